//! A row filter pushed into Parquet reads: `column op value`, evaluated on the decoded
//! Arrow batches with Arrow's comparison kernels, and used first to skip whole row
//! groups whose statistics prove that no row can pass.
//!
//! Invariants: a read with a filter returns exactly the rows of the read without it for
//! which the predicate holds, in the same order; skipping a row group is only ever an
//! optimisation (it happens only when the group's min/max of a column of the scalar's
//! kind exclude every value, never on missing, NaN or unsigned statistics). A null (or
//! NaN) never passes, as in SQL.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use arrow_buffer::BooleanBuffer;
use arrow_schema::{ArrowError, DataType, Schema};
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::statistics::Statistics;
use serde::{Deserialize, Serialize};

/// How a column is compared with the filter's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
}

/// The value a column is compared with; the column is cast to its kind first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Scalar {
    Int(i64),
    Float(f64),
    Str(String),
}

impl From<i64> for Scalar {
    fn from(v: i64) -> Self {
        Scalar::Int(v)
    }
}
impl From<f64> for Scalar {
    fn from(v: f64) -> Self {
        Scalar::Float(v)
    }
}
impl From<&str> for Scalar {
    fn from(v: &str) -> Self {
        Scalar::Str(v.to_string())
    }
}

/// Keep the rows where `column op value`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowFilter {
    pub column: String,
    pub op: CompareOp,
    pub value: Scalar,
}

impl RowFilter {
    fn new(column: &str, op: CompareOp, value: impl Into<Scalar>) -> Self {
        RowFilter {
            column: column.to_string(),
            op,
            value: value.into(),
        }
    }
    /// Rows where `column == value`.
    pub fn eq(column: &str, value: impl Into<Scalar>) -> Self {
        Self::new(column, CompareOp::Eq, value)
    }
    /// Rows where `column < value`.
    pub fn lt(column: &str, value: impl Into<Scalar>) -> Self {
        Self::new(column, CompareOp::Lt, value)
    }
    /// Rows where `column <= value`.
    pub fn le(column: &str, value: impl Into<Scalar>) -> Self {
        Self::new(column, CompareOp::Le, value)
    }
    /// Rows where `column > value`.
    pub fn gt(column: &str, value: impl Into<Scalar>) -> Self {
        Self::new(column, CompareOp::Gt, value)
    }
    /// Rows where `column >= value`.
    pub fn ge(column: &str, value: impl Into<Scalar>) -> Self {
        Self::new(column, CompareOp::Ge, value)
    }

