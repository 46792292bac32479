//! `save_as_object_file` / `Context::object_file`: round trips of several record types
//! (empty partitions, no partitions, many frames), the output layout, and every way a
//! file can be wrong (another type, corrupt, truncated, not an object file) failing with
//! an error naming the file, never a panic and never fewer records.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use ember::{Data, EmberError, SaveOptions};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Event {
    id: u64,
    name: String,
    tags: Vec<String>,
    score: Option<f64>,
    props: BTreeMap<String, i32>,
}

fn events(n: u64) -> Vec<Event> {
    (0..n)
        .map(|i| Event {
            id: i,
            name: format!("event-{i}"),
            tags: (0..i % 4).map(|t| format!("t{t}")).collect(),
            score: (i % 3 != 0).then_some(i as f64 / 7.0),
            props: (0..i % 3)
                .map(|p| (format!("p{p}"), p as i32 - 1))
                .collect(),
        })
        .collect()
}

/// Saves `data` in `parts` partitions under `dir/name`, reads it back, and checks
/// partition by partition.
fn round_trip<T: Data + PartialEq + std::fmt::Debug>(
    c: &ember::Context,
    dir: &Path,
    name: &str,
    data: Vec<T>,
    parts: usize,
) {
    let out = dir.join(name);
    let rdd = c.parallelize(data.clone(), parts);
    rdd.save_as_object_file(&out).unwrap();
    let back = c.object_file::<T>(out.to_str().unwrap()).unwrap();
    assert_eq!(back.num_partitions(), parts, "{name}");
    assert_eq!(
        back.glom().collect().unwrap(),
        rdd.glom().collect().unwrap(),
        "{name}"
    );
    assert_eq!(back.collect().unwrap(), data, "{name}");
}

fn part_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn task_failure<T: std::fmt::Debug>(r: ember::Result<T>) -> String {
    match r {
        Err(EmberError::TaskFailed { message, .. }) => message,
        other => panic!("expected a task failure, got {other:?}"),
    }
}

#[test]
fn records_of_several_types_round_trip_partition_by_partition() {
    let c = ctx(2);
    let tmp = tempfile::tempdir().unwrap();
    round_trip(&c, tmp.path(), "ints", (-500..500).collect::<Vec<i32>>(), 4);
    round_trip(&c, tmp.path(), "events", events(3000), 3);
    round_trip(&c, tmp.path(), "pairs", random_pairs(1, 5000, 70), 6);
    round_trip(
        &c,
        tmp.path(),
        "bytes",
        vec![None, Some(vec![]), Some(vec![0u8, 255, 7])],
        2,
    );
    round_trip(&c, tmp.path(), "units", vec![(); 2000], 3);
    // More partitions than records: empty partitions stay empty partitions.
    round_trip(
        &c,
        tmp.path(),
        "sparse",
        vec!["a".to_string(), "b".into()],
        7,
    );
    round_trip(&c, tmp.path(), "all_empty", Vec::<u64>::new(), 3);
    // Many frames in one partition.
    let big: Vec<(u64, String)> = (0..200_000).map(|i| (i, format!("v{i}"))).collect();
    round_trip(&c, tmp.path(), "big", big, 2);
}

