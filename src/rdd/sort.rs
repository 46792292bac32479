//! Global sorts: `sort_by_key` and `sort_by`. As in Spark, a sampling job first picks
//! range bounds from a sample of the keys, so that each output partition holds a
//! contiguous key range of similar size (unlike Spark's, it reads text input only in
//! windows spread over each split, see `source.rs`); each reducer then sorts its range (spilling
//! sorted runs under memory pressure), so reading the partitions in order yields all
//! records in key order. Also the other ordered operators of Spark's
//! `OrderedRDDFunctions`: `filter_by_range` (which, on a range-partitioned RDD, computes
//! only the partitions whose ranges meet the bounds) and
//! `repartition_and_sort_within_partitions` (a shuffle by a partitioner whose reducers
//! sort their records by key; on data already partitioned that way, a sort of each
//! partition in place, as Spark does since SPARK-32384).

use std::panic::Location;

use rand::{Rng, SeedableRng};

use std::rc::Rc;

use ember_proto::RddNode;

use super::partition_op::Records;
use super::partitioning::plain_write;
use super::Rdd;
use crate::closure::{assert_stateless, conjure};
use crate::data::{decode, encode};
use crate::data::{Data, Key};
use crate::error::{EmberError, Result};
use crate::shuffle::read_blocks;
use crate::shuffle::write::{write_plain, WritePayload};
use crate::shuffle::{KeyPartitioner, Partitioner, PartitionerKind, RangePartitioner};
use crate::spill::ExternalSorter;
use crate::task::{into_batches, record_spills};
use crate::task::{Batches, ComputeFn, Erased, ShuffleWriteFn, TaskContext};

impl<K: Data + Ord, V: Data> Rdd<(K, V)> {
    /// All records sorted by key (ascending or not), into as many range partitions as
    /// this RDD has (Spark's `sortByKey(ascending)`, whose partition count defaults to
    /// the parent's); [`sort_by_key_into`](Self::sort_by_key_into) takes the count.
    ///
    /// As in Spark, a sampling job runs right away to choose the ranges, and the result
    /// has as many partitions as distinct bounds were found plus one (one for an empty
    /// input), with a range [`Partitioner`]. If that job fails, the returned RDD fails
    /// every action over it with the sampling job's error (as `zip_with_index` does with
    /// its counting job), so a sort reads as any other step of a chain:
    ///
    /// ```no_run
    /// # let ctx = ember::Context::local(2).unwrap();
    /// let sorted = ctx
    ///     .parallelize(vec![(3, 'c'), (1, 'a'), (2, 'b')], 2)
    ///     .sort_by_key(true)
    ///     .collect()?;
    /// assert_eq!(sorted, vec![(1, 'a'), (2, 'b'), (3, 'c')]);
    /// # Ok::<(), ember::EmberError>(())
    /// ```
    #[track_caller]
    pub fn sort_by_key(&self, ascending: bool) -> Rdd<(K, V)> {
        self.sort_to(ascending, self.num_partitions(), Location::caller())
    }

    /// [`sort_by_key`](Self::sort_by_key) into at most `partitions` range partitions
    /// (Spark's `sortByKey(ascending, numPartitions)`); 0 partitions for a non-empty
    /// RDD is an invalid-argument error at the first action.
    #[track_caller]
    pub fn sort_by_key_into(&self, ascending: bool, partitions: usize) -> Rdd<(K, V)> {
        self.sort_to(ascending, partitions, Location::caller())
    }

