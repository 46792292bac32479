//! Sum of non-negative values per key, Parquet in and out:
//! `parquet_etl [--master M] [--partitions P] INPUT OUTPUT`.
//!
//! INPUT is Parquet (a file, a directory or a glob) with columns `key` (int64) and
//! `value` (double); other columns are not read. Rows with `value >= 0` are kept (the
//! filter is pushed into the read, as Spark pushes a DataFrame filter down: row groups
//! whose statistics rule every row out are skipped, and the rest are filtered on their
//! Arrow columns before any row becomes a record), and
//! OUTPUT gets Parquet files with columns `key` (int64) and `sum` (double), one
//! `part-NNNNN.parquet` per partition (P of them, default 64), then `_SUCCESS`. Like
//! Spark SQL's `spark.sql.shuffle.partitions` (200), P is a count of its own, not the
//! cores: with 64 reducers each one's table of a 5 M-key input holds 78,000 keys and stays
//! in cache; with 2 (the default parallelism of `local[2]`) the same job took 4.8 s
//! instead of 2.9 s (`bench/results/2026-12-01-9f183b9-round2.md`). A `value` that is NaN or negative is dropped; a file whose columns
//! do not fit fails the job before any task, naming the file and the column.

#[path = "support/args.rs"]
mod args;

#[path = "support/alloc.rs"]
mod alloc;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// Reduce partitions when `--partitions` is not given.
const SHUFFLE_PARTITIONS: usize = 64;

#[derive(Clone, Serialize, Deserialize)]
struct Row {
    key: i64,
    value: f64,
}

#[derive(Clone, Serialize, Deserialize)]
struct KeySum {
    key: i64,
    sum: f64,
}

fn main() -> anyhow::Result<()> {
    alloc::keep_freed_memory();
    let ctx = ember::Context::from_env()?;
    let Some(args) = args::Args::parse("parquet_etl", &[])? else {
        return Ok(()); // --help
    };
    let parts = args.partitions.unwrap_or(SHUFFLE_PARTITIONS);
    let rows = ctx
        .read_parquet_where::<Row>(&args.input, ember::RowFilter::ge("value", 0.0))
        .with_context(|| format!("reading {}", args.input))?;
    rows.map(|r: Row| (r.key, r.value))
        .reduce_by_key_into(|a: f64, b: f64| a + b, parts)
        .map(|(key, sum): (i64, f64)| KeySum { key, sum })
        .save_as_parquet(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    Ok(())
}
