//! The shuffle index file, and the on-disk format of a map task's two shuffle files.
//!
//! A map task of shuffle `S` with map partition `M` and `R` reducers writes, in its
//! shuffle directory:
//!
//! **`shuffle_S_M.data`**: the concatenation of `R` blocks, block `r` holding every record
//! the task sent to reduce partition `r`, blocks in reducer order with no gaps or padding.
//! An empty block has zero bytes. A block is a sequence of frames (see `frame.rs`):
//!
//! ```text
//! block := frame*
//! frame := u32 LE uncompressed_len | u32 LE compressed_len | lz4 block (compressed_len bytes)
//! lz4 block decompresses to postcard-encoded records, back to back, none split across frames
//! ```
//!
//! **`shuffle_S_M.index`** (`16 + 20 * R` bytes, all integers little-endian):
//!
//! ```text
//! offset        size  field
//! 0             8     magic  b"EMBIDX01"
//! 8             4     u32 R  number of reduce partitions
//! 12 + 20*r     8     u64    offset of block r in the data file
//! 20 + 20*r     8     u64    length of block r in bytes (0 for an empty block)
//! 28 + 20*r     4     u32    crc32 (IEEE, crc32fast) of block r's bytes (0 for empty)
//! 12 + 20*R     4     u32    crc32 of bytes [0, 12 + 20*R) of this file
//! ```
//!
//! Invariants checked by [`IndexFile::read`]: magic, exact file length for `R`, trailing
//! crc, and contiguity (`offset[0] == 0`, `offset[r+1] == offset[r] + len[r]`), so the
//! data file's length is the sum of the block lengths. Every violation is
//! `ShuffleError::Corrupt` naming the file.
//!
//! Commit protocol (writer side): the data file is written under a temporary name and
//! renamed into place, then the index likewise ([`IndexFile::write`] is itself atomic).
//! A reader that finds the index may therefore rely on the data file being complete.
//! No fsync: a machine crash may lose shuffle output, which the scheduler recomputes.

use std::io::Write;
use std::path::Path;

use crate::error::{Result, ShuffleError};

/// First eight bytes of every index file (format version 01).
pub const INDEX_MAGIC: [u8; 8] = *b"EMBIDX01";
const HEADER_BYTES: usize = 12;
const ENTRY_BYTES: usize = 20;
const TRAILER_BYTES: usize = 4;

/// Where one reducer's block lies in the data file, and its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockEntry {
    /// Byte offset of the block in the data file.
    pub offset: u64,
    /// Length of the block in bytes.
    pub len: u64,
    /// crc32 of the block's bytes (`crc32fast::hash`); 0 for an empty block.
    pub crc: u32,
}

/// A parsed, validated index file: one [`BlockEntry`] per reduce partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFile {
    entries: Vec<BlockEntry>,
}

