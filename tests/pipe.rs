//! `pipe`: PipedRDDSuite's assertions restated (per test), plus what a pipe must not
//! do: deadlock on a command that writes before it reads, lose the exit status, quote
//! unbounded stderr, or leave its command running when the task stops early.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use ember::{EmberError, PipeOptions, INHERITED_PIPE_ENV};

fn task_failure<T: std::fmt::Debug>(r: ember::Result<T>) -> String {
    match r {
        Err(EmberError::TaskFailed { message, .. }) => message,
        other => panic!("expected a task failure, got {other:?}"),
    }
}

// PipedRDDSuite "basic pipe".
#[test]
fn cat_gives_back_every_record_in_order() {
    let c = ctx(2);
    let nums = c.parallelize(vec![1, 2, 3, 4], 2);
    assert_eq!(
        nums.pipe(&["cat"]).collect().unwrap(),
        vec!["1", "2", "3", "4"]
    );
    // Many records in many partitions, against a plain formatting of them.
    let data: Vec<i64> = (0..200_000).map(|i| i * 31 % 1_000_003).collect();
    let piped = c.parallelize(data.clone(), 5).pipe(&["cat"]);
    assert_eq!(piped.num_partitions(), 5);
    let want: Vec<String> = data.iter().map(|x| x.to_string()).collect();
    assert_eq!(piped.collect().unwrap(), want);
    // Records whose Display holds a newline become several lines, as Spark prints them.
    let multi = c.parallelize(vec!["a\nb".to_string(), "c\r\n".to_string()], 1);
    assert_eq!(
        multi.pipe(&["cat"]).collect().unwrap(),
        vec!["a", "b", "c", ""]
    );
}

// PipedRDDSuite "basic pipe with tokenization" (as an argv) and "pipe with empty
// partition".
#[test]
fn wc_counts_each_partition_including_empty_ones() {
    let c = ctx(2);
    let nums = c.parallelize(vec![1, 2, 3, 4], 2);
    let lines = nums.pipe(&["wc", "-l"]).collect().unwrap();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l.trim() == "2"), "{lines:?}");

    let data = c.parallelize(vec!["foo".to_string(), "bing".to_string()], 8);
    let piped = data.pipe(&["wc", "-c"]);
    assert_eq!(piped.count().unwrap(), 8);
    let char_counts: BTreeSet<usize> = piped
        .collect()
        .unwrap()
        .iter()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(char_counts, BTreeSet::from([0, 4, 5]));
    // An RDD of no partitions runs no command.
    assert!(c
        .empty::<i32>()
        .pipe(&["false"])
        .collect()
        .unwrap()
        .is_empty());
}

// PipedRDDSuite "pipe with env variable".
#[test]
fn env_vars_reach_the_command() {
    let c = ctx(2);
    let nums = c.parallelize(vec![1, 2, 3, 4], 2);
    let opts = PipeOptions::default().env("MY_TEST_ENV", "LALALA");
    let out = nums
        .pipe_with(&["printenv", "MY_TEST_ENV"], opts)
        .collect()
        .unwrap();
    assert_eq!(out, vec!["LALALA", "LALALA"]);
}

// PipedRDDSuite "pipe with process which cannot be launched due to bad command".
#[test]
fn a_command_that_cannot_start_fails_naming_it() {
    let c = ctx(2);
    let nums = c.parallelize(vec![1, 2, 3, 4], 2);
    let m = task_failure(nums.pipe(&["some_nonexistent_command"]).collect());
    assert!(m.contains("some_nonexistent_command"), "{m}");
    assert!(m.contains("cannot start the command"), "{m}");
    // An empty argv is an invalid argument at the action.
    match nums.pipe(&[]).collect() {
        Err(EmberError::InvalidArgument(m)) => assert!(m.contains("empty argv"), "{m}"),
        other => panic!("expected an invalid argument, got {other:?}"),
    }
}

// PipedRDDSuite "pipe with process which is launched but fails with non-zero exit
// status".
#[test]
fn a_non_zero_exit_fails_with_command_status_partition_and_stderr() {
    let c = ctx(2);
    let nums = c.parallelize(vec![1, 2, 3, 4], 2);
    let m = task_failure(nums.pipe(&["cat", "nonexistent_file"]).collect());
    assert!(m.contains("cat nonexistent_file"), "{m}");
    assert!(m.contains("exit status: 1"), "{m}");
    assert!(m.contains("in partition "), "{m}");
    assert!(m.contains("nonexistent_file: No such file"), "{m}");

    // Megabytes of stderr neither block the command nor reach the message whole.
    let noisy = [
        "sh",
        "-c",
        "cat >/dev/null; head -c 3000000 /dev/zero | tr '\\0' x >&2; exit 3",
    ];
    let m = task_failure(
        c.parallelize((0..10_000).collect::<Vec<i32>>(), 2)
            .pipe(&noisy)
            .collect(),
    );
    assert!(m.contains("exit status: 3"), "{m}");
    assert!(m.contains("xxxxxxxx"), "{m}");
    assert!(m.len() < 1000, "{} bytes: {m}", m.len());
    // A long command is quoted as a bounded excerpt.
    let long = "y".repeat(10_000);
    let m = task_failure(nums.pipe(&[long.as_str()]).collect());
    assert!(m.len() < 1000, "{} bytes", m.len());
}

