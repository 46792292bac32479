//! A process-wide cache of parsed map output indexes, so that a reducer reading one small
//! block from each of many map outputs does not read, check and decode every file's
//! whole index each time: a 1,000 x 1,000 shuffle read a million 20 KB indexes, most of
//! its run time.
//!
//! Invariants: an entry is keyed by the file's identity and version as `fstat` reports
//! them on the open file the block is then read from (device, inode, length,
//! modification time to the nanosecond). A map output file is never changed in place
//! (it is written under a temporary name and renamed whole), so a file with that key has
//! exactly that index, and a rewritten output (a rerun map task) is another inode. The
//! cache holds at most [`MAX_ENTRIES`] block entries over all its files; past that it is
//! emptied and refilled by the reads that follow.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Result, ShuffleError};
use crate::index::IndexFile;

/// Block entries (over all cached indexes) the cache holds at most: 24 MB of them.
pub const MAX_ENTRIES: usize = 1 << 20;

/// A file's identity and version as `fstat`/`stat` report them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileKey {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl FileKey {
    /// The key of the file `meta` describes.
    pub fn of(meta: &Metadata) -> FileKey {
        FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        }
    }
}

#[derive(Default)]
struct Cache {
    indexes: HashMap<FileKey, Arc<IndexFile>>,
    entries: usize,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The index of the open map output `file` (at `path`, for errors): from the cache when
/// this very file's was read before, else read, validated and remembered.
pub fn index_of(file: &mut File, path: &Path) -> Result<Arc<IndexFile>> {
    index_and_key(file, path).map(|(index, _)| index)
}

/// [`index_of`], with the key of the file it describes.
pub fn index_and_key(file: &mut File, path: &Path) -> Result<(Arc<IndexFile>, FileKey)> {
    let meta = file.metadata().map_err(|e| ShuffleError::io(path, e))?;
    let key = FileKey::of(&meta);
    if let Some(index) = cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .indexes
        .get(&key)
    {
        return Ok((index.clone(), key));
    }
    let index = Arc::new(IndexFile::read_with_len(file, path, meta.len())?);
    let mut c = cache().lock().unwrap_or_else(|p| p.into_inner());
    let n = index.entries().len();
    if c.entries + n > MAX_ENTRIES {
        c.indexes.clear();
        c.entries = 0;
    }
    if n <= MAX_ENTRIES && c.indexes.insert(key, index.clone()).is_none() {
        c.entries += n;
    }
    Ok((index, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_output::write_output;

    #[test]
    fn a_rewritten_output_is_never_served_the_old_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shuffle_1_0.data");
        write_output(&path, &[b"abc", b"", b"de"]);
        let first = index_of(&mut File::open(&path).unwrap(), &path).unwrap();
        let again = index_of(&mut File::open(&path).unwrap(), &path).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the second read is the cached index"
        );
        assert_eq!(first.entry(2).unwrap().len, 2);
        // A rerun map task renames a new output over the old: another inode.
        write_output(&path, &[b"abcdef", b"g", b"hij"]);
        let third = index_of(&mut File::open(&path).unwrap(), &path).unwrap();
        assert!(!Arc::ptr_eq(&first, &third));
        assert_eq!(third.entry(0).unwrap().len, 6);
        assert_eq!(third.entry(2).unwrap().offset, 7);
    }

    #[test]
    fn a_corrupt_index_is_an_error_and_not_cached() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shuffle_2_0.data");
        std::fs::write(&path, b"not a map output at all, but long enough").unwrap();
        for _ in 0..2 {
            let err = index_of(&mut File::open(&path).unwrap(), &path).unwrap_err();
            assert!(err.to_string().contains("bad magic"), "{err}");
        }
    }
}