impl IndexFile {
    /// Writes `entries` as an index file at `path`, atomically: written to a temporary file
    /// in the same directory, then renamed over `path`.
    pub fn write(path: &Path, entries: &[BlockEntry]) -> Result<()> {
        debug_assert!(
            check_contiguous(entries).is_ok(),
            "non-contiguous index entries"
        );
        let bytes = Self::encode(entries);
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.", name.as_deref().unwrap_or("index")))
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| ShuffleError::io(dir, e))?;
        tmp.write_all(&bytes)
            .map_err(|e| ShuffleError::io(tmp.path(), e))?;
        tmp.persist(path)
            .map_err(|e| ShuffleError::io(path, e.error))?;
        Ok(())
    }

    /// Reads and validates the index file at `path`. A missing or unreadable file is
    /// `ShuffleError::Io`; a malformed one is `ShuffleError::Corrupt`, both naming `path`.
    pub fn read(path: &Path) -> Result<IndexFile> {
        let bytes = std::fs::read(path).map_err(|e| ShuffleError::io(path, e))?;
        Self::decode(&bytes, &path.display().to_string())
    }

    /// The index file bytes for `entries`.
    pub fn encode(entries: &[BlockEntry]) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(HEADER_BYTES + ENTRY_BYTES * entries.len() + TRAILER_BYTES);
        out.extend_from_slice(&INDEX_MAGIC);
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for e in entries {
            out.extend_from_slice(&e.offset.to_le_bytes());
            out.extend_from_slice(&e.len.to_le_bytes());
            out.extend_from_slice(&e.crc.to_le_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses and validates index bytes; `what` names their origin in errors.
    pub fn decode(bytes: &[u8], what: &str) -> Result<IndexFile> {
        let corrupt = |message: String| ShuffleError::Corrupt {
            what: format!("shuffle index {what}"),
            message,
        };
        if bytes.len() < HEADER_BYTES + TRAILER_BYTES {
            return Err(corrupt(format!(
                "file is {} bytes, shorter than any index",
                bytes.len()
            )));
        }
        if bytes[..8] != INDEX_MAGIC {
            return Err(corrupt(format!("bad magic {:02x?}", &bytes[..8])));
        }
        let n = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as u64;
        let expected = (HEADER_BYTES + TRAILER_BYTES) as u64 + n * ENTRY_BYTES as u64;
        if bytes.len() as u64 != expected {
            return Err(corrupt(format!(
                "file is {} bytes, but {n} reducers need {expected} (truncated?)",
                bytes.len()
            )));
        }
        let body = &bytes[..bytes.len() - TRAILER_BYTES];
        let stored = u32::from_le_bytes(bytes[body.len()..].try_into().unwrap());
        let actual = crc32fast::hash(body);
        if stored != actual {
            return Err(corrupt(format!(
                "index checksum mismatch: expected {stored:08x} got {actual:08x}"
            )));
        }
        let entries: Vec<BlockEntry> = body[HEADER_BYTES..]
            .chunks_exact(ENTRY_BYTES)
            .map(|c| BlockEntry {
                offset: u64::from_le_bytes(c[..8].try_into().unwrap()),
                len: u64::from_le_bytes(c[8..16].try_into().unwrap()),
                crc: u32::from_le_bytes(c[16..20].try_into().unwrap()),
            })
            .collect();
        check_contiguous(&entries).map_err(corrupt)?;
        Ok(IndexFile { entries })
    }

    /// Number of reduce partitions (blocks).
    pub fn num_reduce(&self) -> u32 {
        self.entries.len() as u32
    }

    /// The block of reduce partition `reduce`, or `None` if out of range.
    pub fn entry(&self, reduce: u32) -> Option<BlockEntry> {
        self.entries.get(reduce as usize).copied()
    }

    /// All entries, in reducer order.
    pub fn entries(&self) -> &[BlockEntry] {
        &self.entries
    }

    /// Length the data file must have: the sum of all block lengths.
    pub fn data_len(&self) -> u64 {
        self.entries.last().map_or(0, |e| e.offset + e.len)
    }
}

fn check_contiguous(entries: &[BlockEntry]) -> std::result::Result<(), String> {
    let mut next = 0u64;
    for (r, e) in entries.iter().enumerate() {
        if e.offset != next {
            return Err(format!(
                "block {r} starts at {} but the previous block ends at {next}",
                e.offset
            ));
        }
        next = next
            .checked_add(e.len)
            .ok_or_else(|| format!("block {r} length {} overflows", e.len))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<BlockEntry> {
        vec![
            BlockEntry {
                offset: 0,
                len: 10,
                crc: 7,
            },
            BlockEntry {
                offset: 10,
                len: 0,
                crc: 0,
            },
            BlockEntry {
                offset: 10,
                len: 5,
                crc: 9,
            },
        ]
    }

    #[test]
    fn write_read_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shuffle_0_0.index");
        IndexFile::write(&path, &sample()).unwrap();
        let idx = IndexFile::read(&path).unwrap();
        assert_eq!(idx.entries(), &sample()[..]);
        assert_eq!(idx.num_reduce(), 3);
        assert_eq!(idx.entry(2), Some(sample()[2]));
        assert_eq!(idx.entry(3), None);
        assert_eq!(idx.data_len(), 15);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 + 3 * 20);
        // Only the index itself is left in the directory: the temp file was renamed.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn empty_index_is_valid() {
        let bytes = IndexFile::encode(&[]);
        assert_eq!(bytes.len(), 16);
        assert_eq!(IndexFile::decode(&bytes, "x").unwrap().num_reduce(), 0);
    }

    #[test]
    fn every_kind_of_damage_is_corrupt_naming_the_file() {
        let good = IndexFile::encode(&sample());
        let mut cases: Vec<(Vec<u8>, &str)> = vec![
            (good[..good.len() - 1].to_vec(), "truncated"),
            (good[..10].to_vec(), "shorter"),
            (Vec::new(), "shorter"),
        ];
        let mut magic = good.clone();
        magic[0] = b'X';
        cases.push((magic, "magic"));
        let mut flipped = good.clone();
        flipped[30] ^= 1;
        cases.push((flipped, "checksum"));
        let gap = IndexFile::encode(&[BlockEntry {
            offset: 4,
            len: 1,
            crc: 0,
        }]);
        cases.push((gap, "starts at"));
        for (bytes, needle) in cases {
            let err = IndexFile::decode(&bytes, "/d/shuffle_1_2.index").unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, ShuffleError::Corrupt { .. }), "{msg}");
            assert!(
                msg.contains("/d/shuffle_1_2.index") && msg.contains(needle),
                "{msg}"
            );
        }
    }

    #[test]
    fn missing_file_is_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shuffle_9_9.index");
        let err = IndexFile::read(&path).unwrap_err();
        assert!(matches!(err, ShuffleError::Io { .. }));
        assert!(err.to_string().contains("shuffle_9_9.index"), "{err}");
    }
}
