//! Global sorts: `sort_by_key` and `sort_by`. As in Spark, a sampling job first picks
//! range bounds from a sample of the keys, so that each output partition holds a
//! contiguous key range of similar size (unlike Spark's, it reads text input only in
//! windows spread over each split, see `source.rs`); each reducer then sorts its range (spilling
//! sorted runs under memory pressure), so reading the partitions in order yields all
//! records in key order.

use std::panic::Location;

use rand::{Rng, SeedableRng};

use super::ops::Records;
use super::shuffle_ops::{read_sorted, write_plain, WritePayload};
use super::{encode, Rdd};
use crate::data::Data;
use crate::error::Result;
use crate::plan::op::{assert_stateless, conjure};
use crate::shuffle::{Partitioner, RangePartitioner};
use crate::task::{ComputeFn, ShuffleWriteFn};

impl<K: Data + Ord, V: Data> Rdd<(K, V)> {
    /// All records sorted by key into at most `partitions` range partitions (ascending or
    /// not): as in Spark, a sampling job runs right away to choose the ranges, and the
    /// result has as many partitions as distinct bounds were found plus one (one for an
    /// empty input), with a range [`Partitioner`].
    #[track_caller]
    pub fn sort_by_key(&self, ascending: bool, partitions: usize) -> Result<Rdd<(K, V)>> {
        let at = Location::caller();
        if partitions == 0 && self.num_partitions() > 0 {
            return Err(crate::error::EmberError::InvalidArgument(format!(
                "sort_by_key at {}:{}: cannot sort {} partitions into 0 partitions",
                at.file(),
                at.line(),
                self.num_partitions()
            )));
        }
        let n = u32::try_from(partitions).unwrap_or(u32::MAX);
        let per_partition = (60 * n as usize / self.num_partitions().max(1)).clamp(20, 10_000);
        // No partitions, nothing to sample (and no job to run).
        let sample: Vec<K> = if self.num_partitions() == 0 {
            Vec::new()
        } else {
            self.map_partitions_with_index_with(
                per_partition,
                |&size: &usize, i: u32, it: Records<(K, V)>| {
                    reservoir(it.map(|(k, _)| k), size, u64::from(i))
                },
            )
            .collect_sample()?
        };
        let partitioner = RangePartitioner::from_sample(sample, n, !ascending);
        // As Spark: as many partitions as the bounds allow (bounds + 1; 1 for no input).
        let n = partitioner.num_partitions();
        let write: ShuffleWriteFn = write_plain::<K, V, RangePartitioner<K>>;
        let read: ComputeFn = if ascending {
            read_sorted::<K, V, false>
        } else {
            read_sorted::<K, V, true>
        };
        let payload = WritePayload {
            partitioner: encode("sort_by_key", &partitioner),
            state: Vec::new(),
        };
        Ok(self
            .shuffle_child(
                "sort_by_key",
                at,
                n,
                write,
                encode("sort_by_key", &payload),
                read,
                Vec::new(),
            )
            .with_partitioner(Some(Partitioner::range(&partitioner))))
    }
}

impl<T: Data> Rdd<T> {
    /// All records sorted by the key `f` computes, into `partitions` partitions.
    #[track_caller]
    pub fn sort_by<K: Data + Ord, F: Fn(&T) -> K + Copy + 'static>(
        &self,
        f: F,
        ascending: bool,
        partitions: usize,
    ) -> Result<Rdd<T>> {
        assert_stateless(&f);
        let keyed = self.map(move |x: T| (conjure::<F>()(&x), x));
        Ok(keyed.sort_by_key(ascending, partitions)?.values())
    }
}

/// Uniform reservoir sample of at most `size` items (Algorithm R, seeded).
fn reservoir<K>(it: impl Iterator<Item = K>, size: usize, seed: u64) -> Vec<K> {
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed ^ 0x5eed_5a3b_1e00_0000);
    let mut out = Vec::with_capacity(size);
    for (i, k) in it.enumerate() {
        if i < size {
            out.push(k);
        } else {
            let j = rng.gen_range(0..=i);
            if j < size {
                out[j] = k;
            }
        }
    }
    out
}
