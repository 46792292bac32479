//! Object files: `save_as_object_file` (each partition as one file of ember's binary
//! object format, see [`crate::io::object_file`]) and `Context::object_file` (one
//! partition per file, in name order).
//!
//! Invariants: the output directory follows `save_as_text_file`'s commit protocol
//! (`part-NNNNN` files moved into place after the job, `_SUCCESS` last, a failed job
//! leaves no directory behind); reading skips names starting with `_` or `.` and
//! returns every record written, in partition then record order, or fails the task with
//! an error naming the file (a wrong type, a corrupt or truncated file), never a panic
//! and never fewer records.

use std::marker::PhantomData;
use std::panic::Location;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use ember_proto::RddNode;

use super::actions::{ResultOp, SaveOptions};
use super::Rdd;
use crate::data::{decode, encode};
use crate::data::{Data, BATCH};
use crate::error::{EmberError, Result};
use crate::io::object_file::{ObjectReader, ObjectWriter};
use crate::io::text_input::list_input_files;
use crate::task::{Batches, ComputeFn, Erased, TaskContext};

struct SaveObject<T>(PhantomData<T>);
impl<T: Data> ResultOp for SaveObject<T> {
    type In = T;
    type Out = String;
    fn run(tc: &Rc<TaskContext>, payload: &[u8], part: u32, input: Batches<T>) -> Result<String> {
        let dir: PathBuf = decode("save_as_object_file", payload)?;
        let path = tc.attempt_path(&dir, part);
        let file = std::fs::File::create_new(&path).map_err(|e| EmberError::io(&path, e))?;
        let out = std::io::BufWriter::with_capacity(1 << 18, file);
        let mut w = ObjectWriter::new::<T>(out, &path)?;
        for b in input {
            for x in b? {
                w.push(&x)?;
            }
        }
        let (out, n) = w.finish()?;
        crate::io::commit::sync_file(&path, out)?;
        tc.with_metrics(|m| m.records_out += n);
        Ok(path.to_string_lossy().into_owned())
    }
}

impl<T: Data> Rdd<T> {
    /// Writes each partition as a file `part-NNNNN` of ember's object format (records
    /// serialised with their type's fingerprint, see [`crate::io::object_file`]) into
    /// directory `path`, then an empty `_SUCCESS`; read it back with
    /// [`Context::object_file`](crate::Context::object_file). Fails if `path` exists.
    pub fn save_as_object_file(&self, path: impl AsRef<Path>) -> Result<()> {
        self.save_as_object_file_with(path, SaveOptions::default())
    }

    /// [`save_as_object_file`](Self::save_as_object_file) with options (overwrite).
    pub fn save_as_object_file_with(
        &self,
        path: impl AsRef<Path>,
        opts: SaveOptions,
    ) -> Result<()> {
        crate::io::commit::save_files(path.as_ref(), opts.overwrite, "", |tmp| {
            self.run_action::<SaveObject<T>>(
                encode("save_as_object_file", &tmp.to_path_buf()),
                None,
                "save_as_object_file",
            )
        })
    }
}

impl crate::Context {
    /// The records of object files written by [`Rdd::save_as_object_file`]: `path` is
    /// a directory (its files in name order, skipping names that start with `_` or
    /// `.`), a file, a glob or a comma-separated list of those; one partition per file.
    /// Fails at once if the path matches nothing. A file of another record type, or a
    /// corrupt or truncated one, fails the task that reads it, naming the file.
    #[track_caller]
    pub fn object_file<T: Data>(&self, path: &str) -> Result<Rdd<T>> {
        let files = list_input_files(path)?;
        let compute: ComputeFn = object_file_compute::<T>;
        Ok(self.source(
            &format!("object_file({})", crate::io::excerpt(path)),
            Location::caller(),
            files.len() as u32,
            compute,
            encode("object_file", &files),
        ))
    }
}

pub(crate) fn object_file_compute<T: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let files: Vec<PathBuf> = decode("object_file", &node.payload)?;
    let path = files
        .get(part as usize)
        .ok_or_else(|| EmberError::Plan(format!("object_file has no partition {part}")))?;
    let mut reader = ObjectReader::open::<T>(path, Some(tc.reservation("object file reader")))?;
    let tc = tc.clone();
    let mut failed = false;
    let out: Batches<T> = Box::new(std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let mut batch = Vec::with_capacity(BATCH);
        while batch.len() < BATCH {
            match reader.next_record::<T>() {
                Ok(Some(x)) => batch.push(x),
                Ok(None) => break,
                Err(e) => {
                    failed = true;
                    return Some(Err(e));
                }
            }
        }
        if batch.is_empty() {
            return None;
        }
        tc.with_metrics(|m| m.records_in += batch.len() as u64);
        Some(Ok(batch))
    }));
    Ok(Box::new(out))
}
