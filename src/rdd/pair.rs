//! Shuffles by key that aggregate nothing: hash repartitioning (`partition_by`,
//! `repartition`, `coalesce_with_shuffle`), `distinct`, and the key-wise actions
//! (`count_by_key`, `collect_as_map`). The key-wise aggregations are `aggregate/`.

use std::collections::HashMap;
use std::panic::Location;

use super::partition_op::Records;
use super::Rdd;
use crate::data::{Data, Key};
use crate::error::Result;
use crate::shuffle::Partitioner;

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// Redistributes the records into `partitions` hash partitions by key; this RDD
    /// itself if it is hash-partitioned into `partitions` already (Spark's
    /// `partitionBy(new HashPartitioner(n))`).
    #[track_caller]
    pub fn partition_by(&self, partitions: usize) -> Rdd<(K, V)> {
        let at = Location::caller();
        let n = u32::try_from(partitions).unwrap_or(u32::MAX);
        let rdd = self.partition_by_partitioner("partition_by", at, &Partitioner::hash::<K>(n));
        if partitions == 0 {
            return rdd.invalid("number of partitions must be positive, got 0");
        }
        rdd
    }

    /// Number of records per key, brought to the driver.
    #[track_caller]
    pub fn count_by_key(&self) -> Result<HashMap<K, u64>> {
        Ok(self
            .map_values(|_: V| 1u64)
            .reduce_by_key(|a: u64, b: u64| a + b)
            .collect()?
            .into_iter()
            .collect())
    }

    /// The records as a map (for duplicate keys, one of the values is kept).
    pub fn collect_as_map(&self) -> Result<HashMap<K, V>> {
        Ok(self.collect()?.into_iter().collect())
    }
}

impl<T: Key> Rdd<T> {
    /// The distinct records. On an RDD that has a partitioner (equal records are then in
    /// one partition) duplicates are removed within each partition and the partitioner
    /// is kept, with no shuffle, as in Spark; otherwise through a hash shuffle into as
    /// many partitions.
    #[track_caller]
    pub fn distinct(&self) -> Rdd<T> {
        let at = Location::caller();
        if self.node.partitioner.is_some() {
            return self.distinct_in_place(at);
        }
        let mut rdd = self
            .map(|x: T| (x, ()))
            .reduce_by_key_into(|_: (), _: ()| (), self.num_partitions());
        rename(&mut rdd, "distinct", at);
        rdd.keys()
    }

    /// [`distinct`](Self::distinct) into `partitions` partitions (Spark's `distinct(n)`):
    /// without a shuffle when the RDD has a partitioner and already `partitions`
    /// partitions.
    #[track_caller]
    pub fn distinct_into(&self, partitions: usize) -> Rdd<T> {
        let at = Location::caller();
        if self.node.partitioner.is_some() && partitions == self.node.num_partitions as usize {
            return self.distinct_in_place(at);
        }
        let mut rdd = self
            .map(|x: T| (x, ()))
            .reduce_by_key_into(|_: (), _: ()| (), partitions);
        rename(&mut rdd, "distinct", at);
        rdd.keys()
    }
}

impl<T: Data> Rdd<T> {
    /// Exactly `partitions` partitions of roughly equal size, through a shuffle.
    #[track_caller]
    pub fn repartition(&self, partitions: usize) -> Rdd<T> {
        let at = Location::caller();
        let keyed = self.map_partitions_with_index(|i: u32, it: Records<T>| {
            let base = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            it.enumerate()
                .map(move |(j, x)| (base.wrapping_add(j as u64), x))
        });
        let mut shuffled = keyed.partition_by(partitions);
        rename(&mut shuffled, "repartition", at);
        let mut out = shuffled.values();
        if partitions == 0 {
            rename(&mut out, "repartition", at);
            return out.invalid("number of partitions must be positive, got 0");
        }
        out
    }
}

impl<T: Data> Rdd<T> {
    /// Spark's `coalesce(n, shuffle = true)`: `partitions` partitions through a shuffle,
    /// more or fewer than now (the same as [`repartition`](Self::repartition)).
    #[track_caller]
    pub fn coalesce_with_shuffle(&self, partitions: usize) -> Rdd<T> {
        let at = Location::caller();
        let mut rdd = self.repartition(partitions);
        rename(&mut rdd, "coalesce", at);
        rdd
    }
}

/// Hash partitioning into `partitions` partitions (a count past `u32::MAX` is capped).
pub(super) fn hash_into<K: std::hash::Hash + 'static>(partitions: usize) -> Partitioner {
    Partitioner::hash::<K>(u32::try_from(partitions).unwrap_or(u32::MAX))
}

/// Renames a freshly made node (it has no other handle yet) to the public operator.
pub(super) fn rename<T>(rdd: &mut Rdd<T>, op: &str, at: &Location<'_>) {
    if let Some(node) = std::sync::Arc::get_mut(&mut rdd.node) {
        node.name = super::op_name(op, at);
    }
}
