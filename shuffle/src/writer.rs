//! Map-side shuffle writer: routes records to reduce partitions, buffers them as compressed
//! frames, spills those frames to disk on demand, and commits one file per map task, its
//! blocks followed by their index (format in `index.rs`).
//!
//! Invariants:
//! * Per reducer, records are decoded back in the order they were written.
//! * Memory held by the writer is exactly what [`ShuffleWriter::buffered_bytes`] reports
//!   (capacity of the per-reducer pending and frame buffers, kept up to date on every
//!   write in O(1)), apart from fixed-size I/O buffers (256 KiB while spilled).
//! * After [`ShuffleWriter::spill_buffers`] the writer holds no record data in memory:
//!   partial frames are flushed as (short) frames too. Spilling never changes the records a
//!   reducer reads, only how they are framed; all spills go to one unnamed temporary file
//!   in the shuffle directory (removed by the OS when the writer is dropped, even on crash).
//! * [`ShuffleWriter::finish`] writes each reducer's block contiguously, in reducer order
//!   (spilled frames first, in spill order, then in-memory ones), computes its crc32 on the
//!   way out, appends the index, and commits by renaming the whole file into place (one
//!   rename, so a reader sees an earlier attempt's file or this one, never a mix). A
//!   failed or dropped writer leaves no `shuffle_*` file behind (temps are deleted).
//! * Hot path: `write` serialises straight into the reducer's pending buffer: no allocation
//!   and no syscall per record. Finished frames go into chunks, each allocated before the
//!   frame that would not fit the last one (twice its size up to [`CHUNK_BYTES`], the
//!   first one just that frame's bound, so a reducer of a wide shuffle that gets a few
//!   records holds a few bytes), never into a buffer grown by reallocation, which copies every
//!   byte again at each growth and faults in fresh pages for the copy (a 64-reducer
//!   shuffle's blocks of ~300 KB per map task all grew that way: parquet_etl spent 5 % of
//!   its CPU in `realloc`).

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::data_path;
use crate::error::{Result, ShuffleError};
use crate::frame::{CompressHint, FrameEncoder};
use crate::index::{BlockEntry, IndexFile};

/// Size of the buffered writers for the data and spill files.
pub const WRITE_BUFFER_BYTES: usize = 256 * 1024;

/// What a finished map task reports to the map-output tracker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MapOutput {
    /// Bytes of each reducer's block (0 for an empty block), in reducer order.
    pub block_sizes: Vec<u64>,
    /// Records written, over all reducers.
    pub records_written: u64,
    /// Bytes of the data file (sum of `block_sizes`).
    pub bytes_written: u64,
}

/// Largest chunk of finished frames a bucket allocates (one frame bigger than this gets a
/// chunk of its own size).
pub const CHUNK_BYTES: usize = 1 << 20;

/// One reducer's in-memory state: records not yet framed, and finished frames (full
/// chunks, then the chunk being filled).
#[derive(Debug)]
struct Bucket {
    encoder: FrameEncoder,
    full: Vec<Vec<u8>>,
    /// Capacity of the chunks in `full`.
    full_capacity: usize,
    frames: Vec<u8>,
}

/// Pending bytes the encoders of one writer aim to hold in all: each cuts its frames at
/// this over the reducer count (within the encoder's bounds), so that the pending buffers
/// the records scatter into stay in a core's L2 cache. Why: parquet_etl's map side (64
/// reducers, 64 KiB frames, 4 MiB of pending buffers) spent 13 % of the job in
/// `MapSide::write`, 17.6 ns a record against 9.3 ns for kvsum's 16 reducers, its time on
/// the loads and stores of the pending buffers.
const PENDING_BUDGET_BYTES: usize = 1 << 20;

impl Bucket {
    /// An empty bucket of a writer with `num_reduce` buckets.
    fn new(num_reduce: u32) -> Self {
        let target = PENDING_BUDGET_BYTES / (num_reduce.max(1) as usize);
        Bucket {
            encoder: FrameEncoder::with_target(target),
            full: Vec::new(),
            full_capacity: 0,
            frames: Vec::new(),
        }
    }

    fn memory(&self) -> u64 {
        (self.encoder.buffer_capacity() + self.full_capacity + self.frames.capacity()) as u64
    }

    /// Before a frame of at most `bound` bytes is appended: if the chunk being filled has
    /// no room for it, that chunk is set aside and the next one allocated (see the module
    /// invariants), so the append never reallocates.
    #[inline]
    fn make_room(&mut self, bound: usize) {
        if self.frames.capacity() - self.frames.len() >= bound {
            return;
        }
        let size = (self.frames.capacity() * 2).min(CHUNK_BYTES).max(bound);
        let done = std::mem::replace(&mut self.frames, Vec::with_capacity(size));
        if !done.is_empty() {
            self.full_capacity += done.capacity();
            self.full.push(done);
        }
    }

