//! Deleting shuffle files from the shuffle directory: those of one ended client session
//! (by shuffle id range), those of shuffles a client released (by id), or all of them
//! when the driver is lost.
//!
//! Invariants: a session cleanup or a release deletes only files whose name parses as
//! a shuffle file (`ember_shuffle::parse_file_name`, including the writers'
//! dot-prefixed temporaries) with a shuffle id in `[id_lo, id_hi)`, or in the released
//! set; nothing from the wire becomes a path (ids are numbers, matched against the names
//! found in the one shuffle directory); nothing here fails the caller: errors are
//! logged and the rest is still deleted. These functions do blocking file I/O.

use std::path::Path;

/// The shuffle id a file in the shuffle directory belongs to, if it is a shuffle file
/// (`shuffle_S_M.data`, an earlier format's `.index`, or a temporary of either, possibly
/// dot-prefixed).
pub fn shuffle_id_of(name: &str) -> Option<u32> {
    ember_shuffle::shuffle_id_of_file(name)
}

/// Deletes the shuffle files of shuffles `[id_lo, id_hi)` in `dir`; returns how many.
pub fn delete_shuffle_range(dir: &Path, id_lo: u32, id_hi: u32) -> usize {
    delete_where(dir, |name| {
        shuffle_id_of(name).is_some_and(|id| id >= id_lo && id < id_hi)
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
    ember_shuffle::remove_shuffle_files(dir, ids)
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
        assert_eq!(delete_shuffles(dir.path(), &[20, 1048576, 5]), 2);
        assert_eq!(delete_all(dir.path()), 2);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(delete_all(&dir.path().join("missing")), 0);
    }
}
