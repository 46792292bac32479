//! Resident map outputs: a process-wide, byte-bounded cache of the blocks of small map
//! output files, so that a reducer reading one tiny block from each of many outputs (a
//! wide shuffle: 1,000 maps x 1,000 reducers is a million blocks of a few bytes) reads
//! memory instead of paying open, fstat, seek, read and close for every block.
//!
//! An output becomes resident when a reader first opens it (its data section, at most
//! [`MAX_OUTPUT_BYTES`], read in one `pread` from the file the index was read from);
//! later readers of any of its blocks in this process take them from memory.
//!
//! Currency: every directory holding a resident output is watched with inotify, and a
//! [`View`] (taken by a reader before it looks blocks up: one per reduce task, one per
//! fetch request) first applies every change reported so far: a file of the directory
//! written, renamed, replaced or deleted drops that map output from the cache, a lost
//! event queue drops everything. So the blocks looked up through a view are those of
//! outputs as they were on disk when the view was taken, or later; never a version
//! replaced (by a rerun map task renamed over it) or deleted before it. Checking each
//! block with `fstat` instead cost about a third of a wide shuffle's time.
//!
//! Invariants:
//! - An output is admitted only under the table's lock, after its directory is watched
//!   and a `stat` of its path (taken then) shows the very file and version the bytes
//!   were read from ([`FileKey`]); any change after that `stat` is an event the next
//!   view applies (views need the same lock). Without inotify (none available, or no
//!   watch left) nothing is admitted and every read goes to the files.
//! - A watched directory is the one its device and inode were when it was watched: a
//!   directory removed and made again at the same path is watched afresh (its
//!   predecessor's outputs dropped) when an output is next admitted there, and one
//!   directory under two spellings is watched under the first only. A lost event queue
//!   drops every output and closes the inotify instance (every watch with it).
//! - Bytes served from here are crc-checked per block as they decode, as bytes read from
//!   the file are.
//! - The cache holds at most [`MAX_BYTES`] (data plus a compact index); an output that
//!   would exceed it is not admitted (a full cache is not emptied for newcomers: a wide
//!   shuffle's reducers read every output in turn, each would be evicted just before its
//!   next read). [`forget_shuffles`] drops a removed shuffle's outputs.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::{Arc, OnceLock, RwLock};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

use crate::index::{BlockEntry, IndexFile};
use crate::index_cache::FileKey;

/// The largest data section (all blocks of one map output) kept in memory: 256 KiB.
pub const MAX_OUTPUT_BYTES: u64 = 256 * 1024;
/// What all resident outputs may take together: 32 MiB.
pub const MAX_BYTES: usize = 32 << 20;

/// One map output's blocks and a compact index, as read from its file.
pub struct ResidentOutput {
    path: Arc<Path>,
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

    /// The path of the map output file.
    pub fn path(&self) -> &Arc<Path> {
        &self.path
    }

    fn cost(&self) -> usize {
        cost(self.data.len(), self.crcs.len())
    }
}

/// What an output of `data` bytes and `blocks` blocks takes in the cache.
fn cost(data: usize, blocks: usize) -> usize {
    data + (2 * blocks + 1) * 4 + 256
}

/// A watched directory (the one whose device and inode were seen when it was watched)
/// and its resident outputs by (shuffle id, map partition).
struct Dir {
    wd: WatchDescriptor,
    dev: u64,
    ino: u64,
    outputs: HashMap<(u32, u32), Arc<ResidentOutput>>,
}

/// Directories by their path's bytes (cheap to hash).
#[derive(Default)]
struct Table {
    /// `None` before the first admission (and after a lost event queue);
    /// `Some(None)` when inotify is unavailable.
    watcher: Option<Option<Inotify>>,
    dirs: HashMap<OsString, Dir>,
    by_wd: HashMap<i32, OsString>,
    bytes: usize,
}

