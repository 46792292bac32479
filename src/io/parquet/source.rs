//! Reading Parquet files into records: planning on the driver (footers read, schemas
//! checked, row groups packed into partitions) and decoding in a task (only the
//! record type's columns, only the partition's row groups).
//!
//! Invariants:
//! - Every row group of every listed file is in exactly one partition, and partitions
//!   list them in file then row-group order: reading the partitions in order reads
//!   every row once, in file order.
//! - A file that is not Parquet, is truncated, or does not fit the record type fails
//!   the read before any task runs, naming the file; a task that meets a file changed
//!   since (or a value that does not decode) fails naming the file and row group.
//! - A partition's row groups cost their compressed size plus the open cost of each
//!   file they start, and stay within `min(total / min_partitions, max_partition_bytes)`
//!   unless one row group alone is larger (Spark's file source packing).

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_schema::FieldRef;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use serde::{Deserialize, Serialize};

use super::schema::{check_nulls, projection, record_fields};
use crate::data::Data;
use crate::error::{EmberError, Result};
use crate::io::storage::{is_remote, ObjectUrl, RemoteFile};
use crate::io::text_input::{list_input_files, Packing};

/// Rows decoded per Arrow batch (and handed on as one batch of records).
pub const ROWS_PER_BATCH: usize = 8192;

/// Some row groups of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParquetChunk {
    pub path: PathBuf,
    pub row_groups: Vec<usize>,
}

pub(crate) fn corrupt(path: &Path, e: impl std::fmt::Display) -> EmberError {
    EmberError::Corrupt {
        what: format!("Parquet file {}", path.display()),
        message: e.to_string(),
    }
}

/// The footer of `path`, as Arrow sees it.
fn footer(path: &Path) -> Result<ArrowReaderMetadata> {
    let options = ArrowReaderOptions::new();
    if is_remote(path) {
        let file = RemoteFile::open(&ObjectUrl::parse(path)?)?;
        return ArrowReaderMetadata::load(&file, options).map_err(|e| corrupt(path, e));
    }
    let file = File::open(path).map_err(|e| EmberError::io(path, e))?;
    ArrowReaderMetadata::load(&file, options).map_err(|e| corrupt(path, e))
}

/// The partitions of a read of `path` (a file, directory, glob or comma-separated
/// list) into records of type `T`; see the module invariants.
pub fn plan<T: Data>(
    path: &str,
    min_partitions: usize,
    packing: Packing,
) -> Result<Vec<Vec<ParquetChunk>>> {
    let fields = record_fields::<T>()?;
    let files = list_input_files(path)?;
    // (file, row group, cost)
    let mut units: Vec<(usize, usize, u64)> = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let meta = footer(f)?;
        let shown = f.display().to_string();
        projection(&shown, meta.schema(), &fields)?;
        check_nulls(&shown, meta.metadata(), meta.schema(), &fields)?;
        for (g, rg) in meta.metadata().row_groups().iter().enumerate() {
            let open = if g == 0 { packing.open_cost } else { 0 };
            let size = u64::try_from(rg.compressed_size()).unwrap_or(0);
            units.push((i, g, size.saturating_add(open)));
        }
    }
    let total: u64 = units.iter().fold(0u64, |a, u| a.saturating_add(u.2));
    let capacity = (total / min_partitions.max(1) as u64)
        .min(packing.max_partition_bytes)
        .max(1);
    let mut parts: Vec<Vec<ParquetChunk>> = Vec::new();
    let mut current: Vec<ParquetChunk> = Vec::new();
    let mut used = 0u64;
    for (file, group, cost) in units {
        if !current.is_empty() && used.saturating_add(cost) > capacity {
            parts.push(std::mem::take(&mut current));
            used = 0;
        }
        used = used.saturating_add(cost);
        match current.last_mut() {
            Some(c) if c.path == files[file] => c.row_groups.push(group),
            _ => current.push(ParquetChunk {
                path: files[file].clone(),
                row_groups: vec![group],
            }),
        }
    }
    if !current.is_empty() {
        parts.push(current);
    }
    tracing::debug!(
        input = path,
        files = files.len(),
        partitions = parts.len(),
        "planned a Parquet read"
    );
    Ok(parts)
}

/// Decodes the row groups of `chunks`, in order, into batches of `T`.
pub struct ChunkReader<T> {
    fields: Vec<FieldRef>,
    chunks: std::vec::IntoIter<ParquetChunk>,
    current: Option<(
        PathBuf,
        parquet::arrow::arrow_reader::ParquetRecordBatchReader,
    )>,
    _t: std::marker::PhantomData<T>,
}

impl<T: Data> ChunkReader<T> {
    pub fn new(chunks: Vec<ParquetChunk>) -> Result<Self> {
        Ok(ChunkReader {
            fields: record_fields::<T>()?,
            chunks: chunks.into_iter(),
            current: None,
            _t: std::marker::PhantomData,
        })
    }

    fn open(&self, chunk: &ParquetChunk) -> Result<ParquetRecordBatchReader> {
        let path = &chunk.path;
        if is_remote(path) {
            let file = RemoteFile::open(&ObjectUrl::parse(path)?)?;
            return self.open_with(chunk, file);
        }
        let file = File::open(path).map_err(|e| EmberError::io(path, e))?;
        self.open_with(chunk, file)
    }

    fn open_with<R: parquet::file::reader::ChunkReader + 'static>(
        &self,
        chunk: &ParquetChunk,
        file: R,
    ) -> Result<ParquetRecordBatchReader> {
        let path = &chunk.path;
        let builder =
            ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| corrupt(path, e))?;
        let roots = projection(&path.display().to_string(), builder.schema(), &self.fields)?;
        let groups = builder.metadata().num_row_groups();
        if let Some(g) = chunk.row_groups.iter().find(|&&g| g >= groups) {
            return Err(corrupt(
                path,
                format!("row group {g} is gone (the file has {groups}; it changed since the job was planned)"),
            ));
        }
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
        builder
            .with_projection(mask)
            .with_row_groups(chunk.row_groups.clone())
            .with_batch_size(ROWS_PER_BATCH)
            .build()
            .map_err(|e| corrupt(path, e))
    }

    /// The next batch of records, `None` at the end.
    pub fn next_batch(&mut self) -> Option<Result<Vec<T>>> {
        loop {
            if let Some((path, reader)) = &mut self.current {
                match reader.next() {
                    Some(Ok(batch)) => {
                        return Some(serde_arrow::from_record_batch::<Vec<T>>(&batch).map_err(
                            |e| EmberError::Corrupt {
                                what: format!("Parquet file {}", path.display()),
                                message: format!(
                                    "a row does not decode as {}: {e}",
                                    std::any::type_name::<T>()
                                ),
                            },
                        ));
                    }
                    Some(Err(e)) => return Some(Err(corrupt(path, e))),
                    None => self.current = None,
                }
            }
            let chunk = self.chunks.next()?;
            match self.open(&chunk) {
                Ok(r) => self.current = Some((chunk.path, r)),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
