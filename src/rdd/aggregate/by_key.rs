//! The public key-wise aggregations of `Rdd<(K, V)>` (Spark's `combineByKey`,
//! `reduceByKey`, `foldByKey`, `aggregateByKey`, `groupByKey`), each with an `_into`
//! variant taking a partition count; all define their shuffle through
//! `Rdd::aggregate_shuffle`.

use std::panic::Location;

use super::pass_through::PassThrough;
use super::{AggFns, FnAgg};
use crate::closure::{assert_stateless, conjure};
use crate::data::{Data, Key};
use crate::rdd::pair::{hash_into, rename};
use crate::rdd::partition_op::State;
use crate::rdd::partitioning::default_partitioner;
use crate::rdd::Rdd;
use crate::shuffle::Partitioner;

impl<K: Key, V: Data> Rdd<(K, V)> {
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
}
