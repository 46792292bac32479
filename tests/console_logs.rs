//! A job's console: by default it shows the program's own output and no log lines of
//! ember's (no INFO line, no line naming a place in ember's source); `EMBER_LOG=info`
//! or `RUST_LOG=info` brings ember's per-stage and per-job lines back, and those name
//! the user's lines only. Each run is the README's tour (`examples/tour.rs`, which uses
//! `lookup`, built inside ember from other operators) as a child process.

mod common;

use std::path::Path;

use common::process::{run_example_env, Run};

/// Runs the tour on a small input in `dir` with `envs`, checks its answer, and returns
/// the run. `EMBER_LOG` and `RUST_LOG` are unset unless `envs` sets them
/// ([`run_example_env`] does not pass the test's own).
fn tour(dir: &Path, envs: &[(&str, &str)]) -> Run {
    let input = dir.join("in.txt");
    std::fs::write(
        &input,
        "the cat which sat\nthe hat quietly\nwhich mouse mouse quietly\n",
    )
    .unwrap();
    let out = dir.join("out");
    let run = run_example_env(
        "tour",
        &[
            "--master",
            "local[2]",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        dir,
        envs,
    );
    assert!(run.success, "{run:?}");
    assert!(run.stdout.contains("quietly: [2]"), "{run:?}");
    assert!(out.join("_SUCCESS").is_file(), "{run:?}");
    run
}

/// The `FILE:LINE` places a log text names after ` at `.
fn places(text: &str) -> Vec<String> {
    text.split(" at ")
        .skip(1)
        .filter_map(|rest| {
            let end = rest.find(|c: char| c.is_whitespace() || c == ')' || c == ',')?;
            let place = &rest[..end];
            place.contains(".rs:").then(|| place.to_string())
        })
        .collect()
}

#[test]
fn a_jobs_console_has_no_ember_log_lines_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tour(tmp.path(), &[]);
    assert!(!run.stderr.contains("INFO"), "{run:?}");
    assert!(!run.stderr.contains("src/"), "{run:?}");
    // Nothing at all: the progress bar is off (not a terminal) and nothing went wrong.
    assert_eq!(run.stderr, "", "{run:?}");
}

#[test]
fn ember_log_or_rust_log_brings_the_info_lines_back_naming_only_the_users_lines() {
    for var in ["EMBER_LOG", "RUST_LOG"] {
        let tmp = tempfile::tempdir().unwrap();
        let run = tour(tmp.path(), &[(var, "info")]);
        let info: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.contains(" INFO "))
            .collect();
        assert!(
            info.iter().any(|l| l.contains("job 0 stage 0 (")),
            "{var}: {run:?}"
        );
        assert!(
            info.iter()
                .any(|l| l.contains("(lookup of map at examples/tour.rs:")),
            "{var}: lookup is named at the tour's line: {run:?}"
        );
        let named = places(&run.stderr);
        assert!(!named.is_empty(), "{var}: {run:?}");
        for place in &named {
            assert!(
                place.starts_with("examples/tour.rs:"),
                "{var}: a log line names {place}, not the tour's line: {run:?}"
            );
        }
    }
}
