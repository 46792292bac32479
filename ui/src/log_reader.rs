//! Reading an event log, whole or incrementally: [`LogReader`] applies the complete
//! lines appended since its last read to a status store and remembers the byte offset
//! it stopped at, so a history server parses only what a growing log added.
//!
//! Invariants: a log is refused only when its first line is not `app_started` (it is
//! not an ember event log) or it cannot be read at all. Any other line that is not an
//! event (longer than [`MAX_LINE_BYTES`], not JSON, an event kind of a newer version)
//! is skipped with a warning naming the file and line number, as Spark's replay skips
//! unknown events, and the rest of the log is kept. A last line without its newline
//! (an application still writing it, or one that died mid-write) is not consumed: the
//! offset stays before it, so the next read sees it whole. A line longer than
//! [`MAX_LINE_BYTES`] is never buffered whole.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::event::AppEvent;
use crate::event_log::{LogError, MAX_LINE_BYTES};
use crate::store::AppStatus;

/// Skipped lines warned about (and returned) per log; past this, one summary line.
pub const MAX_WARNINGS: usize = 10;

/// Characters of a bad line quoted in its warning.
const QUOTED_CHARS: usize = 120;

/// Where reading one log stopped.
#[derive(Debug)]
pub struct LogReader {
    path: PathBuf,
    /// Bytes consumed: the end of the last complete line read.
    offset: u64,
    /// Complete lines consumed.
    lines: usize,
    /// Whether the first line (`app_started`) has been read.
    started: bool,
    /// Bad lines skipped so far.
    skipped: usize,
}

/// What one [`LogReader::read_new`] did.
#[derive(Debug, Default)]
pub struct ReadOutcome {
    /// Events applied.
    pub events: usize,
    /// The first lines skipped (at most [`MAX_WARNINGS`] per log, each a
    /// [`LogError::Bad`] naming file and line), already warned.
    pub skipped: Vec<LogError>,
    /// Lines skipped, all of them.
    pub skipped_lines: usize,
    /// Bytes after the last complete line: a line still being written (or torn).
    pub partial_bytes: u64,
}

