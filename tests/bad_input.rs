//! Bad input and failure handling: the example programs (run as processes) must exit
//! non-zero with a message that says what is wrong and where, without leaving a
//! half-written output behind; and the library calls behind them (run in-process)
//! must report the same failures as typed errors.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::process::{run_example, Run};
use ember::{Context, EmberError, SaveOptions};

// ---------------------------------------------------------------------------------
// Running examples (see tests/common/process.rs)

/// Runs `name INPUT OUTPUT` (plus `flags`) under `local[2]`, expecting failure.
fn run_failing(name: &str, flags: &[&str], input: &Path, output: &Path, scratch: &Path) -> Run {
    let mut args = vec!["--master", "local[2]"];
    args.extend_from_slice(flags);
    args.push(input.to_str().unwrap());
    args.push(output.to_str().unwrap());
    let run = run_example(name, &args, scratch);
    assert!(!run.success, "{name} {args:?} should have failed: {run:?}");
    assert_eq!(run.code, Some(1), "{name} {args:?}: {run:?}");
    assert_work_dir_cleaned(&run);
    run
}

/// A finished example must have removed its local-mode work directory.
fn assert_work_dir_cleaned(run: &Run) {
    let left: Vec<_> = fs::read_dir(&run.work)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        left.is_empty(),
        "work dir not cleaned up: {left:?}\n{run:?}"
    );
}

fn kv_lines(range: std::ops::Range<u32>) -> String {
    range
        .map(|i| format!("{},{}.{:03}\n", i % 17, i, i % 1000))
        .collect()
}

// ---------------------------------------------------------------------------------
// Example programs

#[test]
fn missing_input_names_the_path_and_creates_no_output() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-input");
    for name in ["wordcount", "kvsum", "sort", "pagerank"] {
        let out = tmp.path().join(format!("out-{name}"));
        let run = run_failing(name, &[], &missing, &out, tmp.path());
        assert!(
            run.stderr.contains(missing.to_str().unwrap()),
            "{name}: message does not name the path: {run:?}"
        );
        assert!(run.stderr.contains("does not exist"), "{name}: {run:?}");
        assert!(!out.exists(), "{name} created its output dir");
    }
    // A glob matching nothing is a missing input too.
    let pattern = tmp.path().join("in-*.txt");
    let out = tmp.path().join("out-glob");
    let run = run_failing("kvsum", &[], &pattern, &out, tmp.path());
    assert!(run.stderr.contains(pattern.to_str().unwrap()), "{run:?}");
    assert!(!out.exists());
}

#[test]
fn malformed_kvsum_line_names_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    fs::create_dir(&input).unwrap();
    fs::write(input.join("a.txt"), kv_lines(0..3000)).unwrap();
    // Line 7 of the second file is bad; the file has \r\n endings and goes on after it.
    let mut second: Vec<String> = (0..300).map(|i| format!("{},{}.5", i % 5, i)).collect();
    second[6] = "12,3.14159".to_string();
    fs::write(input.join("b.txt"), second.join("\r\n") + "\r\n").unwrap();
    for partitions in ["1", "5"] {
        let out = tmp.path().join(format!("out-{partitions}"));
        let run = run_failing(
            "kvsum",
            &["--partitions", partitions],
            &input,
            &out,
            tmp.path(),
        );
        let b = input.join("b.txt");
        let expected = format!("{}:7", b.display());
        assert!(
            run.stderr.contains(&expected),
            "no {expected:?} in: {run:?}"
        );
        assert!(run.stderr.contains("12,3.14159"), "{run:?}");
        assert!(run.stderr.contains("expected key,value"), "{run:?}");
        assert!(run.stderr.contains("stage"), "{run:?}");
        assert!(run.stderr.contains("partition"), "{run:?}");
        assert!(!out.exists(), "failed job left its output dir");
    }
}

#[test]
fn kvsum_rejects_each_kind_of_malformed_value() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = [
        "5,1.2345", // four decimals
        "5,1.",     // no decimals after the point
        "5,.5",     // no integer part
        "5,1e3",
        "5,abc",
        "5,",
        "x,1",
        "-5,1", // keys are unsigned
        "5;1",
        "5,1,2",
        "",
        "5,99999999999999999999", // out of range
        "18446744073709551616,1", // key out of range
    ];
    for (i, line) in bad.iter().enumerate() {
        let input = tmp.path().join(format!("bad{i}.txt"));
        fs::write(&input, format!("1,1\n2,2.5\n{line}\n3,3\n")).unwrap();
        let out = tmp.path().join(format!("out{i}"));
        let run = run_failing("kvsum", &[], &input, &out, tmp.path());
        let expected = format!("{}:3", input.display());
        assert!(
            run.stderr.contains(&expected),
            "{line:?}: no {expected:?} in: {run:?}"
        );
        assert!(!out.exists());
    }
}

