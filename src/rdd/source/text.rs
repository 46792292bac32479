//! Text sources: `text_file`, `text_file_with_positions` and `text_file_map` (the
//! input's files cut into byte-range splits and packed into partitions, see
//! [`crate::io::text_input`]; `text_file_map` hands each line to the job's function as a
//! slice of the read buffer, never as a `String`) and
//! `whole_text_files` (each file one record).
//!
//! Invariant: every line of every listed file is read by exactly one task: the one whose
//! split holds the line's first byte.

use std::panic::Location;
use std::path::PathBuf;
use std::rc::Rc;

use ember_proto::RddNode;

use super::{count_in, partition_payload};
use crate::closure::{assert_stateless, conjure};
use crate::context::Context;
use crate::data::{decode, encode, Data, BATCH};
use crate::error::Result;
use crate::io::text_input::{
    list_input_files, list_input_files_as_listed, pack_splits, plan_splits, read_whole_file,
    FileSplit, LineReader,
};
use crate::rdd::position::{file_id, LinePosition};
use crate::rdd::Rdd;
use crate::task::{Batches, ComputeFn, Erased, TaskContext};

impl Context {
    /// The lines of a text file, a directory of files or a glob, in at least
    /// `min_partitions` partitions (fewer only if the input has fewer splits). Big files
    /// are cut into byte ranges; small files are packed several to a partition, by
    /// bytes, counting an open cost per file ([`Conf::packing`](crate::Conf::packing)). Fails at once if the
    /// path matches nothing; an empty directory gives an RDD of no partitions. A
    /// comma-separated list is read as Spark reads it: in the order listed, a path
    /// listed twice read twice.
    #[track_caller]
    pub fn text_file(&self, path: &str, min_partitions: usize) -> Result<Rdd<String>> {
        self.text_source(path, min_partitions, text_file_compute, Location::caller())
    }

    /// Like [`text_file`](Self::text_file), with each line's file and byte offset, so
    /// errors can name `file:line`.
    #[track_caller]
    pub fn text_file_with_positions(
        &self,
        path: &str,
        min_partitions: usize,
    ) -> Result<Rdd<(LinePosition, String)>> {
        self.text_source(
            path,
            min_partitions,
            text_file_positions_compute,
            Location::caller(),
        )
    }

    /// The lines of a text file, a directory of files or a glob (split and packed as
    /// [`text_file`](Self::text_file) does), each turned into a record by
    /// `f(position, line)` as it is read. The same records as
    /// `text_file_with_positions(..).map(|(pos, line)| f(pos, &line))`, without a `String`
    /// per line: `line` borrows the read buffer, so a job that parses its lines (a key
    /// and a number, say) allocates nothing for the text it throws away. A panic in `f`
    /// fails the task as a panic in `map` does; `pos` names the line for its message.
    ///
    /// ```no_run
    /// # let ctx = ember::Context::local(2).unwrap();
    /// let lengths = ctx
    ///     .text_file_map("input", 2, |_pos, line: &str| line.len() as u64)
    ///     .unwrap();
    /// ```
    #[track_caller]
    pub fn text_file_map<T: Data, F: Fn(LinePosition, &str) -> T + 'static>(
        &self,
        path: &str,
        min_partitions: usize,
        f: F,
    ) -> Result<Rdd<T>> {
        let _capture_f = assert_stateless(&f);
        self.text_source(
            path,
            min_partitions,
            text_file_map_compute::<T, F>,
            Location::caller(),
        )
    }

    /// A text source: the input's files cut into splits, read by `compute`.
    fn text_source<T: Data>(
        &self,
        path: &str,
        min_partitions: usize,
        compute: ComputeFn,
        at: &Location<'_>,
    ) -> Result<Rdd<T>> {
        let splits = plan_splits(&list_input_files_as_listed(path)?, min_partitions)?;
        let partitions = pack_splits(splits, min_partitions, self.inner.conf.packing);
        // One encoded list per partition, so a task decodes only its own.
        let encoded: Vec<Vec<u8>> = partitions
            .iter()
            .map(|splits| encode("text_file", splits))
            .collect();
        Ok(self.source(
            &format!("text_file({path})"),
            at,
            partitions.len() as u32,
            compute,
            encode("text_file", &encoded),
        ))
    }

    /// Each file as one record `(path, contents)`.
    #[track_caller]
    pub fn whole_text_files(
        &self,
        path: &str,
        min_partitions: usize,
    ) -> Result<Rdd<(String, String)>> {
        let files = list_input_files(path)?;
        // No files, no partitions (as Spark's wholeTextFiles of an empty directory).
        let n = min_partitions.clamp(1, files.len().max(1)).min(files.len());
        let groups: Vec<Vec<PathBuf>> = (0..n)
            .map(|i| files[i * files.len() / n..(i + 1) * files.len() / n].to_vec())
            .collect();
        let compute: ComputeFn = whole_text_files_compute;
        Ok(self.source(
            &format!("whole_text_files({path})"),
            Location::caller(),
            n as u32,
            compute,
            encode("whole_text_files", &groups),
        ))
    }
}

/// The splits of partition `part`.
fn splits_of(node: &RddNode, part: u32) -> Result<Vec<FileSplit>> {
    partition_payload(node, part, "text_file")
}