impl LogReader {
    /// A reader at the start of the log at `path`.
    pub fn new(path: &Path) -> Self {
        LogReader {
            path: path.to_path_buf(),
            offset: 0,
            lines: 0,
            started: false,
            skipped: 0,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the log consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Whether the log's `app_started` has been read.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Applies to `status` every complete line appended since the last read. Fails only
    /// when the log cannot be read or its first line is not `app_started`.
    pub fn read_new(&mut self, status: &mut AppStatus) -> Result<ReadOutcome, LogError> {
        let io = |source| LogError::Io {
            path: self.path.clone(),
            source,
        };
        let mut file = File::open(&self.path).map_err(io)?;
        file.seek(SeekFrom::Start(self.offset)).map_err(io)?;
        let mut reader = BufReader::with_capacity(64 * 1024, file);
        let mut out = ReadOutcome::default();
        let mut line = Vec::new();
        loop {
            line.clear();
            let (consumed, complete, too_long) = read_line(&mut reader, &mut line).map_err(io)?;
            if consumed == 0 {
                break;
            }
            if !complete {
                // Still being written, or torn: left for the next read.
                out.partial_bytes = consumed;
                break;
            }
            let number = self.lines + 1;
            let outcome = if too_long {
                Err(format!("line longer than {MAX_LINE_BYTES} bytes"))
            } else {
                self.parse(&line)
            };
            match outcome {
                Ok(None) => {}
                Ok(Some(e)) => {
                    if !self.started && !matches!(e, AppEvent::AppStarted { .. }) {
                        return Err(self.bad(number, "the log does not start with app_started"));
                    }
                    self.started = true;
                    status.apply(&e);
                    out.events += 1;
                }
                Err(_) if !self.started => {
                    return Err(self.bad(number, "the log does not start with app_started"));
                }
                Err(what) => {
                    self.skipped += 1;
                    out.skipped_lines += 1;
                    if self.skipped <= MAX_WARNINGS {
                        let err = self.bad(number, &what);
                        tracing::warn!("history: skipping a line: {err}");
                        out.skipped.push(err);
                    } else if self.skipped == MAX_WARNINGS + 1 {
                        tracing::warn!(
                            "history: {}: more bad lines; warning no more for this log",
                            self.path.display()
                        );
                    }
                }
            }
            self.lines = number;
            self.offset += consumed;
        }
        Ok(out)
    }

    /// One complete line as an event: `None` for a blank line, an error saying why
    /// (with a bounded quote) for anything else that is not an event this version knows.
    fn parse(&self, line: &[u8]) -> Result<Option<AppEvent>, String> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        match serde_json::from_slice::<AppEvent>(line) {
            Ok(e) => Ok(Some(e)),
            Err(e) => {
                let kind = serde_json::from_slice::<Kind>(line)
                    .ok()
                    .and_then(|k| k.event);
                let text = String::from_utf8_lossy(line);
                let cut = text
                    .char_indices()
                    .nth(QUOTED_CHARS)
                    .map_or(text.len(), |(i, _)| i);
                let quote = text[..cut].trim_end();
                Err(match kind {
                    Some(kind) => format!(
                        "an event this version does not know ({}): {quote:?}",
                        cut_str(&kind, 40)
                    ),
                    None => format!("not an event ({e}): {quote:?}"),
                })
            }
        }
    }

    fn bad(&self, line: usize, what: &str) -> LogError {
        LogError::Bad {
            path: self.path.clone(),
            line,
            what: what.to_string(),
        }
    }
}

/// An event's tag alone, to tell an unknown event kind from a line that is no event.
#[derive(serde::Deserialize)]
struct Kind {
    event: Option<String>,
}

fn cut_str(s: &str, chars: usize) -> &str {
    s.char_indices().nth(chars).map_or(s, |(i, _)| &s[..i])
}

/// Reads one line into `line` (without buffering more than [`MAX_LINE_BYTES`] + 1 of
/// it): (bytes consumed, whether it ended with a newline, whether it was too long). A
/// line is too long when it has more than [`MAX_LINE_BYTES`] bytes before its newline,
/// the bound the writer keeps to.
fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<(u64, bool, bool)> {
    let mut consumed = 0u64;
    let mut too_long = false;
    loop {
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok((consumed, false, too_long));
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if !too_long {
            let room = MAX_LINE_BYTES + 1 - line.len();
            if take > room {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(&buf[..take]);
            }
        }
        reader.consume(take);
        consumed += take as u64;
        if done {
            // The bound is the writer's: the line's bytes without its newline.
            if line.len() > MAX_LINE_BYTES + 1 {
                too_long = true;
                line.clear();
            }
            return Ok((consumed, true, too_long));
        }
    }
}

/// Replays the log at `path` into a new status store, skipping (and warning about)
/// the lines that are not events; a torn last line is warned about and left out.
pub fn replay(path: &Path) -> Result<AppStatus, LogError> {
    let mut status = AppStatus::default();
    let mut reader = LogReader::new(path);
    let read = reader.read_new(&mut status)?;
    if read.partial_bytes > 0 {
        tracing::warn!(
            "history: {}:{}: ignoring a torn last line ({} bytes)",
            path.display(),
            reader.lines + 1,
            read.partial_bytes
        );
    }
    if !reader.started() {
        return Err(LogError::Bad {
            path: path.to_path_buf(),
            line: 0,
            what: "empty event log".into(),
        });
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_read_whole_and_a_long_one_is_not_buffered() {
        let mut data: &[u8] = b"ab\ncd";
        let mut line = Vec::new();
        assert_eq!(read_line(&mut data, &mut line).unwrap(), (3, true, false));
        assert_eq!(line, b"ab\n");
        line.clear();
        assert_eq!(read_line(&mut data, &mut line).unwrap(), (2, false, false));
        let long = vec![b'x'; MAX_LINE_BYTES + 10];
        let mut with_nl = long.clone();
        with_nl.push(b'\n');
        line.clear();
        let mut r = std::io::BufReader::with_capacity(4096, &with_nl[..]);
        let got = read_line(&mut r, &mut line).unwrap();
        assert_eq!(got, (MAX_LINE_BYTES as u64 + 11, true, true));
        assert!(line.len() <= MAX_LINE_BYTES + 1);
    }
}
