//! Parquet as a source and a sink of records: `Context::read_parquet` and
//! `Rdd::save_as_parquet` (see [`crate::io::parquet`] for the format work).
//!
//! Invariants: a read fails before any task runs when a file is not Parquet or does
//! not fit the record type (naming the file, the column and both types); a write
//! follows the output commit protocol (`part-NNNNN.parquet` files moved into place
//! after the job, `_SUCCESS` last, a failed job leaves no directory behind).

use std::marker::PhantomData;
use std::panic::Location;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use ember_proto::RddNode;

use super::actions::{ResultOp, SaveOptions};
use super::Rdd;
use crate::data::Data;
use crate::data::{decode, encode};
use crate::error::Result;
use arrow_array::RecordBatch;

use super::source::{batch_len, counted_batches, partition_payload};
use super::Records;
use crate::closure::{assert_stateless, conjure};
use crate::io::arrow_batch::ArrowBatch;
use crate::io::parquet::schema::record_fields;
use crate::io::parquet::source::{plan, ChunkReader, RecordReader, ROWS_PER_BATCH};
use crate::io::parquet::{sink, ParquetChunk, ParquetWriteOptions, RowFilter};
use crate::task::{Batches, Erased, TaskContext};

struct SaveParquet<T>(PhantomData<T>);
impl<T: Data> ResultOp for SaveParquet<T> {
    type In = T;
    type Out = String;
    fn run(tc: &Rc<TaskContext>, payload: &[u8], part: u32, input: Batches<T>) -> Result<String> {
        let (dir, options): (PathBuf, ParquetWriteOptions) = decode("save_as_parquet", payload)?;
        tc.write_attempt(&dir, part, |path| {
            sink::write_file::<T>(path, &options, input)
        })
    }
}

impl<T: Data> Rdd<T> {
    /// Writes each partition as a Parquet file `part-NNNNN.parquet` into directory
    /// `path`, then an empty `_SUCCESS`: columns are `T`'s fields (a struct; `Option`
    /// fields nullable, `Vec`s as lists, nested structs as structs), Snappy-compressed
    /// (as Spark writes them; [`save_as_parquet_with`](Self::save_as_parquet_with) picks another codec).
    /// Fails if `path` exists.
    ///
    /// Needs ember's `parquet` feature (on by default).
    pub fn save_as_parquet(&self, path: impl AsRef<Path>) -> Result<()> {
        self.save_as_parquet_with(path, ParquetWriteOptions::default())
    }

    /// [`save_as_parquet`](Self::save_as_parquet) with options (compression, row-group
    /// size, overwrite).
    ///
    /// Needs ember's `parquet` feature (on by default).
    pub fn save_as_parquet_with(
        &self,
        path: impl AsRef<Path>,
        options: ParquetWriteOptions,
    ) -> Result<()> {
        // Bad options and record types without a schema fail here, not in a task.
        options.properties()?;
        record_fields::<T>()?;
        let save = SaveOptions {
            overwrite: options.overwrite,
        };
        crate::io::commit::save_files(path.as_ref(), save.overwrite, ".parquet", |tmp| {
            self.run_action::<SaveParquet<T>>(
                encode("save_as_parquet", &(tmp.to_path_buf(), options)),
                None,
                "save_as_parquet",
            )
        })
    }
}

impl crate::Context {
    /// The rows of Parquet files as records of type `T` (a struct whose fields name
    /// columns; only those columns are decoded). `path` is a file, a directory (its
    /// files in name order, skipping names that start with `_` or `.`), a glob, an
    /// `s3://` URL of any of those, or a comma-separated list. Row groups are packed
    /// into partitions as text splits are (at most 32 MiB each, at least the default
    /// parallelism where the data allows). Reads every footer first: a file that is
    /// not Parquet, or whose columns do not fit `T`, is an error here naming the file,
    /// the column and both types.
    ///
    /// Needs ember's `parquet` feature (on by default).
    #[track_caller]
    pub fn read_parquet<T: Data>(&self, path: &str) -> Result<Rdd<T>> {
        self.parquet_records::<T>(path, None, Location::caller())
    }

