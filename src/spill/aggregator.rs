//! What an aggregation does with a key's values, apart from where it keeps them: the
//! [`Aggregate`] trait that the in-memory table (`table.rs`), the spilling map
//! (`aggregate.rs`) and the merge of its runs (`aggregate/merge.rs`) all fold with.
//!
//! Invariant: an implementation is pure — the same calls in the same order give the same
//! combiner — so a recomputed partition folds to the same answer.

/// How values of type `V` combine into combiners of type `C` per key `K`
/// (Spark's `createCombiner` / `mergeValue` / `mergeCombiners`).
pub trait Aggregate<K, V, C>: Send + Sync + 'static {
    /// A combiner for the first value of a key.
    fn create(&self, key: &K, v: V) -> C;
    /// Folds another value into a combiner.
    fn merge_value(&self, c: &mut C, v: V);
    /// Folds another combiner for the same key into a combiner.
    fn merge_combiners(&self, c: &mut C, other: C);
}
