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

use arrow_array::RecordBatch;
use arrow_schema::FieldRef;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use serde::{Deserialize, Serialize};

use super::bounds::{check_row_group, corrupt};
use super::filter::{keep_rows, RowFilter};
use super::schema::{check_nulls, projection, record_fields};
use crate::data::Data;
use crate::error::{EmberError, Result};
#[cfg(feature = "s3")]
use crate::io::storage::{is_remote, ObjectUrl, RemoteFile};
use crate::io::text_input::{list_input_files, Packing};
use crate::memory::{MemoryPool, Reservation};

/// Rows decoded per Arrow batch (and handed on as one batch of records).
pub const ROWS_PER_BATCH: usize = 8192;

/// Some row groups of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParquetChunk {
    pub path: PathBuf,
    pub row_groups: Vec<usize>,
}

/// The footer of `path`, as Arrow sees it.
fn footer(path: &Path) -> Result<ArrowReaderMetadata> {
    let options = ArrowReaderOptions::new();
    #[cfg(feature = "s3")]
    if is_remote(path) {
        let file = RemoteFile::open(&ObjectUrl::parse(path)?)?;
        return ArrowReaderMetadata::load(&file, options).map_err(|e| corrupt(path, e));
    }
    let file = File::open(path).map_err(|e| EmberError::io(path, e))?;
    ArrowReaderMetadata::load(&file, options).map_err(|e| corrupt(path, e))
}

