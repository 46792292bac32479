//! ember's shuffle format (sort shuffle): how map output is laid out on disk and read
//! back. Map tasks write with it; executors serve blocks from it.
//!
//! Every map task of a shuffle writes exactly one file into a shuffle directory (see
//! [`index`] for its byte layout), `shuffle_{shuffle_id}_{map_partition}.data`: one block
//! per reduce partition, blocks contiguous and in reduce-partition order (a block is a
//! sequence of lz4 frames of postcard records, [`frame`]), then the index: offset, length
//! and crc32 of every block.
//!
//! Modules: [`frame`] (record/frame codec shared by both sides), [`writer`] (map side,
//! with spill), [`reader`] (reduce side: local block reads, checksum verification, record
//! decoding; every failure is a typed `FetchFailed`), [`index`] (the file format and its index),
//! [`index_cache`] (parsed indexes kept per process, keyed by the file's inode and version),
//! [`cold_copy`] (copies kept for a lost writer, written past the page cache),
//! [`local`] (finding a local block: its file and index, or its resident copy),
//! [`resident`] (small map outputs' blocks kept in memory per process, served only while
//! the file is unchanged).
//! Which reducer a record goes to (partitioners) is the job library's business.
//!
//! Invariants: the file is written under a temporary name and renamed into place whole,
//! so the presence of a data file means the map output is complete. Only this crate
//! knows these file names; callers go through [`data_path`] and [`remove_shuffle_files`]
//! (deleting a released shuffle's files), and [`cached_block_path`] for the one other kind
//! of file a session's shuffle directory holds: cached partitions moved between executors.

pub mod codec;
pub mod cold_copy;
mod error;
pub mod frame;
pub mod index;
pub mod index_cache;
pub mod local;
pub mod reader;
pub mod resident;
#[cfg(test)]
mod test_output;
pub mod writer;

use std::path::{Path, PathBuf};

pub use error::{Result, ShuffleError};
pub use frame::{FrameDecoder, FrameEncoder, FRAME_TARGET_BYTES};
pub use index::{BlockEntry, IndexFile};
pub use reader::{
    open_block_records, open_file_block_records, read_local_block, BlockId, BlockRecords,
};
pub use writer::{MapOutput, ShuffleWriter};

/// Path of the map output file (blocks and index) of map task `map_partition` of shuffle
/// `shuffle_id` in `dir`.
pub fn data_path(dir: &Path, shuffle_id: u32, map_partition: u32) -> PathBuf {
    dir.join(data_file_name(shuffle_id, map_partition))
}

/// The name of that file (`shuffle_S_M.data`), as an object name under a stored prefix
/// too.
pub fn data_file_name(shuffle_id: u32, map_partition: u32) -> String {
    format!("shuffle_{shuffle_id}_{map_partition}.data")
}

/// Path of a cached RDD partition moved to this executor (or written to be moved off
/// it) in a session's shuffle directory `dir`: `rdd_R_P.cached`. Its content is the job
/// library's; the shuffle service only stores, pushes and deletes it. Not a shuffle file:
/// [`remove_shuffle_files`] never touches it.
pub fn cached_block_path(dir: &Path, rdd_id: u32, partition: u32) -> PathBuf {
    dir.join(format!("rdd_{rdd_id}_{partition}.cached"))
}

/// The (rdd id, partition) of a [`cached_block_path`] file name, or `None`.
pub fn parse_cached_block_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix("rdd_")?.strip_suffix(".cached")?;
    let (rdd, part) = rest.split_once('_')?;
    Some((rdd.parse().ok()?, part.parse().ok()?))
}

/// The (shuffle id, map partition) of a shuffle file name (`shuffle_S_M.data`, a
/// temporary file of one, or an earlier format's `.index`), or `None` for any other name.
pub fn parse_file_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix("shuffle_")?;
    let mut parts = rest.splitn(3, ['_', '.']);
    let shuffle_id = parts.next()?.parse().ok()?;
    let map_partition = parts.next()?.parse().ok()?;
    Some((shuffle_id, map_partition))
}

/// The shuffle id of a file in a shuffle directory: a shuffle file or a writer's
/// temporary of one (possibly dot-prefixed, as `tempfile` names them); `None` for any
/// other name.
pub fn shuffle_id_of_file(name: &str) -> Option<u32> {
    let name = name.strip_prefix('.').unwrap_or(name);
    parse_file_name(name).map(|(shuffle_id, _)| shuffle_id)
}

/// Deletes from `dir` every file of the shuffles `shuffle_ids` (data files and
/// temporaries, found by name with [`shuffle_id_of_file`]; nothing else is touched, no
/// subdirectory is entered); returns how many files went. Errors are logged, never
/// returned: what can be deleted is. Blocking file I/O.
pub fn remove_shuffle_files(dir: &Path, shuffle_ids: &[u32]) -> usize {
    if shuffle_ids.is_empty() {
        return 0;
    }
    resident::forget_shuffles(dir, shuffle_ids);
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "cannot list the shuffle directory: {e}");
            return 0;
        }
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let hit = name
            .to_str()
            .and_then(shuffle_id_of_file)
            .is_some_and(|id| shuffle_ids.contains(&id));
        if !hit || entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %entry.path().display(), "cannot delete: {e}"),
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_naming_scheme() {
        let dir = Path::new("/tmp/x");
        assert_eq!(data_path(dir, 3, 1), Path::new("/tmp/x/shuffle_3_1.data"));
    }

    #[test]
    fn file_names_parse_back() {
        let dir = Path::new("/tmp/x");
        let p = data_path(dir, 1048577, 12);
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(parse_file_name(name), Some((1048577, 12)));
        assert_eq!(
            parse_file_name("shuffle_1048577_12.index"),
            Some((1048577, 12))
        );
        assert_eq!(parse_file_name("shuffle_3_4.data.tmp-1"), Some((3, 4)));
        assert_eq!(parse_file_name("spill-3"), None);
        assert_eq!(parse_file_name("shuffle_x_4.data"), None);
    }

    #[test]
    fn cached_block_names_parse_back_and_are_no_shuffle_files() {
        let p = cached_block_path(Path::new("/tmp/x"), 1048577, 12);
        assert_eq!(p, Path::new("/tmp/x/rdd_1048577_12.cached"));
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(parse_cached_block_name(name), Some((1048577, 12)));
        assert_eq!(parse_file_name(name), None);
        assert_eq!(shuffle_id_of_file(name), None);
        assert_eq!(parse_cached_block_name("rdd_1_2.data"), None);
        assert_eq!(parse_cached_block_name("rdd_1.cached"), None);
        assert_eq!(parse_cached_block_name("rdd_1_x.cached"), None);
    }

    #[test]
    fn removing_shuffles_deletes_only_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let names = [
            "shuffle_3_0.data",
            "shuffle_3_0.index",
            "shuffle_3_1.data",
            ".shuffle_3_2.data.abc.tmp",
            "shuffle_30_0.data",
            "shuffle_4_0.index",
            "spill-3",
            "3",
        ];
        for n in names {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        std::fs::create_dir(dir.path().join("shuffle_3_9.data")).unwrap();
        assert_eq!(remove_shuffle_files(dir.path(), &[3, 7]), 4);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "3",
                "shuffle_30_0.data",
                "shuffle_3_9.data",
                "shuffle_4_0.index",
                "spill-3"
            ]
        );
        assert_eq!(remove_shuffle_files(&dir.path().join("missing"), &[3]), 0);
    }
}
