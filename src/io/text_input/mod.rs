//! Text input: listing input files, cutting them into byte-range splits, and reading
//! each split as newline-delimited records, the way Hadoop's `TextInputFormat` does.
//!
//! This module owns:
//! - [`list_input_files`] (in `listing.rs`): turning a user's input string (file, directory, glob, or a
//!   comma-separated list of those) into a sorted list of files, skipping names that start
//!   with `_` or `.` (`_SUCCESS`, `.crc`, ...) in directory listings and glob results;
//!   [`list_input_files_as_listed`] keeps a comma-separated list's order and repeats, as
//!   Hadoop's `FileInputFormat` does for `text_file`;
//! - [`plan_splits`]: cutting files into [`FileSplit`]s with Hadoop's split-size rule
//!   (`max(min_split, min(goal, max_split))`, tails under 10% folded into the previous split);
//! - [`pack_splits`] (in `packing.rs`): packing splits into partitions, many small files
//!   to a partition;
//! - [`LineReader`]: reading the lines of one split.
//!
//! Invariants:
//! - A line belongs to the split in which its first byte lies (`start <= pos < end`). A reader
//!   whose split starts at `start > 0` discards everything up to and including the first line
//!   terminator at or after `start - 1`, and reads past `end` to finish its last line. Hence,
//!   for any partition of `[0, len)` into contiguous splits, every line of the file is emitted
//!   by exactly one split, in file order.
//! - Lines are terminated by `'\n'`, `'\r'` or `'\r\n'`, as Hadoop's `LineReader` (and so
//!   Spark's `textFile`) ends them, also where a `"\r\n"` straddles a split boundary or a
//!   read buffer. A file ending in a terminator has no trailing empty line; an empty file has
//!   no lines; line numbers count the same terminators.
//! - Offsets handed out are the byte offset of the line's first byte in the file.
//! - Every I/O error names the path it concerns.
//! - Files are read as raw bytes: no decompression, no byte-order-mark handling.

use std::fs;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{EmberError, Result};
use crate::io::storage::InputFile;

mod listing;
mod packing;
pub use listing::{list_input_files, list_input_files_as_listed};
pub use packing::{pack_splits, Packing, DEFAULT_PACKING};

/// Smallest split [`plan_splits`] produces (Hadoop's `minSize` default: 1 byte, so
/// `min_partitions` is honoured even for small files, as Spark users expect).
pub const MIN_SPLIT_SIZE: u64 = 1;
/// Largest split [`plan_splits`] aims for (the "block size").
pub const MAX_SPLIT_SIZE: u64 = 64 << 20;
/// Capacity of a [`LineReader`]'s read buffer.
const READ_BUFFER_SIZE: usize = 256 * 1024;

/// One byte range of one file; a line belongs to the split in which it STARTS.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileSplit {
    #[serde(with = "arc_path")]
    pub path: Arc<Path>,
    pub start: u64,
    pub end: u64,
}