    /// [`read_parquet`](Self::read_parquet) of the rows passing `filter` only: row
    /// groups whose statistics rule every row out are not read at all, and the rest are
    /// filtered on their decoded columns (exactly the rows for which the predicate
    /// holds; a null never passes).
    ///
    /// Needs ember's `parquet` feature (on by default).
    #[track_caller]
    pub fn read_parquet_where<T: Data>(&self, path: &str, filter: RowFilter) -> Result<Rdd<T>> {
        self.parquet_records::<T>(path, Some(filter), Location::caller())
    }

    /// The rows of Parquet files as Arrow batches of every column (up to 8,192 rows
    /// each), for vectorised work with [`Rdd::map_batches`]; every file must have the
    /// first one's schema. Paths as for [`read_parquet`](Self::read_parquet).
    ///
    /// Needs ember's `parquet` feature (on by default).
    #[track_caller]
    pub fn read_parquet_batches(&self, path: &str) -> Result<Rdd<ArrowBatch>> {
        self.parquet_batches(path, None, Location::caller())
    }

    /// [`read_parquet_batches`](Self::read_parquet_batches) of the rows passing
    /// `filter` (see [`read_parquet_where`](Self::read_parquet_where)).
    ///
    /// Needs ember's `parquet` feature (on by default).
    #[track_caller]
    pub fn read_parquet_batches_where(
        &self,
        path: &str,
        filter: RowFilter,
    ) -> Result<Rdd<ArrowBatch>> {
        self.parquet_batches(path, Some(filter), Location::caller())
    }

    fn parquet_records<T: Data>(
        &self,
        path: &str,
        filter: Option<RowFilter>,
        at: &'static Location<'static>,
    ) -> Result<Rdd<T>> {
        let fields = record_fields::<T>()?;
        let parts = plan(
            path,
            Some(&fields),
            filter.as_ref(),
            self.default_parallelism(),
            self.inner.conf.packing,
        )?;
        Ok(self.parquet_source(path, parts, filter, at, parquet_compute::<T>))
    }

    fn parquet_batches(
        &self,
        path: &str,
        filter: Option<RowFilter>,
        at: &'static Location<'static>,
    ) -> Result<Rdd<ArrowBatch>> {
        let parts = plan(
            path,
            None,
            filter.as_ref(),
            self.default_parallelism(),
            self.inner.conf.packing,
        )?;
        Ok(self.parquet_source(path, parts, filter, at, parquet_batches_compute))
    }

    fn parquet_source<T: Data>(
        &self,
        path: &str,
        parts: Vec<Vec<ParquetChunk>>,
        filter: Option<RowFilter>,
        at: &'static Location<'static>,
        compute: crate::task::ComputeFn,
    ) -> Rdd<T> {
        let encoded: Vec<Vec<u8>> = parts
            .iter()
            .map(|p| encode("read_parquet", &(p, &filter)))
            .collect();
        self.source(
            &format!("read_parquet({})", crate::io::excerpt(path)),
            at,
            parts.len() as u32,
            compute,
            encode("read_parquet", &encoded),
        )
    }
}

/// Partition `part`'s row groups and filter.
fn partition_of(node: &RddNode, part: u32) -> Result<(Vec<ParquetChunk>, Option<RowFilter>)> {
    partition_payload(node, part, "read_parquet")
}

pub(crate) fn parquet_compute<T: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let (chunks, filter) = partition_of(node, part)?;
    let mut reader =
        RecordReader::<T>::new(chunks, filter)?.with_memory(tc.reservation("Parquet page buffers"));
    let out: Batches<T> = counted_batches(tc, batch_len, move || reader.next_batch());
    Ok(Box::new(out))
}

pub(crate) fn parquet_batches_compute(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let (chunks, filter) = partition_of(node, part)?;
    let mut reader =
        ChunkReader::new(chunks, None, filter).with_memory(tc.reservation("Parquet page buffers"));
    let rows = |b: &[ArrowBatch]| b.iter().map(|b| b.num_rows() as u64).sum();
    let out: Batches<ArrowBatch> = counted_batches(tc, rows, move || {
        let next = reader.next_arrow()?;
        Some(next.map(|(b, _)| vec![ArrowBatch(b)]))
    });
    Ok(Box::new(out))
}