/// The partitions of a read of `path` (a file, directory, glob or comma-separated
/// list): of the columns `fields` (each file checked against them) or, for `None`, of
/// every column (each file's schema the first's); row groups `filter` proves empty are
/// left out. See the module invariants.
pub fn plan(
    path: &str,
    fields: Option<&[FieldRef]>,
    filter: Option<&RowFilter>,
    min_partitions: usize,
    packing: Packing,
) -> Result<Vec<Vec<ParquetChunk>>> {
    let files = list_input_files(path)?;
    // (file, row group, cost)
    let mut units: Vec<(usize, usize, u64)> = Vec::new();
    let mut first_schema: Option<(String, arrow_schema::SchemaRef)> = None;
    let mut skipped = 0usize;
    for (i, f) in files.iter().enumerate() {
        let meta = footer(f)?;
        let shown = f.display().to_string();
        if meta.metadata().file_metadata().num_rows() == 0 {
            // No rows to misread (e.g. the file of an empty partition, which may even
            // have no columns): its schema is not checked, and it adds no partition.
            continue;
        }
        match fields {
            Some(fields) => {
                projection(&shown, meta.schema(), fields)?;
                check_nulls(&shown, meta.metadata(), meta.schema(), fields)?;
            }
            None => match &first_schema {
                None => first_schema = Some((shown.clone(), meta.schema().clone())),
                Some((first, schema)) => {
                    if schema.fields() != meta.schema().fields() {
                        return Err(EmberError::SchemaMismatch {
                            path: shown,
                            column: "(all)".into(),
                            found: crate::io::excerpt(&meta.schema().to_string()).to_string(),
                            expected: format!(
                                "the schema of {first}: {}",
                                crate::io::excerpt(&schema.to_string())
                            ),
                        });
                    }
                }
            },
        }
        if let Some(filter) = filter {
            filter.check(&shown, meta.schema())?;
        }
        let mut opened = false;
        for (g, rg) in meta.metadata().row_groups().iter().enumerate() {
            if filter.is_some_and(|f| !f.may_match(rg, meta.schema())) {
                skipped += 1;
                continue;
            }
            let open = if opened { 0 } else { packing.open_cost };
            opened = true;
            let size = u64::try_from(rg.compressed_size()).unwrap_or(0);
            units.push((i, g, size.saturating_add(open)));
        }
    }
    if skipped > 0 {
        tracing::info!(
            input = path,
            skipped,
            "row groups skipped by their statistics"
        );
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

/// Decodes the row groups of `chunks`, in order, into Arrow batches of the projected
/// columns (`fields`; all columns when `None`), rows passing `filter` only. Before a
/// file's row groups are decoded, the sizes their column chunks and pages claim are
/// checked against the file and charged to the reader's memory reservation
/// (`bounds.rs`).
pub struct ChunkReader {
    fields: Option<Vec<FieldRef>>,
    filter: Option<RowFilter>,
    chunks: std::vec::IntoIter<ParquetChunk>,
    current: Option<(PathBuf, ParquetRecordBatchReader)>,
    /// Holds the largest page buffers checked so far; an unbounded private pool's
    /// reservation unless [`with_memory`](Self::with_memory) gives the task's.
    memory: Reservation,
}

impl ChunkReader {
    pub fn new(
        chunks: Vec<ParquetChunk>,
        fields: Option<Vec<FieldRef>>,
        filter: Option<RowFilter>,
    ) -> Self {
        ChunkReader {
            fields,
            filter,
            chunks: chunks.into_iter(),
            current: None,
            memory: MemoryPool::new(u64::MAX).reservation("Parquet page buffers"),
        }
    }

    /// Charges the page buffers to `memory` (a task's reservation), so a page claiming
    /// more than the pool grants fails before it is allocated.
    pub fn with_memory(mut self, memory: Reservation) -> Self {
        self.memory = memory;
        self
    }

    fn open(&mut self, chunk: &ParquetChunk) -> Result<ParquetRecordBatchReader> {
        let path = &chunk.path;
        #[cfg(feature = "s3")]
        if is_remote(path) {
            let file = RemoteFile::open(&ObjectUrl::parse(path)?)?;
            return self.open_with(chunk, file);
        }
        let file = File::open(path).map_err(|e| EmberError::io(path, e))?;
        self.open_with(chunk, file)
    }

    fn open_with<R: parquet::file::reader::ChunkReader + 'static>(
        &mut self,
        chunk: &ParquetChunk,
        file: R,
    ) -> Result<ParquetRecordBatchReader> {
        let path = &chunk.path;
        let footer = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
            .map_err(|e| corrupt(path, e))?;
        let groups = footer.metadata().num_row_groups();
        if let Some(g) = chunk.row_groups.iter().find(|&&g| g >= groups) {
            return Err(corrupt(
                path,
                format!(
                    "row group {g} is gone (the file has {groups}; it changed since the job \
                     was planned)"
                ),
            ));
        }
        let mask = match &self.fields {
            Some(fields) => {
                let mut roots = projection(&path.display().to_string(), footer.schema(), fields)?;
                // The filter's column is read too (dropped again after filtering).
                if let Some(f) = &self.filter {
                    if let Ok(i) = footer.schema().index_of(&f.column) {
                        if !roots.contains(&i) {
                            roots.push(i);
                            roots.sort_unstable();
                        }
                    }
                }
                ProjectionMask::roots(footer.parquet_schema(), roots)
            }
            None => ProjectionMask::all(),
        };
        for &group in &chunk.row_groups {
            let metadata = footer.metadata();
            check_row_group(path, &file, metadata, group, &mask, &mut self.memory)?;
        }
        ParquetRecordBatchReaderBuilder::new_with_metadata(file, footer)
            .with_projection(mask)
            .with_row_groups(chunk.row_groups.clone())
            .with_batch_size(ROWS_PER_BATCH)
            .build()
            .map_err(|e| corrupt(path, e))
    }

    /// The next Arrow batch (of rows passing the filter), and its file; `None` at the
    /// end.
    pub fn next_arrow(&mut self) -> Option<Result<(RecordBatch, &Path)>> {
        let batch = loop {
            let batch = match self.next_unfiltered()? {
                Ok(batch) => batch,
                Err(e) => return Some(Err(e)),
            };
            match self.project(batch) {
                Ok(b) if b.num_rows() == 0 => continue,
                Ok(b) => break b,
                Err(e) => return Some(Err(e)),
            }
        };
        Some(Ok((batch, self.current_path())))
    }

    /// `batch`'s rows that pass the filter, in the record type's columns.
    fn project(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let path = self.current_path();
        let batch = match &self.filter {
            Some(f) => f.apply(&batch).map_err(|e| corrupt(path, e))?,
            None => batch,
        };
        match &self.fields {
            Some(fields) => record_columns(batch, fields).map_err(|e| corrupt(path, e)),
            None => Ok(batch),
        }
    }

    /// The next batch as decoded: the projected columns plus the filter's, every row;
    /// `None` at the end.
    fn next_unfiltered(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if let Some((path, reader)) = self.current.as_mut() {
                match reader.next() {
                    Some(Ok(batch)) => return Some(Ok(batch)),
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

    /// The file of the batch [`next_unfiltered`](Self::next_unfiltered) returned last.
    fn current_path(&self) -> &Path {
        self.current
            .as_ref()
            .map_or(Path::new(""), |(path, _)| path.as_path())
    }
}

/// `batch` with exactly the columns of `fields`: a column read only for the filter is
/// dropped, and a field the file has no column for (an `Option`) is a column of nulls
/// (without one, a batch of no columns would decode as no rows).
fn record_columns(
    batch: RecordBatch,
    fields: &[FieldRef],
) -> std::result::Result<RecordBatch, arrow_schema::ArrowError> {
    let schema = batch.schema();
    let rows = batch.num_rows();
    let mut out_fields = Vec::with_capacity(fields.len());
    let mut columns = Vec::with_capacity(fields.len());
    for f in fields {
        match schema.index_of(f.name()) {
            Ok(i) => {
                out_fields.push(schema.field(i).clone());
                columns.push(batch.column(i).clone());
            }
            Err(_) => {
                out_fields.push(f.as_ref().clone());
                columns.push(arrow_array::new_null_array(f.data_type(), rows));
            }
        }
    }
    RecordBatch::try_new_with_options(
        std::sync::Arc::new(arrow_schema::Schema::new(out_fields)),
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )
}

/// Decodes the rows of `chunks` into batches of `T`.
pub struct RecordReader<T> {
    inner: ChunkReader,
    _t: std::marker::PhantomData<T>,
}

impl<T: Data> RecordReader<T> {
    pub fn new(chunks: Vec<ParquetChunk>, filter: Option<RowFilter>) -> Result<Self> {
        let fields = record_fields::<T>()?;
        Ok(RecordReader {
            inner: ChunkReader::new(chunks, Some(fields), filter),
            _t: std::marker::PhantomData,
        })
    }

    /// See [`ChunkReader::with_memory`].
    pub fn with_memory(mut self, memory: Reservation) -> Self {
        self.inner = self.inner.with_memory(memory);
        self
    }

    /// The next batch of records, `None` at the end. A batch whose columns and record
    /// type allow it is decoded without serde_arrow, the filter as a selection of rows
    /// (`rows.rs`); any other through [`decode_rows`].
    pub fn next_batch(&mut self) -> Option<Result<Vec<T>>> {
        loop {
            let batch = match self.inner.next_unfiltered()? {
                Ok(batch) => batch,
                Err(e) => return Some(Err(e)),
            };
            let path = self.inner.current_path();
            let selection = match &self.inner.filter {
                Some(f) => match f.selection(&batch) {
                    Ok(s) => Some(s),
                    Err(e) => return Some(Err(corrupt(path, e))),
                },
                None => None,
            };
            let fields = self
                .inner
                .fields
                .as_deref()
                .expect("a record type's fields");
            let batch = match record_columns(batch, fields) {
                Ok(b) => b,
                Err(e) => return Some(Err(corrupt(path, e))),
            };
            let rows = selection
                .as_ref()
                .map_or(batch.num_rows(), |s| s.count_set_bits());
            if rows == 0 {
                continue;
            }
            if let Some(records) = super::rows::decode_fast::<T>(&batch, selection.as_ref()) {
                return Some(Ok(records));
            }
            let batch = match selection {
                Some(s) => match keep_rows(&batch, s) {
                    Ok(b) => b,
                    Err(e) => return Some(Err(corrupt(path, e))),
                },
                None => batch,
            };
            return Some(decode_rows(path, &batch));
        }
    }
}

/// The rows of `batch` (read from `path`) as records of type `T`.
pub fn decode_rows<T: Data>(path: &Path, batch: &RecordBatch) -> Result<Vec<T>> {
    serde_arrow::from_record_batch::<Vec<T>>(batch).map_err(|e| EmberError::Corrupt {
        what: format!("Parquet file {}", path.display()),
        message: format!(
            "a row does not decode as {}: {e}",
            std::any::type_name::<T>()
        ),
    })
}
