//! Text input: listing input files, cutting them into byte-range splits, and reading
//! each split as newline-delimited records, the way Hadoop's `TextInputFormat` does.
//!
//! This module owns:
//! - [`list_input_files`]: turning a user's input string (file, directory, glob, or a
//!   comma-separated list of those) into a sorted list of files, skipping names that start
//!   with `_` or `.` (`_SUCCESS`, `.crc`, ...) in directory listings and glob results;
//! - [`plan_splits`]: cutting files into [`FileSplit`]s with Hadoop's split-size rule
//!   (`max(min_split, min(goal, max_split))`, tails under 10% folded into the previous split);
//! - [`LineReader`]: reading the lines of one split.
//!
//! Invariants:
//! - A line belongs to the split in which its first byte lies (`start <= pos < end`). A reader
//!   whose split starts at `start > 0` discards everything up to and including the first `'\n'`
//!   at or after `start - 1`, and reads past `end` to finish its last line. Hence, for any
//!   partition of `[0, len)` into contiguous splits, every line of the file is emitted by
//!   exactly one split, in file order.
//! - Lines are terminated by `'\n'`; one `'\r'` directly before the terminator (or at the end
//!   of an unterminated last line) is stripped. A lone `'\r'` is NOT a line terminator. A file
//!   ending in `'\n'` has no trailing empty line; an empty file has no lines.
//! - Offsets handed out are the byte offset of the line's first byte in the file.
//! - Every I/O error names the path it concerns.
//! - Files are read as raw bytes: no decompression, no byte-order-mark handling.

use std::fs::{self, File};
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{EmberError, Result};

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

// ---------------------------------------------------------------------------------------------
// Listing
// ---------------------------------------------------------------------------------------------

/// Resolve a user's input: a file, a directory (its files, non-recursive), or a glob pattern
/// (e.g. `/data/part-*`). Names starting with `_` or `.` are skipped in directory listings and
/// glob results (a file named explicitly is always taken). A comma-separated list of such paths
/// is accepted too. The result is sorted by path and free of duplicates.
///
/// A missing path, or a glob matching no visible entry, is [`EmberError::InputNotFound`]; an
/// existing directory without visible files yields no files. An invalid glob pattern is
/// [`EmberError::Config`]. Unreadable paths are [`EmberError::Io`] naming the path.
pub fn list_input_files(path: &str) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut any = false;
    for piece in path.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        any = true;
        list_one(piece, &mut files)?;
    }
    if !any {
        return Err(EmberError::InputNotFound {
            path: path.to_string(),
        });
    }
    files.sort();
    files.dedup();
    tracing::debug!(input = path, files = files.len(), "listed input files");
    Ok(files)
}

/// Lists one (non-comma) input path into `out`.
fn list_one(piece: &str, out: &mut Vec<PathBuf>) -> Result<()> {
    let p = Path::new(piece);
    match fs::metadata(p) {
        // An existing path is taken literally, even if it contains glob characters.
        Ok(meta) if meta.is_dir() => list_dir(p, out),
        Ok(_) => {
            out.push(p.to_path_buf());
            Ok(())
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if !piece.contains(['*', '?', '[']) {
                return Err(EmberError::InputNotFound {
                    path: piece.to_string(),
                });
            }
            let matches = glob::glob(piece)
                .map_err(|e| EmberError::Config(format!("invalid glob pattern {piece:?}: {e}")))?;
            let mut found = false;
            for entry in matches {
                let m = entry.map_err(|e| {
                    let path = e.path().to_path_buf();
                    EmberError::io(path, std::io::Error::from(e))
                })?;
                if is_hidden(&m) {
                    continue;
                }
                found = true;
                let meta = fs::metadata(&m).map_err(|e| EmberError::io(&m, e))?;
                if meta.is_dir() {
                    list_dir(&m, out)?;
                } else {
                    out.push(m);
                }
            }
            if found {
                Ok(())
            } else {
                Err(EmberError::InputNotFound {
                    path: piece.to_string(),
                })
            }
        }
        Err(e) => Err(EmberError::io(p, e)),
    }
}