#[test]
fn invalid_utf8_names_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("latin1.txt");
    fs::write(&input, b"1,1\n2,2\n3,3\n4,caf\xe9\n5,5\n").unwrap();
    for name in ["wordcount", "kvsum"] {
        let out = tmp.path().join(format!("out-{name}"));
        let run = run_failing(name, &[], &input, &out, tmp.path());
        assert!(run.stderr.contains("latin1.txt"), "{name}: {run:?}");
        assert!(run.stderr.contains("line 4"), "{name}: {run:?}");
        assert!(!out.exists());
    }
}

#[test]
fn malformed_sort_and_pagerank_lines_name_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    // Deep in a file that is cut into several splits.
    let input = tmp.path().join("sort.txt");
    let mut lines: Vec<String> = (0..2000)
        .map(|i| format!("{},value {i}", i * 7919 % 1000))
        .collect();
    lines[1499] = "notanumber,value".to_string();
    fs::write(&input, lines.join("\n")).unwrap();
    let out = tmp.path().join("sort-out");
    let run = run_failing("sort", &["--partitions", "6"], &input, &out, tmp.path());
    let expected = format!("{}:1500", input.display());
    assert!(
        run.stderr.contains(&expected),
        "no {expected:?} in: {run:?}"
    );
    assert!(!out.exists());

    let input = tmp.path().join("edges.txt");
    fs::write(&input, "# graph\na b\nb c\n\nc a\na b c\n").unwrap();
    let out = tmp.path().join("pr-out");
    let run = run_failing("pagerank", &[], &input, &out, tmp.path());
    let expected = format!("{}:6", input.display());
    assert!(
        run.stderr.contains(&expected),
        "no {expected:?} in: {run:?}"
    );
    assert!(run.stderr.contains("expected src dst"), "{run:?}");
    assert!(!out.exists());
}

#[test]
fn existing_output_dir_is_refused_and_left_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.txt");
    fs::write(&input, kv_lines(0..100)).unwrap();
    for name in ["wordcount", "kvsum", "sort", "pagerank"] {
        let input = if name == "pagerank" {
            let edges = tmp.path().join("edges.txt");
            fs::write(&edges, "a b\nb a\n").unwrap();
            edges
        } else {
            input.clone()
        };
        let out = tmp.path().join(format!("existing-{name}"));
        fs::create_dir(&out).unwrap();
        fs::write(out.join("keep.txt"), "precious\n").unwrap();
        fs::write(out.join("part-00000"), "old output\n").unwrap();
        let run = run_failing(name, &[], &input, &out, tmp.path());
        assert!(run.stderr.contains("already exists"), "{name}: {run:?}");
        assert!(
            run.stderr.contains(out.to_str().unwrap()),
            "{name}: {run:?}"
        );
        let mut entries: Vec<String> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        entries.sort();
        assert_eq!(entries, ["keep.txt", "part-00000"], "{name}");
        assert_eq!(
            fs::read_to_string(out.join("keep.txt")).unwrap(),
            "precious\n"
        );
        assert_eq!(
            fs::read_to_string(out.join("part-00000")).unwrap(),
            "old output\n"
        );
    }
}

#[test]
fn bad_command_lines_print_usage() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.txt");
    fs::write(&input, "1,1\n").unwrap();
    let inp = input.to_str().unwrap();
    let out = tmp.path().join("out");
    let o = out.to_str().unwrap();
    let cases: &[(&str, &[&str], &str)] = &[
        ("kvsum", &["--bogus", inp, o], "unknown flag --bogus"),
        (
            "wordcount",
            &["--verbose", inp, o],
            "unknown flag --verbose",
        ),
        ("sort", &[inp], "expected INPUT and OUTPUT"),
        ("kvsum", &[inp, o, "extra"], "expected INPUT and OUTPUT"),
        (
            "kvsum",
            &["--partitions", "zero", inp, o],
            "bad --partitions",
        ),
        ("sort", &["--partitions", "0", inp, o], "bad --partitions"),
        (
            "kvsum",
            &[inp, o, "--partitions"],
            "--partitions needs a value",
        ),
        (
            "pagerank",
            &["--iterations", "-1", inp, o],
            "bad --iterations",
        ),
        (
            "kvsum",
            &["--iterations", "3", inp, o],
            "unknown flag --iterations",
        ),
    ];
    for (name, args, message) in cases {
        let mut all = vec!["--master", "local[2]"];
        all.extend_from_slice(args);
        let run = run_example(name, &all, tmp.path());
        assert_eq!(run.code, Some(1), "{name} {args:?}: {run:?}");
        assert!(run.stderr.contains(message), "{name} {args:?}: {run:?}");
        assert!(
            run.stderr
                .contains(&format!("usage: {name} [--master M] [--partitions P]")),
            "{name} {args:?}: no usage: {run:?}"
        );
        assert!(!out.exists());
        assert_work_dir_cleaned(&run);
    }
    let run = run_example("kvsum", &["--master", "yarn", inp, o], tmp.path());
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stderr.contains("unknown master \"yarn\""), "{run:?}");
    let run = run_example("pagerank", &["--help"], tmp.path());
    assert!(run.success, "{run:?}");
    assert_work_dir_cleaned(&run);
    assert!(
        run.stdout.contains(
            "usage: pagerank [--master M] [--partitions P] [--iterations N] \
             [--checkpoint-every K] [--checkpoint-dir D] INPUT OUTPUT"
        ),
        "{run:?}"
    );
}