#[test]
fn the_output_is_part_files_and_success_and_reading_skips_hidden_files() {
    let c = ctx(2);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let data: Vec<i64> = (0..100).collect();
    c.parallelize(data.clone(), 3)
        .save_as_object_file(&out)
        .unwrap();
    assert_eq!(
        part_names(&out),
        vec!["_SUCCESS", "part-00000", "part-00001", "part-00002"]
    );
    // Files starting with `_` or `.` are not partitions.
    std::fs::write(out.join(".part-00000.crc"), b"junk").unwrap();
    std::fs::write(out.join("_metadata"), b"junk").unwrap();
    let back = c.object_file::<i64>(out.to_str().unwrap()).unwrap();
    assert_eq!(back.num_partitions(), 3);
    assert_eq!(back.collect().unwrap(), data);
    // One file is one partition; a glob works too.
    let one = out.join("part-00001");
    assert_eq!(
        c.object_file::<i64>(one.to_str().unwrap())
            .unwrap()
            .collect()
            .unwrap(),
        (33..66).collect::<Vec<i64>>()
    );
    let glob = format!("{}/part-0000[02]", out.display());
    assert_eq!(c.object_file::<i64>(&glob).unwrap().count().unwrap(), 67);
    // An existing directory is refused unless overwrite is asked for.
    assert!(matches!(
        c.parallelize(vec![1i64], 1).save_as_object_file(&out),
        Err(EmberError::OutputExists { .. })
    ));
    c.parallelize(vec![7i64], 1)
        .save_as_object_file_with(&out, SaveOptions { overwrite: true })
        .unwrap();
    assert_eq!(
        c.object_file::<i64>(out.to_str().unwrap())
            .unwrap()
            .collect()
            .unwrap(),
        vec![7]
    );
    // An RDD of no partitions: only `_SUCCESS`, read back as no partitions.
    let none = tmp.path().join("none");
    c.empty::<i64>().save_as_object_file(&none).unwrap();
    assert_eq!(part_names(&none), vec!["_SUCCESS"]);
    let back = c.object_file::<i64>(none.to_str().unwrap()).unwrap();
    assert_eq!(back.num_partitions(), 0);
    assert!(back.collect().unwrap().is_empty());
    // A missing path fails at once.
    assert!(matches!(
        c.object_file::<i64>(tmp.path().join("missing").to_str().unwrap()),
        Err(EmberError::InputNotFound { .. })
    ));
    // A failed job leaves no directory behind.
    let failed = tmp.path().join("failed");
    let r = c
        .parallelize((0..10).collect::<Vec<i32>>(), 2)
        .map(|x: i32| {
            assert!(x != 7, "boom");
            x
        })
        .save_as_object_file(&failed);
    assert!(task_failure(r).contains("boom"));
    assert!(!failed.exists());
}

#[test]
fn reading_another_record_type_fails_naming_the_file_and_both_types() {
    let c = ctx(2);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ints");
    c.parallelize(vec![1i32, 2, 3], 1)
        .save_as_object_file(&out)
        .unwrap();
    let m = task_failure(
        c.object_file::<String>(out.to_str().unwrap())
            .unwrap()
            .collect(),
    );
    assert!(m.contains("part-00000"), "{m}");
    assert!(m.contains("holds records of type \"i32\""), "{m}");
    assert!(m.contains("alloc::string::String"), "{m}");
    // Same size, other type: still refused (u32 and i32 would decode each other).
    let m = task_failure(c.object_file::<u32>(out.to_str().unwrap()).unwrap().count());
    assert!(m.contains("holds records of type \"i32\""), "{m}");
}

#[test]
fn corrupt_truncated_and_foreign_files_fail_naming_the_file() {
    let c = ctx(2);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("data");
    let data: Vec<(u64, String)> = (0..30_000).map(|i| (i, format!("value {i}"))).collect();
    c.parallelize(data, 2).save_as_object_file(&out).unwrap();
    let part = out.join("part-00001");
    let good = std::fs::read(&part).unwrap();
    let read = |bytes: &[u8]| {
        std::fs::write(&part, bytes).unwrap();
        c.object_file::<(u64, String)>(out.to_str().unwrap())
            .unwrap()
            .collect()
    };
    assert_eq!(read(&good).unwrap().len(), 30_000);

    // A flipped byte in the middle of the records.
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x01;
    let m = task_failure(read(&flipped));
    assert!(m.contains("part-00001"), "{m}");
    assert!(m.contains("fails its checksum"), "{m}");

    // Cut anywhere: inside a chunk, on a chunk boundary (before the footer), in the
    // footer, in the header.
    for cut in [good.len() / 3, good.len() - 16, good.len() - 1, 10, 0] {
        let m = task_failure(read(&good[..cut]));
        assert!(m.contains("part-00001"), "cut at {cut}: {m}");
        assert!(m.contains("truncated"), "cut at {cut}: {m}");
    }
    // Bytes after the footer.
    let mut longer = good.clone();
    longer.extend_from_slice(b"extra");
    let m = task_failure(read(&longer));
    assert!(m.contains("after the footer"), "{m}");
    // Not an object file at all.
    let m = task_failure(read(b"just some text\nin a file\n"));
    assert!(m.contains("part-00001") && m.contains("bad magic"), "{m}");
    // Another format version.
    let mut v2 = good.clone();
    v2[8] = 2;
    let m = task_failure(read(&v2));
    assert!(m.contains("format version 2"), "{m}");
    // Restored, it reads again.
    assert_eq!(read(&good).unwrap().len(), 30_000);
}