    /// Cuts the pending records into a frame (if any are pending).
    fn flush(&mut self, hint: &mut CompressHint) -> Result<()> {
        self.make_room(self.encoder.frame_bound());
        self.encoder.flush_with(&mut self.frames, hint)
    }

    /// Every finished frame's bytes, in order.
    fn chunks(&self) -> impl Iterator<Item = &[u8]> {
        self.full
            .iter()
            .map(Vec::as_slice)
            .chain(std::iter::once(self.frames.as_slice()))
    }

    fn frame_bytes(&self) -> u64 {
        self.chunks().map(|c| c.len() as u64).sum()
    }
}

/// The spill file: frames moved out of memory, as (offset, len) segments per reducer.
struct Spill {
    out: BufWriter<File>,
    len: u64,
    segments: Vec<Vec<(u64, u64)>>,
}

/// Writes one map task's output of a shuffle. See the module docs.
pub struct ShuffleWriter<T: ?Sized> {
    dir: PathBuf,
    shuffle_id: u32,
    map_partition: u32,
    buckets: Vec<Bucket>,
    spill: Option<Spill>,
    records: u64,
    buffered: u64,
    spilled: u64,
    /// Whether frames are worth compressing, shared by every bucket's encoder.
    hint: CompressHint,
    _record: PhantomData<fn(&T)>,
}

impl<T: Serialize + ?Sized> ShuffleWriter<T> {
    /// A writer for map task `map_partition` of shuffle `shuffle_id`, with `num_reduce`
    /// reduce partitions, committing into `dir` (which must exist). Touches no file yet.
    pub fn new(
        dir: impl Into<PathBuf>,
        shuffle_id: u32,
        map_partition: u32,
        num_reduce: u32,
    ) -> Self {
        ShuffleWriter {
            dir: dir.into(),
            shuffle_id,
            map_partition,
            buckets: (0..num_reduce).map(|_| Bucket::new(num_reduce)).collect(),
            spill: None,
            records: 0,
            buffered: 0,
            spilled: 0,
            hint: CompressHint::default(),
            _record: PhantomData,
        }
    }

    /// Appends `record` to reduce partition `reduce_partition`'s block.
    #[inline]
    pub fn write(&mut self, reduce_partition: u32, record: &T) -> Result<()> {
        let Some(bucket) = self.buckets.get_mut(reduce_partition as usize) else {
            return Err(self.out_of_range(reduce_partition));
        };
        let before = bucket.memory();
        if bucket.encoder.push_pending(record)? {
            bucket.flush(&mut self.hint)?;
        }
        self.buffered = self.buffered + bucket.memory() - before;
        self.records += 1;
        Ok(())
    }

    /// Bytes of memory the writer's buffers hold now (capacity, not just contents): what
    /// the caller should hold in its memory reservation.
    #[inline]
    pub fn buffered_bytes(&self) -> u64 {
        self.buffered
    }

    /// Records written so far.
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Bytes moved to the spill file so far (for metrics).
    pub fn spilled_bytes(&self) -> u64 {
        self.spilled
    }

    /// Moves every reducer's frames (completed ones and the partial one) to the spill file
    /// and frees their memory. Returns the bytes of memory freed (the previous
    /// [`buffered_bytes`](Self::buffered_bytes), which is 0 afterwards).
    pub fn spill_buffers(&mut self) -> Result<u64> {
        let num_reduce = self.buckets.len();
        let mut moved = 0u64;
        for (r, bucket) in self.buckets.iter_mut().enumerate() {
            bucket.flush(&mut self.hint)?;
            let n = bucket.frame_bytes();
            if n > 0 {
                let spill = match &mut self.spill {
                    Some(s) => s,
                    None => self.spill.insert(Spill {
                        out: BufWriter::with_capacity(
                            WRITE_BUFFER_BYTES,
                            tempfile::tempfile_in(&self.dir)
                                .map_err(|e| ShuffleError::io(&self.dir, e))?,
                        ),
                        len: 0,
                        segments: vec![Vec::new(); num_reduce],
                    }),
                };
                for chunk in bucket.chunks() {
                    spill
                        .out
                        .write_all(chunk)
                        .map_err(|e| ShuffleError::io(&self.dir, e))?;
                }
                spill.segments[r].push((spill.len, n));
                spill.len += n;
                moved += n;
            }
            bucket.frames = Vec::new();
            bucket.full = Vec::new();
            bucket.full_capacity = 0;
            bucket.encoder.release();
        }
        if let Some(spill) = &mut self.spill {
            spill
                .out
                .flush()
                .map_err(|e| ShuffleError::io(&self.dir, e))?;
        }
        let freed = std::mem::take(&mut self.buffered);
        self.spilled += moved;
        tracing::debug!(
            shuffle_id = self.shuffle_id,
            map_partition = self.map_partition,
            spilled_bytes = moved,
            freed_bytes = freed,
            "shuffle writer spilled its buffers"
        );
        Ok(freed)
    }

