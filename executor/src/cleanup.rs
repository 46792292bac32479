//! Deleting shuffle files from the shuffle directory: those of one ended client session
//! (its `session-<i>/` directory, by shuffle id range), those of shuffles a client
//! released (by id), or all of them when the driver is lost; and cached blocks moved
//! here of an RDD its client unpersisted.
//!
//! Invariants: a session cleanup deletes only the session directories whose index lies
//! in the id range's sessions, and files directly in the shuffle directory whose name
//! parses as a shuffle file (`ember_shuffle::parse_file_name`, including the writers'
//! dot-prefixed temporaries) with a shuffle id in `[id_lo, id_hi)`; a release deletes
//! only shuffle files of the released ids in their sessions' directories; nothing from
//! the wire becomes a path (ids are numbers, matched against the names found in the
//! shuffle directory or turned into a session directory's number); nothing here fails
//! the caller: errors are logged and the rest is still deleted. These functions do
//! blocking file I/O.

use std::collections::BTreeMap;
use std::path::Path;

use ember_proto::IdRange;

use crate::config::{session_of_dir, session_shuffle_dir};

/// The shuffle id a file in the shuffle directory belongs to, if it is a shuffle file
/// (`shuffle_S_M.data`, an earlier format's `.index`, or a temporary of either, possibly
/// dot-prefixed).
pub fn shuffle_id_of(name: &str) -> Option<u32> {
    ember_shuffle::shuffle_id_of_file(name)
}

/// Deletes the shuffle files of shuffles `[id_lo, id_hi)` in shuffle directory `dir`:
/// the directories of their sessions, and any such file directly in `dir`; returns how
/// many entries.
pub fn delete_shuffle_range(dir: &Path, id_lo: u32, id_hi: u32) -> usize {
    if id_hi <= id_lo {
        return 0;
    }
    let (first, last) = (
        IdRange::of_id(id_lo).index(),
        IdRange::of_id(id_hi - 1).index(),
    );
    delete_where(dir, |name| match session_of_dir(name) {
        Some(index) => index >= first && index <= last,
        None => shuffle_id_of(name).is_some_and(|id| id >= id_lo && id < id_hi),
    })
}

/// Deletes the files of the shuffles `shuffle_ids` in `dir` (at most
/// `MAX_RELEASED_SHUFFLES` ids are looked at; a longer list is cut, with a warning);
/// returns how many files.
pub fn delete_shuffles(dir: &Path, shuffle_ids: &[u32]) -> usize {
    let max = ember_proto::limits::MAX_RELEASED_SHUFFLES;
    if shuffle_ids.len() > max {
        tracing::warn!(
            count = shuffle_ids.len(),
            "RemoveShuffles names more than {max} shuffles; only the first {max} are removed"
        );
    }
    let ids = &shuffle_ids[..shuffle_ids.len().min(max)];
    let mut by_session: BTreeMap<IdRange, Vec<u32>> = BTreeMap::new();
    for &id in ids {
        by_session.entry(IdRange::of_id(id)).or_default().push(id);
    }
    by_session
        .into_iter()
        .map(|(session, ids)| {
            ember_shuffle::remove_shuffle_files(&session_shuffle_dir(dir, session), &ids)
        })
        .sum()
}

/// Deletes the cached blocks of RDD `rdd_id` moved to this executor (an unpersist):
/// files named `ember_shuffle::cached_block_path` of that RDD in its session's directory
/// under `dir`; returns how many.
pub fn delete_cached_blocks(dir: &Path, rdd_id: u32) -> usize {
    let session = session_shuffle_dir(dir, IdRange::of_id(rdd_id));
    delete_where(&session, |name| {
        ember_shuffle::parse_cached_block_name(name).is_some_and(|(rdd, _)| rdd == rdd_id)
    })
}

/// Deletes everything in `dir` (the shuffle directory: its output belonged to a
/// registration that is over); returns how many entries.
pub fn delete_all(dir: &Path) -> usize {
    delete_where(dir, |_| true)
}

fn delete_where(dir: &Path, pred: impl Fn(&str) -> bool) -> usize {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "cannot list the shuffle directory: {e}");
            return 0;
        }
    };
    let mut deleted = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !pred(name) {
            continue;
        }
        let path = entry.path();
        let result = match entry.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        match result {
            Ok(()) => deleted += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %path.display(), "cannot delete: {e}"),
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_cleanup_removes_its_sessions_directories_and_releases_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let per = ember_proto::id_range::IDS_PER_SESSION;
        for session in [1u32, 2, 3] {
            let sub = session_shuffle_dir(dir.path(), IdRange::new(session).unwrap());
            std::fs::create_dir(&sub).unwrap();
            for id in [session * per, session * per + 1] {
                std::fs::write(sub.join(format!("shuffle_{id}_0.data")), b"x").unwrap();
            }
        }
        std::fs::write(dir.path().join("session-x"), b"not a session dir").unwrap();
        // Released shuffles are found in their session's directory.
        assert_eq!(delete_shuffles(dir.path(), &[per + 1, 3 * per, 7]), 2);
        let s1 = session_shuffle_dir(dir.path(), IdRange::new(1).unwrap());
        assert!(s1.join(format!("shuffle_{per}_0.data")).exists());
        assert!(!s1.join(format!("shuffle_{}_0.data", per + 1)).exists());
        // Session 2's range only: its directory goes, 1 and 3 stay.
        assert_eq!(delete_shuffle_range(dir.path(), 2 * per, 3 * per), 1);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["session-1", "session-3", "session-x"]);
        assert_eq!(delete_shuffle_range(dir.path(), 5, 5), 0);
    }

    #[test]
    fn range_cleanup_removes_only_that_range() {
        let dir = tempfile::tempdir().unwrap();
        let names = [
            "shuffle_9_0.data",
            "shuffle_10_0.data",
            "shuffle_10_0.index",
            "shuffle_19_3.index",
            ".shuffle_15_1.data.abc.tmp",
            "shuffle_20_0.data",
            "shuffle_1048576_0.index",
            "unrelated.txt",
        ];
        for n in names {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        assert_eq!(delete_shuffle_range(dir.path(), 10, 20), 4);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "shuffle_1048576_0.index",
                "shuffle_20_0.data",
                "shuffle_9_0.data",
                "unrelated.txt"
            ]
        );
        assert_eq!(delete_all(dir.path()), 4);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(delete_all(&dir.path().join("missing")), 0);
    }
}
