//! ember's shuffle format (sort shuffle): how map output is laid out on disk and read
//! back. Map tasks write with it; executors serve blocks from it.
//!
//! Every map task of a shuffle writes exactly one data file and one index file into a
//! shuffle directory (see [`index`] for the byte layout of both):
//!
//! * `shuffle_{shuffle_id}_{map_partition}.data`: one block per reduce partition, blocks
//!   contiguous and in reduce-partition order; a block is a sequence of lz4 frames of
//!   postcard records ([`frame`]).
//! * `shuffle_{shuffle_id}_{map_partition}.index`: offset, length and crc32 of every block.
//!
//! Modules: [`frame`] (record/frame codec shared by both sides), [`writer`] (map side,
//! with spill), [`reader`] (reduce side: local block reads, checksum verification, record
//! decoding; every failure is a typed `FetchFailed`), [`index`] (index file format).
//! Which reducer a record goes to (partitioners) is the job library's business.
//!
//! Invariants: both files are written under temporary names and renamed into place, data
//! first, index last, so the presence of an index file means the map output is complete.
//! Only this crate knows these file names; callers go through [`data_path`] and
//! [`index_path`].

mod error;
pub mod frame;
pub mod index;
pub mod reader;
pub mod writer;

use std::path::{Path, PathBuf};

pub use error::{Result, ShuffleError};
pub use frame::{FrameDecoder, FrameEncoder, FRAME_TARGET_BYTES};
pub use index::{BlockEntry, IndexFile};
pub use reader::{open_block_records, read_local_block, BlockId, BlockRecords};
pub use writer::{MapOutput, ShuffleWriter};

/// Path of the data file of map task `map_partition` of shuffle `shuffle_id` in `dir`.
pub fn data_path(dir: &Path, shuffle_id: u32, map_partition: u32) -> PathBuf {
    dir.join(format!("shuffle_{shuffle_id}_{map_partition}.data"))
}

/// Path of the index file of map task `map_partition` of shuffle `shuffle_id` in `dir`.
pub fn index_path(dir: &Path, shuffle_id: u32, map_partition: u32) -> PathBuf {
    dir.join(format!("shuffle_{shuffle_id}_{map_partition}.index"))
}

/// The (shuffle id, map partition) of a shuffle file name (`shuffle_S_M.data` or
/// `.index`, or a temporary file of one), or `None` for any other name.
pub fn parse_file_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix("shuffle_")?;
    let mut parts = rest.splitn(3, ['_', '.']);
    let shuffle_id = parts.next()?.parse().ok()?;
    let map_partition = parts.next()?.parse().ok()?;
    Some((shuffle_id, map_partition))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_naming_scheme() {
        let dir = Path::new("/tmp/x");
        assert_eq!(data_path(dir, 3, 1), Path::new("/tmp/x/shuffle_3_1.data"));
        assert_eq!(index_path(dir, 3, 1), Path::new("/tmp/x/shuffle_3_1.index"));
    }

    #[test]
    fn file_names_parse_back() {
        let dir = Path::new("/tmp/x");
        for p in [data_path(dir, 1048577, 12), index_path(dir, 1048577, 12)] {
            let name = p.file_name().unwrap().to_str().unwrap();
            assert_eq!(parse_file_name(name), Some((1048577, 12)));
        }
        assert_eq!(parse_file_name("shuffle_3_4.data.tmp-1"), Some((3, 4)));
        assert_eq!(parse_file_name("spill-3"), None);
        assert_eq!(parse_file_name("shuffle_x_4.data"), None);
    }
}
