//! CSV input and output on the `csv` crate: records of a serde type, by header name
//! (or by position without a header), with the delimiter, quote and header handling of
//! [`CsvOptions`].
//!
//! Invariants:
//! - Without `multi_line` (the default, as Spark's `multiLine = false`) a record is one
//!   line, so a large file is cut into byte-range splits at line boundaries as text is
//!   (`text_input`: a line belongs to the split its first byte lies in, lines end at
//!   `\n`, `\r` or `\r\n`): every record of the file is read by exactly one split, in
//!   file order. The header of a cut file is read once, when the read is planned, and
//!   travels with every split; the first split skips the file's first line. A field
//!   holding a line break can only come from a quoted field spanning lines, which
//!   needs `multi_line`: it is an error naming the record, never a record cut in two.
//! - With `multi_line` a file is read whole by one task, never cut (only a parser
//!   reading from the start knows where records begin), and quoted fields may hold
//!   newlines.
//! - Every record is returned, in file order, or the task fails with an error naming
//!   the file, the line and the column (by header name where there is one) and quoting
//!   a bounded prefix of the bad field. Line numbers are the file's own (1 = its first
//!   line), also in a split (the lines before the split are counted when an error is
//!   reported, never on the way).
//! - A written file starts with a header line when asked to, even for a partition of no
//!   records.

use std::cell::Cell;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::data::Data;
use crate::error::{EmberError, Result};
use crate::io::excerpt;
use crate::io::storage::InputFile;
use crate::io::text_input::{FileSplit, LineReader};

/// Records per batch handed on.
const BATCH: usize = crate::data::BATCH;

/// How CSV is read and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CsvOptions {
    /// The field separator (default `,`).
    pub delimiter: u8,
    /// The quote character (default `"`; doubled inside a quoted field).
    pub quote: u8,
    /// Reading: the first line names the columns, and fields are matched to the record
    /// type's fields by those names. Writing: a header line of the field names comes
    /// first. Default true.
    pub has_header: bool,
    /// Writing: replace an existing output directory instead of failing.
    pub overwrite: bool,
    /// Reading: records may span lines (a quoted field holding a newline), so each file
    /// is read whole by one task (Spark's `multiLine`). Default false: a record is one
    /// line, and large files are cut at line boundaries and read in parallel.
    pub multi_line: bool,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            delimiter: b',',
            quote: b'"',
            has_header: true,
            overwrite: false,
            multi_line: false,
        }
    }
}

impl CsvOptions {
    fn reader(&self) -> csv::ReaderBuilder {
        let mut b = csv::ReaderBuilder::new();
        b.delimiter(self.delimiter)
            .quote(self.quote)
            .has_headers(self.has_header);
        b
    }
}

/// What one task reads of one CSV file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CsvPiece {
    /// The whole file, its header (if any) read from its first line.
    Whole(PathBuf),
    /// The records starting in a byte range of a file cut into several, with the file's
    /// header (read when the read was planned) if it has one.
    Split {
        split: FileSplit,
        header: Option<Vec<String>>,
    },
}

/// The header of a CSV file that will be cut into splits: its first record's fields.
/// A header spanning lines (a quoted newline) is an error unless `multi_line`, which
/// never cuts files.
pub fn read_header(path: &Path, options: &CsvOptions) -> Result<Vec<String>> {
    let file = InputFile::open(path)?;
    let mut reader = options.reader().from_reader(BufReader::new(file));
    let headers = reader
        .headers()
        .map_err(|e| read_error(path, None, None, 0, e))?
        .clone();
    if let Some(col) = line_break_field(&headers) {
        return Err(spans_lines(path, None, &headers, col, 1));
    }
    Ok(headers.iter().map(str::to_string).collect())
}

/// Reads CSV pieces, in order, into batches of `T`.
pub struct CsvReader<T> {
    options: CsvOptions,
    pieces: std::vec::IntoIter<CsvPiece>,
    current: Option<Open>,
    _t: std::marker::PhantomData<T>,
}

struct Open {
    path: PathBuf,
    reader: csv::Reader<Box<dyn Read>>,
    headers: Option<csv::StringRecord>,
    record: csv::StringRecord,
    /// For a split: the split, and the file offset of its first line (set once read),
    /// to count the lines before it when an error needs the file's line number.
    split: Option<(FileSplit, Rc<Cell<Option<u64>>>)>,
}

impl Open {
    /// Lines of the file before the line the reader's line 1 is.
    fn line_base(&self) -> u64 {
        match &self.split {
            None => 0,
            Some((split, first)) => {
                let first = first.get().unwrap_or(split.start);
                lines_before(&split.path, first).unwrap_or(0)
            }
        }
    }
}

impl<T: Data> CsvReader<T> {
    pub fn new(pieces: Vec<CsvPiece>, options: CsvOptions) -> Self {
        CsvReader {
            options,
            pieces: pieces.into_iter(),
            current: None,
            _t: std::marker::PhantomData,
        }
    }

