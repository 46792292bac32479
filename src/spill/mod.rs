//! Spill-to-disk data structures and what they share: run files ([`run`]), size
//! estimation ([`size`]), the external aggregation map ([`aggregate`]), the external
//! sorter ([`sort`]), spill metrics, and a streaming k-way merge ([`KMerge`]).
//!
//! Invariants shared by the spilling structures:
//! * Memory use is estimated with [`size::SizeEstimator`] and charged to a
//!   [`Reservation`] every [`ACCOUNT_EVERY`] inserts; the reservation is never below the
//!   estimate, and grows with an eighth of headroom when the pool has it. When the pool
//!   refuses to grow the reservation to the estimate, the in-memory buffer is written as
//!   one sorted run and the reservation is freed.
//! * Progress: a structure spills only once it holds at least `min_spill_entries` records or
//!   `min_spill_bytes` estimated bytes (its [`SpillLimits`]; defaults [`MIN_SPILL_ENTRIES`],
//!   [`MIN_SPILL_BYTES`]).
//!   Below that floor a refusal is ignored and memory beyond the reservation is used, so a
//!   tiny limit cannot cause a spill per record.
//! * Reading back merges at most `merge_fan_in` sources at once (default
//!   [`DEFAULT_MERGE_FAN_IN`]). If there are more runs, intermediate passes merge runs into
//!   bigger runs first. This bounds open files and read buffers to about
//!   `fan_in * 2 * run::FRAME_TARGET` bytes. That merge memory is not charged to the pool.
//! * Spill files live in the caller's spill directory and are deleted when the structure,
//!   or the iterator it turned into, is dropped.

pub mod aggregate;
mod aggregator;
pub(crate) mod anchor;
mod radix;
pub mod run;
pub mod size;
pub mod sort;
mod table;
#[cfg(test)]
mod test_data;

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::Result;
use crate::memory::Reservation;

pub use aggregate::{Aggregate, ExternalAggregator};
pub use run::{RunFile, RunReader, RunWriter};
pub use size::SizeEstimator;
pub use sort::ExternalSorter;

/// Inserts between two memory checks.
pub const ACCOUNT_EVERY: u64 = 32;
/// A reservation that must grow asks for `1 / RESERVE_AHEAD_DIVISOR` more than the
/// estimate (when the pool has it), as Spark's spillables ask for twice what they hold.
pub const RESERVE_AHEAD_DIVISOR: u64 = 8;
/// Default floor: do not spill fewer records than this...
pub const MIN_SPILL_ENTRIES: usize = 1000;
/// ...unless they are estimated at this many bytes or more.
pub const MIN_SPILL_BYTES: u64 = 1 << 20;
/// Default maximum number of sources merged at once.
pub const DEFAULT_MERGE_FAN_IN: usize = 64;

/// What a spilling structure wrote to disk while records were inserted.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillMetrics {
    /// Bytes of spill files written (compressed, as on disk).
    pub bytes_spilled: u64,
    /// Number of times the in-memory buffer was spilled.
    pub spill_count: u64,
}

/// A sorted stream that feeds a merge.
pub type Source<T> = Box<dyn Iterator<Item = Result<T>> + Send>;

/// Streaming k-way merge of sorted sources under a comparator (a binary min-heap holding
/// one head record per source). Among equal records, the one from the lower-numbered
/// source comes first. After a source returns an error, the merge yields that error and
/// then ends.
pub struct KMerge<T, F> {
    sources: Vec<Source<T>>,
    heap: Vec<(T, usize)>,
    cmp: F,
    failed: bool,
}

impl<T: 'static, F: Fn(&T, &T) -> Ordering> KMerge<T, F> {
    /// Pulls the first record of every source. Fails if any source fails.
    pub fn new(mut sources: Vec<Source<T>>, cmp: F) -> Result<Self> {
        let mut heap = Vec::with_capacity(sources.len());
        for (i, s) in sources.iter_mut().enumerate() {
            if let Some(first) = s.next() {
                heap.push((first?, i));
            }
        }
        let mut m = KMerge {
            sources,
            heap,
            cmp,
            failed: false,
        };
        for i in (0..m.heap.len() / 2).rev() {
            m.sift_down(i);
        }
        Ok(m)
    }

    /// The record `next` will return, if any.
    pub fn peek(&self) -> Option<&T> {
        if self.failed {
            return None;
        }
        self.heap.first().map(|(t, _)| t)
    }

    fn less(&self, a: usize, b: usize) -> bool {
        let (x, y) = (&self.heap[a], &self.heap[b]);
        (self.cmp)(&x.0, &y.0).then(x.1.cmp(&y.1)) == Ordering::Less
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut min = i;
            if l < n && self.less(l, min) {
                min = l;
            }
            if r < n && self.less(r, min) {
                min = r;
            }
            if min == i {
                return;
            }
            self.heap.swap(i, min);
            i = min;
        }
    }
}

