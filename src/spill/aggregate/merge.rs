//! The read-back side of the external aggregation map: turns an in-memory table into a
//! hash-sorted source and k-way merges it with the spilled runs, combining equal keys.
//!
//! Invariants:
//! * Every source is sorted by the aggregator's hash; runs store `(K, C)` without hashes,
//!   so a run's hashes are recomputed here with the same hasher as it is read.
//! * The merge takes every entry with the smallest hash from all sources, groups them by
//!   key equality (hash collisions are handled, not assumed away), merges the combiners,
//!   and yields each key exactly once.

use std::cmp::Ordering;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::error::Result;
use crate::spill::aggregator::Aggregate;
use crate::spill::run::RunFile;
use crate::spill::{KMerge, Source};

pub(super) type Entry<K, C> = (u64, K, C);
type HashCmp<K, C> = fn(&Entry<K, C>, &Entry<K, C>) -> Ordering;

/// Merges the hash-sorted `first` source (the in-memory table, if any) with `runs`,
/// recomputing each run record's hash with `hasher`.
pub(super) fn merge_runs<K, V, C, A, S>(
    runs: Vec<RunFile>,
    first: Option<Source<Entry<K, C>>>,
    hasher: &S,
    agg: &Arc<A>,
) -> Result<AggMerge<K, V, C, A>>
where
    K: Hash + DeserializeOwned + Send + 'static,
    C: DeserializeOwned + Send + 'static,
    S: BuildHasher + Clone + Send + 'static,
{
    let mut sources: Vec<Source<Entry<K, C>>> = first.into_iter().collect();
    for run in runs {
        let h = hasher.clone();
        let reader = run.reader::<(K, C)>()?;
        sources.push(Box::new(
            reader.map(move |r| r.map(|(k, c)| (h.hash_one(&k), k, c))),
        ));
    }
    Ok(AggMerge::<K, V, C, A> {
        merge: KMerge::new(sources, by_hash::<K, C> as HashCmp<K, C>)?,
        agg: Arc::clone(agg),
        group: Vec::new(),
        _values: PhantomData,
    })
}

/// Collects `entries` into a vector of `(hash, key, combiner)` sorted by hash.
pub(super) fn sorted_by_hash<K: Hash, C, S: BuildHasher>(
    entries: impl Iterator<Item = (K, C)>,
    hasher: &S,
) -> Vec<Entry<K, C>> {
    let mut entries: Vec<Entry<K, C>> = entries.map(|(k, c)| (hasher.hash_one(&k), k, c)).collect();
    entries.sort_unstable_by_key(|e| e.0);
    entries
}

fn by_hash<K, C>(a: &Entry<K, C>, b: &Entry<K, C>) -> Ordering {
    a.0.cmp(&b.0)
}

/// Merges hash-sorted sources, combining entries whose keys are equal.
pub(super) struct AggMerge<K, V, C, A> {
    merge: KMerge<Entry<K, C>, HashCmp<K, C>>,
    agg: Arc<A>,
    /// Distinct keys sharing the current hash, fully merged, waiting to be yielded.
    group: Vec<(K, C)>,
    _values: PhantomData<fn(V)>,
}

impl<K: Eq + 'static, V, C: 'static, A: Aggregate<K, V, C>> Iterator for AggMerge<K, V, C, A> {
    type Item = Result<(K, C)>;

    fn next(&mut self) -> Option<Result<(K, C)>> {
        if let Some(kc) = self.group.pop() {
            return Some(Ok(kc));
        }
        let (hash, k, c) = match self.merge.next()? {
            Ok(e) => e,
            Err(e) => return Some(Err(e)),
        };
        self.group.push((k, c));
        while self.merge.peek().is_some_and(|e| e.0 == hash) {
            let (_, k, c) = match self.merge.next()? {
                Ok(e) => e,
                Err(e) => {
                    self.group.clear();
                    return Some(Err(e));
                }
            };
            match self.group.iter_mut().find(|g| g.0 == k) {
                Some(g) => self.agg.merge_combiners(&mut g.1, c),
                None => self.group.push((k, c)),
            }
        }
        self.group.pop().map(Ok)
    }
}