    fn open(&self, piece: CsvPiece) -> Result<Open> {
        match piece {
            CsvPiece::Whole(path) => {
                let file = InputFile::open(&path)?;
                let input: Box<dyn Read> = Box::new(BufReader::with_capacity(1 << 18, file));
                let mut reader = self.options.reader().from_reader(input);
                let headers = if self.options.has_header {
                    let h = reader
                        .headers()
                        .map_err(|e| read_error(&path, None, None, 0, e))?
                        .clone();
                    if !self.options.multi_line {
                        if let Some(col) = line_break_field(&h) {
                            return Err(spans_lines(&path, None, &h, col, 1));
                        }
                    }
                    Some(h)
                } else {
                    None
                };
                Ok(Open {
                    path,
                    reader,
                    headers,
                    record: csv::StringRecord::new(),
                    split: None,
                })
            }
            CsvPiece::Split { split, header } => {
                // The first split of a file with a header starts after its first line.
                let mut lines = split.clone();
                if header.is_some() && lines.start == 0 {
                    lines.start = 1.min(lines.end);
                }
                let first = Rc::new(Cell::new(None));
                let input: Box<dyn Read> = Box::new(SplitLines {
                    lines: LineReader::open(&lines)?,
                    buf: Vec::new(),
                    pos: 0,
                    first: first.clone(),
                    done: false,
                });
                let mut b = self.options.reader();
                b.has_headers(false);
                Ok(Open {
                    path: split.path.to_path_buf(),
                    reader: b.from_reader(input),
                    headers: header.map(csv::StringRecord::from),
                    record: csv::StringRecord::new(),
                    split: Some((split, first)),
                })
            }
        }
    }

    /// The next batch of records, `None` at the end.
    pub fn next_batch(&mut self) -> Option<Result<Vec<T>>> {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let Some(open) = &mut self.current else {
                let piece = self.pieces.next()?;
                match self.open(piece) {
                    Ok(o) => self.current = Some(o),
                    Err(e) => return Some(Err(e)),
                }
                continue;
            };
            match open.reader.read_record(&mut open.record) {
                Ok(true) => {
                    if let Err(e) = check_record(open, self.options.multi_line) {
                        return Some(Err(e));
                    }
                    match open.record.deserialize::<T>(open.headers.as_ref()) {
                        Ok(x) => batch.push(x),
                        Err(e) => {
                            let pos = open.record.position().cloned();
                            let base = open.line_base();
                            return Some(Err(read_error(
                                &open.path,
                                open.headers.as_ref(),
                                Some((&open.record, pos)),
                                base,
                                e,
                            )));
                        }
                    }
                    if batch.len() == BATCH {
                        return Some(Ok(batch));
                    }
                }
                Ok(false) => {
                    self.current = None;
                    if !batch.is_empty() {
                        return Some(Ok(batch));
                    }
                }
                Err(e) => {
                    let base = open.line_base();
                    return Some(Err(read_error(
                        &open.path,
                        open.headers.as_ref(),
                        None,
                        base,
                        e,
                    )));
                }
            }
        }
    }
}

/// The checks the `csv` crate cannot make for a record read line by line: no field
/// holds a line break unless `multi_line`, and a split's records have as many fields as
/// the file's header (the crate compares with the first record it read itself).
fn check_record(open: &Open, multi_line: bool) -> Result<()> {
    let line = || open.line_base() + open.record.position().map_or(0, |p| p.line());
    if !multi_line {
        if let Some(col) = line_break_field(&open.record) {
            return Err(spans_lines(
                &open.path,
                open.headers.as_ref(),
                &open.record,
                col,
                line(),
            ));
        }
    }
    if let (Some(h), Some(_)) = (&open.headers, &open.split) {
        if h.len() != open.record.len() {
            return Err(EmberError::BadRecord {
                path: open.path.display().to_string(),
                line: line(),
                column: String::new(),
                message: format!(
                    "{} fields where the records before have {}",
                    open.record.len(),
                    h.len()
                ),
            });
        }
    }
    Ok(())
}

/// The first field of `record` holding a line break, if any.
fn line_break_field(record: &csv::StringRecord) -> Option<usize> {
    memchr::memchr2(b'\n', b'\r', record.as_slice().as_bytes())?;
    record.iter().position(|f| f.contains(['\n', '\r']))
}

/// The error of a record whose field `col` holds a line break without `multi_line`.
fn spans_lines(
    path: &Path,
    headers: Option<&csv::StringRecord>,
    record: &csv::StringRecord,
    col: usize,
    line: u64,
) -> EmberError {
    EmberError::BadRecord {
        path: path.display().to_string(),
        line,
        column: column_name(headers, col),
        message: format!(
            "a quoted field spans lines ({}); read such files with \
             CsvOptions {{ multi_line: true, .. }} (Spark's multiLine)",
            excerpt(record.get(col).unwrap_or(""))
        ),
    }
}

/// `"name" (column N)`, or `(column N)` without a header.
fn column_name(headers: Option<&csv::StringRecord>, i: usize) -> String {
    let name = headers
        .and_then(|h| h.get(i))
        .map(|n| format!("{} ", excerpt(n)))
        .unwrap_or_default();
    format!("{name}(column {})", i + 1)
}

