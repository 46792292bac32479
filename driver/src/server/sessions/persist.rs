//! What of a client session survives a driver restart: one small state file per open
//! session in the operator's state directory (`<--binary-dir>/sessions/`), from which a
//! restarted driver recovers the session so its client can reopen it
//! (`OpenSessionRequest::resume_session_id`) and resubmit its jobs.
//!
//! Invariants:
//! - A file holds the session's id, id range, application name, binaries, its shuffle
//!   key (which executors already hold for its files), and the SHA-256 of its token,
//!   never the token itself: the file lets a driver recognise the client, not act as it.
//! - The directory is mode 0700 and every file 0600, written under a temporary name,
//!   synced and renamed into place, so a reader sees a whole file or none.
//! - A file exists from the session's opening until it is finalized (its ids
//!   forgotten); a driver that stops keeps the files of the sessions it had.
//! - Reading trusts nothing: at most [`MAX_STATE_FILES`] files of at most
//!   [`MAX_STATE_BYTES`] each; a file that does not parse or check (name, id, range,
//!   hex digests) is skipped with a warning naming it, never a reason not to start.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ember_proto::IdRange;
use serde::{Deserialize, Serialize};
use tracing::warn;

/// Most state files a driver reads at start (one per id range at most).
pub const MAX_STATE_FILES: usize = IdRange::MAX_INDEX as usize;

/// Largest state file read.
pub const MAX_STATE_BYTES: u64 = 64 << 10;

/// Most binaries a state file lists.
const MAX_BINARIES: usize = 64;

/// One session as its state file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionState {
    pub id: u64,
    /// The index of its id range.
    pub range: u32,
    /// The client's application name (already escaped and bounded).
    pub app_name: String,
    /// Lower-case hex SHA-256 of the session token.
    pub token_sha256: String,
    pub shuffle_key: String,
    pub binaries: Vec<String>,
}

/// The state file of session `id` in `dir`.
fn path_of(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("session-{id}.json"))
}

/// Writes `state`'s file into `dir` (created 0700 if missing).
pub(crate) fn save(dir: &Path, state: &SessionState) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let path = path_of(dir, state.id);
    let tmp = dir.join(format!(".session-{}.json.tmp", state.id));
    let bytes = serde_json::to_vec(state).map_err(std::io::Error::other)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, &path)
}

/// Deletes session `id`'s file from `dir` (none is fine).
pub(crate) fn remove(dir: &Path, id: u64) {
    match std::fs::remove_file(path_of(dir, id)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            warn!(dir = %dir.display(), session = id, "cannot delete a session's state file: {e}")
        }
    }
}

/// Every session state file in `dir` that checks, by id; none if `dir` does not exist.
pub(crate) fn load(dir: &Path) -> Vec<SessionState> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            warn!(dir = %dir.display(), "cannot read the session state directory: {e}");
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(id) = entry.file_name().to_str().and_then(|n| {
            n.strip_prefix("session-")?
                .strip_suffix(".json")?
                .parse()
                .ok()
        }) else {
            continue;
        };
        if found.len() >= MAX_STATE_FILES {
            warn!(dir = %dir.display(), "more than {MAX_STATE_FILES} session state files; the rest are ignored");
            break;
        }
        match read_one(&path, id) {
            Ok(s) => found.push(s),
            Err(why) => warn!(file = %path.display(), "skipping a session state file: {why}"),
        }
    }
    found.sort_by_key(|s| s.id);
    found
}

fn read_one(path: &Path, id: u64) -> Result<SessionState, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_STATE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_STATE_BYTES {
        return Err(format!("longer than {MAX_STATE_BYTES} bytes"));
    }
    let s: SessionState = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    let hex64 = |h: &str| ember_proto::digest::is_sha256_hex(h);
    if s.id != id {
        return Err(format!("it names session {} but is the file of {id}", s.id));
    }
    // Range 0 is local mode's, never a session's.
    if s.range == 0 || IdRange::new(s.range).is_none() {
        return Err(format!("{} is not a session id range", s.range));
    }
    if !hex64(&s.token_sha256) || !hex64(&s.shuffle_key) {
        return Err("its token digest or shuffle key is not 64 hex digits".into());
    }
    if s.binaries.len() > MAX_BINARIES || !s.binaries.iter().all(|b| hex64(b)) {
        return Err("its binaries are not a short list of SHA-256 digests".into());
    }
    if s.app_name.len() > 4096 {
        return Err("its application name is too long".into());
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn state(id: u64, range: u32) -> SessionState {
        SessionState {
            id,
            range,
            app_name: "wordcount".into(),
            token_sha256: "a".repeat(64),
            shuffle_key: "b".repeat(64),
            binaries: vec!["c".repeat(64)],
        }
    }

    #[test]
    fn saved_sessions_load_back_with_private_modes_and_removed_ones_go() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sessions");
        save(&dir, &state(3, 2)).unwrap();
        save(&dir, &state(1, 1)).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("session-3.json")), 0o600);
        assert_eq!(load(&dir), vec![state(1, 1), state(3, 2)]);
        remove(&dir, 1);
        remove(&dir, 99);
        assert_eq!(load(&dir), vec![state(3, 2)]);
        assert!(load(&root.path().join("missing")).is_empty());
    }

    #[test]
    fn files_that_do_not_check_are_skipped() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        save(dir, &state(1, 1)).unwrap();
        // Another id than its name, a bad range, a bad digest, not JSON, too long.
        let write = |name: &str, s: &SessionState| {
            std::fs::write(dir.join(name), serde_json::to_vec(s).unwrap()).unwrap()
        };
        write("session-2.json", &state(5, 1));
        write("session-3.json", &state(3, 0));
        write(
            "session-4.json",
            &SessionState {
                token_sha256: "not hex".into(),
                ..state(4, 4)
            },
        );
        std::fs::write(dir.join("session-6.json"), b"{not json").unwrap();
        std::fs::write(
            dir.join("session-7.json"),
            vec![b' '; MAX_STATE_BYTES as usize + 1],
        )
        .unwrap();
        std::fs::write(dir.join("notes.txt"), b"ignored").unwrap();
        assert_eq!(load(dir), vec![state(1, 1)]);
    }
}