// ---------------------------------------------------------------------------------
// The library, in-process

fn ctx() -> Context {
    Context::local(2).expect("local context")
}

#[test]
fn missing_text_file_fails_before_any_job() {
    let ctx = ctx();
    match ctx.text_file("/nonexistent", 2) {
        Err(EmberError::InputNotFound { path }) => assert_eq!(path, "/nonexistent"),
        Err(e) => panic!("expected InputNotFound, got {e:?}"),
        Ok(_) => panic!("text_file of a missing path succeeded"),
    }
    match ctx.text_file_with_positions("/nonexistent/*.txt", 2) {
        Err(EmberError::InputNotFound { path }) => assert_eq!(path, "/nonexistent/*.txt"),
        Err(e) => panic!("expected InputNotFound, got {e:?}"),
        Ok(_) => panic!("text_file_with_positions of a missing path succeeded"),
    }
    let msg = ctx.text_file("/nonexistent", 2).err().unwrap().to_string();
    assert!(msg.contains("/nonexistent"), "{msg}");
    assert!(ctx.last_job_metrics().is_none(), "a job ran");
}

#[test]
fn panic_in_map_fails_collect_with_stage_and_partition() {
    let ctx = ctx();
    let rdd = ctx
        .parallelize((0..100).collect::<Vec<i32>>(), 4)
        .map(|x: i32| {
            if x == 57 {
                panic!("user code exploded on record {x}");
            }
            x * 2
        });
    let err = rdd.collect().expect_err("collect should fail");
    let msg = err.to_string();
    assert!(msg.contains("user code exploded on record 57"), "{msg}");
    assert!(msg.contains("stage"), "{msg}");
    assert!(msg.contains("partition"), "{msg}");
    match err {
        // 100 records in 4 even slices: 57 is in partition 2.
        EmberError::TaskFailed { partition, .. } => assert_eq!(partition, 2, "{msg}"),
        other => panic!("expected TaskFailed, got {other:?}"),
    }
    // The context is still usable after a failed job.
    let ok = ctx
        .parallelize((0..10).collect::<Vec<i32>>(), 3)
        .map(|x: i32| x + 1);
    assert_eq!(ok.collect().unwrap(), (1..11).collect::<Vec<_>>());
}

fn part_lines(out: &Path) -> Vec<String> {
    let mut parts: Vec<PathBuf> = fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("part-")
        })
        .collect();
    parts.sort();
    parts
        .iter()
        .flat_map(|p| {
            fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn save_refuses_existing_dir_unless_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("keep.txt"), "precious").unwrap();
    let ctx = ctx();
    let rdd = ctx.parallelize((0..20).collect::<Vec<u32>>(), 3);
    match rdd.save_as_text_file(&out) {
        Err(e @ EmberError::OutputExists { .. }) => {
            assert!(e.to_string().contains("already exists"), "{e}");
        }
        Err(e) => panic!("expected OutputExists, got {e:?}"),
        Ok(()) => panic!("save into an existing dir succeeded"),
    }
    assert_eq!(
        fs::read_to_string(out.join("keep.txt")).unwrap(),
        "precious"
    );
    assert_eq!(fs::read_dir(&out).unwrap().count(), 1);

    rdd.save_as_text_file_with(&out, SaveOptions { overwrite: true })
        .expect("overwrite");
    assert!(out.join("_SUCCESS").is_file());
    assert!(!out.join("_temporary").exists());
    assert!(!out.join("keep.txt").exists(), "overwrite kept old files");
    let want: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(part_lines(&out), want);
}

#[test]
fn failed_save_leaves_no_output() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = ctx();
    let rdd = ctx
        .parallelize((0..1000).collect::<Vec<u32>>(), 4)
        .map(|x: u32| {
            if x == 900 {
                panic!("cannot format record {x}");
            }
            format!("record {x}")
        });
    let out = tmp.path().join("out");
    let err = rdd.save_as_text_file(&out).expect_err("save should fail");
    assert!(
        err.to_string().contains("cannot format record 900"),
        "{err}"
    );
    assert!(!out.join("_SUCCESS").exists());
    assert!(!out.exists(), "failed save left {}", out.display());

    // Also with overwrite over an existing directory: the job fails, nothing remains
    // that looks like a complete output.
    let out = tmp.path().join("out2");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("_SUCCESS"), "").unwrap();
    let err = rdd
        .save_as_text_file_with(&out, SaveOptions { overwrite: true })
        .expect_err("save should fail");
    assert!(
        err.to_string().contains("cannot format record 900"),
        "{err}"
    );
    assert!(!out.join("_SUCCESS").exists());
}
