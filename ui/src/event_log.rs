//! The event log: one JSON line per [`AppEvent`] in a file of its own per application
//! (`<name>-<start ms>-<pid>.jsonl`, mode 0600, never overwritten), and reading logs back
//! for the history server.
//!
//! Invariants: the first line of a log is `app_started`; a line is written whole or not
//! at all as far as readers care (a torn last line of a crashed application is skipped
//! with a warning, any other bad line is an error naming the file and line); lines longer
//! than [`MAX_LINE_BYTES`] are refused on reading, before they are parsed.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::event::AppEvent;
use crate::store::AppStatus;

/// Longest line read back (a task failure text is bounded well below this).
pub const MAX_LINE_BYTES: usize = 1 << 20;

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

    /// Writes one event as a line (buffered; see [`flush`](Self::flush)).
    pub fn write(&mut self, e: &AppEvent) -> Result<(), LogError> {
        let line = serde_json::to_string(e).map_err(|e| LogError::Bad {
            path: self.path.clone(),
            line: 0,
            what: e.to_string(),
        })?;
        self.out
            .write_all(line.as_bytes())
            .map_err(io(&self.path))?;
        self.out.write_all(b"\n").map_err(io(&self.path))
    }

    pub fn flush(&mut self) -> Result<(), LogError> {
        self.out.flush().map_err(io(&self.path))
    }
}

/// Replays the log at `path` into a new status store.
pub fn replay(path: &Path) -> Result<AppStatus, LogError> {
    let file = File::open(path).map_err(io(path))?;
    let mut reader = BufReader::new(file);
    let mut status = AppStatus::default();
    let mut line = Vec::new();
    let mut n = 0;
    loop {
        line.clear();
        let read = Read::by_ref(&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(io(path))?;
        if read == 0 {
            break;
        }
        n += 1;
        let bad = |what: String| LogError::Bad {
            path: path.to_path_buf(),
            line: n,
            what,
        };
        if line.len() > MAX_LINE_BYTES {
            return Err(bad(format!("line longer than {MAX_LINE_BYTES} bytes")));
        }
        let complete = line.last() == Some(&b'\n');
        match serde_json::from_slice::<AppEvent>(&line) {
            Ok(e) => {
                if n == 1 && !matches!(e, AppEvent::AppStarted { .. }) {
                    return Err(bad("the log does not start with app_started".into()));
                }
                status.apply(&e);
            }
            // The application died while writing its last line.
            Err(_) if !complete => {
                tracing::warn!("{}:{n}: ignoring a torn last line", path.display());
                break;
            }
            Err(e) => {
                let text = String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned();
                return Err(bad(format!("not an event ({e}): {text:?}")));
            }
        }
    }
    if n == 0 {
        return Err(LogError::Bad {
            path: path.to_path_buf(),
            line: 0,
            what: "empty event log".into(),
        });
    }
    Ok(status)
}

/// The event logs in `dir` (`*.jsonl`), by name.
pub fn list_logs(dir: &Path) -> Result<Vec<PathBuf>, LogError> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl") && p.is_file())
        .collect();
    out.sort();
    Ok(out)
}
