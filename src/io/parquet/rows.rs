//! Records decoded straight from Arrow columns, without `serde_arrow`: the fast path of a
//! Parquet read whose record type is a flat struct of numbers, bools, strings and
//! `Option`s of them.
//!
//! Why: profile of `examples/parquet_etl` (25 M rows of `{key: i64, value: f64}` kept by a
//! filter): 10 % of the job in serde_arrow's per-row deserializer and 3.5 % in copying the
//! passing rows into new arrays before it. Here each row is handed to the record's
//! `Deserialize` as the sequence of its columns' values at that row, and a filter is a
//! selection of the rows to visit, not a copy.
//!
//! Invariants:
//! * The fast path gives exactly the records serde_arrow gives, or none at all: it runs
//!   only when every column is of a type it knows (integers, floats, booleans, strings),
//!   and only for a record whose `Deserialize` asks for a struct whose fields are exactly
//!   the batch's columns, in order (what `#[derive(Deserialize)]` asks for, the fields
//!   `record_fields` traced). Anything else it is asked for (a map, an enum, `any`, a
//!   null where no `Option` is, an integer out of its field's range) is an error that
//!   sends the whole batch to serde_arrow, whose records, or error, stand.
//! * A value reaches the record through the visitor method of its column's own type
//!   (`visit_i32` for an Int32 column, ...), so serde's own conversions, range checks
//!   included, are the ones applied.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, LargeStringArray, RecordBatch, StringArray};
use arrow_buffer::{BooleanBuffer, NullBuffer};
use arrow_schema::DataType;
use serde::de::{Deserialize, DeserializeOwned, DeserializeSeed, SeqAccess, Visitor};
use serde::Deserializer;

/// The selected rows of `batch` (every row for `None`), in order, as records of type `T`;
/// `None` when the batch or the record type is off the fast path (see the module
/// invariants: the caller then decodes with serde_arrow).
pub fn decode_fast<T: DeserializeOwned>(
    batch: &RecordBatch,
    selection: Option<&BooleanBuffer>,
) -> Option<Vec<T>> {
    let columns: Vec<Column<'_>> = batch
        .columns()
        .iter()
        .map(|c| Column::of(c.as_ref()))
        .collect::<Option<_>>()?;
    let schema = batch.schema_ref();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let checked = Cell::new(0usize);
    let row = |row: usize| {
        T::deserialize(RowDe {
            columns: &columns,
            names: &names,
            checked: &checked,
            row,
        })
        .ok()
    };
    let mut out = Vec::new();
    match selection {
        None => {
            out.reserve_exact(batch.num_rows());
            for r in 0..batch.num_rows() {
                out.push(row(r)?);
            }
        }
        Some(selection) => {
            out.reserve_exact(selection.count_set_bits());
            for r in selection.set_indices() {
                out.push(row(r)?);
            }
        }
    }
    Some(out)
}