    /// Writes the map output file (blocks, then their index) and commits it (see
    /// [`crate::index`]).
    pub fn finish(mut self) -> Result<MapOutput> {
        let (s, m) = (self.shuffle_id, self.map_partition);
        let data_final = data_path(&self.dir, s, m);
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".shuffle_{s}_{m}.data."))
            .suffix(".tmp")
            .tempfile_in(&self.dir)
            .map_err(|e| ShuffleError::io(&self.dir, e))?;
        let tmp_path = tmp.path().to_path_buf();
        let io_err = |e| ShuffleError::io(&tmp_path, e);
        let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, tmp);

        let mut spill = match self.spill.take() {
            Some(sp) => {
                let file = sp
                    .out
                    .into_inner()
                    .map_err(|e| ShuffleError::io(&self.dir, e.into_error()))?;
                Some((file, sp.segments))
            }
            None => None,
        };
        let mut copy_buf = Vec::new();
        let mut entries = Vec::with_capacity(self.buckets.len());
        let mut offset = 0u64;
        for (r, bucket) in self.buckets.iter_mut().enumerate() {
            bucket.flush(&mut self.hint)?;
            let mut crc = crc32fast::Hasher::new();
            let mut len = 0u64;
            if let Some((file, segments)) = &mut spill {
                for &(at, n) in &segments[r] {
                    copy_segment(
                        file,
                        at,
                        n,
                        &mut out,
                        &mut crc,
                        &mut copy_buf,
                        &self.dir,
                        &tmp_path,
                    )?;
                    len += n;
                }
            }
            for chunk in bucket.chunks() {
                crc.update(chunk);
                out.write_all(chunk).map_err(io_err)?;
                len += chunk.len() as u64;
            }
            *bucket = Bucket::new(1);
            entries.push(BlockEntry {
                offset,
                len,
                crc: crc.finalize(), // crc32 of no bytes is 0
            });
            offset += len;
        }
        drop(spill);
        out.write_all(&IndexFile::encode(&entries))
            .map_err(io_err)?;
        let tmp = out.into_inner().map_err(|e| io_err(e.into_error()))?;
        // One rename commits blocks and index together (it replaces an earlier
        // attempt's file whole).
        tmp.persist(&data_final)
            .map_err(|e| ShuffleError::io(&data_final, e.error))?;
        tracing::debug!(
            shuffle_id = s,
            map_partition = m,
            records = self.records,
            bytes = offset,
            spilled_bytes = self.spilled,
            "shuffle map output committed"
        );
        Ok(MapOutput {
            block_sizes: entries.iter().map(|e| e.len).collect(),
            records_written: self.records,
            bytes_written: offset,
        })
    }

    fn out_of_range(&self, reduce_partition: u32) -> ShuffleError {
        ShuffleError::Plan(format!(
            "shuffle {} map {}: record routed to reduce partition {reduce_partition}, but there are only {}",
            self.shuffle_id,
            self.map_partition,
            self.buckets.len()
        ))
    }
}

/// Copies `len` bytes at `at` of the spill file into `out`, feeding `crc`.
#[allow(clippy::too_many_arguments)]
fn copy_segment(
    spill: &mut File,
    at: u64,
    len: u64,
    out: &mut impl Write,
    crc: &mut crc32fast::Hasher,
    buf: &mut Vec<u8>,
    dir: &Path,
    out_path: &Path,
) -> Result<()> {
    if buf.is_empty() {
        buf.resize(WRITE_BUFFER_BYTES, 0);
    }
    spill
        .seek(SeekFrom::Start(at))
        .map_err(|e| ShuffleError::io(dir, e))?;
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        spill
            .read_exact(&mut buf[..n])
            .map_err(|e| ShuffleError::io(dir, e))?;
        crc.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| ShuffleError::io(out_path, e))?;
        left -= n as u64;
    }
    Ok(())
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
