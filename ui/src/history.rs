//! The history server's applications: one entry per event log in the directory, keyed
//! by its id (the file stem), holding the status replayed so far and where reading
//! stopped, so a listing parses only logs that are new or grew since the last one, and
//! reads a grown log from the offset it stopped at.
//!
//! Invariants: a listing costs one directory read and one `stat` per log plus the
//! parsing of what was appended; nothing is re-read or re-sorted per log. A log whose
//! (length, mtime) is unchanged is not opened. A log that shrank (rewritten) is read
//! again from its start. A log that cannot be read, or is not an ember event log, is
//! warned about once per change and left out of the list; bad lines inside a log are
//! skipped by the reader ([`crate::log_reader`]) and the log is kept. Ids are matched
//! against the files listed, never used as paths.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::{Mutex, RwLock};

use crate::api::AppSummary;
use crate::log_reader::LogReader;
use crate::store::AppStatus;
use crate::SharedStatus;

/// A log file's (mtime, length) when it was last read.
type Stamp = (SystemTime, u64);

/// The logs of one directory, as far as they have been read.
pub(crate) struct History {
    dir: PathBuf,
    logs: Mutex<BTreeMap<String, Entry>>,
}

struct Entry {
    stamp: Option<Stamp>,
    reader: LogReader,
    status: SharedStatus,
    /// Set once the log's `app_started` is read (absent for an empty or refused log).
    summary: Option<AppSummary>,
    /// The log is not one the server can show (read again only when it changes).
    refused: bool,
}

impl Entry {
    fn new(path: &Path) -> Self {
        Entry {
            stamp: None,
            reader: LogReader::new(path),
            status: Arc::new(RwLock::new(AppStatus::default())),
            summary: None,
            refused: false,
        }
    }

    /// Reads what the log gained since the last read, if its stamp changed.
    fn refresh(&mut self, id: &str, stamp: Stamp) {
        if self.stamp == Some(stamp) {
            return;
        }
        self.stamp = Some(stamp);
        if self.refused || stamp.1 < self.reader.offset() {
            // Rewritten (or refused before): start over.
            *self = Entry {
                stamp: Some(stamp),
                ..Entry::new(self.reader.path())
            };
        }
        let mut status = self.status.write();
        match self.reader.read_new(&mut status) {
            Ok(_) => {
                if self.reader.started() {
                    self.summary = Some(AppSummary {
                        id: id.to_string(),
                        name: status.name.clone(),
                        started_ms: status.started_ms,
                        jobs: status.jobs().len(),
                    });
                }
            }
            Err(e) => {
                tracing::warn!("history: leaving out a log: {e}");
                self.refused = true;
                self.summary = None;
            }
        }
    }
}

impl History {
    pub(crate) fn new(dir: PathBuf) -> Self {
        History {
            dir,
            logs: Mutex::new(BTreeMap::new()),
        }
    }

    /// The applications of every log in the directory, by id, read up to date.
    pub(crate) fn summaries(&self) -> Vec<AppSummary> {
        let files = self.scan();
        let mut logs = self.logs.lock();
        let ids: HashSet<&str> = files.iter().map(|(id, _, _)| id.as_str()).collect();
        logs.retain(|id, _| ids.contains(id.as_str()));
        for (id, path, stamp) in &files {
            logs.entry(id.clone())
                .or_insert_with(|| Entry::new(path))
                .refresh(id, *stamp);
        }
        logs.values().filter_map(|e| e.summary.clone()).collect()
    }

    /// The status of application `id`, its log read up to date; `None` if no log of
    /// the directory has that id or it cannot be shown.
    pub(crate) fn app(&self, id: &str) -> Option<SharedStatus> {
        let known = self.logs.lock().contains_key(id);
        if !known {
            // A log new since the last listing.
            self.summaries();
        }
        let mut logs = self.logs.lock();
        let Some(now) = stamp(logs.get(id)?.reader.path()) else {
            logs.remove(id);
            return None;
        };
        let entry = logs.get_mut(id)?;
        entry.refresh(id, now);
        entry.summary.as_ref()?;
        Some(entry.status.clone())
    }

    /// The event logs (`*.jsonl` files) of the directory: (id, path, stamp).
    fn scan(&self) -> Vec<(String, PathBuf, Stamp)> {
        let dir = match std::fs::read_dir(&self.dir) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("history: cannot read {}: {e}", self.dir.display());
                return Vec::new();
            }
        };
        dir.flatten()
            .filter_map(|d| {
                let path = d.path();
                if path.extension()? != "jsonl" {
                    return None;
                }
                let id = path.file_stem()?.to_str()?.to_string();
                let stamp = stamp(&path)?;
                Some((id, path, stamp))
            })
            .collect()
    }
}

/// The (mtime, length) of the regular file at `path` (following links).
fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    Some((meta.modified().ok()?, meta.len()))
}