impl<T: 'static, F: Fn(&T, &T) -> Ordering> Iterator for KMerge<T, F> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        if self.failed || self.heap.is_empty() {
            return None;
        }
        let src = self.heap[0].1;
        let out = match self.sources[src].next() {
            Some(Ok(item)) => std::mem::replace(&mut self.heap[0], (item, src)).0,
            Some(Err(e)) => {
                self.failed = true;
                self.sources.clear(); // drop readers (and their files) now
                return Some(Err(e));
            }
            None => {
                // Drop the exhausted source right away: this closes and deletes its file.
                self.sources[src] = Box::new(std::iter::empty());
                let last = self.heap.pop().expect("heap is not empty");
                if self.heap.is_empty() {
                    return Some(Ok(last.0));
                }
                std::mem::replace(&mut self.heap[0], last).0
            }
        };
        self.sift_down(0);
        Some(Ok(out))
    }
}

/// When a spilling structure may spill and how it merges back: the one place these
/// knobs are set (`with_limits` on [`ExternalSorter`] and [`ExternalAggregator`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillLimits {
    /// Do not spill fewer records than this...
    pub min_spill_entries: usize,
    /// ...unless they are estimated at this many bytes or more.
    pub min_spill_bytes: u64,
    /// Merge at most this many (at least 2) sources at once when reading back.
    pub merge_fan_in: usize,
}

impl Default for SpillLimits {
    fn default() -> Self {
        SpillLimits {
            min_spill_entries: MIN_SPILL_ENTRIES,
            min_spill_bytes: MIN_SPILL_BYTES,
            merge_fan_in: DEFAULT_MERGE_FAN_IN,
        }
    }
}

impl SpillLimits {
    /// Do not spill before holding `entries` records or an estimated `bytes`.
    pub fn with_min_spill(mut self, entries: usize, bytes: u64) -> Self {
        self.min_spill_entries = entries;
        self.min_spill_bytes = bytes;
        self
    }

    /// Merge at most `fan_in` (at least 2) sources at once when reading back.
    pub fn with_merge_fan_in(mut self, fan_in: usize) -> Self {
        self.merge_fan_in = fan_in.max(2);
        self
    }
}

/// Spill bookkeeping shared by the spilling structures: reservation, runs, metrics,
/// thresholds.
#[derive(Debug)]
pub(crate) struct Spiller {
    pub(crate) reservation: Reservation,
    pub(crate) spill_dir: PathBuf,
    pub(crate) runs: Vec<RunFile>,
    pub(crate) metrics: SpillMetrics,
    pub(crate) limits: SpillLimits,
    since_check: u64,
}

impl Spiller {
    pub(crate) fn new(reservation: Reservation, spill_dir: PathBuf) -> Self {
        Spiller {
            reservation,
            spill_dir,
            runs: Vec::new(),
            metrics: SpillMetrics::default(),
            limits: SpillLimits::default(),
            since_check: 0,
        }
    }

    /// Counts an insert; true when memory should be checked.
    #[inline]
    pub(crate) fn tick(&mut self) -> bool {
        self.since_check += 1;
        self.since_check >= ACCOUNT_EVERY
    }

    /// Charges `estimate` bytes to the reservation. True if the pool refused and the buffer
    /// (holding `entries` records) is above the spill floor, so the caller must spill.
    pub(crate) fn must_spill(&mut self, estimate: u64, entries: usize) -> bool {
        self.since_check = 0;
        if estimate <= self.reservation.size() {
            return false;
        }
        // A growing buffer asks for an eighth more than it holds, so the pool's shared
        // counter (an atomic both cores update) is touched once per such step, not at
        // nearly every check; if the pool cannot give the headroom, exactly the estimate.
        // Why: wordcount's map side (a new word every ~24 words) spent 2.9 % of the job
        // in `Reservation::try_grow`, waiting on that counter's cache line.
        let ahead = estimate.saturating_add(estimate / RESERVE_AHEAD_DIVISOR);
        if self.reservation.resize(ahead).is_ok() || self.reservation.resize(estimate).is_ok() {
            return false;
        }
        entries >= self.limits.min_spill_entries || estimate >= self.limits.min_spill_bytes
    }

    /// Writes `records` (already in run order) as a new run, counts it, frees the reservation.
    pub(crate) fn spill<T: Serialize>(&mut self, records: impl Iterator<Item = T>) -> Result<()> {
        let run = write_run(&self.spill_dir, records)?;
        self.metrics.spill_count += 1;
        self.metrics.bytes_spilled += run.bytes();
        tracing::debug!(
            consumer = self.reservation.consumer(),
            records = run.records(),
            bytes = run.bytes(),
            released = self.reservation.size(),
            path = %run.path().display(),
            "spilled to disk"
        );
        self.reservation.free();
        self.runs.push(run);
        Ok(())
    }

