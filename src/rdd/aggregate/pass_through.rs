//! Reductions whose map-side combine may stop half way (`reduce_by_key`,
//! `flat_map_reduce_by_key`), and the reduce side that keeps their answer exactly that of
//! a map side that combined everything.
//!
//! A map task combines its first `COMBINE_PROBE_RECORDS` records in a hash table; if
//! nearly every key was new, it writes the table out and sends the rest of its records
//! on uncombined. That is only allowed for a [`PassThrough`] aggregation, where a
//! combiner is a value (`create` is the identity and `merge_value` is
//! `merge_combiners`), so an uncombined record already is a combiner of its own, and no
//! `create` (no zero of `fold_by_key`, no `create` of `combine_by_key`) runs twice for
//! one key of one map partition.
//!
//! Invariants:
//! * A map task that stops combining writes its whole table before the first record it
//!   passes through, so each block holds a key's records in the order the map task saw
//!   them: the combined head first, then the rest one by one.
//! * The reduce side ([`read_grouped`]) folds a key's records of one map output into an
//!   open combiner first, and merges that into the key's result only when a record of
//!   a later map output arrives (or at the end). Without spills, every key's result is
//!   therefore `merge(... merge(C_0, C_1) ..., C_n)` over the map outputs in map order,
//!   with `C_m` the left fold of map `m`'s values in record order: exactly what a map
//!   side that never stopped combining produces, floating point included. With spills
//!   the merge is grouped differently, as for every spilling aggregation.

use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use ember_proto::RddNode;
use serde::{Deserialize, Serialize};

use super::fns::AggFns;
use crate::closure::conjure;
use crate::data::decode;
use crate::data::{Data, Key};
use crate::error::Result;
use crate::shuffle::read_indexed_blocks;
use crate::spill::aggregate::{Aggregate, ExternalAggregator};
use crate::task::{into_batches, record_spills};
use crate::task::{Batches, Erased, TaskContext};

/// The aggregation of `reduce_by_key(f)`: combiners are values, `f` merges both ways.
pub(crate) struct PassThrough<V, F>(PhantomData<fn(V, F)>);

impl<V: Data, F: Fn(V, V) -> V + 'static> AggFns for PassThrough<V, F> {
    type S = ();
    type V = V;
    type C = V;
    const PASS_THROUGH: bool = true;
    #[inline]
    fn create(_: &(), v: V) -> V {
        v
    }
    #[inline]
    fn merge_value(_: &(), c: V, v: V) -> V {
        conjure::<F>()(c, v)
    }
    #[inline]
    fn merge_combiners(_: &(), a: V, b: V) -> V {
        conjure::<F>()(a, b)
    }
}

/// A key's state on the reduce side: the merged result of the map outputs before
/// `map` (`done`), and the fold of map output `map`'s records so far (`open`). A
/// state without `open` (or without anything) stands where a user function panicked
/// part way (the task fails then).
///
/// An enum rather than two `Option`s: for an `f64` sum the table entry is 32 bytes
/// instead of 48 (the tag shares its word with `map`), and the reduce-side table is what
/// the reduce stage spends its time missing cache in (profile of parquet_etl: 22 % in
/// `ExternalAggregator::insert`, mostly waiting on the entry's cache line).
#[derive(Serialize, Deserialize)]
pub(crate) enum Grouped<C> {
    Empty { map: u32 },
    Open { open: C, map: u32 },
    Done { done: C, map: u32 },
    Both { done: C, open: C, map: u32 },
}

