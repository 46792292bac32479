//! Value-wise transformations on `Rdd<(K, V)>`, which never shuffle: value mapping per
//! record, or per partition keeping the partitioner (Spark's `preservesPartitioning`),
//! and the keys or the values alone. The key-wise shuffles are in `pair.rs`.

use super::partition_op::{Records, State};
use super::Rdd;
use crate::closure::{assert_stateless, conjure};
use crate::data::Data;

impl<K: Data, V: Data> Rdd<(K, V)> {
    /// Applies `f` to each value, keeping keys (and partitioning).
    #[track_caller]
    pub fn map_values<U: Data, F: Fn(V) -> U + 'static>(&self, f: F) -> Rdd<(K, U)> {
        let _capture_f = assert_stateless(&f);
        self.map_with((), move |_: &(), (k, v): (K, V)| (k, conjure::<F>()(v)))
            .with_partitioner(self.partitioner())
    }

    /// Transforms each partition's records as a whole, as
    /// [`map_partitions`](Rdd::map_partitions) does, and keeps the partitioner (Spark's
    /// `mapPartitions(f, preservesPartitioning = true)`), so that a following key-wise
    /// operator with the same partitioner runs without a shuffle. `f` may drop, add and
    /// change records, but every record it yields must have a key of the partition it
    /// is in (the keys it was given, say); as in Spark this is the caller's promise and
    /// is not checked: a key moved to another partition's range gives wrong results in
    /// the operators that trust the partitioner.
    #[track_caller]
    pub fn map_partitions_preserving<
        W: Data,
        I: IntoIterator<Item = (K, W)> + 'static,
        F: Fn(Records<(K, V)>) -> I + 'static,
    >(
        &self,
        f: F,
    ) -> Rdd<(K, W)> {
        let _capture_f = assert_stateless(&f);
        self.map_partitions_with_index_with((), move |_: &(), _: u32, it: Records<(K, V)>| {
            conjure::<F>()(it)
        })
        .with_partitioner(self.partitioner())
    }

    /// [`map_partitions_preserving`](Self::map_partitions_preserving) with the partition
    /// index and serialisable state: `f(&state, partition, records)` (the form of
    /// [`map_partitions_with_index_with`](Rdd::map_partitions_with_index_with)).
    #[track_caller]
    pub fn map_partitions_preserving_with<
        S: State,
        W: Data,
        I: IntoIterator<Item = (K, W)> + 'static,
        F: Fn(&S, u32, Records<(K, V)>) -> I + 'static,
    >(
        &self,
        state: S,
        f: F,
    ) -> Rdd<(K, W)> {
        self.map_partitions_with_index_with(state, f)
            .with_partitioner(self.partitioner())
    }

    /// Maps each value to zero or more values, keeping the key.
    #[track_caller]
    pub fn flat_map_values<
        U: Data,
        I: IntoIterator<Item = U> + 'static,
        F: Fn(V) -> I + 'static,
    >(
        &self,
        f: F,
    ) -> Rdd<(K, U)> {
        let _capture_f = assert_stateless(&f);
        self.flat_map_with((), move |_: &(), (k, v): (K, V)| {
            conjure::<F>()(v)
                .into_iter()
                .map(move |u| (k.clone(), u))
                .collect::<Vec<_>>()
        })
        .with_partitioner(self.partitioner())
    }

    /// The keys.
    #[track_caller]
    pub fn keys(&self) -> Rdd<K> {
        self.map(|(k, _): (K, V)| k)
    }

    /// The values.
    #[track_caller]
    pub fn values(&self) -> Rdd<V> {
        self.map(|(_, v): (K, V)| v)
    }
}