/// What a change to a file of a watched directory (or to the directory) is seen by. Not
/// `MODIFY`: every write of a map task's temporary would be an event; a file written in
/// place is seen when it is closed (`CLOSE_WRITE`).
const WATCHED: WatchMask = WatchMask::ATTRIB
    .union(WatchMask::CLOSE_WRITE)
    .union(WatchMask::CREATE)
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR);

impl Table {
    /// Applies every change reported so far.
    fn sync(&mut self) {
        let Some(Some(watcher)) = self.watcher.as_mut() else {
            return;
        };
        let mut buf = [0u8; 4096];
        let mut changed: Vec<(i32, EventMask, Option<OsString>)> = Vec::new();
        loop {
            match watcher.read_events(&mut buf) {
                Ok(events) => changed.extend(events.map(|e| {
                    let name = e.name.map(|n| n.to_os_string());
                    (e.wd.get_watch_descriptor_id(), e.mask, name)
                })),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("inotify read failed, resident shuffle outputs dropped: {e}");
                    self.forget_all(Some(None));
                    return;
                }
            }
        }
        for (wd, mask, name) in changed {
            if mask.contains(EventMask::Q_OVERFLOW) {
                // Changes were lost, a directory's own removal among them perhaps: start
                // over with no watch (closing the instance removes them all).
                tracing::debug!("inotify queue overflowed, resident shuffle outputs dropped");
                self.forget_all(None);
                return;
            }
            self.apply(wd, mask, name);
        }
    }

    /// Drops every output and watch; `watcher` is what stands in the instance's place.
    fn forget_all(&mut self, watcher: Option<Option<Inotify>>) {
        self.watcher = watcher;
        self.dirs.clear();
        self.by_wd.clear();
        self.bytes = 0;
    }

    /// Drops directory `key`, its outputs and its watch.
    fn forget_dir(&mut self, key: &std::ffi::OsStr) {
        if let Some(dir) = self.dirs.remove(key) {
            self.bytes -= dir.outputs.values().map(|o| o.cost()).sum::<usize>();
            self.by_wd.remove(&dir.wd.get_watch_descriptor_id());
            if let Some(Some(w)) = self.watcher.as_mut() {
                // Already gone after IGNORED; otherwise it is no longer needed.
                let _ = w.watches().remove(dir.wd);
            }
        }
    }

    fn apply(&mut self, wd: i32, mask: EventMask, name: Option<OsString>) {
        let Some(path) = self.by_wd.get(&wd).cloned() else {
            return;
        };
        let gone =
            EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::UNMOUNT;
        if mask.intersects(gone) {
            self.forget_dir(&path);
            return;
        }
        // A temporary of an output names it too (dot-prefixed or not): dropping the
        // output for it is only ever one read from the file too many.
        let which = name
            .as_ref()
            .and_then(|n| n.to_str())
            .and_then(|n| crate::parse_file_name(n.strip_prefix('.').unwrap_or(n)));
        if let (Some(which), Some(dir)) = (which, self.dirs.get_mut(&path)) {
            if let Some(out) = dir.outputs.remove(&which) {
                self.bytes -= out.cost();
            }
        }
    }

    /// After applying the changes reported so far: the watched entry of `dir` if an
    /// output of `cost` fits in the cache (see [`Table::watched`]).
    fn room_in(&mut self, dir: &Path, cost: usize) -> Option<&mut Dir> {
        self.sync();
        if self.bytes + cost > MAX_BYTES {
            return None;
        }
        self.watched(dir)
    }

    /// The watched entry of `dir`, watching it now if need be; `None` without inotify,
    /// or when `dir` is already watched under another path (another spelling, a link).
    /// A directory now at the path that is not the one watched (removed and made again)
    /// is watched afresh, its predecessor's outputs dropped.
    fn watched(&mut self, dir: &Path) -> Option<&mut Dir> {
        let key = dir.as_os_str();
        let meta = std::fs::metadata(dir).ok()?;
        let (dev, ino) = (meta.dev(), meta.ino());
        if self
            .dirs
            .get(key)
            .is_some_and(|d| (d.dev, d.ino) != (dev, ino))
        {
            self.forget_dir(key);
        }
        if !self.dirs.contains_key(key) {
            let watcher = self
                .watcher
                .get_or_insert_with(|| match Inotify::init() {
                    Ok(w) => Some(w),
                    Err(e) => {
                        tracing::warn!("no inotify, shuffle outputs are not kept resident: {e}");
                        None
                    }
                })
                .as_mut()?;
            let wd = match watcher.watches().add(dir, WATCHED) {
                Ok(wd) => wd,
                Err(e) => {
                    tracing::debug!(dir = %dir.display(), "cannot watch, not kept resident: {e}");
                    return None;
                }
            };
            let id = wd.get_watch_descriptor_id();
            if self.by_wd.get(&id).is_some_and(|other| other != key) {
                return None;
            }
            self.by_wd.insert(id, key.to_os_string());
            let entry = Dir {
                wd,
                dev,
                ino,
                outputs: HashMap::new(),
            };
            self.dirs.insert(key.to_os_string(), entry);
        }
        self.dirs.get_mut(key)
    }
}

