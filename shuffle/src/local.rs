//! Finding a local block: the map output file opened and its index read (once per
//! process, [`crate::index_cache`]), or the block taken from a resident copy of a small
//! output ([`crate::resident`]), and read whole when a caller needs its bytes.
//!
//! Invariant: every failure (missing data file, bad index, no such block, short read,
//! checksum mismatch) is `ShuffleError::FetchFailed` carrying the block's id and a message
//! naming the file, as everywhere on the reduce side; nothing here panics on bad input.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::data_path;
use crate::error::{Result, ShuffleError};
use crate::index::{BlockEntry, IndexFile};
use crate::index_cache::{index_and_key, FileKey};
use crate::reader::{verify_block, BlockId};
use crate::resident::{self, ResidentBlock, ResidentOutput, View};

/// The map output file at `path` opened, with its index and version.
fn open_indexed(id: &BlockId, path: &Path) -> Result<(File, Arc<IndexFile>, FileKey)> {
    let mut file = File::open(path).map_err(|e| data_file_failed(id, path, "cannot open", e))?;
    let (index, key) = index_and_key(&mut file, path).map_err(|e| match e {
        ShuffleError::Io { path, source } => id.fetch_failed(format!(
            "cannot read the index of shuffle data file {}: {source}",
            path.display()
        )),
        other => id.fetch_failed(other.to_string()),
    })?;
    Ok((file, index, key))
}

/// Block `id`'s entry in `index` (of the file at `path`).
fn index_entry(id: &BlockId, path: &Path, index: &IndexFile) -> Result<BlockEntry> {
    entry_of(
        id,
        path,
        index.entry(id.reduce_partition),
        index.num_reduce(),
    )
}

/// Block `id`'s `entry` as looked up in the index (of `num_reduce` blocks) of the file at
/// `path`: a missing one is a `FetchFailed` saying so.
fn entry_of(
    id: &BlockId,
    path: &Path,
    entry: Option<BlockEntry>,
    num_reduce: u32,
) -> Result<BlockEntry> {
    entry.ok_or_else(|| {
        id.fetch_failed(format!(
            "shuffle data file {} has {num_reduce} reduce partitions, block {} does not exist",
            path.display(),
            id.reduce_partition
        ))
    })
}

/// Where a local block's bytes are, with its entry in its map output's index.
pub enum LocalBlock {
    /// A block of no bytes.
    Empty,
    /// In memory, from a resident map output (see [`crate::resident`]; the output's
    /// path is `block.output().path()`).
    Resident(ResidentBlock, BlockEntry),
    /// In the data file at the path, positioned at the block's first byte (read
    /// `entry.len` bytes).
    File(File, PathBuf, BlockEntry),
}

impl LocalBlock {
    /// The block's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            LocalBlock::Empty => 0,
            LocalBlock::Resident(_, e) | LocalBlock::File(_, _, e) => e.len,
        }
    }

    /// Whether the block has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The block's bytes as a reader (read `entry.len` of them), the path of its map
    /// output file and its entry; `None` for an empty block.
    pub fn into_reader(self) -> Option<(Box<dyn Read + Send>, Arc<Path>, BlockEntry)> {
        match self {
            LocalBlock::Empty => None,
            LocalBlock::Resident(block, entry) => {
                let path = block.output().path().clone();
                Some((Box::new(block), path, entry))
            }
            LocalBlock::File(file, path, entry) => Some((Box::new(file), Arc::from(path), entry)),
        }
    }
}

/// Finds local block `id`: in a resident map output when its file is resident in `view`
/// (or small enough to become so now), else in its data file (its length checked
/// against its index, see [`crate::index::IndexFile::read`]).
pub fn open_local_block(view: &View, dir: &Path, id: &BlockId) -> Result<LocalBlock> {
    if let Some(output) = view.get(dir, id.shuffle_id, id.map_partition) {
        return resident_block(id, output);
    }
    let path = data_path(dir, id.shuffle_id, id.map_partition);
    let (file, index, key) = open_indexed(id, &path)?;
    let which = (dir, id.shuffle_id, id.map_partition);
    if let Some(output) = resident::admit(which, &file, &path, key, &index) {
        return resident_block(id, output);
    }
    file_block(id, file, path, &index)
}

/// Block `id` in the open data `file` at `path` with its `index`: positioned at its
/// first byte, or `Empty`.
fn file_block(
    id: &BlockId,
    mut file: File,
    path: PathBuf,
    index: &IndexFile,
) -> Result<LocalBlock> {
    let entry = index_entry(id, &path, index)?;
    if entry.len == 0 {
        return Ok(LocalBlock::Empty);
    }
    file.seek(SeekFrom::Start(entry.offset))
        .map_err(|e| data_file_failed(id, &path, "cannot seek in", e))?;
    Ok(LocalBlock::File(file, path, entry))
}

/// Finds block `id` in its data file in `dir` and nowhere else: for a map output on a
/// shared file system (a stored copy), which the resident outputs' inotify watches would
/// not see change on another host.
pub fn open_file_block(dir: &Path, id: &BlockId) -> Result<LocalBlock> {
    let path = data_path(dir, id.shuffle_id, id.map_partition);
    let (file, index, _) = open_indexed(id, &path)?;
    file_block(id, file, path, &index)
}

/// Block `id` of the resident `output`.
fn resident_block(id: &BlockId, output: Arc<ResidentOutput>) -> Result<LocalBlock> {
    let entry = entry_of(
        id,
        output.path(),
        output.entry(id.reduce_partition),
        output.num_reduce(),
    )?;
    if entry.len == 0 {
        return Ok(LocalBlock::Empty);
    }
    let path = output.path().clone();
    match ResidentBlock::new(output, entry) {
        Some(block) => Ok(LocalBlock::Resident(block, entry)),
        None => Err(id.fetch_failed(format!(
            "block {} of shuffle data file {} lies outside its data",
            id.reduce_partition,
            path.display()
        ))),
    }
}

/// The `FetchFailed` for an I/O error `what` on the data file at `path`.
fn data_file_failed(id: &BlockId, path: &Path, what: &str, e: io::Error) -> ShuffleError {
    id.fetch_failed(format!("{what} shuffle data file {}: {e}", path.display()))
}

/// Reads block `id` from the shuffle files in `dir` and verifies its checksum.
pub fn read_local_block(dir: &Path, id: &BlockId) -> Result<Vec<u8>> {
    let Some((mut reader, path, entry)) = open_local_block(&View::now(), dir, id)?.into_reader()
    else {
        return Ok(Vec::new());
    };
    let len = usize::try_from(entry.len)
        .map_err(|_| id.fetch_failed(format!("block of {} bytes is too large", entry.len)))?;
    let mut bytes = vec![0u8; len];
    reader
        .read_exact(&mut bytes)
        .map_err(|e| data_file_failed(id, &path, "short read of", e))?;
    verify_block(id, &path.display().to_string(), &bytes, entry.crc)?;
    Ok(bytes)
}