    /// Whether a file's column can be compared: it exists and casts to the scalar's kind.
    pub(crate) fn check(&self, path: &str, schema: &Schema) -> crate::Result<()> {
        let field = schema.field_with_name(&self.column).map_err(|_| {
            crate::EmberError::SchemaMismatch {
                path: path.to_string(),
                column: self.column.clone(),
                found: "no such column".into(),
                expected: "a column to filter on".into(),
            }
        })?;
        // Only casts that lose nothing, so the filter compares the values themselves:
        // signed integers with an integer, floats with a float, strings with a string.
        let t = match field.data_type() {
            DataType::Dictionary(_, v) => v.as_ref(),
            t => t,
        };
        let fits = match self.value {
            Scalar::Int(_) => signed_int(t),
            Scalar::Float(_) => {
                matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64)
            }
            Scalar::Str(_) => {
                matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
            }
        };
        if !fits {
            return Err(crate::EmberError::SchemaMismatch {
                path: path.to_string(),
                column: self.column.clone(),
                found: field.data_type().to_string(),
                expected: format!(
                    "a column to compare with the filter's {:?} (signed integers with an \
                     integer, floats with a float, strings with a string)",
                    self.value
                ),
            });
        }
        Ok(())
    }

    fn kind(&self) -> DataType {
        match self.value {
            Scalar::Int(_) => DataType::Int64,
            Scalar::Float(_) => DataType::Float64,
            Scalar::Str(_) => DataType::Utf8,
        }
    }

    /// The rows of `batch` that pass.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
        keep_rows(batch, self.selection(batch)?)
    }

    /// One bit per row of `batch`, set where the row passes (a null never does).
    pub fn selection(&self, batch: &RecordBatch) -> Result<BooleanBuffer, ArrowError> {
        let column = batch.column_by_name(&self.column).ok_or_else(|| {
            ArrowError::SchemaError(format!("no column {:?} to filter on", self.column))
        })?;
        let column: ArrayRef = arrow_cast::cast(column, &self.kind())?;
        let mask: BooleanArray = match &self.value {
            // Rust's (IEEE) comparisons, as a filter on the records would make: no
            // comparison with NaN holds and -0.0 equals 0.0 (Arrow's kernels order
            // floats totally instead).
            Scalar::Float(v) => {
                let f = column
                    .as_any()
                    .downcast_ref::<Float64Array>()
                    .expect("cast to Float64");
                let (v, values) = (*v, f.values());
                let bits = match self.op {
                    CompareOp::Eq => BooleanBuffer::collect_bool(f.len(), |i| values[i] == v),
                    CompareOp::Lt => BooleanBuffer::collect_bool(f.len(), |i| values[i] < v),
                    CompareOp::Le => BooleanBuffer::collect_bool(f.len(), |i| values[i] <= v),
                    CompareOp::Gt => BooleanBuffer::collect_bool(f.len(), |i| values[i] > v),
                    CompareOp::Ge => BooleanBuffer::collect_bool(f.len(), |i| values[i] >= v),
                };
                BooleanArray::new(bits, f.nulls().cloned())
            }
            Scalar::Int(v) => self.compare(&column, Arc::new(Int64Array::from(vec![*v])))?,
            Scalar::Str(v) => {
                self.compare(&column, Arc::new(StringArray::from(vec![v.as_str()])))?
            }
        };
        let (bits, nulls) = mask.into_parts();
        Ok(match nulls {
            Some(nulls) => &bits & nulls.inner(),
            None => bits,
        })
    }

    fn compare(&self, column: &ArrayRef, value: ArrayRef) -> Result<BooleanArray, ArrowError> {
        let scalar = arrow_array::Scalar::new(value);
        match self.op {
            CompareOp::Eq => arrow_ord::cmp::eq(column, &scalar),
            CompareOp::Lt => arrow_ord::cmp::lt(column, &scalar),
            CompareOp::Le => arrow_ord::cmp::lt_eq(column, &scalar),
            CompareOp::Gt => arrow_ord::cmp::gt(column, &scalar),
            CompareOp::Ge => arrow_ord::cmp::gt_eq(column, &scalar),
        }
    }

    /// Whether row group `rg` may hold a passing row (false only when its statistics
    /// prove otherwise). `schema` is the file's Arrow schema.
    pub(crate) fn may_match(&self, rg: &RowGroupMetaData, schema: &Schema) -> bool {
        use std::cmp::Ordering;
        let Some((min, max)) = self.bounds(rg, schema) else {
            return true;
        };
        match self.op {
            CompareOp::Eq => min != Ordering::Greater && max != Ordering::Less,
            CompareOp::Lt => min == Ordering::Less,
            CompareOp::Le => min != Ordering::Greater,
            CompareOp::Gt => max == Ordering::Greater,
            CompareOp::Ge => max != Ordering::Less,
        }
    }

    /// How the group's min and max of the column compare with the value, when both are
    /// known and comparable without doubt.
    fn bounds(
        &self,
        rg: &RowGroupMetaData,
        schema: &Schema,
    ) -> Option<(std::cmp::Ordering, std::cmp::Ordering)> {
        let root = schema.index_of(&self.column).ok()?;
        let arrow_type = schema.field(root).data_type();
        let descr = rg.schema_descr();
        let leaves: Vec<usize> = (0..descr.num_columns())
            .filter(|&c| descr.get_column_root_idx(c) == root)
            .collect();
        let [leaf] = leaves[..] else {
            return None;
        };
        let stats = rg.column(leaf).statistics()?;
        match (&self.value, stats, arrow_type) {
            (Scalar::Int(v), Statistics::Int32(s), t) if signed_int(t) => Some((
                i64::from(*s.min_opt()?).cmp(v),
                i64::from(*s.max_opt()?).cmp(v),
            )),
            (Scalar::Int(v), Statistics::Int64(s), t) if signed_int(t) => {
                Some((s.min_opt()?.cmp(v), s.max_opt()?.cmp(v)))
            }
            (Scalar::Float(v), Statistics::Double(s), DataType::Float64) => {
                float_bounds(*s.min_opt()?, *s.max_opt()?, *v)
            }
            (Scalar::Float(v), Statistics::Float(s), DataType::Float32) => {
                float_bounds(f64::from(*s.min_opt()?), f64::from(*s.max_opt()?), *v)
            }
            // Only the current statistics: the deprecated min/max of older writers
            // ordered bytes as signed.
            (Scalar::Str(v), Statistics::ByteArray(s), DataType::Utf8 | DataType::LargeUtf8)
                if s.min_is_exact() && s.max_is_exact() && !stats.is_min_max_deprecated() =>
            {
                Some((
                    s.min_opt()?.data().cmp(v.as_bytes()),
                    s.max_opt()?.data().cmp(v.as_bytes()),
                ))
            }
            _ => None,
        }
    }
}

/// The rows of `batch` whose bit in `selection` is set (a [`RowFilter::selection`]).
pub fn keep_rows(batch: &RecordBatch, selection: BooleanBuffer) -> Result<RecordBatch, ArrowError> {
    arrow_select::filter::filter_record_batch(batch, &BooleanArray::new(selection, None))
}

fn signed_int(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    )
}

fn float_bounds(min: f64, max: f64, v: f64) -> Option<(std::cmp::Ordering, std::cmp::Ordering)> {
    if min.is_nan() || max.is_nan() || v.is_nan() {
        return None;
    }
    Some((min.partial_cmp(&v)?, max.partial_cmp(&v)?))
}
