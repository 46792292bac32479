//! A record type's Arrow schema (derived from its serde shape by `serde_arrow`) and
//! whether a file's columns can be read into it.
//!
//! Invariants: a record type is read by field name, never by position; a file fits a
//! record type when every non-`Option` field has a column of a compatible type (an
//! `Option` field may have no column: it reads as `None`); the error of a file that
//! does not fit names the file, the column and both types. "Compatible" never means
//! lossy: integers into any integer field (each value is range-checked when decoded),
//! `f32` into `f64`, the string (binary, list) encodings into each other, dictionaries
//! by their values, structs field by field.

use std::sync::Arc;

use arrow_schema::{DataType, Field, FieldRef, Schema};
use parquet::file::metadata::ParquetMetaData;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_arrow::schema::{SchemaLike, TracingOptions};

use crate::error::{EmberError, Result};

/// How record types are traced: plain (not large) strings, lists and binaries, as
/// Parquet files written by other tools have them; `Option` fields nullable.
fn tracing() -> TracingOptions {
    TracingOptions::default()
        .strings_as_large_utf8(false)
        .sequence_as_large_list(false)
        .bytes_as_large_binary(false)
        .allow_null_fields(true)
}

/// The Arrow fields of record type `T` (a struct: one field per column).
pub fn record_fields<T: Serialize + DeserializeOwned>() -> Result<Vec<FieldRef>> {
    Vec::<FieldRef>::from_type::<T>(tracing()).map_err(|e| {
        EmberError::Config(format!(
            "no Arrow schema for record type {}: {e} (a record is a struct of \
             numbers, bools, strings, Options, Vecs and nested structs)",
            std::any::type_name::<T>()
        ))
    })
}

/// A schema of `fields`.
pub fn schema_of(fields: &[FieldRef]) -> Arc<Schema> {
    Arc::new(Schema::new(fields.to_vec()))
}

/// Whether values of a column of type `file` can be read into a field of type `want`.
pub fn compatible(file: &DataType, want: &DataType) -> bool {
    use DataType as D;
    if file == want {
        return true;
    }
    let list_item = |t: &DataType| match t {
        D::List(f) | D::LargeList(f) | D::ListView(f) | D::LargeListView(f) => {
            Some(f.data_type().clone())
        }
        D::FixedSizeList(f, _) => Some(f.data_type().clone()),
        _ => None,
    };
    let stringy = |t: &DataType| matches!(t, D::Utf8 | D::LargeUtf8 | D::Utf8View);
    let binary = |t: &DataType| {
        matches!(
            t,
            D::Binary | D::LargeBinary | D::BinaryView | D::FixedSizeBinary(_)
        )
    };
    match (file, want) {
        (D::Dictionary(_, values), w) => compatible(values, w),
        (f, w) if stringy(f) && stringy(w) => true,
        (f, w) if binary(f) && binary(w) => true,
        (f, w) if f.is_integer() && w.is_integer() => true,
        (D::Float16 | D::Float32, D::Float32 | D::Float64) => true,
        (D::Timestamp(unit, _), D::Timestamp(want_unit, _)) => unit == want_unit,
        (D::Struct(have), D::Struct(wanted)) => {
            wanted
                .iter()
                .all(|w| match have.iter().find(|h| h.name() == w.name()) {
                    Some(h) => compatible(h.data_type(), w.data_type()),
                    None => w.is_nullable(),
                })
        }
        (f, w) => match (list_item(f), list_item(w)) {
            (Some(a), Some(b)) => compatible(&a, &b),
            _ => false,
        },
    }
}

/// The columns of `file_schema` that `fields` read, by index, in file order; or the
/// error naming `path`, the column and both types.
pub fn projection(path: &str, file_schema: &Schema, fields: &[FieldRef]) -> Result<Vec<usize>> {
    let mut roots = Vec::new();
    for want in fields {
        match file_schema.index_of(want.name()) {
            Ok(i) => {
                let have: &Field = file_schema.field(i);
                if !compatible(have.data_type(), want.data_type()) {
                    return Err(mismatch(path, want.name(), have.data_type(), want));
                }
                roots.push(i);
            }
            Err(_) if want.is_nullable() => {} // read as None
            Err(_) => {
                return Err(EmberError::SchemaMismatch {
                    path: path.to_string(),
                    column: want.name().clone(),
                    found: "no such column".into(),
                    expected: describe(want),
                })
            }
        }
    }
    roots.sort_unstable();
    Ok(roots)
}

/// Fails if a row group's statistics show nulls in a column read into a field that
/// cannot hold them (not an `Option`): found before any task runs, not by a task.
pub fn check_nulls(
    path: &str,
    meta: &ParquetMetaData,
    file_schema: &Schema,
    fields: &[FieldRef],
) -> Result<()> {
    let descr = meta.file_metadata().schema_descr();
    for want in fields.iter().filter(|f| !f.is_nullable()) {
        let Ok(root) = file_schema.index_of(want.name()) else {
            continue;
        };
        if file_schema.field(root).data_type().is_nested() {
            continue; // a leaf's nulls there include empty lists: checked when decoded
        }
        // Leaf columns of this root (one for a primitive column).
        let leaves: Vec<usize> = (0..descr.num_columns())
            .filter(|&c| descr.get_column_root_idx(c) == root)
            .collect();
        if leaves.len() != 1 {
            continue; // nested: nulls inside are checked when decoded
        }
        for (g, rg) in meta.row_groups().iter().enumerate() {
            let nulls = rg
                .column(leaves[0])
                .statistics()
                .and_then(|s| s.null_count_opt());
            if let Some(n) = nulls.filter(|&n| n > 0) {
                return Err(EmberError::SchemaMismatch {
                    path: path.to_string(),
                    column: want.name().clone(),
                    found: format!(
                        "{} with {n} nulls in row group {g}",
                        type_name(file_schema.field(root).data_type())
                    ),
                    expected: format!(
                        "{} (not an Option: make the field an Option to read nulls)",
                        describe(want)
                    ),
                });
            }
        }
    }
    Ok(())
}

fn mismatch(path: &str, column: &str, found: &DataType, want: &Field) -> EmberError {
    EmberError::SchemaMismatch {
        path: path.to_string(),
        column: column.to_string(),
        found: type_name(found),
        expected: describe(want),
    }
}

fn describe(f: &Field) -> String {
    if f.is_nullable() {
        format!("{} (nullable)", type_name(f.data_type()))
    } else {
        type_name(f.data_type())
    }
}

/// A type as Arrow spells it, bounded (a deep struct can be long).
fn type_name(t: &DataType) -> String {
    let s = t.to_string();
    match s.char_indices().nth(crate::io::EXCERPT_CHARS) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}