/// Serde for `Arc<Path>` that does not need serde's `rc` feature.
mod arc_path {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    pub fn serialize<S: serde::Serializer>(p: &Arc<Path>, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&**p, s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Arc<Path>, D::Error> {
        let p: PathBuf = serde::Deserialize::deserialize(d)?;
        Ok(Arc::from(p))
    }
}

/// Refuses a file that reports a size of 0 but has content (`/proc` and `/sys` files):
/// splits are planned by size, so it would silently read as empty.
fn check_truly_empty(path: &Path) -> Result<()> {
    use std::io::Read;
    let mut byte = [0u8; 1];
    let n = fs::File::open(path)
        .and_then(|mut f| f.read(&mut byte))
        .map_err(|e| EmberError::io(path, e))?;
    if n == 0 {
        return Ok(());
    }
    Err(EmberError::io(
        path,
        std::io::Error::new(
            ErrorKind::InvalidInput,
            "reports a size of 0 bytes but has content (a /proc or /sys file?); \
             copy it to a regular file to read it",
        ),
    ))
}

// ---------------------------------------------------------------------------------------------
// Split planning
// ---------------------------------------------------------------------------------------------

/// Cut files into splits like Hadoop `FileInputFormat`: `goal = total_bytes /
/// max(min_partitions, 1)`; `split_size = max(1, min(goal, 64 MiB))`; a file's tail
/// shorter than 10% of `split_size` is folded into the previous split (`SPLIT_SLOP` 1.1).
/// An empty file yields one empty split (`start == end == 0`). Order: by file, then offset.
pub fn plan_splits(files: &[PathBuf], min_partitions: usize) -> Result<Vec<FileSplit>> {
    plan_splits_with(files, min_partitions, MIN_SPLIT_SIZE, MAX_SPLIT_SIZE)
}

/// [`plan_splits`] with explicit split-size floor and ceiling (the floor wins on conflict).
pub(crate) fn plan_splits_with(
    files: &[PathBuf],
    min_partitions: usize,
    min_split: u64,
    max_split: u64,
) -> Result<Vec<FileSplit>> {
    let mut sizes = Vec::with_capacity(files.len());
    for f in files {
        sizes.push(InputFile::len_of(f)?);
    }
    let total: u64 = sizes.iter().fold(0u64, |a, &b| a.saturating_add(b));
    let goal = total / (min_partitions.max(1) as u64);
    let split_size = min_split.max(goal.min(max_split)).max(1);

    let mut splits = Vec::new();
    for (f, &len) in files.iter().zip(&sizes) {
        let path: Arc<Path> = Arc::from(f.as_path());
        if len == 0 {
            if !crate::io::storage::is_remote(f) {
                check_truly_empty(f)?;
            }
            splits.push(FileSplit {
                path,
                start: 0,
                end: 0,
            });
            continue;
        }
        let mut remaining = len;
        // Hadoop: while (remaining / splitSize > SPLIT_SLOP), in exact integer arithmetic.
        while u128::from(remaining) * 10 > u128::from(split_size) * 11 {
            let start = len - remaining;
            splits.push(FileSplit {
                path: path.clone(),
                start,
                end: start + split_size,
            });
            remaining -= split_size;
        }
        splits.push(FileSplit {
            path,
            start: len - remaining,
            end: len,
        });
    }
    tracing::debug!(
        files = files.len(),
        total_bytes = total,
        split_size,
        splits = splits.len(),
        "planned input splits"
    );
    Ok(splits)
}

// ---------------------------------------------------------------------------------------------
// Line reading
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing read yet (the partial first line is not skipped yet).
    Unstarted,
    Reading,
    Done,
}

/// Where the current line's bytes are (without the `'\n'`).
#[derive(Debug, Clone, Copy)]
enum Current {
    Buf(usize, usize),
    Carry,
}

/// Streaming line reader over one split (Hadoop `LineRecordReader` semantics; see the
/// module docs). Owns one reusable read buffer and one reusable buffer for lines that span
/// buffer refills; reading lines does not allocate per line.
#[derive(Debug)]
pub struct LineReader {
    path: Arc<Path>,
    file: InputFile,
    start: u64,
    end: u64,
    state: State,
    buf: Vec<u8>,
    /// Unconsumed data is `buf[lo..hi]`.
    lo: usize,
    hi: usize,
    /// File offset of `buf[lo]` (the next unconsumed byte).
    pos: u64,
    /// Bytes of the current line that were read by earlier refills.
    carry: Vec<u8>,
    current: Current,
    /// The last terminator was a `'\r'` at the end of the buffer: a `'\n'` right after it
    /// belongs to the same terminator and is skipped.
    skip_lf: bool,
    /// `buf[..hi]` is all ASCII (checked once per refill), so a line lying in it is valid
    /// UTF-8 without a check of its own.
    buf_ascii: bool,
}

impl LineReader {
    /// Opens the split's file. Does no reading yet.
    pub fn open(split: &FileSplit) -> Result<Self> {
        Self::open_with_capacity(split, READ_BUFFER_SIZE)
    }

    /// [`LineReader::open`] with a given read-buffer capacity (at least 1 byte).
    pub(crate) fn open_with_capacity(split: &FileSplit, capacity: usize) -> Result<Self> {
        let file = InputFile::open(&split.path)?;
        // A small split needs no huge buffer: its last line spills into `carry` if needed.
        let span = split.end.saturating_sub(split.start).saturating_add(1);
        let cap = capacity.min(usize::try_from(span).unwrap_or(usize::MAX).max(8192));
        Ok(LineReader {
            path: split.path.clone(),
            file,
            start: split.start,
            end: split.end,
            state: State::Unstarted,
            buf: vec![0; cap.max(1)],
            lo: 0,
            hi: 0,
            pos: 0,
            carry: Vec::new(),
            current: Current::Carry,
            skip_lf: false,
            buf_ascii: false,
        })
    }