// PipedRDDSuite "failure in iterating over pipe input".
#[test]
fn an_input_error_fails_the_task_and_stops_the_command() {
    let c = ctx(2);
    // zip of partitions with different record counts yields an error mid-partition.
    let uneven = c
        .parallelize(vec![1, 2, 3, 4], 2)
        .zip(&c.parallelize(vec![1, 2, 3], 2))
        .map(|(a, b): (i32, i32)| a + b);
    let m = task_failure(uneven.pipe(&["cat"]).collect());
    assert!(
        m.contains("same number of records in each partition"),
        "{m}"
    );
    // A panic upstream in the same task fails it too.
    let panicking = c
        .parallelize((0..10_000).collect::<Vec<i32>>(), 2)
        .map(|x: i32| {
            assert!(x != 7_777, "bad record");
            x
        });
    let m = task_failure(panicking.pipe(&["cat"]).collect());
    assert!(m.contains("bad record"), "{m}");
}

#[test]
fn commands_that_write_before_reading_or_stop_reading_early_work() {
    let c = ctx(2);
    let data: Vec<i64> = (0..100_000).collect();
    let rdd = c.parallelize(data.clone(), 2);
    // Reads all its input before writing anything.
    let got = rdd.pipe(&["sort", "-n", "-r"]).collect().unwrap();
    let mut want: Vec<String> = Vec::new();
    for part in rdd.glom().collect().unwrap() {
        want.extend(part.iter().rev().map(|x| x.to_string()));
    }
    assert_eq!(got, want);
    // Writes a lot without reading its input at all, then exits 0: not a failure.
    let got = rdd.pipe(&["seq", "1", "50000"]).collect().unwrap();
    assert_eq!(got.len(), 100_000);
    assert_eq!(got[49_999], "50000");
    // Stops reading after two lines and succeeds.
    assert_eq!(
        rdd.pipe(&["head", "-n", "2"]).collect().unwrap(),
        vec!["0", "1", "50000", "50001"]
    );
    // The task stops reading early (take): the command is stopped, the job ends.
    let started = std::time::Instant::now();
    let infinite = c
        .parallelize(vec![0], 1)
        .pipe(&["yes", "ember"])
        .take(3)
        .unwrap();
    assert_eq!(infinite, vec!["ember"; 3]);
    assert!(started.elapsed().as_secs() < 30);
    // Empty output from a successful command.
    assert!(rdd.pipe(&["true"]).collect().unwrap().is_empty());
    // A last line without a terminator is a record.
    assert_eq!(
        c.parallelize(vec![1], 1)
            .pipe(&["printf", "a\\nb"])
            .collect()
            .unwrap(),
        vec!["a", "b"]
    );
}

#[test]
fn output_that_is_not_utf8_fails_the_task() {
    let c = ctx(1);
    let m = task_failure(
        c.parallelize(vec![1], 1)
            .pipe(&["printf", "ok\\n\\377\\n"])
            .collect(),
    );
    assert!(m.contains("output line 2 is not UTF-8"), "{m}");
}

/// A 64 MiB output line (no newline until its end) comes through whole and exact: the
/// reader searches only newly read bytes for the newline, so a long line is linear.
#[test]
fn a_64_mib_output_line_comes_through_exactly() {
    const LEN: usize = 64 << 20;
    let c = ctx(1);
    let script = format!("head -c {LEN} /dev/zero | tr '\\0' x; printf '\\nend\\n'");
    let out = c
        .parallelize(vec![1], 1)
        .pipe(&["sh", "-c", &script])
        .collect()
        .unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].len(), LEN);
    assert!(out[0].bytes().all(|b| b == b'x'));
    assert_eq!(out[1], "end");
}

/// The command gets a clean environment: the documented inherited variables (those set
/// in this process), `LC_*`, and the user's; never the worker's `EMBER_*` variables
/// nor anything else of the task's process.
#[test]
fn the_command_sees_exactly_the_clean_environment_and_the_users_variables() {
    // Only this test reads these; every context here is local, which reads neither.
    std::env::set_var("EMBER_SECRET", "not-for-the-command");
    std::env::set_var("EMBER_WORKER_DIR", "/nowhere");
    std::env::set_var("PIPE_TEST_NOT_INHERITED", "1");
    std::env::set_var("LC_PIPE_TEST", "C");
    let c = ctx(1);
    let opts = PipeOptions::default()
        .env("MY_TEST_ENV", "LALALA")
        .env("EMBER_ASKED_FOR", "yes");
    let lines = c
        .parallelize(vec![1], 1)
        .pipe_with(&["env"], opts)
        .collect()
        .unwrap();
    let seen: BTreeMap<String, String> = lines
        .iter()
        .map(|l| {
            let (k, v) = l.split_once('=').expect("NAME=value");
            (k.to_string(), v.to_string())
        })
        .collect();
    let mut want: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| INHERITED_PIPE_ENV.contains(&k.as_str()) || k.starts_with("LC_"))
        .collect();
    want.insert("MY_TEST_ENV".into(), "LALALA".into());
    want.insert("EMBER_ASKED_FOR".into(), "yes".into());
    assert_eq!(seen, want);
    assert_eq!(seen["LC_PIPE_TEST"], "C");
    assert!(seen.contains_key("PATH"), "{seen:?}");
    assert!(!seen.contains_key("EMBER_SECRET") && !seen.contains_key("EMBER_WORKER_DIR"));
}
