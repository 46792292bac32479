//! The batch level of Parquet I/O: `Rdd<ArrowBatch>` read from files, vectorised work
//! with `map_batches`, batches through a shuffle and back to the driver (Arrow IPC),
//! conversions between row and batch RDDs, batches written as Parquet; and filters
//! pushed into reads: row groups skipped by their statistics, exactly the rows a plain
//! filter keeps (nulls, NaN and -0.0 included).

use std::path::PathBuf;
use std::sync::Arc;

use ember::arrow_array::{Array, Float64Array, Int64Array, RecordBatch};
use ember::arrow_schema::{DataType, Field, Schema};
use ember::io::parquet::source::plan;
use ember::io::text_input::DEFAULT_PACKING;
use ember::{ArrowBatch, Context, ParquetWriteOptions, RowFilter};
use serde::{Deserialize, Serialize};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/parquet")
        .join(name)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Kv {
    key: i64,
    value: f64,
}

fn expected_kv() -> Vec<Kv> {
    serde_json::from_str(&std::fs::read_to_string(fixture("duckdb_kv.json")).unwrap()).unwrap()
}

#[test]
fn batches_read_map_shuffle_collect_and_convert() {
    let ctx = Context::local(2).unwrap();
    let batches = ctx
        .read_parquet_batches(fixture("duckdb_kv.parquet").to_str().unwrap())
        .unwrap();
    // A vectorised map: value * 2 as a new column, with Arrow's kernels.
    let doubled = batches.map_batches(|b: RecordBatch| {
        let v = b
            .column_by_name("value")
            .unwrap()
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap();
        let twice: Float64Array = v.iter().map(|x| x.map(|x| x * 2.0)).collect();
        let schema = Arc::new(Schema::new(vec![
            Field::new("key", DataType::Int64, true),
            Field::new("value", DataType::Float64, true),
        ]));
        RecordBatch::try_new(schema, vec![b.column(0).clone(), Arc::new(twice)]).unwrap()
    });
    let want: Vec<Kv> = expected_kv()
        .into_iter()
        .map(|kv| Kv {
            key: kv.key,
            value: kv.value * 2.0,
        })
        .collect();
    assert_eq!(doubled.to_records::<Kv>().collect().unwrap(), want);

    // Batches cross a shuffle (Arrow IPC inside ember's shuffle frames) and reach the
    // driver whole.
    let shuffled = doubled.repartition(3);
    assert_eq!(shuffled.num_partitions(), 3);
    let mut rows: Vec<Kv> = shuffled.to_records::<Kv>().collect().unwrap();
    rows.sort_by_key(|kv| kv.key);
    assert_eq!(rows, want);
    let collected: Vec<ArrowBatch> = doubled.collect().unwrap();
    let total: usize = collected.iter().map(ArrowBatch::num_rows).sum();
    assert_eq!(total, want.len());
    let keys = collected[0]
        .0
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .value(0);
    assert_eq!(keys, want[0].key);

    // Rows to batches and back; batches written as Parquet and read as records.
    // An empty partition (its file has no columns) reads back as nothing, not as an
    // error against the other files' schema.
    let rows_rdd = ctx
        .parallelize(want.clone(), 2)
        .union(&ctx.parallelize(Vec::<Kv>::new(), 1));
    let as_batches = rows_rdd.to_batches();
    assert_eq!(as_batches.to_records::<Kv>().collect().unwrap(), want);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("b");
    as_batches
        .save_batches_as_parquet(&out, ParquetWriteOptions::default())
        .unwrap();
    assert!(out.join("_SUCCESS").exists() && out.join("part-00001.parquet").exists());
    assert_eq!(
        ctx.read_parquet::<Kv>(out.to_str().unwrap())
            .unwrap()
            .collect()
            .unwrap(),
        want
    );
    assert!(out.join("part-00002.parquet").exists());
    let back = ctx
        .read_parquet_batches(out.to_str().unwrap())
        .unwrap()
        .to_records::<Kv>()
        .collect()
        .unwrap();
    assert_eq!(back, want);
}