fn table() -> &'static RwLock<Table> {
    static TABLE: OnceLock<RwLock<Table>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// The resident outputs as of the moment it was taken, or later (see the module docs).
pub struct View(());

impl View {
    /// Applies every change to watched directories reported so far, then looks nothing
    /// up until asked.
    pub fn now() -> View {
        let mut t = table().write().unwrap_or_else(|p| p.into_inner());
        t.sync();
        View(())
    }

    /// The resident output of map `map` of shuffle `shuffle` in `dir`, if it is resident.
    pub fn get(&self, dir: &Path, shuffle: u32, map: u32) -> Option<Arc<ResidentOutput>> {
        table()
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .dirs
            .get(dir.as_os_str())?
            .outputs
            .get(&(shuffle, map))
            .cloned()
    }
}

/// Makes map `map` of shuffle `shuffle` in `dir`, open as `file` (at `path`, of version
/// `key`, with `index`, a checked one: contiguous blocks ending where the index starts)
/// resident if it is small enough and the cache has room: reads its data section whole.
/// `None` (and nothing kept) for a larger output, one of a single block, a full cache, a
/// file no longer at its path, no inotify, or when the read fails; the caller reads the
/// file instead.
pub fn admit(
    (dir, shuffle, map): (&Path, u32, u32),
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
    let cost = cost(len as usize, n);
    // Room and a watch first, so an output that cannot be kept costs no read.
    table()
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .room_in(dir, cost)?;
    // Bounded by MAX_OUTPUT_BYTES above, so every offset fits in u32.
    let mut data = vec![0u8; len as usize];
    file.read_exact_at(&mut data, 0).ok()?;
    let mut starts = Vec::with_capacity(n + 1);
    starts.extend(index.entries().iter().map(|e| e.offset as u32));
    starts.push(len as u32);
    let out = Arc::new(ResidentOutput {
        path: Arc::from(path),
        starts,
        crcs: index.entries().iter().map(|e| e.crc).collect(),
        data,
    });
    let mut t = table().write().unwrap_or_else(|p| p.into_inner());
    let outputs = &mut t.room_in(dir, cost)?.outputs;
    // Watched now: a change after this stat is an event a later view applies.
    if !std::fs::metadata(path).is_ok_and(|m| FileKey::of(&m) == key) {
        return None;
    }
    let old = outputs.insert((shuffle, map), out.clone());
    t.bytes += cost;
    if let Some(old) = old {
        t.bytes -= old.cost();
    }
    Some(out)
}

