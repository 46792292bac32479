//! `examples/parquet_etl` end to end, in local mode and on a cluster of real processes:
//! multi-file Parquet input with a column it does not read, negative values dropped,
//! sums per key written as Parquet; the output read back with the parquet crate's own
//! Arrow reader (not ember) and compared with a plain-Rust computation.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use arrow_array::{Array, Float64Array, Int64Array};
use common::cluster::Cluster;
use common::process::run_example;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize)]
struct In {
    key: i64,
    note: String,
    value: f64,
}

/// Values are multiples of 0.25 in a small range, so sums are exact in any order.
fn input(dir: &Path) -> BTreeMap<i64, f64> {
    let rows: Vec<In> = (0..20_000i64)
        .map(|i| In {
            key: (i * 7919) % 613,
            note: format!("n{i}"),
            value: ((i * 31) % 400) as f64 * 0.25 - 25.0,
        })
        .collect();
    let mut want = BTreeMap::new();
    for r in rows.iter().filter(|r| r.value >= 0.0) {
        *want.entry(r.key).or_insert(0.0) += r.value;
    }
    let ctx = ember::Context::local(2).unwrap();
    ctx.parallelize(rows, 4)
        .save_as_parquet(dir.join("in"))
        .unwrap();
    want
}

/// The `key`/`sum` rows of every `part-*.parquet` in `out`, read without ember.
fn read_sums(out: &Path) -> BTreeMap<i64, f64> {
    assert!(out.join("_SUCCESS").is_file());
    let mut names: Vec<String> = fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "_SUCCESS")
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "part-00000.parquet",
            "part-00001.parquet",
            "part-00002.parquet"
        ]
    );
    let mut got = BTreeMap::new();
    for n in names {
        let file = fs::File::open(out.join(n)).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            assert_eq!(batch.schema().field(0).name(), "key");
            assert_eq!(batch.schema().field(1).name(), "sum");
            let keys = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            let sums = batch
                .column(1)
                .as_any()
                .downcast_ref::<Float64Array>()
                .unwrap();
            for i in 0..batch.num_rows() {
                assert!(
                    got.insert(keys.value(i), sums.value(i)).is_none(),
                    "key twice"
                );
            }
        }
    }
    got
}

#[test]
fn parquet_etl_sums_in_local_mode_and_on_a_cluster() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let want = input(s);
    let input = s.join("in");
    let local = s.join("local");
    let run = run_example(
        "parquet_etl",
        &[
            "--master",
            "local[2]",
            "--partitions",
            "3",
            input.to_str().unwrap(),
            local.to_str().unwrap(),
        ],
        s,
    );
    assert!(run.success, "{run:?}");
    assert_eq!(read_sums(&local), want);

    let cluster = Cluster::start(2, 1, None);
    let remote = s.join("cluster");
    let run = cluster.run(
        "parquet_etl",
        &[
            "--partitions",
            "3",
            input.to_str().unwrap(),
            remote.to_str().unwrap(),
        ],
        s,
    );
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    assert_eq!(read_sums(&remote), want);

    // A file that does not fit fails before any task, naming file and column.
    let bad = s.join("bad");
    let ctx = ember::Context::local(1).unwrap();
    ctx.parallelize(vec![(1i64, "x".to_string())], 1)
        .map(|(key, v)| BadRow { key, value: v })
        .save_as_parquet(&bad)
        .unwrap();
    let run = run_example(
        "parquet_etl",
        &[
            "--master",
            "local[1]",
            bad.to_str().unwrap(),
            s.join("never").to_str().unwrap(),
        ],
        s,
    );
    assert!(!run.success);
    assert!(
        run.stderr.contains("part-00000.parquet")
            && run.stderr.contains("`value`")
            && run.stderr.contains("Utf8"),
        "{run:?}"
    );
    assert!(!s.join("never").exists());
}

#[derive(Clone, Serialize, Deserialize)]
struct BadRow {
    key: i64,
    value: String,
}
