//! RDDs with no partitions behave as Spark's do (every action, shuffle, union, join,
//! cogroup and sort works on them), and invalid arguments are typed errors at the
//! action, never panics when the RDD is defined.

mod common;

use std::fs;

use common::*;
use ember::EmberError;

fn empty_dir_rdd(c: &ember::Context) -> (tempfile::TempDir, ember::Rdd<String>) {
    let dir = tempfile::tempdir().unwrap();
    // Only names that are skipped, so the directory holds no input at all.
    fs::write(dir.path().join("_SUCCESS"), b"").unwrap();
    fs::write(dir.path().join(".hidden"), b"not input\n").unwrap();
    let rdd = c.text_file(dir.path().to_str().unwrap(), 4).unwrap();
    (dir, rdd)
}

#[test]
fn text_file_of_an_empty_directory_has_no_partitions_and_every_action_works() {
    let c = ctx(2);
    let (_dir, lines) = empty_dir_rdd(&c);
    assert_eq!(lines.num_partitions(), 0);
    assert_eq!(lines.count().unwrap(), 0);
    assert!(lines.collect().unwrap().is_empty());
    assert!(lines.take(3).unwrap().is_empty());
    assert!(matches!(lines.first(), Err(EmberError::EmptyRdd(_))));
    assert!(matches!(
        lines.reduce(|a, b| a + &b),
        Err(EmberError::EmptyRdd(_))
    ));
    assert_eq!(
        lines.fold("z".to_string(), |a, b| a + &b).unwrap(),
        "z".to_string()
    );

    let pairs = lines.map(|l: String| (l, 1u64));
    let reduced = pairs.reduce_by_key(|a, b| a + b);
    assert_eq!(reduced.num_partitions(), 0);
    assert!(reduced.collect().unwrap().is_empty());
    assert!(pairs.group_by_key().collect().unwrap().is_empty());
    assert!(pairs.count_by_key().unwrap().is_empty());
    assert!(lines.distinct().collect().unwrap().is_empty());
    assert!(pairs
        .sort_by_key_into(true, 0)
        .collect()
        .unwrap()
        .is_empty());
    assert!(lines.zip_with_index().collect().unwrap().is_empty());

    // With a non-empty side: union, joins and cogroup.
    let other = c.parallelize(vec![("a".to_string(), 2u64), ("b".to_string(), 3)], 2);
    let mut u = pairs.union(&other).collect().unwrap();
    u.sort();
    assert_eq!(u, vec![("a".to_string(), 2), ("b".to_string(), 3)]);
    assert!(pairs.join(&other).collect().unwrap().is_empty());
    let mut right = pairs.right_outer_join(&other).collect().unwrap();
    right.sort();
    assert_eq!(
        right,
        vec![("a".to_string(), (None, 2)), ("b".to_string(), (None, 3))]
    );
    let cg = pairs.cogroup(&other).collect().unwrap();
    assert_eq!(cg.len(), 2);
    assert!(cg.iter().all(|(_, (l, r))| l.is_empty() && r.len() == 1));
}

#[test]
fn saving_an_empty_rdd_writes_only_success() {
    let c = ctx(2);
    let (_dir, lines) = empty_dir_rdd(&c);
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("out");
    lines
        .map(|l: String| (l, 1u64))
        .reduce_by_key(|a, b| a + b)
        .map(|(w, n): (String, u64)| format!("{w}\t{n}"))
        .save_as_text_file(path.to_str().unwrap())
        .unwrap();
    let names: Vec<String> = fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["_SUCCESS".to_string()]);
}

#[test]
fn context_empty_has_no_partitions() {
    let c = ctx(2);
    let e = c.empty::<u32>();
    assert_eq!(e.num_partitions(), 0);
    assert_eq!(e.count().unwrap(), 0);
    assert_eq!(e.fold(7, |a, b| a + b).unwrap(), 7);
    assert!(matches!(e.first(), Err(EmberError::EmptyRdd(_))));
    // A shuffle of it has no map tasks and no reducers.
    let kv = e.map(|x: u32| (x, x)).partition_by(3);
    assert_eq!(kv.num_partitions(), 3);
    assert!(kv.collect().unwrap().is_empty());
    assert_eq!(e.coalesce(4).num_partitions(), 0);
    assert!(e.repartition(2).collect().unwrap().is_empty());
}

fn invalid(e: EmberError) -> String {
    match e {
        EmberError::InvalidArgument(m) => m,
        other => panic!("expected an invalid-argument error, got {other}"),
    }
}