impl Rdd<ArrowBatch> {
    /// Applies `f` to every batch (a vectorised map: Arrow's compute kernels work on
    /// whole columns).
    ///
    /// Needs ember's `parquet` feature (on by default).
    #[track_caller]
    pub fn map_batches<F: Fn(RecordBatch) -> RecordBatch + 'static>(
        &self,
        f: F,
    ) -> Rdd<ArrowBatch> {
        let _capture_f = assert_stateless(&f);
        self.map_with((), move |_: &(), b: ArrowBatch| {
            ArrowBatch(conjure::<F>()(b.0))
        })
    }

    /// The rows of every batch as records of type `T` (by column name, as
    /// [`Context::read_parquet`](crate::Context::read_parquet) maps them). A row that
    /// does not decode fails its task, naming the type.
    ///
    /// Needs ember's `parquet` feature (on by default).
    #[track_caller]
    pub fn to_records<T: Data>(&self) -> Rdd<T> {
        self.flat_map_with((), |_: &(), b: ArrowBatch| {
            if let Some(records) = crate::io::parquet::decode_fast::<T>(&b.0, None) {
                return records;
            }
            serde_arrow::from_record_batch::<Vec<T>>(&b.0).unwrap_or_else(|e| {
                panic!(
                    "a batch's rows do not decode as {}: {e}",
                    std::any::type_name::<T>()
                )
            })
        })
    }

    /// Writes the batches of each partition as a Parquet file `part-NNNNN.parquet`
    /// into `path` (the commit protocol of [`Rdd::save_as_parquet`]); the batches of a
    /// partition must share a schema.
    ///
    /// Needs ember's `parquet` feature (on by default).
    pub fn save_batches_as_parquet(
        &self,
        path: impl AsRef<Path>,
        options: ParquetWriteOptions,
    ) -> Result<()> {
        options.properties()?;
        let save = SaveOptions {
            overwrite: options.overwrite,
        };
        crate::io::commit::save_files(path.as_ref(), save.overwrite, ".parquet", |tmp| {
            self.run_action::<SaveBatches>(
                encode("save_batches_as_parquet", &(tmp.to_path_buf(), options)),
                None,
                "save_batches_as_parquet",
            )
        })
    }
}

impl<T: Data> Rdd<T> {
    /// The records of each partition as Arrow batches of up to 8,192 rows, columns
    /// from `T`'s fields (as [`Rdd::save_as_parquet`] derives them).
    ///
    /// Needs ember's `parquet` feature (on by default).
    #[track_caller]
    pub fn to_batches(&self) -> Rdd<ArrowBatch> {
        self.map_partitions(|records: Records<T>| {
            let fields = record_fields::<T>().unwrap_or_else(|e| panic!("{e}"));
            let mut out = Vec::new();
            let mut rows: Vec<T> = Vec::with_capacity(ROWS_PER_BATCH);
            let flush = |rows: &mut Vec<T>, out: &mut Vec<ArrowBatch>| {
                if !rows.is_empty() {
                    let b = serde_arrow::to_record_batch(&fields, rows).unwrap_or_else(|e| {
                        panic!("{} records as Arrow: {e}", std::any::type_name::<T>())
                    });
                    out.push(ArrowBatch(b));
                    rows.clear();
                }
            };
            for r in records {
                rows.push(r);
                if rows.len() == ROWS_PER_BATCH {
                    flush(&mut rows, &mut out);
                }
            }
            flush(&mut rows, &mut out);
            out
        })
    }
}

struct SaveBatches;
impl ResultOp for SaveBatches {
    type In = ArrowBatch;
    type Out = String;
    fn run(
        tc: &Rc<TaskContext>,
        payload: &[u8],
        part: u32,
        input: Batches<ArrowBatch>,
    ) -> Result<String> {
        let (dir, options): (PathBuf, ParquetWriteOptions) =
            decode("save_batches_as_parquet", payload)?;
        tc.write_attempt(&dir, part, |path| {
            sink::write_batches(path, &options, input)
        })
    }
}