    /// Merges runs, `fan_in` at a time, until at most `fan_in - 1` are left (room for the
    /// in-memory source). `merge` turns a group of runs into one sorted stream.
    pub(crate) fn merge_down<T: Serialize>(
        &mut self,
        mut merge: impl FnMut(Vec<RunFile>) -> Result<Source<T>>,
    ) -> Result<()> {
        let fan_in = self.limits.merge_fan_in.max(2);
        while self.runs.len() > fan_in - 1 {
            let group: Vec<RunFile> = self.runs.drain(..fan_in.min(self.runs.len())).collect();
            let mut err = None;
            let merged = merge(group)?.map_while(|r| r.map_err(|e| err = Some(e)).ok());
            let run = write_run(&self.spill_dir, merged)?;
            if let Some(e) = err {
                return Err(e);
            }
            tracing::debug!(
                consumer = self.reservation.consumer(),
                records = run.records(),
                bytes = run.bytes(),
                "merged spill runs"
            );
            self.runs.push(run);
        }
        Ok(())
    }
}

fn write_run<T: Serialize>(dir: &Path, records: impl Iterator<Item = T>) -> Result<RunFile> {
    let mut w = RunWriter::create(dir)?;
    for r in records {
        w.push(&r)?;
    }
    w.finish()
}

/// An iterator that keeps a [`Reservation`] alive (and memory accounted) until it is
/// dropped.
pub(crate) struct Reserved<I> {
    pub(crate) inner: I,
    pub(crate) _reservation: Reservation,
}

impl<I: Iterator> Iterator for Reserved<I> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        self.inner.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EmberError;
    use proptest::prelude::*;

    fn src(v: Vec<i32>) -> Source<i32> {
        Box::new(v.into_iter().map(Ok))
    }

    proptest! {
        #[test]
        fn merges_sorted_sources(mut lists in prop::collection::vec(prop::collection::vec(-50i32..50, 0..40), 0..12)) {
            for l in &mut lists {
                l.sort_unstable();
            }
            let mut expected: Vec<i32> = lists.iter().flatten().copied().collect();
            expected.sort_unstable();
            let m = KMerge::new(lists.into_iter().map(src).collect(), |a: &i32, b: &i32| a.cmp(b)).unwrap();
            let got: Vec<i32> = m.map(Result::unwrap).collect();
            prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn descending_comparator_and_peek() {
        let mut m = KMerge::new(
            vec![src(vec![9, 5, 1]), src(vec![]), src(vec![8, 5, 2])],
            |a: &i32, b: &i32| b.cmp(a),
        )
        .unwrap();
        assert_eq!(m.peek(), Some(&9));
        let got: Vec<i32> = m.by_ref().map(Result::unwrap).collect();
        assert_eq!(got, vec![9, 8, 5, 5, 2, 1]);
        assert_eq!(m.peek(), None);
    }

    #[test]
    fn error_ends_the_merge() {
        let bad: Source<i32> =
            Box::new(vec![Ok(1), Err(EmberError::Cancelled("x".into())), Ok(3)].into_iter());
        let m = KMerge::new(vec![src(vec![0, 2, 4]), bad], |a: &i32, b: &i32| a.cmp(b)).unwrap();
        let got: Vec<_> = m.collect();
        // 0, then the error (the merge stops at the first error, dropping the head it held).
        assert_eq!(got.len(), 2);
        assert_eq!(*got[0].as_ref().unwrap(), 0);
        assert!(got[1].is_err());
    }

    #[test]
    fn a_growing_reservation_takes_headroom_only_when_the_pool_has_it() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::memory::MemoryPool::new(10_000);
        let mut s = Spiller::new(pool.reservation("test"), dir.path().to_path_buf());
        // Room in the pool: an eighth more than the estimate.
        assert!(!s.must_spill(4_000, 5_000));
        assert_eq!(s.reservation.size(), 4_500);
        // Within the headroom: nothing asked of the pool.
        assert!(!s.must_spill(4_400, 5_000));
        assert_eq!(s.reservation.size(), 4_500);
        assert_eq!(pool.used(), 4_500);
        // No room for the headroom: exactly the estimate.
        assert!(!s.must_spill(9_500, 5_000));
        assert_eq!(s.reservation.size(), 9_500);
        // No room for the estimate: spill (above the floor), the reservation unchanged.
        assert!(s.must_spill(10_500, 5_000));
        assert_eq!(s.reservation.size(), 9_500);
        assert_eq!(pool.used(), 9_500);
    }
}