    fn sort_to(
        &self,
        ascending: bool,
        partitions: usize,
        at: &'static Location<'static>,
    ) -> Rdd<(K, V)> {
        let n = u32::try_from(partitions).unwrap_or(u32::MAX);
        if partitions == 0 && self.num_partitions() > 0 {
            return self
                .range_shuffle(
                    at,
                    RangePartitioner::from_sample(Vec::new(), 1, false),
                    ascending,
                )
                .invalid(format!(
                    "cannot sort {} partitions into 0 partitions",
                    self.num_partitions()
                ));
        }
        let per_partition = (60 * n as usize / self.num_partitions().max(1)).clamp(20, 10_000);
        // No partitions, nothing to sample (and no job to run).
        let sample: Result<Vec<K>> = if self.num_partitions() == 0 {
            Ok(Vec::new())
        } else {
            self.map_partitions_with_index_with(
                per_partition,
                |&size: &usize, i: u32, it: Records<(K, V)>| {
                    reservoir(it.map(|(k, _)| k), size, u64::from(i))
                },
            )
            .collect_sample()
        };
        match sample {
            Ok(sample) => self.range_shuffle(
                at,
                RangePartitioner::from_sample(sample, n, !ascending),
                ascending,
            ),
            Err(e) => self
                .range_shuffle(
                    at,
                    RangePartitioner::from_sample(Vec::new(), n, !ascending),
                    ascending,
                )
                .invalid(format!(
                    "sampling the keys to choose the ranges failed: {e}"
                )),
        }
    }

    /// The shuffle of a sort by `partitioner`'s ranges: as Spark, as many partitions as
    /// its bounds allow (bounds + 1; 1 for no input), each sorted by its reducer.
    fn range_shuffle(
        &self,
        at: &'static Location<'static>,
        partitioner: RangePartitioner<K>,
        ascending: bool,
    ) -> Rdd<(K, V)> {
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
        self.shuffle_child(
            "sort_by_key",
            at,
            n,
            write,
            encode("sort_by_key", &payload),
            read,
            Vec::new(),
        )
        .with_partitioner(Some(Partitioner::range(&partitioner)))
    }
}

