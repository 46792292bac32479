//! Writing records as Parquet: one file per partition, the schema derived from the
//! record type, columns encoded by the parquet crate's Arrow writer.
//!
//! Invariants: a file holds every record of its partition, in order, and is complete
//! (footer written, data synced) before its path is returned for the commit; an empty
//! partition is a valid file of no rows with the schema (readers see its columns).

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{WriterProperties, WriterPropertiesBuilder};
use serde::{Deserialize, Serialize};

use super::schema::{record_fields, schema_of};
use super::source::ROWS_PER_BATCH;
use crate::data::Data;
use crate::error::{EmberError, Result};

/// The compression of written Parquet pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ParquetCompression {
    Uncompressed,
    Snappy,
    Lz4,
    /// zstd at a level from 1 to 22.
    Zstd(i32),
    /// gzip at a level from 0 to 9.
    Gzip(u32),
}

/// Options of [`Rdd::save_as_parquet_with`](crate::Rdd::save_as_parquet_with).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParquetWriteOptions {
    /// Default Snappy, as Spark's `spark.sql.parquet.compression.codec` and DuckDB's
    /// default: on the parquet_etl output (5 M keys and sums) zstd level 1 took 6 % of
    /// the job's CPU where Snappy takes 3 %. Pick `Zstd(1)` or higher where size matters
    /// more than time.
    pub compression: ParquetCompression,
    /// Most rows per row group (default 1,048,576, the parquet crate's and Spark's
    /// order of size); at least 1.
    pub row_group_rows: usize,
    /// Replace an existing output directory instead of failing.
    pub overwrite: bool,
}

impl Default for ParquetWriteOptions {
    fn default() -> Self {
        ParquetWriteOptions {
            compression: ParquetCompression::Snappy,
            row_group_rows: 1 << 20,
            overwrite: false,
        }
    }
}

impl ParquetWriteOptions {
    /// The writer properties these options stand for, or what is wrong with them.
    pub(crate) fn properties(&self) -> Result<WriterProperties> {
        Ok(self.builder()?.build())
    }

    /// The properties for a file whose first batch is `first`: dictionary encoding off for
    /// the columns it would not pay for (see [`super::dictionary`]).
    pub(crate) fn properties_for(&self, first: &RecordBatch) -> Result<WriterProperties> {
        let mut b = self.builder()?;
        for column in super::dictionary::sparse_columns(first) {
            b = b.set_column_dictionary_enabled(column, false);
        }
        Ok(b.build())
    }

    fn builder(&self) -> Result<WriterPropertiesBuilder> {
        let bad = |m: String| EmberError::InvalidArgument(format!("save_as_parquet: {m}"));
        if self.row_group_rows == 0 {
            return Err(bad("row_group_rows must be at least 1".into()));
        }
        let compression = match self.compression {
            ParquetCompression::Uncompressed => Compression::UNCOMPRESSED,
            ParquetCompression::Snappy => Compression::SNAPPY,
            ParquetCompression::Lz4 => Compression::LZ4_RAW,
            ParquetCompression::Zstd(level) => Compression::ZSTD(
                ZstdLevel::try_new(level).map_err(|e| bad(format!("zstd level {level}: {e}")))?,
            ),
            ParquetCompression::Gzip(level) => Compression::GZIP(
                parquet::basic::GzipLevel::try_new(level)
                    .map_err(|e| bad(format!("gzip level {level}: {e}")))?,
            ),
        };
        Ok(WriterProperties::builder()
            .set_compression(compression)
            .set_max_row_group_row_count(Some(self.row_group_rows))
            .set_created_by(format!("ember {}", env!("CARGO_PKG_VERSION"))))
    }
}

