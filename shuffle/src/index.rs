//! The on-disk format of a map task's shuffle output: one file, its blocks followed by
//! their index.
//!
//! A map task of shuffle `S` with map partition `M` and `R` reducers writes, in its
//! shuffle directory, **`shuffle_S_M.data`**: the concatenation of `R` blocks, block `r`
//! holding every record the task sent to reduce partition `r`, blocks in reducer order
//! with no gaps or padding (an empty block has zero bytes), then the index of those
//! blocks. A block is a sequence of frames (see `frame.rs`):
//!
//! ```text
//! block := frame*
//! frame := u32 LE uncompressed_len | u32 LE compressed_len | lz4 block (compressed_len bytes)
//! lz4 block decompresses to postcard-encoded records, back to back, none split across frames
//! ```
//!
//! The index (`20 * R + 16` bytes at the end of the file, all integers little-endian,
//! offsets from the start of the index):
//!
//! ```text
//! offset        size  field
//! 20*r          8     u64    offset of block r in the file
//! 20*r + 8      8     u64    length of block r in bytes (0 for an empty block)
//! 20*r + 16     4     u32    crc32 (IEEE, crc32fast) of block r's bytes (0 for empty)
//! 20*R          4     u32 R  number of reduce partitions
//! 20*R + 4      8     magic  b"EMBIDX02"
//! 20*R + 12     4     u32    crc32 of the index's bytes before it
//! ```
//!
//! A reader takes the last 16 bytes first (R and the magic say how long the index is),
//! then the index. Invariants checked by [`IndexFile::read`]: magic, trailing crc,
//! contiguity (`offset[0] == 0`, `offset[r+1] == offset[r] + len[r]`), and that the
//! blocks end exactly where the index starts, so a truncated or extended file is caught
//! before any block is read. Every violation is `ShuffleError::Corrupt` naming the file.
//!
//! Commit protocol (writer side): the whole file is written under a temporary name and
//! renamed into place, so a reader that finds `shuffle_S_M.data` may rely on it being
//! complete. One file per map output, not a data file and an index file: each map task
//! allocates one inode, which is what a shuffle of many small tasks spends its time on
//! (ext4's inode allocator scanning past the inodes of the files deleted just before).
//! No fsync: a machine crash may lose shuffle output, which the scheduler recomputes.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::error::{Result, ShuffleError};

/// The magic of an index at the end of a map output file (format version 02).
pub const INDEX_MAGIC: [u8; 8] = *b"EMBIDX02";
const ENTRY_BYTES: usize = 20;
/// R, the magic and the crc: what a reader takes first.
pub const TAIL_BYTES: usize = 16;

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

/// A parsed, validated index of a map output file: one [`BlockEntry`] per reduce
/// partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFile {
    entries: Vec<BlockEntry>,
}

impl IndexFile {
    /// Reads and validates the index at the end of the map output file at `path`. A
    /// missing or unreadable file is `ShuffleError::Io`; a malformed one (or one whose
    /// length does not fit its index) is `ShuffleError::Corrupt`, both naming `path`.
    pub fn read(path: &Path) -> Result<IndexFile> {
        let mut file = File::open(path).map_err(|e| ShuffleError::io(path, e))?;
        Self::read_from(&mut file, path)
    }

    /// [`IndexFile::read`] of a file already open (`path` names it in errors).
    pub fn read_from(file: &mut File, path: &Path) -> Result<IndexFile> {
        let len = file
            .metadata()
            .map_err(|e| ShuffleError::io(path, e))?
            .len();
        Self::read_with_len(file, path, len)
    }

    /// [`IndexFile::read_from`] of a file whose length (from `fstat`) is `len`.
    pub fn read_with_len(file: &mut File, path: &Path, len: u64) -> Result<IndexFile> {
        let what = path.display().to_string();
        let io = |e| ShuffleError::io(path, e);
        if len < TAIL_BYTES as u64 {
            return Err(corrupt(
                &what,
                format!("file is {len} bytes, shorter than any index"),
            ));
        }
        let mut tail = [0u8; TAIL_BYTES];
        file.seek(SeekFrom::Start(len - TAIL_BYTES as u64))
            .and_then(|_| file.read_exact(&mut tail))
            .map_err(io)?;
        let (n, index_len) = parse_tail(&tail, &what)?;
        if index_len > len {
            return Err(corrupt(
                &what,
                format!("file is {len} bytes, but an index of {n} reducers needs {index_len} (truncated?)"),
            ));
        }
        // Bounded by the file's own length, checked above.
        let mut bytes = vec![0u8; index_len as usize];
        file.seek(SeekFrom::Start(len - index_len))
            .and_then(|_| file.read_exact(&mut bytes))
            .map_err(io)?;
        let index = Self::decode(&bytes, &what)?;
        let blocks_end = index.data_len();
        if blocks_end != len - index_len {
            return Err(corrupt(
                &what,
                format!(
                    "its blocks end at {blocks_end} but its index starts at {} (truncated?)",
                    len - index_len
                ),
            ));
        }
        Ok(index)
    }

