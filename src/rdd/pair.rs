//! Key-wise transformations on `Rdd<(K, V)>` that shuffle by key: the key-wise
//! aggregations (combine_by_key and everything built on it: reduce_by_key,
//! fold_by_key, aggregate_by_key, group_by_key), hash repartitioning, distinct, and the
//! key-wise actions (count_by_key, collect_as_map).
//!
//! Aggregations combine map-side where that shrinks data (everything but
//! group_by_key, as in Spark) and spill on both sides when memory runs short.

use std::collections::HashMap;
use std::panic::Location;

use super::ops::{Records, State};
use super::partitioning::{default_partitioner, write_routed, Routed};
use super::pass_through::PassThrough;
use super::shuffle_ops::{
    read_combined, write_combined, write_plain, AggFns, FnAgg, HashPartitioning, WritePayload,
};
use super::Rdd;
use crate::closure::{assert_stateless, conjure};
use crate::data::encode;
use crate::data::{Data, Key};
use crate::error::Result;
use crate::shuffle::{Partitioner, PartitionerKind};
use crate::task::{ComputeFn, ShuffleWriteFn};

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// The shuffle behind every key-wise aggregation, into `target`; no shuffle at all
    /// when this RDD is partitioned by `target` already (the aggregation runs within
    /// each partition, as Spark's `combineByKey` does then).
    fn aggregate_shuffle<G: AggFns<V = V>, const MAP_SIDE: bool>(
        &self,
        op: &str,
        at: &'static Location<'static>,
        state: G::S,
        target: Partitioner,
    ) -> Rdd<(K, G::C)> {
        if self.node.partitioner.as_ref() == Some(&target) {
            return self.aggregate_in_place::<G>(op, at, &state);
        }
        let n = target.num_partitions() as u32;
        let hash = *target.kind() == PartitionerKind::Hash;
        let (write, read, partitioner): (ShuffleWriteFn, ComputeFn, Vec<u8>) =
            match (hash, MAP_SIDE) {
                (true, true) => (
                    write_combined::<K, G>,
                    read_combined::<K, G, true>,
                    Vec::new(),
                ),
                (true, false) => (
                    write_plain::<K, V, HashPartitioning>,
                    read_combined::<K, G, false>,
                    Vec::new(),
                ),
                // Another partitioner (from a parent): values are routed as they are and
                // combined on the reduce side only.
                (false, _) => (
                    write_routed::<K, V>,
                    read_combined::<K, G, false>,
                    encode(op, &Routed::of(&target)),
                ),
            };
        let state_bytes = encode(op, &state);
        let payload = WritePayload {
            partitioner,
            state: state_bytes.clone(),
        };
        self.shuffle_child(op, at, n, write, encode(op, &payload), read, state_bytes)
            .with_partitioner(Some(target))
    }

    /// The partitioner a key-wise operator given no partition count uses.
    pub(crate) fn default_target(&self) -> Partitioner {
        default_partitioner::<K>(&self.ctx, &[&self.node])
    }

    /// [`combine_by_key_with`](Self::combine_by_key_with) into `target` (the closures
    /// are zero-sized: only their types are used).
    fn combine_to<S, C, Fc, Fm, Fmc>(
        &self,
        at: &'static Location<'static>,
        state: S,
        fns: (Fc, Fm, Fmc),
        target: Partitioner,
    ) -> Rdd<(K, C)>
    where
        S: State + Send + Sync,
        C: Data,
        Fc: Fn(&S, V) -> C + 'static,
        Fm: Fn(&S, C, V) -> C + 'static,
        Fmc: Fn(&S, C, C) -> C + 'static,
    {
        drop(fns);
        self.aggregate_shuffle::<FnAgg<S, V, C, Fc, Fm, Fmc>, true>(
            "combine_by_key",
            at,
            state,
            target,
        )
    }

    /// Spark's `combineByKeyWithClassTag` with state: per key, `create(&state, v)` starts a
    /// combiner, `merge_value` folds values into it, `merge_combiners` merges combiners
    /// (map-side combine on), partitioned by Spark's default partitioner (as
    /// [`combine_by_key`](Self::combine_by_key)).
    #[track_caller]
    pub fn combine_by_key_with<S, C, Fc, Fm, Fmc>(
        &self,
        state: S,
        create: Fc,
        merge_value: Fm,
        merge_combiners: Fmc,
    ) -> Rdd<(K, C)>
    where
        S: State + Send + Sync,
        C: Data,
        Fc: Fn(&S, V) -> C + 'static,
        Fm: Fn(&S, C, V) -> C + 'static,
        Fmc: Fn(&S, C, C) -> C + 'static,
    {
        let _capture_create = assert_stateless(&create);
        let _capture_merge_value = assert_stateless(&merge_value);
        let _capture_merge_combiners = assert_stateless(&merge_combiners);
        let fns = (create, merge_value, merge_combiners);
        self.combine_to(Location::caller(), state, fns, self.default_target())
    }

    /// [`combine_by_key_with`](Self::combine_by_key_with) into `partitions` hash
    /// partitions.
    #[track_caller]
    pub fn combine_by_key_with_into<S, C, Fc, Fm, Fmc>(
        &self,
        state: S,
        create: Fc,
        merge_value: Fm,
        merge_combiners: Fmc,
        partitions: usize,
    ) -> Rdd<(K, C)>
    where
        S: State + Send + Sync,
        C: Data,
        Fc: Fn(&S, V) -> C + 'static,
        Fm: Fn(&S, C, V) -> C + 'static,
        Fmc: Fn(&S, C, C) -> C + 'static,
    {
        let _capture_create = assert_stateless(&create);
        let _capture_merge_value = assert_stateless(&merge_value);
        let _capture_merge_combiners = assert_stateless(&merge_combiners);
        let fns = (create, merge_value, merge_combiners);
        self.combine_to(Location::caller(), state, fns, hash_into::<K>(partitions))
    }

    /// Per key: `create(v)` for the first value, `merge_value(c, v)` for the others,
    /// `merge_combiners(c1, c2)` across partitions; partitioned by Spark's default
    /// partitioner (this RDD's partitioner if it has one, else hash partitioning into the
    /// configured default parallelism or this RDD's partition count).
    #[track_caller]
    pub fn combine_by_key<C: Data, Fc, Fm, Fmc>(
        &self,
        create: Fc,
        merge_value: Fm,
        merge_combiners: Fmc,
    ) -> Rdd<(K, C)>
    where
        Fc: Fn(V) -> C + 'static,
        Fm: Fn(C, V) -> C + 'static,
        Fmc: Fn(C, C) -> C + 'static,
    {
        let target = self.default_target();
        self.combine_plain(create, merge_value, merge_combiners, target)
    }

    /// [`combine_by_key`](Self::combine_by_key) into `partitions` hash partitions
    /// (Spark's `combineByKey(create, mergeValue, mergeCombiners, numPartitions)`).
    #[track_caller]
    pub fn combine_by_key_into<C: Data, Fc, Fm, Fmc>(
        &self,
        create: Fc,
        merge_value: Fm,
        merge_combiners: Fmc,
        partitions: usize,
    ) -> Rdd<(K, C)>
    where
        Fc: Fn(V) -> C + 'static,
        Fm: Fn(C, V) -> C + 'static,
        Fmc: Fn(C, C) -> C + 'static,
    {
        self.combine_plain(
            create,
            merge_value,
            merge_combiners,
            hash_into::<K>(partitions),
        )
    }

    #[track_caller]
    fn combine_plain<C: Data, Fc, Fm, Fmc>(
        &self,
        create: Fc,
        merge_value: Fm,
        merge_combiners: Fmc,
        target: Partitioner,
    ) -> Rdd<(K, C)>
    where
        Fc: Fn(V) -> C + 'static,
        Fm: Fn(C, V) -> C + 'static,
        Fmc: Fn(C, C) -> C + 'static,
    {
        let _capture_create = assert_stateless(&create);
        let _capture_merge_value = assert_stateless(&merge_value);
        let _capture_merge_combiners = assert_stateless(&merge_combiners);
        self.combine_to(
            Location::caller(),
            (),
            (
                move |_: &(), v: V| conjure::<Fc>()(v),
                move |_: &(), c: C, v: V| conjure::<Fm>()(c, v),
                move |_: &(), a: C, b: C| conjure::<Fmc>()(a, b),
            ),
            target,
        )
    }

    /// Merges the values of each key with an associative, commutative `f`.
    #[track_caller]
    pub fn reduce_by_key<F: Fn(V, V) -> V + 'static>(&self, f: F) -> Rdd<(K, V)> {
        self.reduce_by_key_to(f, self.default_target(), Location::caller())
    }

    /// [`reduce_by_key`](Self::reduce_by_key) into `partitions` partitions.
    #[track_caller]
    pub fn reduce_by_key_into<F: Fn(V, V) -> V + 'static>(
        &self,
        f: F,
        partitions: usize,
    ) -> Rdd<(K, V)> {
        self.reduce_by_key_to(f, hash_into::<K>(partitions), Location::caller())
    }

    fn reduce_by_key_to<F: Fn(V, V) -> V + 'static>(
        &self,
        f: F,
        target: Partitioner,
        at: &'static Location<'static>,
    ) -> Rdd<(K, V)> {
        let _capture_f = assert_stateless(&f);
        let mut rdd =
            self.aggregate_shuffle::<PassThrough<V, F>, true>("combine_by_key", at, (), target);
        rename(&mut rdd, "reduce_by_key", at);
        rdd
    }

    /// Merges the values of each key with `f`, starting from `zero` in each partition;
    /// partitioned by Spark's default partitioner (as [`combine_by_key`](Self::combine_by_key)).
    #[track_caller]
    pub fn fold_by_key<F: Fn(V, V) -> V + 'static>(&self, zero: V, f: F) -> Rdd<(K, V)>
    where
        V: State + Send + Sync,
    {
        self.fold_by_key_to(zero, f, self.default_target())
    }

    /// [`fold_by_key`](Self::fold_by_key) into `partitions` hash partitions (Spark's
    /// `foldByKey(zero, numPartitions)(f)`).
    #[track_caller]
    pub fn fold_by_key_into<F: Fn(V, V) -> V + 'static>(
        &self,
        zero: V,
        f: F,
        partitions: usize,
    ) -> Rdd<(K, V)>
    where
        V: State + Send + Sync,
    {
        self.fold_by_key_to(zero, f, hash_into::<K>(partitions))
    }

    #[track_caller]
    fn fold_by_key_to<F: Fn(V, V) -> V + 'static>(
        &self,
        zero: V,
        f: F,
        target: Partitioner,
    ) -> Rdd<(K, V)>
    where
        V: State + Send + Sync,
    {
        let _capture_f = assert_stateless(&f);
        let at = Location::caller();
        let mut rdd = self.combine_to(
            at,
            zero,
            (
                move |z: &V, v: V| conjure::<F>()(z.clone(), v),
                move |_: &V, a: V, b: V| conjure::<F>()(a, b),
                move |_: &V, a: V, b: V| conjure::<F>()(a, b),
            ),
            target,
        );
        rename(&mut rdd, "fold_by_key", at);
        rdd
    }

    /// Per key: folds values into a `U` with `seq` starting from `zero`, merges partial
    /// results with `comb`; partitioned by Spark's default partitioner (as
    /// [`combine_by_key`](Self::combine_by_key)).
    #[track_caller]
    pub fn aggregate_by_key<U, Seq, Comb>(&self, zero: U, seq: Seq, comb: Comb) -> Rdd<(K, U)>
    where
        U: Data,
        Seq: Fn(U, V) -> U + 'static,
        Comb: Fn(U, U) -> U + 'static,
    {
        self.aggregate_by_key_to(zero, seq, comb, self.default_target())
    }

    /// [`aggregate_by_key`](Self::aggregate_by_key) into `partitions` hash partitions
    /// (Spark's `aggregateByKey(zero, numPartitions)(seq, comb)`).
    #[track_caller]
    pub fn aggregate_by_key_into<U, Seq, Comb>(
        &self,
        zero: U,
        seq: Seq,
        comb: Comb,
        partitions: usize,
    ) -> Rdd<(K, U)>
    where
        U: Data,
        Seq: Fn(U, V) -> U + 'static,
        Comb: Fn(U, U) -> U + 'static,
    {
        self.aggregate_by_key_to(zero, seq, comb, hash_into::<K>(partitions))
    }

    #[track_caller]
    fn aggregate_by_key_to<U, Seq, Comb>(
        &self,
        zero: U,
        seq: Seq,
        comb: Comb,
        target: Partitioner,
    ) -> Rdd<(K, U)>
    where
        U: Data,
        Seq: Fn(U, V) -> U + 'static,
        Comb: Fn(U, U) -> U + 'static,
    {
        let _capture_seq = assert_stateless(&seq);
        let _capture_comb = assert_stateless(&comb);
        let at = Location::caller();
        let mut rdd = self.combine_to(
            at,
            zero,
            (
                move |z: &U, v: V| conjure::<Seq>()(z.clone(), v),
                move |_: &U, a: U, v: V| conjure::<Seq>()(a, v),
                move |_: &U, a: U, b: U| conjure::<Comb>()(a, b),
            ),
            target,
        );
        rename(&mut rdd, "aggregate_by_key", at);
        rdd
    }

    /// All values of each key (no map-side combine: it would not shrink the data).
    #[track_caller]
    pub fn group_by_key(&self) -> Rdd<(K, Vec<V>)> {
        self.group_values(Location::caller(), self.default_target())
    }

    /// [`group_by_key`](Self::group_by_key) into `partitions` partitions.
    #[track_caller]
    pub fn group_by_key_into(&self, partitions: usize) -> Rdd<(K, Vec<V>)> {
        self.group_values(Location::caller(), hash_into::<K>(partitions))
    }

    pub(crate) fn group_values(
        &self,
        at: &'static Location<'static>,
        target: Partitioner,
    ) -> Rdd<(K, Vec<V>)> {
        let create = |_: &(), v: V| vec![v];
        let merge = |_: &(), mut c: Vec<V>, v: V| {
            c.push(v);
            c
        };
        let combine = |_: &(), mut a: Vec<V>, mut b: Vec<V>| {
            if a.len() < b.len() {
                std::mem::swap(&mut a, &mut b);
            }
            a.extend(b);
            a
        };
        fn typed<S, V, C, Fc, Fm, Fmc>(
            _: &Fc,
            _: &Fm,
            _: &Fmc,
        ) -> std::marker::PhantomData<FnAgg<S, V, C, Fc, Fm, Fmc>> {
            std::marker::PhantomData
        }
        let marker = typed::<(), V, Vec<V>, _, _, _>(&create, &merge, &combine);
        self.group_with_marker(marker, at, target)
    }

    fn group_with_marker<G: AggFns<V = V, S = (), C = Vec<V>>>(
        &self,
        _: std::marker::PhantomData<G>,
        at: &'static Location<'static>,
        target: Partitioner,
    ) -> Rdd<(K, Vec<V>)> {
        self.aggregate_shuffle::<G, false>("group_by_key", at, (), target)
    }

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
