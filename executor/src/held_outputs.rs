//! The map outputs this executor holds from an earlier registration: what it tells a
//! driver it registers with again (a restarted driver rebuilds its map-output tracker
//! from these reports, so finished stages are not run again). Only sessions whose key
//! this executor holds are reported (the registration sends each key's digest with
//! them); another session directory is an earlier session's that nothing can claim, and
//! is deleted.
//!
//! Invariants: only committed map output files are reported (a session directory's
//! files named exactly `shuffle_S_M.data`, renamed into place whole by their writer,
//! never a temporary), each only if its shuffle id lies in its directory's session
//! id range and its index reads and checks (`ember_shuffle::IndexFile`: the blocks end
//! where the index starts); the block sizes are the file's own index, so what a
//! reducer is told matches what it will read. A file that does not check is left
//! alone and not reported (a reducer would fail on it; lineage recomputes it). At most
//! [`MAX_HELD_OUTPUTS`] outputs are reported. These functions do blocking file I/O.

use std::path::Path;

use ember_proto::{HeldOutput, IdRange};

use crate::config::session_of_dir;

/// Most outputs one report lists (an executor holding more reports the first found;
/// the rest are recomputed if needed).
pub use ember_proto::limits::MAX_HELD_OUTPUTS;

/// Every committed map output under shuffle directory `dir` (`session-<i>/`) of the
/// sessions `known` (whose keys this executor holds), in (shuffle, map) order; the
/// directories of other sessions are deleted (nothing can claim them).
pub fn scan(dir: &Path, known: &[IdRange]) -> Vec<HeldOutput> {
    let mut held = Vec::new();
    let Ok(sessions) = std::fs::read_dir(dir) else {
        return held;
    };
    for entry in sessions.flatten() {
        let name = entry.file_name();
        let Some(range) = name
            .to_str()
            .and_then(session_of_dir)
            .and_then(IdRange::new)
        else {
            continue;
        };
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if !known.contains(&range) {
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(dir = %entry.path().display(), "cannot delete: {e}");
            }
            continue;
        }
        scan_session(&entry.path(), range, &mut held);
        if held.len() >= MAX_HELD_OUTPUTS {
            tracing::warn!(
                "more than {MAX_HELD_OUTPUTS} map outputs held; reporting the first found"
            );
            held.truncate(MAX_HELD_OUTPUTS);
            break;
        }
    }
    held.sort_unstable_by_key(|o| (o.shuffle_id, o.map_partition));
    held
}

fn scan_session(dir: &Path, range: IdRange, held: &mut Vec<HeldOutput>) {
    let Ok(files) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in files.flatten() {
        if held.len() >= MAX_HELD_OUTPUTS {
            return;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((shuffle_id, map_partition)) = ember_shuffle::parse_file_name(name) else {
            continue;
        };
        if name != ember_shuffle::data_file_name(shuffle_id, map_partition)
            || IdRange::of_id(shuffle_id) != range
        {
            continue;
        }
        let path = entry.path();
        match ember_shuffle::IndexFile::read(&path) {
            Ok(index) => held.push(HeldOutput {
                shuffle_id,
                map_partition,
                block_sizes: index.entries().iter().map(|e| e.len).collect(),
            }),
            Err(e) => tracing::warn!("not reporting a map output that does not check: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::session_shuffle_dir;
    use ember_shuffle::BlockEntry;

    /// A map output file of blocks of `sizes` bytes, with its index.
    fn output(dir: &Path, name: &str, sizes: &[u64]) {
        let mut bytes = Vec::new();
        let mut entries = Vec::new();
        for &len in sizes {
            let block = vec![7u8; len as usize];
            entries.push(BlockEntry {
                offset: bytes.len() as u64,
                len,
                crc: if len == 0 { 0 } else { crc32fast::hash(&block) },
            });
            bytes.extend_from_slice(&block);
        }
        bytes.extend_from_slice(&ember_shuffle::IndexFile::encode(&entries));
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    #[test]
    fn committed_outputs_of_each_session_are_reported_with_their_index_sizes() {
        let root = tempfile::tempdir().unwrap();
        let (one, two) = (IdRange::new(1).unwrap(), IdRange::new(2).unwrap());
        let (d1, d2) = (
            session_shuffle_dir(root.path(), one),
            session_shuffle_dir(root.path(), two),
        );
        std::fs::create_dir_all(&d1).unwrap();
        std::fs::create_dir_all(&d2).unwrap();
        let s1 = one.ids().start + 3;
        let s2 = two.ids().start;
        output(&d1, &format!("shuffle_{s1}_1.data"), &[5, 0, 9]);
        output(&d1, &format!("shuffle_{s1}_0.data"), &[1, 2, 3]);
        output(&d2, &format!("shuffle_{s2}_4.data"), &[4]);
        // Not reported: a temporary, another session's id, a file that does not check,
        // a file outside any session directory.
        output(&d1, &format!(".shuffle_{s1}_2.data.tmp"), &[1]);
        output(&d1, &format!("shuffle_{s2}_0.data"), &[1]);
        std::fs::write(d1.join(format!("shuffle_{s1}_3.data")), b"not an output").unwrap();
        output(root.path(), &format!("shuffle_{s1}_5.data"), &[1]);
        // Session 3's key is not known here: its directory goes.
        let d3 = session_shuffle_dir(root.path(), IdRange::new(3).unwrap());
        std::fs::create_dir_all(&d3).unwrap();
        output(
            &d3,
            &format!("shuffle_{}_0.data", IdRange::new(3).unwrap().ids().start),
            &[1],
        );
        let held = scan(root.path(), &[one, two]);
        let got: Vec<(u32, u32, Vec<u64>)> = held
            .into_iter()
            .map(|o| (o.shuffle_id, o.map_partition, o.block_sizes))
            .collect();
        assert_eq!(
            got,
            vec![
                (s1, 0, vec![1, 2, 3]),
                (s1, 1, vec![5, 0, 9]),
                (s2, 4, vec![4]),
            ]
        );
        assert!(!d3.exists(), "an unclaimable session directory is deleted");
        assert!(scan(&root.path().join("missing"), &[one]).is_empty());
    }
}