#[test]
fn a_batch_encoding_round_trips_and_garbage_is_an_error() {
    let b = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)])),
        vec![Arc::new(Int64Array::from(vec![Some(1), None, Some(3)]))],
    )
    .unwrap();
    let a = ArrowBatch(b);
    let bytes = postcard::to_allocvec(&a).unwrap();
    let back: ArrowBatch = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(back, a);
    assert!(back.0.column(0).is_null(1));
    let garbage = postcard::to_allocvec(&vec![1u8, 2, 3, 4]).unwrap();
    let e = postcard::from_bytes::<ArrowBatch>(&garbage).unwrap_err();
    assert!(!e.to_string().is_empty());
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Reading {
    id: i64,
    v: Option<f64>,
    tag: String,
}

#[test]
fn pushed_down_filters_skip_row_groups_and_keep_exactly_the_matching_rows() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let ctx = Context::local(2).unwrap();
    let specials = [f64::NAN, -0.0, 0.0, -1.0, f64::INFINITY, f64::NEG_INFINITY];
    let rows: Vec<Reading> = (0..10_000i64)
        .map(|i| Reading {
            id: i,
            v: match i % 13 {
                0 => None,
                1 => Some(specials[(i as usize / 13) % specials.len()]),
                _ => Some((i % 200) as f64 - 100.0),
            },
            tag: format!("t{}", i % 7),
        })
        .collect();
    // Sorted by id, 1,000 rows per row group: ids tell row groups apart.
    ctx.parallelize(rows.clone(), 1)
        .save_as_parquet_with(
            &out,
            ParquetWriteOptions {
                row_group_rows: 1000,
                ..Default::default()
            },
        )
        .unwrap();
    let path = out.to_str().unwrap();

    let by_id = RowFilter::ge("id", 7500i64);
    let groups: usize = plan(path, None, Some(&by_id), 1, DEFAULT_PACKING)
        .unwrap()
        .iter()
        .flatten()
        .map(|c| c.row_groups.len())
        .sum();
    assert_eq!(groups, 3, "row groups 0-6 hold no id >= 7500");
    let got = ctx
        .read_parquet_where::<Reading>(path, by_id)
        .unwrap()
        .collect()
        .unwrap();
    let want: Vec<Reading> = rows.iter().filter(|r| r.id >= 7500).cloned().collect();
    assert_eq!(format!("{got:?}"), format!("{want:?}"));

    // Floats: IEEE comparisons as the plain filter makes them (NaN never, -0.0 >= 0.0).
    for (filter, keep) in [
        (
            RowFilter::ge("v", 0.0),
            Box::new(|v: f64| v >= 0.0) as Box<dyn Fn(f64) -> bool>,
        ),
        (RowFilter::lt("v", 0.0), Box::new(|v: f64| v < 0.0)),
        (RowFilter::eq("v", 0.0), Box::new(|v: f64| v == 0.0)),
    ] {
        let got = ctx
            .read_parquet_where::<Reading>(path, filter.clone())
            .unwrap()
            .collect()
            .unwrap();
        let want: Vec<Reading> = rows
            .iter()
            .filter(|r| r.v.is_some_and(&keep))
            .cloned()
            .collect();
        // NaN != NaN: compare the debug text.
        assert_eq!(format!("{got:?}"), format!("{want:?}"), "{filter:?}");
    }
    // Strings, and the batch read with a filter.
    let t3 = ctx
        .read_parquet_batches_where(path, RowFilter::eq("tag", "t3"))
        .unwrap()
        .to_records::<Reading>()
        .collect()
        .unwrap();
    let want: Vec<Reading> = rows.iter().filter(|r| r.tag == "t3").cloned().collect();
    assert_eq!(format!("{t3:?}"), format!("{want:?}"));
    // A filter whose value would need a lossy cast of the column is refused.
    let e = ctx
        .read_parquet_where::<Reading>(path, RowFilter::ge("id", 1.5))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`id`") && e.contains("Int64"), "{e}");
    // A filter on a column that is not there is an error before any task.
    let e = ctx
        .read_parquet_where::<Reading>(path, RowFilter::ge("nope", 1i64))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`nope`") && e.contains("part-00000.parquet"),
        "{e}"
    );
}
