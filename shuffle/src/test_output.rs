//! Test support: a map output file written by hand (blocks, then their index), renamed
//! into place as the writer commits one.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::index::{BlockEntry, IndexFile};

/// Writes `blocks` and their index to `path` (through a temporary renamed over it).
pub(crate) fn write_output(path: &Path, blocks: &[&[u8]]) {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).unwrap();
    let mut entries = Vec::new();
    let mut offset = 0;
    for b in blocks {
        f.write_all(b).unwrap();
        entries.push(BlockEntry {
            offset,
            len: b.len() as u64,
            crc: if b.is_empty() { 0 } else { crc32fast::hash(b) },
        });
        offset += b.len() as u64;
    }
    f.write_all(&IndexFile::encode(&entries)).unwrap();
    drop(f);
    std::fs::rename(&tmp, path).unwrap();
}