/// Pushes the visible regular files (symlinks followed) directly inside `dir`.
fn list_dir(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(|e| EmberError::io(dir, e))? {
        let entry = entry.map_err(|e| EmberError::io(dir, e))?;
        let path = entry.path();
        if is_hidden(&path) {
            continue;
        }
        let meta = fs::metadata(&path).map_err(|e| EmberError::io(&path, e))?;
        if meta.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

/// Hadoop's hidden-file rule: the last component starts with `_` or `.`.
fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .map(|n| {
            let b = n.as_encoded_bytes();
            b.first() == Some(&b'_') || b.first() == Some(&b'.')
        })
        .unwrap_or(false)
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
        let meta = fs::metadata(f).map_err(|e| EmberError::io(f, e))?;
        sizes.push(meta.len());
    }
    let total: u64 = sizes.iter().fold(0u64, |a, &b| a.saturating_add(b));
    let goal = total / (min_partitions.max(1) as u64);
    let split_size = min_split.max(goal.min(max_split)).max(1);

    let mut splits = Vec::new();
    for (f, &len) in files.iter().zip(&sizes) {
        let path: Arc<Path> = Arc::from(f.as_path());
        if len == 0 {
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
    file: File,
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
}

impl LineReader {
    /// Opens the split's file. Does no reading yet.
    pub fn open(split: &FileSplit) -> Result<Self> {
        Self::open_with_capacity(split, READ_BUFFER_SIZE)
    }

    /// [`LineReader::open`] with a given read-buffer capacity (at least 1 byte).
    pub(crate) fn open_with_capacity(split: &FileSplit, capacity: usize) -> Result<Self> {
        let file = File::open(&split.path).map_err(|e| EmberError::io(&*split.path, e))?;
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
        self.batch(max, |_, s| out.push(s.to_owned()))
    }

    /// Same as [`LineReader::next_batch`], with the byte offset of each line.
    pub fn next_batch_with_offsets(
        &mut self,
        max: usize,
        out: &mut Vec<(u64, String)>,
    ) -> Result<()> {
        self.batch(max, |off, s| out.push((off, s.to_owned())))
    }

    fn batch(&mut self, max: usize, mut push: impl FnMut(u64, &str)) -> Result<()> {
        if max == 0 {
            return Ok(());
        }
        let mut n = 0;
        let mut bad = None;
        self.for_each_line(|off, line| match std::str::from_utf8(line) {
            Ok(s) => {
                push(off, s);
                n += 1;
                n < max
            }
            Err(e) => {
                bad = Some((off, e));
                false
            }
        })?;
        match bad {
            None => Ok(()),
            Some((off, e)) => Err(invalid_utf8(&self.path, off, off + e.valid_up_to() as u64)),
        }
    }

    /// The current line's bytes, without `'\n'` and one trailing `'\r'`.
    fn current_line(&self) -> &[u8] {
        let line = match self.current {
            Current::Buf(a, b) => &self.buf[a..b],
            Current::Carry => &self.carry[..],
        };
        line.strip_suffix(b"\r").unwrap_or(line)
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
        if self.state == State::Done || self.pos >= self.end {
            self.state = State::Done;
            return Ok(None);
        }
        let line_start = self.pos;
        let mut carried = false;
        self.carry.clear();
        loop {
            let data = &self.buf[self.lo..self.hi];
            if let Some(i) = memchr::memchr(b'\n', data) {
                let nl = self.lo + i;
                if carried {
                    self.carry.extend_from_slice(&self.buf[self.lo..nl]);
                    self.current = Current::Carry;
                } else {
                    self.current = Current::Buf(self.lo, nl);
                }
                self.lo = nl + 1;
                self.pos += i as u64 + 1;
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

    /// Consumes bytes through the next `'\n'`; false if end of file came first.
    fn skip_through_newline(&mut self) -> Result<bool> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.lo..self.hi]) {
                self.lo += i + 1;
                self.pos += i as u64 + 1;
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
/// number of `'\n'` before `offset`; an offset past the end counts the whole file).
/// Meant for error paths, to tell a user "file X line N".
pub fn line_number_at(path: &Path, offset: u64) -> Result<u64> {
    let file = File::open(path).map_err(|e| EmberError::io(path, e))?;
    let mut reader = file.take(offset);
    let mut buf = vec![0u8; 64 * 1024];
    let mut newlines = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(EmberError::io(path, e)),
        };
        newlines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
    }
    Ok(newlines + 1)
}

/// Reads a whole file as a `String` (for `whole_text_files`). Invalid UTF-8 is
/// [`EmberError::Corrupt`] naming the file, line and byte offset.
pub fn read_whole_file(path: &Path) -> Result<String> {
    let bytes = fs::read(path).map_err(|e| EmberError::io(path, e))?;
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
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Write;

    fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
        let p = dir.join(name);
        fs::write(&p, content).unwrap();
        p
    }

    /// Independent reference: split on '\n', drop a final empty piece, strip one '\r'.
    fn reference_lines(content: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut pos = 0u64;
        let pieces: Vec<&[u8]> = content.split(|&b| b == b'\n').collect();
        let n = pieces.len();
        for (i, piece) in pieces.into_iter().enumerate() {
            if i + 1 == n && piece.is_empty() {
                break;
            }
            let line = piece.strip_suffix(b"\r").unwrap_or(piece);
            out.push((pos, line.to_vec()));
            pos += piece.len() as u64 + 1;
        }
        out
    }

    fn read_split(split: &FileSplit, cap: usize) -> Vec<(u64, Vec<u8>)> {
        let mut r = LineReader::open_with_capacity(split, cap).unwrap();
        let mut got = Vec::new();
        let done = r
            .for_each_line(|off, line| {
                got.push((off, line.to_vec()));
                true
            })
            .unwrap();
        assert!(done);
        got
    }

    fn split(path: &Path, start: u64, end: u64) -> FileSplit {
        FileSplit {
            path: Arc::from(path),
            start,
            end,
        }
    }

    fn content_strategy() -> impl Strategy<Value = Vec<u8>> {
        let line = (
            proptest::collection::vec(prop::sample::select(vec![b'a', b'b', b'\r', 0xC3]), 0..6),
            prop::sample::select(vec![&b"\n"[..], &b"\r\n"[..]]),
        );
        (proptest::collection::vec(line, 0..30), any::<bool>()).prop_map(|(lines, term)| {
            let mut c = Vec::new();
            let n = lines.len();
            for (i, (body, end)) in lines.into_iter().enumerate() {
                c.extend_from_slice(&body);
                if i + 1 < n || term {
                    c.extend_from_slice(end);
                }
            }
            c
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn splits_emit_every_line_exactly_once(
            content in content_strategy(),
            cuts in proptest::collection::vec(any::<u64>(), 0..8),
            cap in 1usize..40,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let p = write(dir.path(), "f", &content);
            let len = content.len() as u64;
            let mut bounds: Vec<u64> = cuts.iter().map(|c| c % (len + 1)).collect();
            bounds.push(0);
            bounds.push(len);
            bounds.sort_unstable(); // duplicates kept: empty splits must emit nothing
            let mut got = Vec::new();
            for w in bounds.windows(2) {
                got.extend(read_split(&split(&p, w[0], w[1]), cap));
            }
            let want = reference_lines(&content);
            prop_assert_eq!(&got, &want);
            for (i, (off, _)) in want.iter().enumerate() {
                prop_assert_eq!(line_number_at(&p, *off).unwrap(), i as u64 + 1);
            }
        }

        #[test]
        fn planned_splits_cover_files(
            sizes in proptest::collection::vec(0u64..5000, 1..5),
            min_partitions in 0usize..20,
            min_split in 0u64..300,
            max_split in 1u64..2000,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let files: Vec<PathBuf> = sizes.iter().enumerate().map(|(i, &s)| {
                let p = dir.path().join(format!("f{i}"));
                File::create(&p).unwrap().set_len(s).unwrap();
                p
            }).collect();
            let splits = plan_splits_with(&files, min_partitions, min_split, max_split).unwrap();
            let mut it = splits.iter().peekable();
            for (f, &size) in files.iter().zip(&sizes) {
                let mut next = 0;
                let mut count = 0;
                while let Some(s) = it.next_if(|s| &*s.path == f.as_path()) {
                    prop_assert_eq!(s.start, next);
                    prop_assert!(s.end > s.start || size == 0);
                    next = s.end;
                    count += 1;
                }
                prop_assert_eq!(next, size);
                prop_assert!(count >= 1);
            }
            prop_assert!(it.next().is_none());
        }
    }

    #[test]
    fn crlf_empty_lines_and_unterminated_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "f", b"a\r\n\nbb\r\n\r\nlast\r");
        let mut r = LineReader::open(&split(&p, 0, 17)).unwrap();
        let mut out = Vec::new();
        r.next_batch_with_offsets(1024, &mut out).unwrap();
        let want: Vec<(u64, String)> = [(0, "a"), (3, ""), (4, "bb"), (8, ""), (10, "last")]
            .iter()
            .map(|&(o, s)| (o, s.to_string()))
            .collect();
        assert_eq!(out, want);
        out.clear();
        r.next_batch_with_offsets(1024, &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn empty_file_and_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let e = write(dir.path(), "e", b"");
        assert!(read_split(&split(&e, 0, 0), 4).is_empty());
        let t = write(dir.path(), "t", b"x\ny\n");
        assert_eq!(read_split(&split(&t, 0, 4), 4).len(), 2);
        // A line starting exactly at `end` belongs to the next split.
        assert_eq!(read_split(&split(&t, 0, 2), 4), vec![(0, b"x".to_vec())]);
        assert_eq!(read_split(&split(&t, 2, 4), 4), vec![(2, b"y".to_vec())]);
    }

    #[test]
    fn batches_and_early_stop_resume() {
        let dir = tempfile::tempdir().unwrap();
        let content: String = (0..10).map(|i| format!("line{i}\n")).collect();
        let p = write(dir.path(), "f", content.as_bytes());
        let mut r = LineReader::open(&split(&p, 0, content.len() as u64)).unwrap();
        let mut out = Vec::new();
        r.next_batch(3, &mut out).unwrap();
        assert_eq!(out, ["line0", "line1", "line2"]);
        r.next_batch(0, &mut out).unwrap();
        assert_eq!(out.len(), 3);
        let mut seen = Vec::new();
        let done = r
            .for_each_line(|_, l| {
                seen.push(String::from_utf8(l.to_vec()).unwrap());
                seen.len() < 2
            })
            .unwrap();
        assert!(!done);
        assert_eq!(seen, ["line3", "line4"]);
        out.clear();
        r.next_batch(100, &mut out).unwrap();
        assert_eq!(out, ["line5", "line6", "line7", "line8", "line9"]);
        out.clear();
        r.next_batch(100, &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn long_lines_spanning_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(READ_BUFFER_SIZE * 2 + 17);
        let content = format!("{long}\r\nshort\n{long}");
        let p = write(dir.path(), "f", content.as_bytes());
        let len = content.len() as u64;
        let mid = len / 2;
        let mut out = Vec::new();
        LineReader::open(&split(&p, 0, mid))
            .unwrap()
            .next_batch_with_offsets(10, &mut out)
            .unwrap();
        LineReader::open(&split(&p, mid, len))
            .unwrap()
            .next_batch_with_offsets(10, &mut out)
            .unwrap();
        let second = long.len() as u64 + 2;
        let want = vec![
            (0, long.clone()),
            (second, "short".to_string()),
            (second + 6, long),
        ];
        assert_eq!(out, want);
    }

    #[test]
    fn invalid_utf8_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "bad.txt", b"ok\nfine\nb\xffd\nafter\n");
        let mut r = LineReader::open(&split(&p, 0, 100)).unwrap();
        let mut out = Vec::new();
        let err = r.next_batch(10, &mut out).unwrap_err();
        assert!(matches!(err, EmberError::Corrupt { .. }));
        let msg = err.to_string();
        assert!(msg.contains("bad.txt"), "{msg}");
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("offset 8"), "{msg}");
        assert_eq!(out, ["ok", "fine"]);
        out.clear();
        r.next_batch(10, &mut out).unwrap();
        assert_eq!(out, ["after"]);

        let err = read_whole_file(&p).unwrap_err().to_string();
        assert!(err.contains("bad.txt") && err.contains("line 3"), "{err}");
    }

    #[test]
    fn read_whole_file_and_io_errors_name_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "w", "héllo\nworld\n".as_bytes());
        assert_eq!(read_whole_file(&p).unwrap(), "héllo\nworld\n");
        let missing = dir.path().join("missing.txt");
        for err in [
            read_whole_file(&missing).unwrap_err(),
            LineReader::open(&split(&missing, 0, 1)).unwrap_err(),
            line_number_at(&missing, 0).unwrap_err(),
            plan_splits(std::slice::from_ref(&missing), 1).unwrap_err(),
        ] {
            assert!(matches!(&err, EmberError::Io { path, .. } if *path == missing));
            assert!(err.to_string().contains("missing.txt"));
        }
    }

    #[test]
    fn line_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "f", b"a\nbb\n\nccc");
        let got: Vec<u64> = [0, 2, 5, 6]
            .iter()
            .map(|&o| line_number_at(&p, o).unwrap())
            .collect();
        assert_eq!(got, [1, 2, 3, 4]);
        assert_eq!(line_number_at(&p, 1000).unwrap(), 4);
    }

    fn bounds(splits: &[FileSplit]) -> Vec<(u64, u64)> {
        splits.iter().map(|s| (s.start, s.end)).collect()
    }

    fn sized(dir: &Path, name: &str, len: u64) -> PathBuf {
        let p = dir.join(name);
        File::create(&p).unwrap().set_len(len).unwrap();
        p
    }

    #[test]
    fn plan_slop_rule_and_empty_file() {
        let dir = tempfile::tempdir().unwrap();
        let a = sized(dir.path(), "a", 110);
        let b = sized(dir.path(), "b", 111);
        let e = sized(dir.path(), "e", 0);
        let c = sized(dir.path(), "c", 350);
        let splits =
            plan_splits_with(&[a.clone(), b.clone(), e.clone(), c.clone()], 1, 100, 100).unwrap();
        let paths: Vec<&Path> = splits.iter().map(|s| &*s.path).collect();
        assert_eq!(paths, [&a, &b, &b, &e, &c, &c, &c, &c].map(|p| p.as_path()));
        assert_eq!(
            bounds(&splits),
            [
                (0, 110),
                (0, 100),
                (100, 111),
                (0, 0),
                (0, 100),
                (100, 200),
                (200, 300),
                (300, 350)
            ]
        );
        // 350 with split 115: 115, 115, then the 120-byte rest (< 1.1 * 115) stays whole.
        let c_only = plan_splits_with(std::slice::from_ref(&c), 1, 115, 115).unwrap();
        assert_eq!(bounds(&c_only), [(0, 115), (115, 230), (230, 350)]);
    }

    #[test]
    fn plan_respects_min_partitions_floor_and_ceiling() {
        const MIB: u64 = 1 << 20;
        let dir = tempfile::tempdir().unwrap();
        let f = sized(dir.path(), "four", 4 * MIB);
        let files = std::slice::from_ref(&f);
        assert_eq!(plan_splits(files, 4).unwrap().len(), 4);
        assert_eq!(plan_splits(files, 0).unwrap().len(), 1); // 4 MiB < 64 MiB ceiling
        assert_eq!(plan_splits(files, 16).unwrap().len(), 16);
        // A floor above the goal wins.
        assert_eq!(plan_splits_with(files, 16, MIB, 64 * MIB).unwrap().len(), 4);
        let g = sized(dir.path(), "big", 200 * MIB); // sparse
        let splits = plan_splits(std::slice::from_ref(&g), 1).unwrap();
        assert_eq!(
            bounds(&splits),
            [
                (0, 64 * MIB),
                (64 * MIB, 128 * MIB),
                (128 * MIB, 192 * MIB),
                (192 * MIB, 200 * MIB)
            ]
        );
        // min_partitions is honoured for a single file whenever the goal is above the floor.
        let one = plan_splits_with(files, 7, 1, u64::MAX).unwrap();
        assert_eq!(one.len(), 7);
    }

    #[test]
    fn list_dir_glob_comma_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for name in ["_SUCCESS", ".hidden", "part-1", "part-0"] {
            write(d, name, b"x\n");
        }
        fs::create_dir(d.join("sub")).unwrap();
        write(&d.join("sub"), "part-9", b"x\n");
        let parts = vec![d.join("part-0"), d.join("part-1")];
        let ds = d.to_str().unwrap();
        assert_eq!(list_input_files(ds).unwrap(), parts);
        assert_eq!(list_input_files(&format!("{ds}/part-*")).unwrap(), parts);
        assert_eq!(list_input_files(&format!("{ds}/*")).unwrap(), {
            let mut v = parts.clone();
            v.push(d.join("sub/part-9")); // a matched directory is expanded
            v
        });
        assert_eq!(
            list_input_files(&format!("{ds}/part-1, {ds}/part-0,{ds}/part-1")).unwrap(),
            parts
        );
        // An explicitly named hidden file is taken.
        assert_eq!(
            list_input_files(&format!("{ds}/_SUCCESS")).unwrap(),
            [d.join("_SUCCESS")]
        );

        let missing = format!("{ds}/nope");
        let err = list_input_files(&format!("{ds}/part-0,{missing}")).unwrap_err();
        assert!(matches!(&err, EmberError::InputNotFound { path } if *path == missing));
        assert!(err.to_string().contains(&missing));
        let pat = format!("{ds}/zzz-*");
        let err = list_input_files(&pat).unwrap_err();
        assert!(matches!(&err, EmberError::InputNotFound { path } if *path == pat));
        // Only hidden matches counts as no match.
        assert!(matches!(
            list_input_files(&format!("{ds}/_*")),
            Err(EmberError::InputNotFound { .. })
        ));
        assert!(matches!(
            list_input_files(" , "),
            Err(EmberError::InputNotFound { .. })
        ));
        let empty = d.join("empty");
        fs::create_dir(&empty).unwrap();
        assert!(list_input_files(empty.to_str().unwrap())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn file_split_is_serde_and_clone() {
        // FileSplit must stay Clone + Eq + serde (without serde's `rc` feature).
        fn assert_serde<T: serde::Serialize + serde::de::DeserializeOwned>() {}
        assert_serde::<FileSplit>();
        let s = split(Path::new("/x"), 1, 2);
        assert_eq!(s.clone(), s);
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"q\n").unwrap();
        assert_eq!(
            read_split(&split(f.path(), 0, 2), 8),
            vec![(0, b"q".to_vec())]
        );
    }
}
