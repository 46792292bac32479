//! Batches made to travel: a view array (`Utf8View`, `BinaryView`) keeps its strings in
//! data buffers it may share with every batch cut from the same source (an aggregate's
//! whole state, a join's whole build side), and Arrow IPC writes a view array's data
//! buffers whole. So before a batch is shuffled or returned, each view column is
//! compacted to the bytes its own rows use.
//!
//! Invariant: the batch's schema, rows and values are unchanged; only which bytes its
//! view columns' buffers hold.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;

/// `batch` with every top-level view column holding only its own rows' bytes (the
/// batch itself when it has no view column).
pub(crate) fn compact(batch: RecordBatch) -> RecordBatch {
    let views = |a: &ArrayRef| matches!(a.data_type(), DataType::Utf8View | DataType::BinaryView);
    if !batch.columns().iter().any(views) {
        return batch;
    }
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|a| match a.data_type() {
            DataType::Utf8View => Arc::new(a.as_string_view().gc()) as ArrayRef,
            DataType::BinaryView => Arc::new(a.as_binary_view().gc()) as ArrayRef,
            _ => a.clone(),
        })
        .collect();
    // Same schema, same columns' types and lengths: cannot fail.
    RecordBatch::try_new(batch.schema(), columns).unwrap_or(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringViewArray};
    use datafusion::arrow::datatypes::{Field, Schema};

    #[test]
    fn a_slice_of_a_view_column_keeps_only_its_own_bytes_and_values() {
        let long: Vec<String> = (0..10_000)
            .map(|i| format!("customer name number {i:08}"))
            .collect();
        let names = StringViewArray::from_iter_values(long.iter());
        let keys = Int64Array::from_iter_values(0..10_000);
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("name", DataType::Utf8View, false),
        ]));
        let whole = RecordBatch::try_new(schema, vec![Arc::new(keys), Arc::new(names)]).unwrap();
        let slice = whole.slice(100, 10);
        let compacted = compact(slice.clone());
        assert_eq!(compacted, slice, "values and schema unchanged");
        let bytes = |b: &RecordBatch| b.column(1).get_buffer_memory_size();
        assert!(bytes(&slice) > 200_000, "the slice shares the whole buffer");
        assert!(
            bytes(&compacted) < 2_000,
            "{} bytes kept",
            bytes(&compacted)
        );
        // No view column: the batch as it was.
        let plain = whole.project(&[0]).unwrap();
        assert_eq!(compact(plain.clone()), plain);
    }
}