    /// The index bytes for `entries`, to be written after their blocks.
    pub fn encode(entries: &[BlockEntry]) -> Vec<u8> {
        let mut out = Vec::with_capacity(ENTRY_BYTES * entries.len() + TAIL_BYTES);
        for e in entries {
            out.extend_from_slice(&e.offset.to_le_bytes());
            out.extend_from_slice(&e.len.to_le_bytes());
            out.extend_from_slice(&e.crc.to_le_bytes());
        }
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        out.extend_from_slice(&INDEX_MAGIC);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses and validates the bytes of an index, exactly (as [`IndexFile::encode`]
    /// makes them); `what` names their origin in errors.
    pub fn decode(bytes: &[u8], what: &str) -> Result<IndexFile> {
        if bytes.len() < TAIL_BYTES {
            return Err(corrupt(
                what,
                format!("index is {} bytes, shorter than any index", bytes.len()),
            ));
        }
        let (n, expected) = parse_tail(&bytes[bytes.len() - TAIL_BYTES..], what)?;
        if bytes.len() as u64 != expected {
            return Err(corrupt(
                what,
                format!(
                    "index is {} bytes, but {n} reducers need {expected} (truncated?)",
                    bytes.len()
                ),
            ));
        }
        let body = &bytes[..bytes.len() - 4];
        let stored = u32::from_le_bytes(bytes[body.len()..].try_into().unwrap());
        let actual = crc32fast::hash(body);
        if stored != actual {
            return Err(corrupt(
                what,
                format!("index checksum mismatch: expected {stored:08x} got {actual:08x}"),
            ));
        }
        let entries: Vec<BlockEntry> = body[..body.len() - 12]
            .chunks_exact(ENTRY_BYTES)
            .map(|c| BlockEntry {
                offset: u64::from_le_bytes(c[..8].try_into().unwrap()),
                len: u64::from_le_bytes(c[8..16].try_into().unwrap()),
                crc: u32::from_le_bytes(c[16..20].try_into().unwrap()),
            })
            .collect();
        check_contiguous(&entries).map_err(|m| corrupt(what, m))?;
        Ok(IndexFile { entries })
    }

    /// How many bytes the whole index takes, from its last [`TAIL_BYTES`] (checked for
    /// the magic): what a reader of a remote copy asks for next.
    pub fn len_from_tail(tail: &[u8], what: &str) -> Result<u64> {
        if tail.len() != TAIL_BYTES {
            return Err(corrupt(
                what,
                format!("index tail is {} bytes, not {TAIL_BYTES}", tail.len()),
            ));
        }
        parse_tail(tail, what).map(|(_, len)| len)
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

    /// Where the blocks end (and the index starts): the sum of all block lengths.
    pub fn data_len(&self) -> u64 {
        self.entries.last().map_or(0, |e| e.offset + e.len)
    }

    /// The length of the whole map output file: blocks and index.
    pub fn file_len(&self) -> u64 {
        self.data_len() + (ENTRY_BYTES * self.entries.len() + TAIL_BYTES) as u64
    }
}

/// The reducer count an index's last [`TAIL_BYTES`] name and the length of the whole
/// index that implies, once its magic is checked.
fn parse_tail(tail: &[u8], what: &str) -> Result<(u64, u64)> {
    if tail[4..12] != INDEX_MAGIC {
        return Err(corrupt(what, format!("bad magic {:02x?}", &tail[4..12])));
    }
    let n = u64::from(u32::from_le_bytes(tail[..4].try_into().unwrap()));
    Ok((n, n * ENTRY_BYTES as u64 + TAIL_BYTES as u64))
}

/// The `Corrupt` error for the index of `what`.
fn corrupt(what: &str, message: String) -> ShuffleError {
    ShuffleError::Corrupt {
        what: format!("shuffle index of {what}"),
        message,
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

    /// A map output file of `sample()`'s blocks (15 bytes) and their index.
    fn output_file(path: &Path) {
        let mut bytes = vec![1u8; 15];
        bytes.extend_from_slice(&IndexFile::encode(&sample()));
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn read_finds_the_index_at_the_end_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shuffle_0_0.data");
        output_file(&path);
        let idx = IndexFile::read(&path).unwrap();
        assert_eq!(idx.entries(), &sample()[..]);
        assert_eq!(idx.num_reduce(), 3);
        assert_eq!(idx.entry(2), Some(sample()[2]));
        assert_eq!(idx.entry(3), None);
        assert_eq!(idx.data_len(), 15);
        assert_eq!(idx.file_len(), 15 + 3 * 20 + 16);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), idx.file_len());
    }

    #[test]
    fn a_file_whose_length_does_not_fit_its_index_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shuffle_4_1.data");
        let index = IndexFile::encode(&sample());
        for (blocks, needle) in [
            (14, "blocks end at 15 but its index starts at 14"),
            (16, "blocks end at 15 but its index starts at 16"),
            (0, "needs 76"),
        ] {
            let mut bytes = vec![1u8; blocks];
            if blocks == 0 {
                bytes.extend_from_slice(&index[20..]); // the index cut short
            } else {
                bytes.extend_from_slice(&index);
            }
            std::fs::write(&path, bytes).unwrap();
            let err = IndexFile::read(&path).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, ShuffleError::Corrupt { .. }), "{msg}");
            assert!(
                msg.contains("shuffle_4_1.data") && msg.contains(needle),
                "{msg}"
            );
        }
        std::fs::write(&path, b"short").unwrap();
        let msg = IndexFile::read(&path).unwrap_err().to_string();
        assert!(msg.contains("shorter than any index"), "{msg}");
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
            (good[20..].to_vec(), "truncated"),
            (good[..good.len() - 1].to_vec(), "magic"),
            (good[..10].to_vec(), "shorter"),
            (Vec::new(), "shorter"),
        ];
        let mut magic = good.clone();
        magic[3 * 20 + 4] = b'X';
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
            let err = IndexFile::decode(&bytes, "/d/shuffle_1_2.data").unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, ShuffleError::Corrupt { .. }), "{msg}");
            assert!(
                msg.contains("/d/shuffle_1_2.data") && msg.contains(needle),
                "{msg}"
            );
        }
    }

    #[test]
    fn missing_file_is_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shuffle_9_9.data");
        let err = IndexFile::read(&path).unwrap_err();
        assert!(matches!(err, ShuffleError::Io { .. }));
        assert!(err.to_string().contains("shuffle_9_9.data"), "{err}");
    }
}