/// A column's values, by their Arrow type.
enum Values<'a> {
    Bool(&'a BooleanBuffer),
    I8(&'a [i8]),
    I16(&'a [i16]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    U8(&'a [u8]),
    U16(&'a [u16]),
    U32(&'a [u32]),
    U64(&'a [u64]),
    F32(&'a [f32]),
    F64(&'a [f64]),
    Utf8(&'a StringArray),
    LargeUtf8(&'a LargeStringArray),
}

struct Column<'a> {
    values: Values<'a>,
    /// `None` when the column has no nulls.
    nulls: Option<&'a NullBuffer>,
}

impl<'a> Column<'a> {
    /// `None` for a column type the fast path does not know.
    fn of(a: &'a dyn Array) -> Option<Self> {
        let values = match a.data_type() {
            DataType::Boolean => Values::Bool(a.as_boolean().values()),
            DataType::Int8 => Values::I8(a.as_primitive::<Int8Type>().values()),
            DataType::Int16 => Values::I16(a.as_primitive::<Int16Type>().values()),
            DataType::Int32 => Values::I32(a.as_primitive::<Int32Type>().values()),
            DataType::Int64 => Values::I64(a.as_primitive::<Int64Type>().values()),
            DataType::UInt8 => Values::U8(a.as_primitive::<UInt8Type>().values()),
            DataType::UInt16 => Values::U16(a.as_primitive::<UInt16Type>().values()),
            DataType::UInt32 => Values::U32(a.as_primitive::<UInt32Type>().values()),
            DataType::UInt64 => Values::U64(a.as_primitive::<UInt64Type>().values()),
            DataType::Float32 => Values::F32(a.as_primitive::<Float32Type>().values()),
            DataType::Float64 => Values::F64(a.as_primitive::<Float64Type>().values()),
            DataType::Utf8 => Values::Utf8(a.as_string::<i32>()),
            DataType::LargeUtf8 => Values::LargeUtf8(a.as_string::<i64>()),
            _ => return None,
        };
        let nulls = a.nulls().filter(|n| n.null_count() > 0);
        Some(Column { values, nulls })
    }
}

/// Why a row left the fast path (never shown: serde_arrow decodes the batch again).
#[derive(Debug)]
struct Fallback;

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not on the fast path")
    }
}

impl std::error::Error for Fallback {}

impl serde::de::Error for Fallback {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Fallback
    }
}

/// One row, as a struct of the columns' values.
struct RowDe<'a, 'b> {
    columns: &'b [Column<'a>],
    names: &'b [&'a str],
    /// The address of the field list last found equal to `names` (0: none yet).
    checked: &'b Cell<usize>,
    row: usize,
}

impl<'de> Deserializer<'de> for RowDe<'_, '_> {
    type Error = Fallback;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    #[inline]
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Fallback> {
        let at = fields.as_ptr() as usize;
        if self.checked.get() != at {
            if fields != self.names {
                return Err(Fallback);
            }
            self.checked.set(at);
        }
        visitor.visit_seq(RowSeq {
            columns: self.columns,
            row: self.row,
            next: 0,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The values of one row, column by column.
struct RowSeq<'a, 'b> {
    columns: &'b [Column<'a>],
    row: usize,
    next: usize,
}

impl<'de> SeqAccess<'de> for RowSeq<'_, '_> {
    type Error = Fallback;

    /// The provided method, inlined (called once per value: serde's was not, 3 % of
    /// parquet_etl).
    #[inline]
    fn next_element<E: Deserialize<'de>>(&mut self) -> Result<Option<E>, Fallback> {
        self.next_element_seed(PhantomData)
    }

    #[inline]
    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Fallback> {
        let Some(column) = self.columns.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        seed.deserialize(ValueDe {
            column,
            row: self.row,
        })
        .map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.columns.len() - self.next)
    }
}

/// One value: column `column` at row `row`.
struct ValueDe<'a, 'b> {
    column: &'b Column<'a>,
    row: usize,
}

impl ValueDe<'_, '_> {
    #[inline]
    fn is_null(&self) -> bool {
        self.column.nulls.is_some_and(|n| n.is_null(self.row))
    }

    /// The value through the visitor method of the column's type; a null is an error (a
    /// field that is not an `Option`).
    #[inline]
    fn visit<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fallback> {
        if self.is_null() {
            return Err(Fallback);
        }
        let r = self.row;
        match &self.column.values {
            Values::Bool(v) => visitor.visit_bool(v.value(r)),
            Values::I8(v) => visitor.visit_i8(v[r]),
            Values::I16(v) => visitor.visit_i16(v[r]),
            Values::I32(v) => visitor.visit_i32(v[r]),
            Values::I64(v) => visitor.visit_i64(v[r]),
            Values::U8(v) => visitor.visit_u8(v[r]),
            Values::U16(v) => visitor.visit_u16(v[r]),
            Values::U32(v) => visitor.visit_u32(v[r]),
            Values::U64(v) => visitor.visit_u64(v[r]),
            Values::F32(v) => visitor.visit_f32(v[r]),
            Values::F64(v) => visitor.visit_f64(v[r]),
            Values::Utf8(v) => visitor.visit_str(v.value(r)),
            Values::LargeUtf8(v) => visitor.visit_str(v.value(r)),
        }
    }
}

macro_rules! visit_column {
    ($($method:ident)*) => {
        $(
            #[inline]
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fallback> {
                self.visit(visitor)
            }
        )*
    };
}

impl<'de> Deserializer<'de> for ValueDe<'_, '_> {
    type Error = Fallback;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    visit_column! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_f32
        deserialize_f64 deserialize_char deserialize_str deserialize_string
    }

    #[inline]
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fallback> {
        if self.is_null() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Fallback> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        i128 u128 bytes byte_buf unit unit_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

#[cfg(test)]
#[path = "rows_tests.rs"]
mod tests;