#[test]
fn zero_partitions_are_an_invalid_argument_naming_the_operator_and_call_site() {
    let c = ctx(2);
    let m = invalid(c.parallelize(vec![1, 2, 3], 0).count().unwrap_err());
    assert!(
        m.contains("parallelize at tests/empty_and_invalid.rs:"),
        "{m}"
    );
    assert!(
        m.contains("number of partitions must be positive, got 0"),
        "{m}"
    );

    let m = invalid(c.range(0, 10, 0).collect().unwrap_err());
    assert!(m.starts_with("range at tests/empty_and_invalid.rs:"), "{m}");

    let base = c.parallelize(vec![(1u32, 1u32), (2, 2)], 2);
    let m = invalid(base.coalesce(0).collect().unwrap_err());
    assert!(
        m.starts_with("coalesce at tests/empty_and_invalid.rs:"),
        "{m}"
    );
    let m = invalid(base.repartition(0).collect().unwrap_err());
    assert!(
        m.starts_with("repartition at tests/empty_and_invalid.rs:"),
        "{m}"
    );
    let m = invalid(base.partition_by(0).collect().unwrap_err());
    assert!(
        m.starts_with("partition_by at tests/empty_and_invalid.rs:"),
        "{m}"
    );
    let m = invalid(
        base.reduce_by_key_into(|a, b| a + b, 0)
            .count()
            .unwrap_err(),
    );
    assert!(
        m.contains("cannot shuffle 2 partitions into 0 partitions"),
        "{m}"
    );
    let m = invalid(base.sort_by_key_into(true, 0).count().unwrap_err());
    assert!(m.contains("cannot sort 2 partitions into 0"), "{m}");

    // The error travels to everything derived from the bad RDD.
    let derived = base.coalesce(0).map(|(a, b): (u32, u32)| a + b);
    assert!(invalid(derived.count().unwrap_err()).contains("coalesce at"));
    // The message is the error's Display and its Debug (what `main` prints).
    let e = base.coalesce(0).count().unwrap_err();
    assert_eq!(format!("{e:?}"), e.to_string());
    assert!(e.to_string().starts_with("invalid argument: coalesce at"));
}

#[test]
fn bad_sample_fractions_and_zip_with_index_of_a_failing_input_do_not_panic() {
    let c = ctx(2);
    let r = c.parallelize((0..100).collect::<Vec<u32>>(), 3);
    let m = invalid(r.sample(false, -0.5, 1).count().unwrap_err());
    assert!(
        m.contains("sample fraction must be a finite number >= 0, got -0.5"),
        "{m}"
    );
    let m = invalid(r.sample(true, f64::NAN, 1).count().unwrap_err());
    assert!(m.contains("got NaN"), "{m}");
    let m = invalid(r.sample(false, 1.5, 1).count().unwrap_err());
    assert!(
        m.contains("without replacement must be <= 1, got 1.5"),
        "{m}"
    );

    // A partition that fails while zip_with_index counts records.
    let failing = r.map(|x: u32| if x == 57 { panic!("bad record 57") } else { x });
    let zipped = failing.zip_with_index();
    let m = invalid(zipped.collect().unwrap_err());
    assert!(
        m.starts_with("zip_with_index at tests/empty_and_invalid.rs:"),
        "{m}"
    );
    assert!(m.contains("bad record 57"), "{m}");

    // And a good one still numbers every record.
    let z = r.zip_with_index().collect().unwrap();
    assert_eq!(z, (0..100).map(|x| (x, u64::from(x))).collect::<Vec<_>>());
}

#[test]
fn a_fifo_is_refused_as_input_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let c = ctx(1);
    for path in [fifo.clone(), dir.path().to_path_buf()] {
        let err = c.text_file(path.to_str().unwrap(), 1).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("pipe"), "{text}");
        assert!(text.contains("not a regular file"), "{text}");
    }
}

#[test]
fn a_proc_file_that_reports_size_zero_is_refused_not_read_as_empty() {
    let c = ctx(1);
    let err = c.text_file("/proc/self/status", 1).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("/proc/self/status"), "{text}");
    assert!(
        text.contains("reports a size of 0 bytes but has content"),
        "{text}"
    );
    // A truly empty file is fine and reads as nothing.
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.txt");
    fs::write(&empty, b"").unwrap();
    assert_eq!(
        c.text_file(empty.to_str().unwrap(), 1)
            .unwrap()
            .count()
            .unwrap(),
        0
    );
}

#[test]
fn wordcount_over_an_empty_directory_succeeds_with_an_empty_output() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    fs::create_dir(&input).unwrap();
    let out = tmp.path().join("out");
    let run = common::process::run_example(
        "wordcount",
        &[
            "--master",
            "local[2]",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert!(run.success, "{run:?}");
    let names: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["_SUCCESS".to_string()]);
}
