//! Parquet input and output on the arrow project's `parquet` crate: records of a serde
//! type mapped to Arrow columns by field name (`serde_arrow`), one partition per row
//! group or group of row groups, only the record type's columns decoded, one file per
//! partition written with the output commit protocol.
//!
//! `schema` owns what a record type's columns are and which files fit it; `source`
//! plans and decodes reads (`rows` the records of
//! flat record types straight from the columns); `sink` encodes writes.

mod bounds;
pub mod dictionary;
pub mod filter;
mod rows;
pub mod schema;
pub mod sink;
pub mod source;

pub use filter::{CompareOp, RowFilter, Scalar};
pub(crate) use rows::decode_fast;
pub use sink::{ParquetCompression, ParquetWriteOptions};
pub use source::ParquetChunk;
