//! Which columns of a written Parquet file get dictionary encoding.
//!
//! The parquet crate dictionary-encodes every column until a dictionary page outgrows its
//! limit (1 MiB by default). A column whose values hardly repeat (the keys and sums a
//! group-by writes) then carries a dictionary as big as its data plus an index per row:
//! parquet_etl's output was 72.8 MB with dictionaries and 45.7 MB without, and building
//! them was 3 % of its time (`Interner::intern`). parquet-mr falls back to plain pages
//! when a dictionary does not pay; the parquet crate does not, so the sink decides per
//! column from the file's first batch, as DuckDB decides from the values it has seen.
//!
//! Invariants:
//! * Only the encoding changes, never a value: a file reads back the same either way.
//! * The decision depends only on the first batch's values (at most
//!   [`SAMPLE_ROWS`] of them), so the same records always give the same file.
//! * Only top-level columns of fixed-width primitive, string or binary type are judged;
//!   other columns (booleans, nested types) keep the parquet crate's default.

use std::collections::HashSet;
use std::hash::BuildHasher;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use foldhash::fast::FixedState;
use parquet::schema::types::ColumnPath;

/// Rows of the first batch looked at per column.
pub const SAMPLE_ROWS: usize = 65_536;
/// Fewest non-null sampled values for a verdict: below it the default stays.
pub const MIN_SAMPLE: usize = 1024;

/// Top-level columns of `batch` whose sampled non-null values are more than half
/// distinct: dictionary encoding would not pay for them.
pub fn sparse_columns(batch: &RecordBatch) -> Vec<ColumnPath> {
    let schema = batch.schema();
    schema
        .fields()
        .iter()
        .zip(batch.columns())
        .filter(|(_, column)| {
            distinct_ratio(column.as_ref()).is_some_and(|(distinct, seen)| distinct * 2 > seen)
        })
        .map(|(field, _)| ColumnPath::from(field.name().as_str()))
        .collect()
}

/// (distinct, non-null) among the first [`SAMPLE_ROWS`] rows, or `None` when the type
/// is not judged or too few values were seen.
fn distinct_ratio(column: &dyn Array) -> Option<(usize, usize)> {
    let rows = column.len().min(SAMPLE_ROWS);
    let hasher = FixedState::default();
    let mut seen = HashSet::with_capacity(rows);
    let mut count = 0usize;
    let mut note = |i: usize, bytes: &[u8]| {
        if column.is_valid(i) {
            count += 1;
            seen.insert(hasher.hash_one(bytes));
        }
    };
    match column.data_type() {
        DataType::Utf8 => {
            let a = column.as_string::<i32>();
            (0..rows).for_each(|i| note(i, a.value(i).as_bytes()));
        }
        DataType::LargeUtf8 => {
            let a = column.as_string::<i64>();
            (0..rows).for_each(|i| note(i, a.value(i).as_bytes()));
        }
        DataType::Binary => {
            let a = column.as_binary::<i32>();
            (0..rows).for_each(|i| note(i, a.value(i)));
        }
        DataType::LargeBinary => {
            let a = column.as_binary::<i64>();
            (0..rows).for_each(|i| note(i, a.value(i)));
        }
        t if t.is_primitive() => {
            let width = t.primitive_width()?;
            let data = column.to_data();
            let values = data.buffers().first()?.as_slice();
            let start = data.offset() * width;
            for i in 0..rows {
                let at = start + i * width;
                note(i, values.get(at..at + width)?);
            }
        }
        _ => return None,
    }
    (count >= MIN_SAMPLE).then_some((seen.len(), count))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{BooleanArray, Float64Array, Int64Array, StringArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    fn batch(columns: Vec<(&str, Arc<dyn Array>)>) -> RecordBatch {
        let fields: Vec<Field> = columns
            .iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns.into_iter().map(|(_, a)| a).collect(),
        )
        .unwrap()
    }

    #[test]
    fn unique_columns_are_sparse_and_repeating_ones_are_not() {
        let n = 5000i64;
        let b = batch(vec![
            ("key", Arc::new(Int64Array::from_iter_values(0..n))),
            (
                "bucket",
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 10))),
            ),
            (
                "sum",
                Arc::new(Float64Array::from_iter_values(
                    (0..n).map(|i| i as f64 * 0.5),
                )),
            ),
            (
                "name",
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("n{}", i % 3)),
                )),
            ),
            (
                "id",
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("id-{i}")),
                )),
            ),
            (
                "flag",
                Arc::new(BooleanArray::from_iter((0..n).map(|i| Some(i % 2 == 0)))),
            ),
        ]);
        let names: Vec<String> = sparse_columns(&b).iter().map(|p| p.string()).collect();
        assert_eq!(names, vec!["key", "sum", "id"]);
    }

    #[test]
    fn small_samples_nulls_and_slices_are_judged_on_their_values() {
        // Too few values: no verdict.
        let few = batch(vec![("k", Arc::new(Int64Array::from_iter_values(0..100)))]);
        assert!(sparse_columns(&few).is_empty());
        // Mostly null: the non-null values alone count (and are too few here).
        let nulls = Int64Array::from_iter((0..5000i64).map(|i| (i % 10 == 0).then_some(i)));
        assert!(sparse_columns(&batch(vec![("k", Arc::new(nulls))])).is_empty());
        // A slice is read from its own offset: 0..2000 repeated, sliced past the start.
        let repeated = Int64Array::from_iter_values((0..8000i64).map(|i| i % 2000));
        let sliced: Arc<dyn Array> = Arc::new(repeated.slice(3000, 4000));
        assert!(
            sparse_columns(&batch(vec![("k", sliced)])).is_empty(),
            "2000 of 4000 distinct"
        );
        let unique: Arc<dyn Array> =
            Arc::new(Int64Array::from_iter_values(0..8000).slice(3000, 4000));
        assert_eq!(sparse_columns(&batch(vec![("k", unique)])).len(), 1);
    }
}