/// The number of lines of `path` that start before byte `offset` (a line start): read
/// only when an error in a split needs the file's own line number.
fn lines_before(path: &Path, offset: u64) -> Result<u64> {
    let mut reader = LineReader::open(&FileSplit {
        path: Arc::from(path),
        start: 0,
        end: offset,
    })?;
    let mut n = 0u64;
    reader.for_each_line(|_, _| {
        n += 1;
        true
    })?;
    Ok(n)
}

/// The lines of a split, each ended by `\n` whatever ended it in the file, as one byte
/// stream for the CSV parser; remembers the file offset of the first line.
struct SplitLines {
    lines: LineReader,
    buf: Vec<u8>,
    pos: usize,
    first: Rc<Cell<Option<u64>>>,
    done: bool,
}

impl Read for SplitLines {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.buf.len() && !self.done {
            self.buf.clear();
            self.pos = 0;
            let (buf, first) = (&mut self.buf, &self.first);
            let finished = self
                .lines
                .for_each_line(|offset, line| {
                    if first.get().is_none() {
                        first.set(Some(offset));
                    }
                    buf.extend_from_slice(line);
                    buf.push(b'\n');
                    buf.len() < 1 << 16
                })
                .map_err(std::io::Error::other)?;
            self.done = finished;
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The error of a record that did not read: file, line, column and a prefix of the
/// field.
fn read_error(
    path: &Path,
    headers: Option<&csv::StringRecord>,
    record: Option<(&csv::StringRecord, Option<csv::Position>)>,
    line_base: u64,
    e: csv::Error,
) -> EmberError {
    let at_line = |p: Option<&csv::Position>| line_base + p.map_or(0, |p| p.line());
    match e.into_kind() {
        csv::ErrorKind::Io(io) => EmberError::io(path, io),
        csv::ErrorKind::Deserialize { pos, err } => {
            let line = at_line(pos.as_ref().or(record.as_ref().and_then(|r| r.1.as_ref())));
            let column = err.field().map(|i| {
                let value = record
                    .as_ref()
                    .and_then(|(r, _)| r.get(i as usize))
                    .map(|v| format!(" in field {}", excerpt(v)))
                    .unwrap_or_default();
                (column_name(headers, i as usize), value)
            });
            let (column, value) = column.unwrap_or_default();
            EmberError::BadRecord {
                path: path.display().to_string(),
                line,
                column,
                message: format!("{}{value}", err.kind()),
            }
        }
        csv::ErrorKind::UnequalLengths {
            pos,
            expected_len,
            len,
        } => EmberError::BadRecord {
            path: path.display().to_string(),
            line: at_line(pos.as_ref()),
            column: String::new(),
            message: format!("{len} fields where the records before have {expected_len}"),
        },
        csv::ErrorKind::Utf8 { pos, err } => EmberError::BadRecord {
            path: path.display().to_string(),
            line: at_line(pos.as_ref()),
            column: format!("(column {})", err.field() + 1),
            message: "not UTF-8 text".into(),
        },
        other => EmberError::BadRecord {
            path: path.display().to_string(),
            line: line_base,
            column: String::new(),
            message: format!("{other:?}"),
        },
    }
}

/// Writes `records` as CSV to a new file at `path`; returns the number written.
pub fn write_file<T: Data>(
    path: &Path,
    options: &CsvOptions,
    records: impl Iterator<Item = Result<Vec<T>>>,
) -> Result<u64> {
    let file = File::create_new(path).map_err(|e| EmberError::io(path, e))?;
    let out = BufWriter::with_capacity(1 << 18, file);
    let mut w = csv::WriterBuilder::new()
        .delimiter(options.delimiter)
        .quote(options.quote)
        .has_headers(options.has_header)
        .from_writer(out);
    let failed = |e: csv::Error| match e.into_kind() {
        csv::ErrorKind::Io(io) => EmberError::io(path, io),
        other => EmberError::ser(
            format!("a {} record as CSV", std::any::type_name::<T>()),
            format!("{other:?}"),
        ),
    };
    let mut n = 0u64;
    for batch in records {
        for x in batch? {
            w.serialize(&x).map_err(failed)?;
            n += 1;
        }
    }
    if n == 0 && options.has_header {
        // No record wrote the header: write it from the type's field names.
        if let Some(names) = field_names::<T>() {
            w.write_record(&names).map_err(failed)?;
        }
    }
    let out = w
        .into_inner()
        .map_err(|e| EmberError::io(path, std::io::Error::other(e.to_string())))?;
    crate::io::commit::sync_file(path, out)?;
    Ok(n)
}

/// The field names of struct `T` (as its header), from serde_arrow's schema tracing
/// (which needs no Arrow crate, so the `csv` feature works without `parquet`).
fn field_names<T: Data>() -> Option<Vec<String>> {
    use serde_arrow::schema::{SchemaLike, TracingOptions};
    let options = TracingOptions::default().allow_null_fields(true);
    let fields = Vec::<marrow::datatypes::Field>::from_type::<T>(options).ok()?;
    Some(fields.into_iter().map(|f| f.name).collect())
}

#[cfg(test)]
#[path = "csv_split_tests.rs"]
mod split_tests;
