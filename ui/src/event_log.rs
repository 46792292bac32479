//! The event log: one JSON line per [`AppEvent`] in a file of its own per application
//! (`<name>-<start ms>-<pid>.jsonl`, mode 0600, never overwritten), and reading logs back
//! for the history server.
//!
//! Invariants: the first line of a log is `app_started`; a line is written whole or not
//! at all as far as readers care; the writer never writes a line longer than
//! [`MAX_LINE_BYTES`] (an event that would be has its texts cut to
//! [`CUT_TEXT_BYTES`] each, and is left out with a warning if it is still too long), so
//! every line it writes is one the reader ([`crate::log_reader`]) accepts. Reading skips
//! bad lines with a warning naming the file and line and keeps the rest.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::event::AppEvent;

/// Longest line written or read back (a task failure text is bounded well below this).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// What each text of an event longer than [`MAX_LINE_BYTES`] is cut to when written.
pub const CUT_TEXT_BYTES: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {what}")]
    Bad {
        path: PathBuf,
        line: usize,
        what: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LogError + '_ {
    move |source| LogError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Appends events to one application's log.
pub struct EventLogWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventLogWriter {
    /// Creates the log of application `name` in `dir` and writes its `app_started`.
    pub fn create(dir: &Path, name: &str, started_ms: u64) -> Result<Self, LogError> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        let path = dir.join(format!("{safe}-{started_ms}-{}.jsonl", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io(&path))?;
        let mut w = EventLogWriter {
            path,
            out: BufWriter::new(file),
        };
        w.write(&AppEvent::AppStarted {
            name: name.to_string(),
            time_ms: started_ms,
        })?;
        Ok(w)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one event as a line (buffered; see [`flush`](Self::flush)). An event whose
    /// line would be longer than [`MAX_LINE_BYTES`] has its texts cut; if it is still
    /// too long it is left out with a warning.
    pub fn write(&mut self, e: &AppEvent) -> Result<(), LogError> {
        // Credentials never reach the log, whatever the sender did.
        let redacted = e.redacted();
        let e = redacted.as_ref().unwrap_or(e);
        let mut line = self.encode(e)?;
        if line.len() > MAX_LINE_BYTES {
            let mut cut = e.clone();
            cut.cut_texts(CUT_TEXT_BYTES);
            line = self.encode(&cut)?;
            if line.len() > MAX_LINE_BYTES {
                tracing::warn!(
                    "event log {}: leaving out a {} event of {} bytes (longer than {MAX_LINE_BYTES} with its texts cut)",
                    self.path.display(),
                    e.kind(),
                    line.len()
                );
                return Ok(());
            }
        }
        self.out
            .write_all(line.as_bytes())
            .map_err(io(&self.path))?;
        self.out.write_all(b"\n").map_err(io(&self.path))
    }

    fn encode(&self, e: &AppEvent) -> Result<String, LogError> {
        serde_json::to_string(e).map_err(|err| LogError::Bad {
            path: self.path.clone(),
            line: 0,
            what: err.to_string(),
        })
    }

    pub fn flush(&mut self) -> Result<(), LogError> {
        self.out.flush().map_err(io(&self.path))
    }
}

pub use crate::log_reader::replay;