fn merge_opt<G: AggFns>(s: &G::S, a: Option<G::C>, b: Option<G::C>) -> Option<G::C> {
    match (a, b) {
        (Some(a), Some(b)) => Some(G::merge_combiners(s, a, b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl<C> Grouped<C> {
    fn from_parts(done: Option<C>, open: Option<C>, map: u32) -> Self {
        match (done, open) {
            (None, None) => Grouped::Empty { map },
            (None, Some(open)) => Grouped::Open { open, map },
            (Some(done), None) => Grouped::Done { done, map },
            (Some(done), Some(open)) => Grouped::Both { done, open, map },
        }
    }

    fn into_parts(self) -> (Option<C>, Option<C>, u32) {
        match self {
            Grouped::Empty { map } => (None, None, map),
            Grouped::Open { open, map } => (None, Some(open), map),
            Grouped::Done { done, map } => (Some(done), None, map),
            Grouped::Both { done, open, map } => (Some(done), Some(open), map),
        }
    }

    /// Moves the state out, leaving `Empty` (what stays if a user function panics).
    #[inline]
    fn take(&mut self) -> Self {
        let map = match self {
            Grouped::Empty { map }
            | Grouped::Open { map, .. }
            | Grouped::Done { map, .. }
            | Grouped::Both { map, .. } => *map,
        };
        std::mem::replace(self, Grouped::Empty { map })
    }

    /// The key's final combiner.
    fn finish<G: AggFns<C = C>>(self, s: &G::S) -> Option<C> {
        let (done, open, _) = self.into_parts();
        merge_opt::<G>(s, done, open)
    }
}

/// Adapts [`AggFns`] to the spillable aggregator over `(map, combiner)` records.
struct GroupedAdapter<G: AggFns>(Arc<G::S>);

impl<K, G: AggFns> Aggregate<K, (u32, G::C), Grouped<G::C>> for GroupedAdapter<G> {
    #[inline]
    fn create(&self, _: &K, (map, c): (u32, G::C)) -> Grouped<G::C> {
        Grouped::Open { open: c, map }
    }

    #[inline]
    fn merge_value(&self, g: &mut Grouped<G::C>, (map, c): (u32, G::C)) {
        let s = &self.0;
        *g = match g.take() {
            Grouped::Open { open, map: m } if m == map => Grouped::Open {
                open: G::merge_combiners(s, open, c),
                map,
            },
            Grouped::Both { done, open, map: m } if m == map => Grouped::Both {
                done,
                open: G::merge_combiners(s, open, c),
                map,
            },
            Grouped::Open { open, .. } => Grouped::Both {
                done: open,
                open: c,
                map,
            },
            Grouped::Both { done, open, .. } => Grouped::Both {
                done: G::merge_combiners(s, done, open),
                open: c,
                map,
            },
            // A state a panicking function left behind (the task is failing anyway).
            other => {
                let (done, open, _) = other.into_parts();
                Grouped::from_parts(merge_opt::<G>(s, done, open), Some(c), map)
            }
        };
    }

    fn merge_combiners(&self, g: &mut Grouped<G::C>, other: Grouped<G::C>) {
        let s = &self.0;
        let (done, open, map) = g.take().into_parts();
        let (other_done, other_open, other_map) = other.into_parts();
        *g = if other_done.is_none() && other_map == map {
            Grouped::from_parts(done, merge_opt::<G>(s, open, other_open), map)
        } else {
            let closed = merge_opt::<G>(s, done, open);
            Grouped::from_parts(merge_opt::<G>(s, closed, other_done), other_open, other_map)
        };
    }
}

/// The reduce-side table of a [`PassThrough`] aggregation.
type GroupedTable<K, G> =
    ExternalAggregator<K, (u32, <G as AggFns>::C), Grouped<<G as AggFns>::C>, GroupedAdapter<G>>;

/// Reduce side of a [`PassThrough`] aggregation (see the module invariants).
pub(crate) fn read_grouped<K: Key, G: AggFns>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let state: Arc<G::S> = Arc::new(decode("aggregator state", &node.payload)?);
    let mut agg: GroupedTable<K, G> = ExternalAggregator::new(
        GroupedAdapter::<G>(state.clone()),
        tc.reservation("reduce-side aggregation"),
        tc.env.spill_dir(),
    );
    for r in read_indexed_blocks::<(K, G::C)>(tc, node, part)? {
        let (map, (k, c)) = r?;
        agg.insert(k, (map, c))?;
    }
    record_spills(tc, agg.metrics());
    let out: Batches<(K, G::C)> = into_batches(agg.into_iter()?.map(move |r| {
        r.map(|(k, g)| {
            let c = g.finish::<G>(&state).expect("combiner present");
            (k, c)
        })
    }));
    Ok(Box::new(out))
}
