//! The external sorter behind `sort_by_key`: buffers `(K, V)` pairs in a `Vec`, spills
//! sorted runs when the memory pool says no, and k-way merges them when read back.
//!
//! Invariants:
//! * Every run, and the buffer at read-back time, is sorted by key in the requested
//!   direction (`sort_unstable_by`). Records with equal keys may come out in any order.
//! * Memory charged to the reservation is `capacity * size_of::<(K, V)>()` plus the sampled
//!   encoded size of the records held. A spill drops the buffer's allocation and frees the
//!   reservation. A full buffer asks the pool for its growth (the old allocation and the
//!   new one of twice its size are both live while it reallocates) before it grows, and
//!   spills instead when refused.
//! * Memory accounting, the spill floor and merge fan-in are described in `spill/mod.rs`.
//!   After any `Err` the sorter must be dropped: a failed spill loses the buffer.

use std::cmp::Ordering;
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::run::RunFile;
use super::size::SizeEstimator;
use super::{KMerge, Reserved, Source, SpillLimits, SpillMetrics, Spiller};
use crate::error::Result;
use crate::memory::Reservation;

/// The key order for the k-way merge of runs (a heap compares far fewer pairs than a
/// sort, so a function pointer costs little there).
fn key_cmp<K: Ord, V>(descending: bool) -> fn(&(K, V), &(K, V)) -> Ordering {
    if descending {
        |a, b| b.0.cmp(&a.0)
    } else {
        |a, b| a.0.cmp(&b.0)
    }
}

/// Sorts a buffer by key: a radix sort for a primitive integer key when `reservation`
/// takes its scratch buffer (`super::radix`), else the comparison sort.
fn sort_final<K: Ord + 'static, V>(
    buf: &mut Vec<(K, V)>,
    descending: bool,
    reservation: &mut Reservation,
) {
    if buf.len() >= super::radix::MIN_RADIX_RECORDS
        && super::radix::sort(buf, descending, reservation)
    {
        return;
    }
    sort_buffer(buf, descending);
}

/// Sorts a buffer by key with the comparison inlined into the sort. Why: sort's profile
/// (the kv set, local[2]) had 23 % of the job in `quicksort` and in the comparison it
/// called through a function pointer for every pair.
fn sort_buffer<K: Ord, V>(buf: &mut [(K, V)], descending: bool) {
    if descending {
        buf.sort_unstable_by(|a, b| b.0.cmp(&a.0));
    } else {
        buf.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    }
}

/// Sorts `(K, V)` pairs by key, spilling to disk under memory pressure.
pub struct ExternalSorter<K, V> {
    buf: Vec<(K, V)>,
    descending: bool,
    estimator: SizeEstimator,
    spiller: Spiller,
}