impl<K: Data + Ord, V: Data> Rdd<(K, V)> {
    /// The records with `lower <= key <= upper` (Spark's `filterByRange`). On an RDD
    /// partitioned by ranges (a `sort_by_key` result) only the partitions whose range
    /// can hold such keys are kept, so the others are never computed; the result then
    /// has that many partitions, in order.
    #[track_caller]
    pub fn filter_by_range(&self, lower: K, upper: K) -> Rdd<(K, V)> {
        let at = Location::caller();
        let pruned = match self.node.partitioner.as_ref() {
            Some(p) if matches!(p.kind(), PartitionerKind::Range { .. }) => {
                match (p.partition_of(&lower), p.partition_of(&upper)) {
                    (Some(l), Some(u)) => {
                        let keep: Vec<u32> = (l.min(u)..=l.max(u)).collect();
                        let compute: ComputeFn = pruned_compute::<(K, V)>;
                        Some(self.narrow_child::<(K, V)>(
                            "filter_by_range",
                            at,
                            vec![self.node.clone()],
                            false,
                            keep.len() as u32,
                            compute,
                            encode("filter_by_range", &keep),
                        ))
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        let base = pruned.as_ref().unwrap_or(self);
        let mut out = base.filter_with((lower, upper), |(lo, hi): &(K, K), (k, _): &(K, V)| {
            k >= lo && k <= hi
        });
        super::pair::rename(&mut out, "filter_by_range", at);
        out
    }
}

impl<K: Key + Ord, V: Data> Rdd<(K, V)> {
    /// Redistributes the records into `partitions` hash partitions and sorts each
    /// partition by key (Spark's `repartitionAndSortWithinPartitions`): cheaper than a
    /// `partition_by` followed by sorting, as the reducers sort while they read
    /// (spilling sorted runs under memory pressure). Records with equal keys come in no
    /// particular order.
    #[track_caller]
    pub fn repartition_and_sort_within_partitions(&self, partitions: usize) -> Rdd<(K, V)> {
        let n = u32::try_from(partitions).unwrap_or(u32::MAX);
        let rdd = self.sort_by_partitioner(Location::caller(), &Partitioner::hash::<K>(n));
        if partitions == 0 {
            return rdd.invalid("number of partitions must be positive, got 0");
        }
        rdd
    }

    /// [`repartition_and_sort_within_partitions`](Self::repartition_and_sort_within_partitions)
    /// by a user partitioner.
    #[track_caller]
    pub fn repartition_and_sort_within_partitions_with<P: KeyPartitioner<K>>(
        &self,
        partitioner: P,
    ) -> Rdd<(K, V)> {
        let p = Partitioner::custom::<K, P>(&partitioner);
        let rdd = self.sort_by_partitioner(Location::caller(), &p);
        if partitioner.num_partitions() == 0 {
            return rdd.invalid("the partitioner has 0 partitions");
        }
        rdd
    }

    /// The records partitioned by `p`, each partition sorted by key: through a shuffle
    /// whose reducers sort, or, on data already partitioned by `p` (SPARK-32384), by
    /// sorting each partition in place, keeping the partitioner, with no shuffle.
    fn sort_by_partitioner(&self, at: &'static Location<'static>, p: &Partitioner) -> Rdd<(K, V)> {
        let op = "repartition_and_sort_within_partitions";
        if self.node.partitioner.as_ref() == Some(p) {
            let compute: ComputeFn = sort_within_partition::<K, V>;
            return self.within_partitions(op, at, compute, Vec::new());
        }
        let (write, payload) = plain_write::<K, V>(op, p);
        let read: ComputeFn = read_sorted::<K, V, false>;
        self.shuffle_child(
            op,
            at,
            p.num_partitions() as u32,
            write,
            payload,
            read,
            Vec::new(),
        )
        .with_partitioner(Some(p.clone()))
    }
}

/// One partition's records sorted by key (spilling sorted runs under memory pressure).
fn sort_within_partition<K: Data + Ord, V: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let parent = TaskContext::dep_parent(node, 0)?;
    let mut sorter: ExternalSorter<K, V> =
        ExternalSorter::new(tc.reservation("sort"), tc.env.spill_dir(), false);
    for batch in tc.compute::<(K, V)>(parent, part)? {
        for (k, v) in batch? {
            sorter.insert(k, v)?;
        }
    }
    record_spills(tc, sorter.metrics());
    let out: Batches<(K, V)> = into_batches(sorter.into_sorted_iter()?);
    Ok(Box::new(out))
}

/// Partition `i` of a pruned RDD: partition `keep[i]` of its parent.
fn pruned_compute<T: Data>(tc: &Rc<TaskContext>, node: &RddNode, part: u32) -> Result<Erased> {
    let keep: Vec<u32> = decode("filter_by_range", &node.payload)?;
    let Some(&p) = keep.get(part as usize) else {
        return Err(EmberError::Plan(format!(
            "filter_by_range has no partition {part}"
        )));
    };
    let parent = TaskContext::dep_parent(node, 0)?;
    Ok(Box::new(tc.compute::<T>(parent, p)?))
}

impl<T: Data> Rdd<T> {
    /// All records sorted by the key `f` computes, into as many range partitions as
    /// this RDD has (Spark's `sortBy(f, ascending)`); see
    /// [`sort_by_key`](Rdd::sort_by_key) for the sampling job it runs.
    #[track_caller]
    pub fn sort_by<K: Data + Ord, F: Fn(&T) -> K + 'static>(
        &self,
        f: F,
        ascending: bool,
    ) -> Rdd<T> {
        self.sort_by_into(f, ascending, self.num_partitions())
    }

    /// [`sort_by`](Self::sort_by) into at most `partitions` range partitions (Spark's
    /// `sortBy(f, ascending, numPartitions)`).
    #[track_caller]
    pub fn sort_by_into<K: Data + Ord, F: Fn(&T) -> K + 'static>(
        &self,
        f: F,
        ascending: bool,
        partitions: usize,
    ) -> Rdd<T> {
        let _capture_f = assert_stateless(&f);
        let at = Location::caller();
        let keyed = self.map(move |x: T| (conjure::<F>()(&x), x));
        let mut sorted = keyed.sort_to(ascending, partitions, at);
        super::pair::rename(&mut sorted, "sort_by", at);
        sorted.values()
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

/// Reduce side of a sort: every record of the partition in key order, spilling runs.
pub(crate) fn read_sorted<K: Data + Ord, V: Data, const DESC: bool>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let mut sorter: ExternalSorter<K, V> =
        ExternalSorter::new(tc.reservation("sort"), tc.env.spill_dir(), DESC);
    for r in read_blocks::<(K, V)>(tc, node, part)? {
        let (k, v) = r?;
        sorter.insert(k, v)?;
    }
    record_spills(tc, sorter.metrics());
    let out: Batches<(K, V)> = into_batches(sorter.into_sorted_iter()?);
    Ok(Box::new(out))
}
