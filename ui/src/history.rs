//! The history server's applications: one entry per event log in the directory, keyed
//! by its id (the file stem), holding the status replayed so far and where reading
//! stopped, so a listing parses only logs that are new or grew since the last one, and
//! reads a grown log from the offset it stopped at.
//!
//! Invariants: a listing costs one directory read and one `stat` per log plus the
//! parsing of what was appended; nothing is re-read or re-sorted per log. A log whose
//! stamp (device, inode, mtime, length) is unchanged since it was last read is not
//! opened. A log that is another file now (its device or inode changed: a new log
//! renamed over it) or that shrank below its previous length is read again from its
//! start, never read on from the old offset. A log that is not an ember event log is
//! warned about once per change and left out of the list; a log that could not be read
//! (an I/O error, e.g. out of file descriptors, or the file gone between `stat` and
//! `open`) keeps what was read so far and is retried at the next listing. Bad lines
//! inside a log are skipped by the reader ([`crate::log_reader`]) and the log is kept.
//! Ids are matched against the files listed, never used as paths.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::{Mutex, RwLock};

use crate::api::AppSummary;
use crate::event_log::LogError;
use crate::log_reader::LogReader;
use crate::store::AppStatus;
use crate::SharedStatus;

/// A log file's identity and size when it was last read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mtime: SystemTime,
    len: u64,
}

/// The logs of one directory, as far as they have been read.
pub(crate) struct History {
    dir: PathBuf,
    logs: Mutex<BTreeMap<String, Entry>>,
}

struct Entry {
    /// The log's stamp when last read through (or refused); `None` before the first
    /// read and after a read that failed on an I/O error, so the next listing retries.
    stamp: Option<Stamp>,
    /// The stamp of the file the reader's offset belongs to (kept across I/O errors),
    /// to tell a log that grew from one that was replaced.
    read_from: Option<Stamp>,
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
            read_from: None,
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
        let replaced = self
            .read_from
            .is_some_and(|old| (old.dev, old.ino) != (stamp.dev, stamp.ino) || stamp.len < old.len);
        if self.refused || replaced || stamp.len < self.reader.offset() {
            // Another file, rewritten, or refused before: start over.
            *self = Entry::new(self.reader.path());
        }
        self.read_from = Some(stamp);
        let mut status = self.status.write();
        match self.reader.read_new(&mut status) {
            Ok(_) => {
                self.stamp = Some(stamp);
                if self.reader.started() {
                    self.summary = Some(AppSummary {
                        id: id.to_string(),
                        name: status.name.clone(),
                        started_ms: status.started_ms,
                        jobs: status.jobs().len(),
                    });
                }
            }
            Err(e @ LogError::Io { .. }) => {
                // Not the log's fault: keep what was read (the reader's offset stays at
                // the last whole line applied) and retry at the next listing.
                tracing::warn!("history: cannot read a log now, will retry: {e}");
                self.stamp = None;
            }
            Err(e) => {
                tracing::warn!("history: leaving out a log: {e}");
                self.stamp = Some(stamp);
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

/// The stamp of the regular file at `path` (following links).
fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    Some(Stamp {
        dev: meta.dev(),
        ino: meta.ino(),
        mtime: meta.modified().ok()?,
        len: meta.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::AppEvent;

    fn line(e: &AppEvent) -> String {
        serde_json::to_string(e).unwrap() + "\n"
    }

    fn log(name: &str, jobs: u64) -> String {
        let mut text = line(&AppEvent::AppStarted {
            name: name.into(),
            time_ms: 7,
        });
        for job_id in 0..jobs {
            text += &line(&AppEvent::JobSubmitted {
                pool_share: Default::default(),
                job_group: Default::default(),
                pool: Default::default(),
                job_id,
                application: name.into(),
                number: Some(job_id),
                description: format!("job {job_id} of {name}"),
                stages: vec![],
                time_ms: 8,
            });
        }
        text
    }

    fn listed(history: &History) -> Vec<(String, String)> {
        let apps = history.summaries();
        apps.into_iter().map(|a| (a.id, a.name)).collect()
    }

    #[test]
    fn a_log_that_failed_to_open_is_read_at_the_next_listing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a-1-1.jsonl");
        std::fs::write(&path, log("first", 0)).unwrap();
        let now = stamp(&path).unwrap();
        // The log is gone between the listing's stat and its open: an I/O error.
        let moved = dir.path().join("moved");
        std::fs::rename(&path, &moved).unwrap();
        let mut entry = Entry::new(&path);
        entry.refresh("a-1-1", now);
        assert!(entry.summary.is_none() && !entry.refused);
        // Back, unchanged (same stamp): the next refresh reads it.
        std::fs::rename(&moved, &path).unwrap();
        assert_eq!(stamp(&path), Some(now));
        entry.refresh("a-1-1", now);
        let summary = entry.summary.as_ref().map(|s| s.name.as_str());
        assert_eq!(summary, Some("first"));
    }

    #[test]
    fn a_log_replaced_by_a_longer_one_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a-1-1.jsonl");
        std::fs::write(&path, log("old", 1)).unwrap();
        let history = History::new(dir.path().to_path_buf());
        assert_eq!(listed(&history), [("a-1-1".into(), "old".into())]);
        let new = dir.path().join("new.tmp");
        std::fs::write(&new, log("new", 3)).unwrap();
        std::fs::rename(&new, &path).unwrap();
        assert_eq!(listed(&history), [("a-1-1".into(), "new".into())]);
        let status = history.app("a-1-1").unwrap();
        let status = status.read();
        assert_eq!(status.name, "new");
        let ids: Vec<u64> = status.jobs().iter().map(|j| j.job_id).collect();
        assert_eq!(ids, [2, 1, 0]); // newest first
    }
}
