//! Parquet files ember did not write (made by pyarrow and DuckDB with
//! `tests/fixtures/make_fixtures.py`), read by ember and compared with the rows pyarrow
//! reads from the same files (the JSON next to each).

use std::path::PathBuf;

use ember::Context;
use serde::{Deserialize, Serialize};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn expected<T: for<'de> Deserialize<'de>>(name: &str) -> Vec<T> {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Ab {
    a: i32,
    b: String,
}

/// Every column of `pyarrow_types.parquet` but `unused`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Types {
    i8: i8,
    i16: i16,
    i32: i32,
    i64: i64,
    u32: u32,
    f32: f32,
    f64: f64,
    flag: bool,
    name: String,
    maybe_name: Option<String>,
    maybe_i64: Option<i64>,
    ints: Vec<i64>,
    point: Ab,
    /// Dictionary-encoded in the file.
    category: String,
}

#[test]
fn a_pyarrow_file_of_many_types_reads_as_pyarrow_reads_it() {
    let ctx = Context::local(2).unwrap();
    let path = fixture("parquet/pyarrow_types.parquet");
    let rdd = ctx.read_parquet::<Types>(path.to_str().unwrap()).unwrap();
    let got = rdd.collect().unwrap();
    let want: Vec<Types> = expected("parquet/pyarrow_types.json");
    assert_eq!(want.len(), 50);
    assert_eq!(got, want);
    assert!(got.iter().any(|t| t.maybe_name.is_none()) && got.iter().any(|t| t.ints.len() == 3));
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Widened {
    /// int8 in the file.
    i8: i64,
    /// int32 in the file.
    i32: i64,
    /// float32 in the file.
    f32: f64,
    /// A struct read by a subset of its fields.
    point: OnlyA,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OnlyA {
    a: i64,
}

#[test]
fn narrower_columns_read_into_wider_fields() {
    let ctx = Context::local(1).unwrap();
    let path = fixture("parquet/pyarrow_types.parquet");
    let got = ctx
        .read_parquet::<Widened>(path.to_str().unwrap())
        .unwrap()
        .collect()
        .unwrap();
    let want: Vec<Types> = expected("parquet/pyarrow_types.json");
    let want: Vec<Widened> = want
        .iter()
        .map(|t| Widened {
            i8: t.i8.into(),
            i32: t.i32.into(),
            f32: t.f32.into(),
            point: OnlyA {
                a: t.point.a.into(),
            },
        })
        .collect();
    assert_eq!(got, want);
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Kv {
    key: i64,
    value: f64,
}

#[test]
fn a_duckdb_file_reads_with_its_row_groups_as_partitions() {
    let ctx = Context::local(2).unwrap();
    let path = fixture("parquet/duckdb_kv.parquet");
    let rdd = ctx.read_parquet::<Kv>(path.to_str().unwrap()).unwrap();
    assert!(
        rdd.num_partitions() >= 2,
        "{} partitions",
        rdd.num_partitions()
    );
    let got = rdd.collect().unwrap();
    let want: Vec<Kv> = expected("parquet/duckdb_kv.json");
    assert_eq!(want.len(), 4096);
    assert_eq!(got, want);
    // And a job over it: the sum per key parity, against the JSON's.
    let sums = rdd
        .map(|kv| (kv.key % 2, kv.value))
        .reduce_by_key(|a, b| a + b)
        .collect_as_map()
        .unwrap();
    for parity in [0, 1] {
        let want: f64 = want
            .iter()
            .filter(|kv| kv.key % 2 == parity)
            .map(|kv| kv.value)
            .sum();
        assert!((sums[&parity] - want).abs() < 1e-6, "{sums:?}");
    }
}