impl<K, V> ExternalSorter<K, V>
where
    K: Ord + Serialize + DeserializeOwned + Send + 'static,
    V: Serialize + DeserializeOwned + Send + 'static,
{
    /// An empty sorter that charges its memory to `reservation` and spills into `spill_dir`
    /// (created if missing). `descending` reverses the key order.
    pub fn new(reservation: Reservation, spill_dir: PathBuf, descending: bool) -> Self {
        ExternalSorter {
            buf: Vec::new(),
            descending,
            estimator: SizeEstimator::new::<(K, V)>(0),
            spiller: Spiller::new(reservation, spill_dir),
        }
    }

    /// Sets when it may spill and how it merges back (default [`SpillLimits::default`]).
    pub fn with_limits(mut self, limits: SpillLimits) -> Self {
        self.spiller.limits = limits;
        self
    }

    /// Adds a record.
    pub fn insert(&mut self, k: K, v: V) -> Result<()> {
        if self.buf.len() == self.buf.capacity() && self.must_spill_to_grow() {
            self.spill()?;
        }
        self.buf.push((k, v));
        if let Some(last) = self.buf.last() {
            self.estimator.update(last);
        }
        if self.spiller.tick()
            && self
                .spiller
                .must_spill(self.estimated_bytes(), self.buf.len())
        {
            self.spill()?;
        }
        Ok(())
    }

    /// Spills so far.
    pub fn metrics(&self) -> SpillMetrics {
        self.spiller.metrics
    }

    /// Records currently buffered in memory.
    pub fn in_memory_len(&self) -> usize {
        self.buf.len()
    }

    /// Estimated bytes of the buffer: sampled records plus unused capacity.
    pub fn estimated_bytes(&self) -> u64 {
        let len = self.buf.len() as u64;
        let spare = (self.buf.capacity() as u64 - len) * std::mem::size_of::<(K, V)>() as u64;
        self.estimator.estimate(len) + spare
    }

    /// Whether the full buffer must spill instead of growing. Growing reallocates: for a
    /// moment the old allocation and one of twice its size are both live, so the growth is
    /// asked of the pool, old and new together, before it happens (charging only after it
    /// left a sorter at three times its capacity unaccounted while it copied).
    fn must_spill_to_grow(&mut self) -> bool {
        let cap = self.buf.capacity();
        if cap == 0 {
            return false;
        }
        let new_bytes = (2 * cap * std::mem::size_of::<(K, V)>()) as u64;
        self.spiller
            .must_spill(self.estimated_bytes() + new_bytes, self.buf.len())
    }

    fn spill(&mut self) -> Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        sort_buffer(&mut buf, self.descending);
        self.spiller.spill(buf.into_iter())
    }

    /// Consumes the sorter and yields all records in key order. Streams from disk if
    /// anything was spilled. With more runs than the merge fan-in, intermediate merge passes
    /// run here before returning. The iterator keeps the reservation and the spill files
    /// until it is dropped.
    #[allow(clippy::type_complexity)]
    pub fn into_sorted_iter(self) -> Result<Box<dyn Iterator<Item = Result<(K, V)>> + Send>> {
        let ExternalSorter {
            mut buf,
            descending,
            mut spiller,
            ..
        } = self;
        sort_final(&mut buf, descending, &mut spiller.reservation);
        if spiller.runs.is_empty() {
            return Ok(Box::new(Reserved {
                inner: buf.into_iter().map(Ok),
                _reservation: spiller.reservation,
            }));
        }
        let merge_runs =
            |runs: Vec<RunFile>, first: Option<Source<(K, V)>>| -> Result<KMerge<_, _>> {
                let mut sources: Vec<Source<(K, V)>> = first.into_iter().collect();
                for run in runs {
                    sources.push(Box::new(run.reader::<(K, V)>()?));
                }
                KMerge::new(sources, key_cmp(descending))
            };
        spiller.merge_down(|runs| Ok(Box::new(merge_runs(runs, None)?) as Source<(K, V)>))?;
        let runs = std::mem::take(&mut spiller.runs);
        let merged = merge_runs(runs, Some(Box::new(buf.into_iter().map(Ok))))?;
        Ok(Box::new(Reserved {
            inner: merged,
            _reservation: spiller.reservation,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryPool;
    use crate::spill::test_data::records;
    use proptest::prelude::*;
    use std::path::Path;

    fn files_in(dir: &Path) -> usize {
        std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
    }

    /// Checks `got` is ordered by key and holds exactly the records of `input`.
    fn check_sorted<K: Ord + Clone + std::fmt::Debug, V: Ord + Clone + std::fmt::Debug>(
        got: Vec<(K, V)>,
        mut input: Vec<(K, V)>,
        descending: bool,
    ) {
        assert!(got.windows(2).all(|w| if descending {
            w[0].0 >= w[1].0
        } else {
            w[0].0 <= w[1].0
        }));
        let mut got = got;
        got.sort_unstable();
        input.sort_unstable();
        assert_eq!(got, input);
    }

    fn sort_all(
        recs: &[(u64, String)],
        pool: &std::sync::Arc<MemoryPool>,
        dir: &Path,
        descending: bool,
    ) -> (Vec<(u64, String)>, SpillMetrics) {
        let mut s = ExternalSorter::new(pool.reservation("sort"), dir.into(), descending);
        for (k, v) in recs.iter().cloned() {
            s.insert(k, v).unwrap();
        }
        let m = s.metrics();
        let got = s
            .into_sorted_iter()
            .unwrap()
            .collect::<Result<Vec<_>>>()
            .unwrap();
        (got, m)
    }

    /// An integer key is radix-sorted when the pool takes the scratch buffer, and sorted
    /// by comparison when it refuses: the same order of keys and the same records.
    #[test]
    fn integer_keys_sort_with_and_without_the_radix_scratch() {
        let dir = tempfile::tempdir().unwrap();
        let recs = records(20_000, 3_000, 11);
        // A pool far too small for the buffer, under a spill floor the buffer never
        // reaches: nothing spills, and the scratch is refused.
        for (limit, floor) in [
            (1u64 << 30, crate::spill::MIN_SPILL_ENTRIES),
            (4096, usize::MAX),
        ] {
            let pool = MemoryPool::new(limit);
            for descending in [false, true] {
                let mut s =
                    ExternalSorter::new(pool.reservation("sort"), dir.path().into(), descending)
                        .with_limits(SpillLimits::default().with_min_spill(floor, u64::MAX));
                for (k, v) in recs.iter().cloned() {
                    s.insert(k, v).unwrap();
                }
                assert_eq!(s.metrics(), SpillMetrics::default(), "no spill at {limit}");
                let got = s
                    .into_sorted_iter()
                    .unwrap()
                    .collect::<Result<Vec<_>>>()
                    .unwrap();
                check_sorted(got, recs.clone(), descending);
            }
            assert_eq!(pool.used(), 0, "the scratch's reservation is given back");
        }
    }

    #[test]
    fn large_limit_does_not_spill() {
        let dir = tempfile::tempdir().unwrap();
        let pool = MemoryPool::new(1 << 30);
        let recs = records(50_000, 5_000, 7);
        for descending in [false, true] {
            let (got, m) = sort_all(&recs, &pool, dir.path(), descending);
            assert_eq!(m, SpillMetrics::default());
            check_sorted(got, recs.clone(), descending);
        }
        assert_eq!(pool.used(), 0);
        assert_eq!(files_in(dir.path()), 0);
    }

    #[test]
    fn tiny_limit_spills_and_merges_correctly() {
        let dir = tempfile::tempdir().unwrap();
        let pool = MemoryPool::new(64 << 10);
        let recs = records(200_000, 10_000, 8);
        // Descending takes the same path with the other comparator: a smaller input will do.
        for (descending, n) in [(false, 200_000), (true, 50_000)] {
            let recs = recs[..n].to_vec();
            let (got, m) = sort_all(&recs, &pool, dir.path(), descending);
            assert!(m.spill_count > 20 && m.bytes_spilled > 0, "{m:?}");
            check_sorted(got, recs, descending);
            assert_eq!(files_in(dir.path()), 0);
        }
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn dropping_a_partly_read_iterator_removes_files() {
        let dir = tempfile::tempdir().unwrap();
        let pool = MemoryPool::new(8 << 10);
        let mut s = ExternalSorter::new(pool.reservation("sort"), dir.path().into(), false)
            .with_limits(SpillLimits::default().with_min_spill(500, u64::MAX));
        for (k, v) in records(10_000, 10_000, 9) {
            s.insert(k, v).unwrap();
        }
        assert!(s.metrics().spill_count >= 10);
        let mut it = s.into_sorted_iter().unwrap();
        it.next().unwrap().unwrap();
        assert!(files_in(dir.path()) > 0);
        drop(it);
        assert_eq!(files_in(dir.path()), 0);
        assert_eq!(pool.used(), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn matches_sorted_vec(
            recs in prop::collection::vec((any::<i16>(), "[a-z]{0,8}"), 0..2000),
            fan_in in 2usize..6,
            min_spill in 1usize..300,
            descending in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let pool = MemoryPool::new(1 << 10);
            let mut s = ExternalSorter::new(pool.reservation("sort"), dir.path().into(), descending)
                .with_limits(
                SpillLimits::default()
                    .with_min_spill(min_spill, u64::MAX)
                    .with_merge_fan_in(fan_in),
            );
            for (k, v) in recs.iter().cloned() {
                s.insert(k, v).unwrap();
            }
            let got = s.into_sorted_iter().unwrap().collect::<Result<Vec<_>>>().unwrap();
            check_sorted(got, recs, descending);
            prop_assert_eq!(files_in(dir.path()), 0);
        }
    }
}
