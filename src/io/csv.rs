//! CSV input and output on the `csv` crate: records of a serde type, by header name
//! (or by position without a header), with the delimiter, quote and header handling of
//! [`CsvOptions`].
//!
//! Invariants: a file is read whole by one task, never cut (a quoted field may hold a
//! newline, so only a parser reading from the start knows where records begin); every
//! record is returned, in file order, or the task fails with an error naming the file,
//! the line and the column (by header name where there is one) and quoting a bounded
//! prefix of the bad field; a written file starts with a header line when asked to,
//! even for a partition of no records.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::data::Data;
use crate::error::{EmberError, Result};
use crate::io::excerpt;
use crate::io::storage::InputFile;

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
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            delimiter: b',',
            quote: b'"',
            has_header: true,
            overwrite: false,
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

/// Reads the CSV files `files`, in order, into batches of `T`.
pub struct CsvReader<T> {
    options: CsvOptions,
    files: std::vec::IntoIter<PathBuf>,
    current: Option<Open>,
    _t: std::marker::PhantomData<T>,
}

struct Open {
    path: PathBuf,
    reader: csv::Reader<BufReader<InputFile>>,
    headers: Option<csv::StringRecord>,
    record: csv::StringRecord,
}

impl<T: Data> CsvReader<T> {
    pub fn new(files: Vec<PathBuf>, options: CsvOptions) -> Self {
        CsvReader {
            options,
            files: files.into_iter(),
            current: None,
            _t: std::marker::PhantomData,
        }
    }

    fn open(&self, path: PathBuf) -> Result<Open> {
        let file = InputFile::open(&path)?;
        let mut reader = self
            .options
            .reader()
            .from_reader(BufReader::with_capacity(1 << 18, file));
        let headers = if self.options.has_header {
            Some(
                reader
                    .headers()
                    .map_err(|e| read_error(&path, None, None, e))?
                    .clone(),
            )
        } else {
            None
        };
        Ok(Open {
            path,
            reader,
            headers,
            record: csv::StringRecord::new(),
        })
    }

    /// The next batch of records, `None` at the end.
    pub fn next_batch(&mut self) -> Option<Result<Vec<T>>> {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let Some(open) = &mut self.current else {
                let path = self.files.next()?;
                match self.open(path) {
                    Ok(o) => self.current = Some(o),
                    Err(e) => return Some(Err(e)),
                }
                continue;
            };
            match open.reader.read_record(&mut open.record) {
                Ok(true) => {
                    match open.record.deserialize::<T>(open.headers.as_ref()) {
                        Ok(x) => batch.push(x),
                        Err(e) => {
                            let pos = open.record.position().cloned();
                            return Some(Err(read_error(
                                &open.path,
                                open.headers.as_ref(),
                                Some((&open.record, pos)),
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
                Err(e) => return Some(Err(read_error(&open.path, open.headers.as_ref(), None, e))),
            }
        }
    }
}

/// The error of a record that did not read: file, line, column and a prefix of the
/// field.
fn read_error(
    path: &Path,
    headers: Option<&csv::StringRecord>,
    record: Option<(&csv::StringRecord, Option<csv::Position>)>,
    e: csv::Error,
) -> EmberError {
    let at_line = |p: Option<&csv::Position>| p.map_or(0, |p| p.line());
    match e.into_kind() {
        csv::ErrorKind::Io(io) => EmberError::io(path, io),
        csv::ErrorKind::Deserialize { pos, err } => {
            let line = at_line(pos.as_ref().or(record.as_ref().and_then(|r| r.1.as_ref())));
            let column = err.field().map(|i| {
                let name = headers
                    .and_then(|h| h.get(i as usize))
                    .map(|n| format!("{} ", excerpt(n)))
                    .unwrap_or_default();
                let value = record
                    .as_ref()
                    .and_then(|(r, _)| r.get(i as usize))
                    .map(|v| format!(" in field {}", excerpt(v)))
                    .unwrap_or_default();
                (format!("{name}(column {})", i + 1), value)
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
            line: 0,
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
    crate::output::sync_file(path, out)?;
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
