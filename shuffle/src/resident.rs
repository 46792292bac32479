//! Resident map outputs: a process-wide, byte-bounded cache of the blocks of small map
//! output files, so that a reducer reading one tiny block from each of many outputs (a
//! wide shuffle: 1,000 maps x 1,000 reducers is a million blocks of a few bytes) reads
//! memory instead of paying open, fstat, seek, read and close for every block.
//!
//! An output becomes resident when a reader first opens it (its data section, at most
//! [`MAX_OUTPUT_BYTES`], read in one `pread` from the file the index was read from);
//! later readers of any of its blocks in this process take them from memory.
//!
//! Invariants:
//! - An entry is served only after a `stat` of its path reports the very file and version
//!   the bytes were read from ([`FileKey`]: device, inode, length, modification time), so a
//!   deleted output, or one replaced by a rerun map task (renamed over it: another inode),
//!   is never served from memory: the reader falls back to the file and fails, or reads
//!   the new output, exactly as without this cache. Bytes served from here are
//!   crc-checked per block as they decode, as bytes read from the file are.
//! - The cache holds at most [`MAX_BYTES`] (data plus a compact index); an output that
//!   would exceed it is not admitted and is read from its file.
//! - [`forget_shuffles`] drops a removed shuffle's outputs, so memory follows the files.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};

use crate::index::{BlockEntry, IndexFile};
use crate::index_cache::FileKey;

/// The largest data section (all blocks of one map output) kept in memory: 256 KiB.
pub const MAX_OUTPUT_BYTES: u64 = 256 * 1024;
/// What all resident outputs may take together: 32 MiB.
pub const MAX_BYTES: usize = 32 << 20;

/// One map output's blocks and index, as read from the file `key` names.
pub struct ResidentOutput {
    key: FileKey,
    /// Block `r` is `data[starts[r]..starts[r + 1]]` (`starts` has one more entry than
    /// there are blocks; offsets fit in u32 as the data is at most MAX_OUTPUT_BYTES).
    starts: Vec<u32>,
    crcs: Vec<u32>,
    data: Vec<u8>,
}

impl ResidentOutput {
    /// How many blocks (reduce partitions) the output has.
    pub fn num_reduce(&self) -> u32 {
        self.crcs.len() as u32
    }

    /// Block `reduce`'s entry, as the file's index has it; `None` past the last block.
    pub fn entry(&self, reduce: u32) -> Option<BlockEntry> {
        let r = reduce as usize;
        let crc = *self.crcs.get(r)?;
        let (start, end) = (self.starts[r], self.starts[r + 1]);
        Some(BlockEntry {
            offset: u64::from(start),
            len: u64::from(end - start),
            crc,
        })
    }

    fn cost(&self) -> usize {
        self.data.len() + (self.starts.len() + self.crcs.len()) * 4 + 128
    }
}

#[derive(Default)]
struct Table {
    outputs: HashMap<PathBuf, Arc<ResidentOutput>>,
    bytes: usize,
}

fn table() -> &'static RwLock<Table> {
    static TABLE: OnceLock<RwLock<Table>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// The resident output for the map output file at `path`, if it is resident and the file
/// there is still the one its bytes were read from.
pub fn get(path: &Path) -> Option<Arc<ResidentOutput>> {
    let out = table()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .outputs
        .get(path)?
        .clone();
    let meta = std::fs::metadata(path).ok()?;
    (FileKey::of(&meta) == out.key).then_some(out)
}

/// Makes the map output open as `file` (at `path`, of version `key`, with `index`, a
/// checked one: contiguous blocks ending where the index starts) resident if it is small
/// enough and the cache has room: reads its data section whole. `None` (and nothing
/// kept) for a larger output, a full cache, or when the read fails; the caller reads the
/// file instead. A full cache is not emptied for newcomers: a wide shuffle's reducers
/// read every output in turn, which would evict each one just before its next read.
pub fn admit(
    file: &File,
    path: &Path,
    key: FileKey,
    index: &IndexFile,
) -> Option<Arc<ResidentOutput>> {
    let len = index.data_len();
    let n = index.entries().len();
    if len > MAX_OUTPUT_BYTES || n < 2 {
        return None;
    }
    let cost = len as usize + (2 * n + 1) * 4 + 128;
    if table().read().unwrap_or_else(|p| p.into_inner()).bytes + cost > MAX_BYTES {
        return None;
    }
    // Bounded by MAX_OUTPUT_BYTES above, so every offset fits in u32.
    let mut data = vec![0u8; len as usize];
    file.read_exact_at(&mut data, 0).ok()?;
    let mut starts = Vec::with_capacity(n + 1);
    starts.extend(index.entries().iter().map(|e| e.offset as u32));
    starts.push(len as u32);
    let crcs = index.entries().iter().map(|e| e.crc).collect();
    let out = Arc::new(ResidentOutput {
        key,
        starts,
        crcs,
        data,
    });
    debug_assert_eq!(out.cost(), cost);
    let mut t = table().write().unwrap_or_else(|p| p.into_inner());
    if t.bytes + cost > MAX_BYTES {
        return None;
    }
    if let Some(old) = t.outputs.insert(path.to_path_buf(), out.clone()) {
        t.bytes -= old.cost();
    }
    t.bytes += cost;
    Some(out)
}