/// Drops the resident outputs of shuffles `shuffle_ids` in `dir` (their files are being
/// removed).
pub fn forget_shuffles(dir: &Path, shuffle_ids: &[u32]) {
    let mut t = table().write().unwrap_or_else(|p| p.into_inner());
    let Some(d) = t.dirs.get_mut(dir.as_os_str()) else {
        return;
    };
    let mut freed = 0;
    d.outputs.retain(|(shuffle, _), out| {
        let gone = shuffle_ids.contains(shuffle);
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

    /// The output the block belongs to.
    pub fn output(&self) -> &Arc<ResidentOutput> {
        &self.output
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
    use crate::test_output::write_output;
    use std::io::Write;

    fn admit_path(dir: &Path, shuffle: u32, map: u32) -> Option<Arc<ResidentOutput>> {
        let path = crate::data_path(dir, shuffle, map);
        let mut f = File::open(&path).unwrap();
        let (index, key) = index_and_key(&mut f, &path).unwrap();
        admit((dir, shuffle, map), &f, &path, key, &index)
    }

    fn get(dir: &Path, shuffle: u32, map: u32) -> Option<Arc<ResidentOutput>> {
        View::now().get(dir, shuffle, map)
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
        let d = dir.path();
        let path = crate::data_path(d, 7, 0);
        write_output(&path, &[b"abc", b"", b"de"]);
        admit_path(d, 7, 0).unwrap();
        let out = get(d, 7, 0).expect("resident after the first read");
        assert_eq!(out.path().as_ref(), path.as_path());
        assert_eq!(block(out.clone(), 0), b"abc");
        assert_eq!(block(out, 2), b"de");
        // A rerun map task renames another output over it: the old bytes are not served.
        write_output(&path, &[b"xyz", b"12", b"3"]);
        assert!(get(d, 7, 0).is_none());
        admit_path(d, 7, 0).unwrap();
        assert_eq!(block(get(d, 7, 0).unwrap(), 1), b"12");
        // Nor after the file is written in place.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all(b"Q")
            .unwrap();
        assert!(get(d, 7, 0).is_none());
        // A deleted output is not served either.
        write_output(&path, &[b"x", b"y", b"z"]);
        admit_path(d, 7, 0).unwrap();
        assert!(get(d, 7, 0).is_some());
        std::fs::remove_file(&path).unwrap();
        assert!(get(d, 7, 0).is_none());
        // An output replaced between its read and its admission is not admitted.
        write_output(&path, &[b"old", b"1"]);
        let mut f = File::open(&path).unwrap();
        let (index, key) = index_and_key(&mut f, &path).unwrap();
        write_output(&path, &[b"new", b"2"]);
        assert!(admit((d, 7, 0), &f, &path, key, &index).is_none());
        assert!(get(d, 7, 0).is_none());
    }

    #[test]
    fn a_removed_shuffle_or_directory_is_forgotten_and_large_outputs_stay_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write_output(&crate::data_path(d, 8, 0), &[b"a", b"b"]);
        write_output(&crate::data_path(d, 9, 0), &[b"c", b"d"]);
        admit_path(d, 8, 0).unwrap();
        admit_path(d, 9, 0).unwrap();
        forget_shuffles(d, &[8]);
        assert!(get(d, 8, 0).is_none());
        assert!(get(d, 9, 0).is_some());
        let half = vec![7u8; MAX_OUTPUT_BYTES as usize / 2 + 1];
        write_output(&crate::data_path(d, 10, 0), &[&half, &half]);
        assert!(admit_path(d, 10, 0).is_none());
        assert!(get(d, 10, 0).is_none());
        let path = d.to_path_buf();
        drop(dir);
        assert!(get(&path, 9, 0).is_none());
        let t = table().read().unwrap();
        assert!(
            !t.dirs.contains_key(path.as_os_str()),
            "the deleted directory is unwatched"
        );
    }

    #[test]
    fn a_directory_made_again_at_the_same_path_starts_afresh() {
        let root = tempfile::tempdir().unwrap();
        let d = root.path().join("session-0");
        std::fs::create_dir(&d).unwrap();
        write_output(&crate::data_path(&d, 11, 0), &[b"old", b"1"]);
        admit_path(&d, 11, 0).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::create_dir(&d).unwrap();
        write_output(&crate::data_path(&d, 11, 0), &[b"new", b"2"]);
        assert!(
            get(&d, 11, 0).is_none(),
            "the removed directory's output is gone"
        );
        admit_path(&d, 11, 0).unwrap();
        assert_eq!(block(get(&d, 11, 0).unwrap(), 0), b"new");
    }
}
