//! `storage:s3://...` shuffle durability: map output copies as objects under the
//! application's prefix, one "directory" per shuffle (`shuffle-S/shuffle_S_M.data`), so a
//! released shuffle's copies go with one prefix delete.
//!
//! Invariants:
//! * A copy is uploaded whole (`io::storage::upload_file`: an object appears complete or
//!   not at all) before its map task reports `MapStatus::stored`.
//! * A reducer reads a block of a copy in three ranged requests: the index's tail, the
//!   index (its length from the tail, bounded by the object's), then the block (inside
//!   the blocks the index describes); the block's crc32 is checked before any record is
//!   decoded. Whatever is missing, short or damaged is a fetch failure naming the object,
//!   after which the scheduler falls back to lineage.
//! * The bytes are the local output's, byte for byte, as with a directory.

use std::path::Path;

use ember_shuffle::{BlockId, BlockRecords, IndexFile, ShuffleError};
use serde::de::DeserializeOwned;

use crate::error::Result;
use crate::io::storage::{ObjectUrl, RemoteFile};

/// The object of map output `map` of `shuffle_id` under the stored prefix `prefix`.
pub(crate) fn copy_url(prefix: &ObjectUrl, shuffle_id: u32, map: u32) -> ObjectUrl {
    prefix
        .join(&format!("shuffle-{shuffle_id}"))
        .join(&ember_shuffle::data_file_name(shuffle_id, map))
}

/// Uploads map output `map` of `shuffle_id` from `shuffle_dir` to `prefix`.
pub(crate) fn upload_copy(
    shuffle_dir: &Path,
    prefix: &Path,
    shuffle_id: u32,
    map: u32,
) -> Result<()> {
    let url = copy_url(&ObjectUrl::parse(prefix)?, shuffle_id, map);
    let from = ember_shuffle::data_path(shuffle_dir, shuffle_id, map);
    crate::io::storage::upload_file(&from, &url)
}

/// Deletes the copies of `shuffle_ids` under `prefix`; how many shuffles' went.
pub(crate) fn delete_copies(prefix: &Path, shuffle_ids: &[u32]) -> usize {
    let Ok(prefix) = ObjectUrl::parse(prefix) else {
        return 0;
    };
    shuffle_ids
        .iter()
        .filter(|id| {
            let url = prefix.join(&format!("shuffle-{id}"));
            match crate::io::storage::delete_prefix(&url) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!("removing the stored copies under {url}: {e}");
                    false
                }
            }
        })
        .count()
}

/// The records of block `id` of its map output's copy under `prefix`, checked.
pub(crate) fn open_copy_block<T: DeserializeOwned>(
    prefix: &Path,
    id: &BlockId,
) -> std::result::Result<BlockRecords<T>, ShuffleError> {
    let url = ObjectUrl::parse(prefix)
        .map(|p| copy_url(&p, id.shuffle_id, id.map_partition))
        .map_err(|e| id.fetch_failed(format!("stored copy under {}: {e}", prefix.display())))?;
    let fail = |m: String| id.fetch_failed(format!("stored copy {url}: {m}"));
    let file = RemoteFile::open(&url).map_err(|e| fail(e.to_string()))?;
    let n = file.len();
    let tail_bytes = ember_shuffle::index::TAIL_BYTES as u64;
    if n < tail_bytes {
        return Err(fail(format!("{n} bytes, shorter than any index")));
    }
    let what = url.to_string();
    let tail = file
        .range(n - tail_bytes, tail_bytes)
        .map_err(|e| fail(e.to_string()))?;
    let index_len = IndexFile::len_from_tail(&tail, &what).map_err(|e| fail(e.to_string()))?;
    if index_len > n {
        return Err(fail(format!(
            "its index claims {index_len} bytes of a {n}-byte object"
        )));
    }
    let index_bytes = file
        .range(n - index_len, index_len)
        .map_err(|e| fail(e.to_string()))?;
    let index = IndexFile::decode(&index_bytes, &what).map_err(|e| fail(e.to_string()))?;
    let Some(entry) = index.entry(id.reduce_partition) else {
        return Err(fail(format!(
            "no block for reduce partition {} ({} blocks)",
            id.reduce_partition,
            index.num_reduce()
        )));
    };
    if entry.offset.saturating_add(entry.len) > n - index_len {
        return Err(fail(format!(
            "block {} claims bytes {}..{} past the blocks' end {}",
            id.reduce_partition,
            entry.offset,
            entry.offset.saturating_add(entry.len),
            n - index_len
        )));
    }
    if entry.len == 0 {
        return Ok(BlockRecords::from_bytes(id.clone(), Vec::new()));
    }
    let bytes = file
        .range(entry.offset, entry.len)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 != entry.len {
        return Err(fail(format!(
            "block {} is {} bytes, the index says {}",
            id.reduce_partition,
            bytes.len(),
            entry.len
        )));
    }
    let crc = crc32fast::hash(&bytes);
    if crc != entry.crc {
        return Err(fail(format!(
            "block {} checksum mismatch: expected {:08x} got {crc:08x}",
            id.reduce_partition, entry.crc
        )));
    }
    Ok(BlockRecords::from_bytes(id.clone(), bytes.to_vec()))
}
