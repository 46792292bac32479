//! CSV as a source and a sink of records: `Context::read_csv` and `Rdd::save_as_csv`
//! (see [`crate::io::csv`] for parsing and its errors).
//!
//! Invariants: without `multi_line` a file is cut into splits at line boundaries as
//! text files are (Hadoop's split rule over the default parallelism, no split under
//! [`CSV_MIN_SPLIT`]), the header of a cut file read once here and sent with each of
//! its splits; with `multi_line` files are never cut (one task reads a file whole).
//! Either way small files are packed into partitions as text splits are. A write
//! follows the output commit protocol (`part-NNNNN.csv` files moved into place after
//! the job, `_SUCCESS` last, a failed job leaves no directory behind).

use std::marker::PhantomData;
use std::panic::Location;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use ember_proto::RddNode;

use super::actions::{ResultOp, SaveOptions};
use super::source::{batch_len, counted_batches, partition_payload};
use super::Rdd;
use crate::data::Data;
use crate::data::{decode, encode};
use crate::error::Result;
use crate::io::csv::{read_header, write_file, CsvOptions, CsvPiece, CsvReader};
use crate::io::text_input::{
    list_input_files, pack_splits, plan_splits_with, FileSplit, MAX_SPLIT_SIZE,
};

/// The smallest split a CSV file is cut into: a smaller file is read whole. Each split
/// is a task with the file's header and its own open, so splits stay large enough to be
/// worth one (Spark does not cut files under its 4 MiB `openCostInBytes`, which left
/// a 100k-row file as one task).
pub(crate) const CSV_MIN_SPLIT: u64 = 1 << 20;
use crate::task::{Batches, Erased, TaskContext};

struct SaveCsv<T>(PhantomData<T>);
impl<T: Data> ResultOp for SaveCsv<T> {
    type In = T;
    type Out = String;
    fn run(tc: &Rc<TaskContext>, payload: &[u8], part: u32, input: Batches<T>) -> Result<String> {
        let (dir, options): (PathBuf, CsvOptions) = decode("save_as_csv", payload)?;
        tc.write_attempt(&dir, part, |path| write_file::<T>(path, &options, input))
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
        crate::io::commit::save_files(path.as_ref(), save.overwrite, ".csv", |tmp| {
            self.run_action::<SaveCsv<T>>(
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
    /// Without `options.multi_line` (the default, as Spark's `multiLine = false`) each
    /// record is one line and a large file is cut into splits at line boundaries, read
    /// in parallel (splits of at least 1 MiB, aiming at the default parallelism); a
    /// quoted field spanning lines is then an error naming the record.
    /// With `multi_line` each file is read whole by one task and quoted fields may hold
    /// newlines.
    /// Needs ember's `csv` feature (on by default).
    #[track_caller]
    pub fn read_csv<T: Data>(&self, path: &str, options: CsvOptions) -> Result<Rdd<T>> {
        let at = Location::caller();
        let files = list_input_files(path)?;
        let splits = if options.multi_line {
            let mut whole = Vec::with_capacity(files.len());
            for f in &files {
                let len = crate::io::storage::InputFile::len_of(f)?;
                whole.push(FileSplit {
                    path: Arc::from(f.as_path()),
                    start: 0,
                    end: len,
                });
            }
            whole
        } else {
            plan_splits_with(
                &files,
                self.default_parallelism(),
                CSV_MIN_SPLIT,
                MAX_SPLIT_SIZE,
            )?
        };
        let pieces = csv_pieces(&splits, &options)?;
        let parts = pack_splits(splits, self.default_parallelism(), self.inner.conf.packing);
        let mut pieces = pieces.into_iter();
        let encoded: Vec<Vec<u8>> = parts
            .iter()
            .map(|p| {
                let mine: Vec<CsvPiece> = pieces.by_ref().take(p.len()).collect();
                encode("read_csv", &(mine, options))
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

/// What each split's task reads: a file not cut is read whole (its header by the
/// task); the splits of a cut file carry its header, read here once.
fn csv_pieces(splits: &[FileSplit], options: &CsvOptions) -> Result<Vec<CsvPiece>> {
    let mut out = Vec::with_capacity(splits.len());
    let mut header: Option<(Arc<std::path::Path>, Option<Vec<String>>)> = None;
    for (i, s) in splits.iter().enumerate() {
        let same_file = |j: usize| splits.get(j).is_some_and(|o| o.path == s.path);
        let cut = (i > 0 && same_file(i - 1)) || same_file(i + 1);
        if !cut {
            out.push(CsvPiece::Whole(s.path.to_path_buf()));
            continue;
        }
        let known = header.as_ref().filter(|(p, _)| *p == s.path);
        let h = match known {
            Some((_, h)) => h.clone(),
            None => {
                let h = if options.has_header {
                    Some(read_header(&s.path, options)?)
                } else {
                    None
                };
                header = Some((s.path.clone(), h.clone()));
                h
            }
        };
        out.push(CsvPiece::Split {
            split: s.clone(),
            header: h,
        });
    }
    Ok(out)
}

pub(crate) fn csv_compute<T: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let (pieces, options): (Vec<CsvPiece>, CsvOptions) = partition_payload(node, part, "read_csv")?;
    let mut reader = CsvReader::<T>::new(pieces, options);
    let out: Batches<T> = counted_batches(tc, batch_len, move || reader.next_batch());
    Ok(Box::new(out))
}
