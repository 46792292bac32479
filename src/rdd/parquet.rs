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
use super::{decode, encode, Rdd};
use crate::data::Data;
use crate::error::{EmberError, Result};
use crate::io::parquet::source::{plan, ChunkReader};
use crate::io::parquet::{sink, ParquetChunk, ParquetWriteOptions};
use crate::task::{Batches, Erased, TaskContext};

struct SaveParquet<T>(PhantomData<T>);
impl<T: Data> ResultOp for SaveParquet<T> {
    type In = T;
    type Out = String;
    fn run(tc: &Rc<TaskContext>, payload: &[u8], part: u32, input: Batches<T>) -> Result<String> {
        let (dir, options): (PathBuf, ParquetWriteOptions) = decode("save_as_parquet", payload)?;
        let output = crate::io::storage::PartOutput::create(
            dir.join(format!(
                "part-{part:05}.stage{}-attempt{}-{:08x}",
                tc.stage_id,
                tc.attempt,
                rand::random::<u32>()
            )),
            &tc.env.work_dir,
        )?;
        let path = output.local().to_path_buf();
        let n = sink::write_file::<T>(&path, &options, input)?;
        tc.with_metrics(|m| m.records_out += n);
        output.finish()
    }
}

impl<T: Data> Rdd<T> {
    /// Writes each partition as a Parquet file `part-NNNNN.parquet` into directory
    /// `path`, then an empty `_SUCCESS`: columns are `T`'s fields (a struct; `Option`
    /// fields nullable, `Vec`s as lists, nested structs as structs), zstd-compressed.
    /// Fails if `path` exists.
    pub fn save_as_parquet(&self, path: impl AsRef<Path>) -> Result<()> {
        self.save_as_parquet_with(path, ParquetWriteOptions::default())
    }

    /// [`save_as_parquet`](Self::save_as_parquet) with options (compression, row-group
    /// size, overwrite).
    pub fn save_as_parquet_with(
        &self,
        path: impl AsRef<Path>,
        options: ParquetWriteOptions,
    ) -> Result<()> {
        // Bad options and record types without a schema fail here, not in a task.
        options.properties()?;
        crate::io::parquet::schema::record_fields::<T>()?;
        let save = SaveOptions {
            overwrite: options.overwrite,
        };
        crate::output::save_files(self, path.as_ref(), save, ".parquet", |rdd, tmp| {
            rdd.run_action::<SaveParquet<T>>(
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
    /// files in name order, skipping names that start with `_` or `.`), a glob or a
    /// comma-separated list of those. Row groups are packed into partitions as text
    /// splits are (at most 128 MiB each, at least the default parallelism where the
    /// data allows). Reads every footer first: a file that is not Parquet, or whose
    /// columns do not fit `T`, is an error here naming the file, the column and both
    /// types.
    #[track_caller]
    pub fn read_parquet<T: Data>(&self, path: &str) -> Result<Rdd<T>> {
        let at = Location::caller();
        let parts = plan::<T>(path, self.default_parallelism(), self.inner.conf.packing)?;
        let encoded: Vec<Vec<u8>> = parts.iter().map(|p| encode("read_parquet", p)).collect();
        Ok(self.source(
            &format!("read_parquet({})", crate::io::excerpt(path)),
            at,
            parts.len() as u32,
            parquet_compute::<T>,
            encode("read_parquet", &encoded),
        ))
    }
}

pub(crate) fn parquet_compute<T: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let parts: Vec<Vec<u8>> = decode("read_parquet", &node.payload)?;
    let bytes = parts
        .get(part as usize)
        .ok_or_else(|| EmberError::Plan(format!("read_parquet has no partition {part}")))?;
    let chunks: Vec<ParquetChunk> = decode("read_parquet partition", bytes)?;
    let mut reader = ChunkReader::<T>::new(chunks)?;
    let tc = tc.clone();
    let mut failed = false;
    let out: Batches<T> = Box::new(std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let next = reader.next_batch()?;
        match &next {
            Ok(b) => tc.with_metrics(|m| m.records_in += b.len() as u64),
            Err(_) => failed = true,
        }
        Some(next)
    }));
    Ok(Box::new(out))
}