/// Drops the resident outputs of shuffles `shuffle_ids` in `dir` (their files are being
/// removed).
pub fn forget_shuffles(dir: &Path, shuffle_ids: &[u32]) {
    let mut t = table().write().unwrap_or_else(|p| p.into_inner());
    let mut freed = 0;
    t.outputs.retain(|path, out| {
        let gone = path.parent() == Some(dir)
            && path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(crate::parse_file_name)
                .is_some_and(|(s, _)| shuffle_ids.contains(&s));
        if gone {
            freed += out.cost();
        }
        !gone
    });
    t.bytes -= freed;
}

/// The bytes a resident output's block `entry` covers, read like a file.
pub struct ResidentBlock {
    output: Arc<ResidentOutput>,
    pos: usize,
    end: usize,
}

impl ResidentBlock {
    /// Block `entry` of `output`; `None` if the entry lies outside the data (an index
    /// checked when read never has such an entry).
    pub fn new(output: Arc<ResidentOutput>, entry: BlockEntry) -> Option<ResidentBlock> {
        let pos = usize::try_from(entry.offset).ok()?;
        let end = pos.checked_add(usize::try_from(entry.len).ok()?)?;
        (end <= output.data.len()).then_some(ResidentBlock { output, pos, end })
    }
}

impl Read for ResidentBlock {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.end - self.pos);
        buf[..n].copy_from_slice(&self.output.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index_cache::index_and_key;
    use std::io::Write;

    fn write_output(path: &Path, blocks: &[&[u8]]) {
        let tmp = path.with_extension("tmp");
        let mut f = File::create(&tmp).unwrap();
        let mut entries = Vec::new();
        let mut offset = 0;
        for b in blocks {
            f.write_all(b).unwrap();
            entries.push(BlockEntry {
                offset,
                len: b.len() as u64,
                crc: crc32fast::hash(b),
            });
            offset += b.len() as u64;
        }
        f.write_all(&IndexFile::encode(&entries)).unwrap();
        drop(f);
        std::fs::rename(&tmp, path).unwrap();
    }

    fn admit_path(path: &Path) -> Option<Arc<ResidentOutput>> {
        let mut f = File::open(path).unwrap();
        let (index, key) = index_and_key(&mut f, path).unwrap();
        admit(&f, path, key, &index)
    }

    fn block(out: Arc<ResidentOutput>, r: u32) -> Vec<u8> {
        let entry = out.entry(r).unwrap();
        let mut bytes = Vec::new();
        ResidentBlock::new(out, entry)
            .unwrap()
            .read_to_end(&mut bytes)
            .unwrap();
        bytes
    }

    #[test]
    fn served_only_while_the_file_is_the_one_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = crate::data_path(dir.path(), 7, 0);
        write_output(&path, &[b"abc", b"", b"de"]);
        admit_path(&path).unwrap();
        let out = get(&path).expect("resident after the first read");
        assert_eq!(block(out.clone(), 0), b"abc");
        assert_eq!(block(out, 2), b"de");
        // A rerun map task renames another output over it: the old bytes are not served.
        write_output(&path, &[b"xyz", b"12", b"3"]);
        assert!(get(&path).is_none());
        admit_path(&path).unwrap();
        assert_eq!(block(get(&path).unwrap(), 1), b"12");
        // A deleted output is not served either.
        std::fs::remove_file(&path).unwrap();
        assert!(get(&path).is_none());
    }

    #[test]
    fn a_removed_shuffle_is_forgotten_and_large_outputs_stay_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let small = crate::data_path(dir.path(), 8, 0);
        let other = crate::data_path(dir.path(), 9, 0);
        write_output(&small, &[b"a", b"b"]);
        write_output(&other, &[b"c", b"d"]);
        admit_path(&small).unwrap();
        admit_path(&other).unwrap();
        forget_shuffles(dir.path(), &[8]);
        assert!(table().read().unwrap().outputs.get(&small).is_none());
        assert!(get(&other).is_some());
        let big = crate::data_path(dir.path(), 10, 0);
        let half = vec![7u8; MAX_OUTPUT_BYTES as usize / 2 + 1];
        write_output(&big, &[&half, &half]);
        assert!(admit_path(&big).is_none());
        assert!(get(&big).is_none());
    }
}
