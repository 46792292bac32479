//! CSV as a source and a sink of records: `Context::read_csv` and `Rdd::save_as_csv`
//! (see [`crate::io::csv`] for parsing and its errors).
//!
//! Invariants: files are never cut (one task reads a file whole), but small files are
//! packed into partitions as text splits are; a write follows the output commit
//! protocol (`part-NNNNN.csv` files moved into place after the job, `_SUCCESS` last, a
//! failed job leaves no directory behind).

use std::marker::PhantomData;
use std::panic::Location;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use ember_proto::RddNode;

use super::actions::{ResultOp, SaveOptions};
use super::source::{batch_len, counted_batches, partition_payload};
use super::{decode, encode, Rdd};
use crate::data::Data;
use crate::error::Result;
use crate::io::csv::{write_file, CsvOptions, CsvReader};
use crate::io::text_input::{list_input_files, pack_splits, FileSplit};
use crate::task::{Batches, Erased, TaskContext};

struct SaveCsv<T>(PhantomData<T>);
impl<T: Data> ResultOp for SaveCsv<T> {
    type In = T;
    type Out = String;
    fn run(tc: &Rc<TaskContext>, payload: &[u8], part: u32, input: Batches<T>) -> Result<String> {
        let (dir, options): (PathBuf, CsvOptions) = decode("save_as_csv", payload)?;
        crate::output::write_attempt(tc, &dir, part, |path| {
            write_file::<T>(path, &options, input)
        })
    }
}

impl<T: Data> Rdd<T> {
    /// Writes each partition as a CSV file `part-NNNNN.csv` into directory `path`, then
    /// an empty `_SUCCESS`: one line per record (a struct of numbers, bools, strings
    /// and `Option`s, `None` as an empty field), fields quoted where they need it, a
    /// header line of the field names first unless `options.has_header` is false.
    /// Fails if `path` exists unless `options.overwrite`.
    ///
    /// Needs ember's `csv` feature (on by default).
    pub fn save_as_csv(&self, path: impl AsRef<Path>, options: CsvOptions) -> Result<()> {
        let save = SaveOptions {
            overwrite: options.overwrite,
        };
        crate::output::save_files(self, path.as_ref(), save, ".csv", |rdd, tmp| {
            rdd.run_action::<SaveCsv<T>>(
                encode("save_as_csv", &(tmp.to_path_buf(), options)),
                None,
                "save_as_csv",
            )
        })
    }
}

impl crate::Context {
    /// The records of CSV files: `path` is a file, a directory (its files in name
    /// order, skipping names that start with `_` or `.`), a glob or a comma-separated
    /// list of those. With a header (`options.has_header`, the default) fields are
    /// matched to `T`'s fields by column name, else by position; an empty field reads
    /// as `None` into an `Option`. A record that does not parse fails its task with an
    /// error naming the file, the line and the column.
    ///
    /// Needs ember's `csv` feature (on by default).
    #[track_caller]
    pub fn read_csv<T: Data>(&self, path: &str, options: CsvOptions) -> Result<Rdd<T>> {
        let at = Location::caller();
        let files = list_input_files(path)?;
        let mut whole = Vec::with_capacity(files.len());
        for f in files {
            let len = crate::io::storage::InputFile::len_of(&f)?;
            whole.push(FileSplit {
                path: Arc::from(f.as_path()),
                start: 0,
                end: len,
            });
        }
        let parts = pack_splits(whole, self.default_parallelism(), self.inner.conf.packing);
        let encoded: Vec<Vec<u8>> = parts
            .iter()
            .map(|p| {
                let files: Vec<PathBuf> = p.iter().map(|s| s.path.to_path_buf()).collect();
                encode("read_csv", &(files, options))
            })
            .collect();
        Ok(self.source(
            &format!("read_csv({})", crate::io::excerpt(path)),
            at,
            parts.len() as u32,
            csv_compute::<T>,
            encode("read_csv", &encoded),
        ))
    }
}

pub(crate) fn csv_compute<T: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let (files, options): (Vec<PathBuf>, CsvOptions) = partition_payload(node, part, "read_csv")?;
    let mut reader = CsvReader::<T>::new(files, options);
    let out: Batches<T> = counted_batches(tc, batch_len, move || reader.next_batch());
    Ok(Box::new(out))
}