    /// The path of the file this reader reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Calls `f(byte_offset_of_line_start_in_file, line_bytes_without_newline)` for each line.
    /// Stops early and returns `Ok(false)` if `f` returns false (the next call continues with
    /// the following line); `Ok(true)` when the split is exhausted.
    pub fn for_each_line(&mut self, mut f: impl FnMut(u64, &[u8]) -> bool) -> Result<bool> {
        while let Some(offset) = self.advance()? {
            if !f(offset, self.current_line()) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Appends up to `max` lines to `out` (which the caller clears). If nothing was appended
    /// (and `max > 0`) the split is exhausted. A line that is not valid UTF-8 is
    /// [`EmberError::Corrupt`] naming the file, line number and byte offset; lines before it
    /// stay in `out`, and the bad line is consumed.
    pub fn next_batch(&mut self, max: usize, out: &mut Vec<String>) -> Result<()> {
        self.next_batch_with(max, |_, s| out.push(s.to_owned()))
    }

    /// Same as [`LineReader::next_batch`], with the byte offset of each line.
    pub fn next_batch_with_offsets(
        &mut self,
        max: usize,
        out: &mut Vec<(u64, String)>,
    ) -> Result<()> {
        self.next_batch_with(max, |off, s| out.push((off, s.to_owned())))
    }

    /// Calls `push(byte_offset, line)` for up to `max` lines, the line borrowed from the
    /// read buffer (no allocation per line). If `push` was not called (and `max > 0`) the
    /// split is exhausted. Invalid UTF-8 fails as in [`LineReader::next_batch`], after the
    /// lines before it were pushed.
    pub(crate) fn next_batch_with(
        &mut self,
        max: usize,
        mut push: impl FnMut(u64, &str),
    ) -> Result<()> {
        if max == 0 {
            return Ok(());
        }
        let mut n = 0;
        let mut bad = None;
        while let Some(off) = self.advance()? {
            match self.current_str() {
                Ok(s) => {
                    push(off, s);
                    n += 1;
                    if n >= max {
                        break;
                    }
                }
                Err(e) => {
                    bad = Some((off, e));
                    break;
                }
            }
        }
        match bad {
            None => Ok(()),
            Some((off, e)) => Err(invalid_utf8(&self.path, off, off + e.valid_up_to() as u64)),
        }
    }

    /// The current line as text: unchecked when it lies in an all-ASCII buffer,
    /// through `from_utf8` otherwise.
    fn current_str(&self) -> std::result::Result<&str, std::str::Utf8Error> {
        match self.current {
            Current::Buf(a, b) if self.buf_ascii => {
                let bytes = &self.buf[a..b];
                debug_assert!(bytes.is_ascii());
                // SAFETY: `buf_ascii` says `buf[..hi]` is all ASCII, and `b <= hi`
                // (a line in the buffer ends before `hi`): ASCII is valid UTF-8.
                Ok(unsafe { std::str::from_utf8_unchecked(bytes) })
            }
            _ => std::str::from_utf8(self.current_line()),
        }
    }

    /// The current line's bytes, without its terminator.
    fn current_line(&self) -> &[u8] {
        match self.current {
            Current::Buf(a, b) => &self.buf[a..b],
            Current::Carry => &self.carry[..],
        }
    }

    /// Consumes the terminator found at `buf[at]` (`'\n'` or `'\r'`, with the `'\n'` of a
    /// `"\r\n"`, or notes that one may follow in the next buffer).
    fn consume_terminator(&mut self, at: usize) {
        let mut len = 1;
        if self.buf[at] == b'\r' {
            match self.buf[at + 1..self.hi].first() {
                Some(b'\n') => len = 2,
                Some(_) => {}
                None => self.skip_lf = true,
            }
        }
        self.pos += (at + len - self.lo) as u64;
        self.lo = at + len;
    }

    /// After a `'\r'` that ended a buffer: skips a `'\n'` that completes `"\r\n"`.
    fn finish_crlf(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.skip_lf) {
            return Ok(());
        }
        if self.lo == self.hi && self.refill()? == 0 {
            return Ok(());
        }
        if self.buf[self.lo] == b'\n' {
            self.lo += 1;
            self.pos += 1;
        }
        Ok(())
    }

    /// Moves to the next line of the split; returns its start offset, or `None` when done.
    fn advance(&mut self) -> Result<Option<u64>> {
        if self.state == State::Unstarted {
            self.state = State::Reading;
            if self.start > 0 {
                let at = self.start - 1;
                self.file
                    .seek(SeekFrom::Start(at))
                    .map_err(|e| EmberError::io(&*self.path, e))?;
                self.pos = at;
                if !self.skip_through_newline()? {
                    self.state = State::Done;
                }
            }
        }
        if self.state != State::Done {
            self.finish_crlf()?;
        }
        if self.state == State::Done || self.pos >= self.end {
            self.state = State::Done;
            return Ok(None);
        }
        let line_start = self.pos;
        let mut carried = false;
        self.carry.clear();
        loop {
            let data = &self.buf[self.lo..self.hi];
            if let Some(i) = memchr::memchr2(b'\n', b'\r', data) {
                let nl = self.lo + i;
                if carried {
                    self.carry.extend_from_slice(&self.buf[self.lo..nl]);
                    self.current = Current::Carry;
                } else {
                    self.current = Current::Buf(self.lo, nl);
                }
                self.consume_terminator(nl);
                return Ok(Some(line_start));
            }
            if !data.is_empty() {
                self.carry.extend_from_slice(data);
                carried = true;
                self.pos += data.len() as u64;
            }
            if self.refill()? == 0 {
                self.state = State::Done;
                if carried {
                    // Unterminated last line.
                    self.current = Current::Carry;
                    return Ok(Some(line_start));
                }
                return Ok(None);
            }
        }
    }

    /// Consumes bytes through the next line terminator; false if end of file came first.
    fn skip_through_newline(&mut self) -> Result<bool> {
        loop {
            if let Some(i) = memchr::memchr2(b'\n', b'\r', &self.buf[self.lo..self.hi]) {
                self.consume_terminator(self.lo + i);
                return Ok(true);
            }
            self.pos += (self.hi - self.lo) as u64;
            if self.refill()? == 0 {
                return Ok(false);
            }
        }
    }

    /// Discards the buffer's contents and reads more; returns the number of bytes read.
    fn refill(&mut self) -> Result<usize> {
        self.lo = 0;
        self.hi = 0;
        loop {
            match self.file.read(&mut self.buf) {
                Ok(n) => {
                    self.hi = n;
                    self.buf_ascii = self.buf[..n].is_ascii();
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(EmberError::io(&*self.path, e)),
            }
        }
    }
}

/// The error for invalid UTF-8 in the line starting at `line_offset`, bad byte at `bad_at`.
fn invalid_utf8(path: &Path, line_offset: u64, bad_at: u64) -> EmberError {
    let line = match line_number_at(path, line_offset) {
        Ok(n) => format!("line {n}, "),
        Err(_) => String::new(),
    };
    EmberError::Corrupt {
        what: path.display().to_string(),
        message: format!(
            "invalid UTF-8 in {line}line starting at byte offset {line_offset} \
             (bad byte at offset {bad_at})"
        ),
    }
}

/// The 1-based line number of the line that starts at `offset` in `path` (one plus the
/// number of line terminators, `'\n'`, `'\r'` or `"\r\n"`, before `offset`; an offset
/// past the end counts the whole file). Meant for error paths and line positions, to
/// tell a user "file X line N".
pub fn line_number_at(path: &Path, offset: u64) -> Result<u64> {
    let file = InputFile::open(path)?;
    let mut reader = file.take(offset);
    let mut buf = vec![0u8; 64 * 1024];
    let mut terminators = 0u64;
    // Whether the previous chunk ended in '\r' (a '\n' first in this one is its pair).
    let mut after_cr = false;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(EmberError::io(path, e)),
        };
        let chunk = &buf[..n];
        for i in memchr::memchr2_iter(b'\n', b'\r', chunk) {
            let pairs_with_cr = chunk[i] == b'\n'
                && if i == 0 {
                    after_cr
                } else {
                    chunk[i - 1] == b'\r'
                };
            if !pairs_with_cr {
                terminators += 1;
            }
        }
        after_cr = chunk[n - 1] == b'\r';
    }
    Ok(terminators + 1)
}

/// Reads a whole file as a `String` (for `whole_text_files`). Invalid UTF-8 is
/// [`EmberError::Corrupt`] naming the file, line and byte offset.
pub fn read_whole_file(path: &Path) -> Result<String> {
    let mut bytes = Vec::new();
    InputFile::open(path)?
        .read_to_end(&mut bytes)
        .map_err(|e| EmberError::io(path, e))?;
    String::from_utf8(bytes).map_err(|e| {
        let bad = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let newlines = memchr::memchr_iter(b'\n', &bytes[..bad]).count();
        EmberError::Corrupt {
            what: path.display().to_string(),
            message: format!("invalid UTF-8 at line {}, byte offset {bad}", newlines + 1),
        }
    })
}

#[cfg(test)]
mod tests;