/// Writes `records` (batches of `T`) to a new Parquet file at `path`; returns the
/// number of records written.
pub fn write_file<T: Data>(
    path: &Path,
    options: &ParquetWriteOptions,
    records: impl Iterator<Item = Result<Vec<T>>>,
) -> Result<u64> {
    let fields = record_fields::<T>()?;
    let schema = schema_of(&fields);
    let file = File::create_new(path).map_err(|e| EmberError::io(path, e))?;
    let mut out = Some(BufWriter::with_capacity(1 << 20, file));
    let failed = |e: parquet::errors::ParquetError| EmberError::Corrupt {
        what: format!("Parquet file {} (writing)", path.display()),
        message: e.to_string(),
    };
    // Opened with the first batch, whose values choose the dictionary columns.
    let mut writer: Option<ArrowWriter<BufWriter<File>>> = None;
    let mut write = |rb: &RecordBatch| -> Result<()> {
        let w = match &mut writer {
            Some(w) => w,
            None => {
                let props = options.properties_for(rb)?;
                let out = out.take().expect("opened once");
                writer
                    .insert(ArrowWriter::try_new(out, schema.clone(), Some(props)).map_err(failed)?)
            }
        };
        w.write(rb).map_err(failed)
    };
    let mut builder = serde_arrow::ArrayBuilder::from_arrow(&fields)
        .map_err(|e| EmberError::ser("a Parquet schema", e))?;
    let mut pending = 0usize;
    let mut total = 0u64;
    let encode = |e: serde_arrow::Error| {
        EmberError::ser(
            format!("a {} record for Parquet", std::any::type_name::<T>()),
            e,
        )
    };
    for batch in records {
        let batch = batch?;
        total += batch.len() as u64;
        pending += batch.len();
        builder.extend(&batch).map_err(encode)?;
        if pending >= ROWS_PER_BATCH {
            let rb = builder.to_record_batch().map_err(encode)?;
            write(&rb)?;
            pending = 0;
        }
    }
    if pending > 0 || total == 0 {
        // An empty partition is a file of T's schema and no rows.
        let rb = builder.to_record_batch().map_err(encode)?;
        write(&rb)?;
    }
    let writer = writer.expect("the last batch opened it");
    crate::io::commit::sync_file(path, writer.into_inner().map_err(failed)?)?;
    Ok(total)
}

/// Writes Arrow `batches` (one schema, the first's) to a new Parquet file at `path`;
/// returns the number of rows written. An empty input is a file of no columns.
pub fn write_batches(
    path: &Path,
    options: &ParquetWriteOptions,
    batches: impl Iterator<Item = Result<Vec<crate::io::arrow_batch::ArrowBatch>>>,
) -> Result<u64> {
    let failed = |e: parquet::errors::ParquetError| EmberError::Corrupt {
        what: format!("Parquet file {} (writing)", path.display()),
        message: e.to_string(),
    };
    let mut writer: Option<(ArrowWriter<BufWriter<File>>, arrow_schema::SchemaRef)> = None;
    let mut total = 0u64;
    let open = |first: &RecordBatch| -> Result<ArrowWriter<BufWriter<File>>> {
        let file = File::create_new(path).map_err(|e| EmberError::io(path, e))?;
        ArrowWriter::try_new(
            BufWriter::with_capacity(1 << 20, file),
            first.schema(),
            Some(options.properties_for(first)?),
        )
        .map_err(failed)
    };
    for batch in batches {
        for b in batch? {
            let (w, schema) = match &mut writer {
                Some(w) => w,
                None => writer.insert((open(&b.0)?, b.0.schema())),
            };
            if *schema != b.0.schema() {
                return Err(EmberError::SchemaMismatch {
                    path: path.display().to_string(),
                    column: "(all)".into(),
                    found: crate::io::excerpt(&b.0.schema().to_string()).to_string(),
                    expected: format!(
                        "the partition's first batch's schema, {}",
                        crate::io::excerpt(&schema.to_string())
                    ),
                });
            }
            total += b.0.num_rows() as u64;
            w.write(&b.0).map_err(failed)?;
        }
    }
    let writer = match writer {
        Some((w, _)) => w,
        None => open(&RecordBatch::new_empty(std::sync::Arc::new(
            arrow_schema::Schema::empty(),
        )))?,
    };
    crate::io::commit::sync_file(path, writer.into_inner().map_err(failed)?)?;
    Ok(total)
}