/// Every part a task of partition `part` reads (see [`parts_to_read`]), in order.
fn partition_parts(tc: &TaskContext, node: &RddNode, part: u32) -> Result<Vec<FileSplit>> {
    Ok(splits_of(node, part)?
        .into_iter()
        .flat_map(|s| parts_to_read(tc, s))
        .collect())
}

/// Windows a sampling task reads instead of a whole split.
const SAMPLE_WINDOWS: u64 = 32;
/// Bytes per sampling window.
const SAMPLE_WINDOW_BYTES: u64 = 64 << 10;

/// The parts of `split` a task reads: all of it, or, for a sampling task and a split
/// much larger than the windows, [`SAMPLE_WINDOWS`] sub-splits of
/// [`SAMPLE_WINDOW_BYTES`] spread evenly over it. Sub-splits follow the split rules
/// (a line belongs to the sub-split it starts in), so every line read is a line of the
/// split, read once.
fn parts_to_read(tc: &TaskContext, split: FileSplit) -> Vec<FileSplit> {
    let len = split.end.saturating_sub(split.start);
    if !tc.sampling() || len < 4 * SAMPLE_WINDOWS * SAMPLE_WINDOW_BYTES {
        return vec![split];
    }
    let stride = len / SAMPLE_WINDOWS;
    (0..SAMPLE_WINDOWS)
        .map(|i| {
            let start = split.start + i * stride;
            FileSplit {
                path: split.path.clone(),
                start,
                end: start + SAMPLE_WINDOW_BYTES,
            }
        })
        .collect()
}

/// Reads the lines of several splits (of one file or many) in order, one batch at a
/// time; a batch never mixes lines of two splits.
struct SplitsReader {
    parts: std::vec::IntoIter<FileSplit>,
    reader: Option<LineReader>,
    /// The split `reader` reads.
    current: Option<FileSplit>,
}

impl SplitsReader {
    fn new(parts: Vec<FileSplit>) -> Self {
        SplitsReader {
            parts: parts.into_iter(),
            reader: None,
            current: None,
        }
    }

    /// Fills `f`'s batch from the current reader, moving to the next split when one is
    /// exhausted; `Ok(false)` when every split is. `f` also gets the split it reads.
    fn next(
        &mut self,
        mut f: impl FnMut(&FileSplit, &mut LineReader) -> Result<bool>,
    ) -> Result<bool> {
        loop {
            let reader = match &mut self.reader {
                Some(r) => r,
                None => match self.parts.next() {
                    Some(split) => {
                        let r = LineReader::open(&split)?;
                        self.current = Some(split);
                        self.reader.insert(r)
                    }
                    None => return Ok(false),
                },
            };
            let split = self.current.as_ref().expect("a reader has its split");
            if f(split, reader)? {
                return Ok(true);
            }
            self.reader = None;
        }
    }
}

pub(crate) fn text_file_compute(tc: &Rc<TaskContext>, node: &RddNode, part: u32) -> Result<Erased> {
    // No position is read: the files are not entered in the process's file registry.
    mapped_lines(tc, node, part, false, |_, line| line.to_owned())
}

pub(crate) fn text_file_positions_compute(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    mapped_lines(tc, node, part, true, |pos, line| (pos, line.to_owned()))
}

/// `text_file_map`'s task: lines borrowed from the reader's buffer, each passed to `F`.
fn text_file_map_compute<T: Data, F: Fn(LinePosition, &str) -> T + 'static>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    mapped_lines(tc, node, part, true, conjure::<F>())
}

/// The records `f(position, line)` of partition `part`'s lines, a batch at a time (a
/// batch never mixes lines of two splits). Without `name_files`, a position's file is
/// not looked up (its id is 0) and `f` must not use it.
fn mapped_lines<T: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
    name_files: bool,
    f: impl Fn(LinePosition, &str) -> T + 'static,
) -> Result<Erased> {
    let mut reader = SplitsReader::new(partition_parts(tc, node, part)?);
    let tc = tc.clone();
    let out: Batches<T> = Box::new(std::iter::from_fn(move || {
        let mut batch = Vec::with_capacity(BATCH);
        let more = reader.next(|split, r| {
            let file = if name_files {
                file_id(&split.path.to_string_lossy())
            } else {
                0
            };
            r.next_batch_with(BATCH, |offset, line| {
                batch.push(f(LinePosition::new(file, offset), line))
            })?;
            Ok(!batch.is_empty())
        });
        match more {
            Ok(false) => None,
            Ok(true) => {
                count_in(&tc, batch.len());
                Some(Ok(batch))
            }
            Err(e) => Some(Err(e)),
        }
    }));
    Ok(Box::new(out))
}

pub(crate) fn whole_text_files_compute(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let groups: Vec<Vec<PathBuf>> = decode("whole_text_files", &node.payload)?;
    let files = groups.get(part as usize).cloned().unwrap_or_default();
    let tc = tc.clone();
    let mut it = files.into_iter();
    let out: Batches<(String, String)> = Box::new(std::iter::from_fn(move || {
        let path = it.next()?;
        count_in(&tc, 1);
        Some(read_whole_file(&path).map(|text| vec![(path.to_string_lossy().into_owned(), text)]))
    }));
    Ok(Box::new(out))
}
