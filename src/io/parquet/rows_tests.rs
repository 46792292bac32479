//! The fast row decoder against serde_arrow: the same records, or a fallback.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, ListArray, RecordBatch, StringArray};
use arrow_buffer::BooleanBuffer;
use arrow_schema::{DataType, Field, Schema};
use serde::{Deserialize, Serialize};

use super::decode_fast;
use crate::io::parquet::schema::record_fields;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Flat {
    key: i64,
    value: f64,
    name: String,
    flag: bool,
    small: u8,
    maybe: Option<i32>,
    id: UserId,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct UserId(u32);

fn flat(n: usize) -> Vec<Flat> {
    (0..n)
        .map(|i| Flat {
            key: i as i64 * 7919 - 5000,
            value: i as f64 / 3.0 - 1.5,
            name: format!("row {i}"),
            flag: i % 3 == 0,
            small: (i % 256) as u8,
            maybe: (i % 4 != 0).then_some(i as i32 * -3),
            id: UserId(i as u32 * 11),
        })
        .collect()
}

fn batch_of<T: Serialize + for<'de> Deserialize<'de>>(rows: &[T]) -> RecordBatch {
    serde_arrow::to_record_batch(&record_fields::<T>().unwrap(), &rows).unwrap()
}

fn slow<T: for<'de> Deserialize<'de>>(batch: &RecordBatch) -> Vec<T> {
    serde_arrow::from_record_batch(batch).unwrap()
}

#[test]
fn flat_records_decode_as_serde_arrow_decodes_them() {
    let rows = flat(1000);
    let batch = batch_of(&rows);
    let fast: Vec<Flat> = decode_fast(&batch, None).expect("on the fast path");
    assert_eq!(fast, rows);
    assert_eq!(fast, slow::<Flat>(&batch));
}

#[test]
fn a_selection_decodes_exactly_the_selected_rows_in_order() {
    let rows = flat(777);
    let batch = batch_of(&rows);
    let selection = BooleanBuffer::collect_bool(rows.len(), |i| i % 5 == 1 || i == 776);
    let fast: Vec<Flat> = decode_fast(&batch, Some(&selection)).expect("on the fast path");
    let expected: Vec<Flat> = rows
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 5 == 1 || *i == 776)
        .map(|(_, r)| r.clone())
        .collect();
    assert_eq!(fast, expected);
    let none = BooleanBuffer::new_unset(rows.len());
    assert_eq!(decode_fast::<Flat>(&batch, Some(&none)), Some(vec![]));
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Narrow {
    key: i64,
    small: u8,
}

/// A column wider than its field: in range it decodes (serde's own range check), out of
/// range the batch falls back, and serde_arrow reports the error.
#[test]
fn an_out_of_range_integer_falls_back() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("small", DataType::Int64, false),
    ]));
    let batch = |small: Vec<i64>| {
        let keys: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
        let small: ArrayRef = Arc::new(Int64Array::from(small));
        RecordBatch::try_new(schema.clone(), vec![keys, small]).unwrap()
    };
    let ok = batch(vec![0, 17, 255]);
    let fast: Vec<Narrow> = decode_fast(&ok, None).expect("in range");
    assert_eq!(fast, slow::<Narrow>(&ok));
    assert_eq!(fast[2], Narrow { key: 3, small: 255 });
    let bad = batch(vec![0, 256, 1]);
    assert!(decode_fast::<Narrow>(&bad, None).is_none());
    assert!(serde_arrow::from_record_batch::<Vec<Narrow>>(&bad).is_err());
}

/// Columns in another order than the record's fields: the batch falls back (the fast
/// path hands values over by position).
#[test]
fn columns_out_of_field_order_fall_back() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Swapped {
        small: u8,
        key: i64,
    }
    let batch = batch_of(&[Narrow { key: 9, small: 4 }]);
    assert!(decode_fast::<Swapped>(&batch, None).is_none());
    assert_eq!(slow::<Swapped>(&batch), vec![Swapped { small: 4, key: 9 }]);
}

/// A null where the field is not an `Option` falls back; in an `Option` it is `None`.
#[test]
fn a_null_outside_an_option_falls_back() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Named {
        name: String,
    }
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct MaybeNamed {
        name: Option<String>,
    }
    let schema = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, true)]));
    let names: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None, Some("c")]));
    let batch = RecordBatch::try_new(schema, vec![names]).unwrap();
    assert!(decode_fast::<Named>(&batch, None).is_none());
    let fast: Vec<MaybeNamed> = decode_fast(&batch, None).expect("an Option holds a null");
    assert_eq!(fast, slow::<MaybeNamed>(&batch));
    assert_eq!(fast[1], MaybeNamed { name: None });
}

/// A column type the fast path does not know (a list) sends the batch to serde_arrow.
#[test]
fn a_list_column_is_off_the_fast_path() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Listed {
        key: i64,
        values: Vec<i64>,
    }
    let rows = vec![
        Listed {
            key: 1,
            values: vec![1, 2],
        },
        Listed {
            key: 2,
            values: vec![],
        },
    ];
    let batch = batch_of(&rows);
    assert!(batch
        .column(1)
        .as_any()
        .downcast_ref::<ListArray>()
        .is_some());
    assert!(decode_fast::<Listed>(&batch, None).is_none());
    assert_eq!(slow::<Listed>(&batch), rows);
}
