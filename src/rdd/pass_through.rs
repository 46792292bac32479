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

use super::decode;
use super::shuffle_ops::{into_batches, record_spills, AggFns};
use crate::data::{Data, Key};
use crate::error::Result;
use crate::plan::op::conjure;
use crate::shuffle::read_indexed_blocks;
use crate::spill::aggregate::{Aggregate, ExternalAggregator};
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
/// `map`, and the fold of map output `map`'s records so far. `None`s stand where a
/// user function panicked part way (the task fails then) or nothing arrived yet.
#[derive(Serialize, Deserialize)]
pub(crate) struct Grouped<C> {
    done: Option<C>,
    open: Option<C>,
    map: u32,
}

fn merge_opt<G: AggFns>(s: &G::S, a: Option<G::C>, b: Option<G::C>) -> Option<G::C> {
    match (a, b) {
        (Some(a), Some(b)) => Some(G::merge_combiners(s, a, b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl<C> Grouped<C> {
    /// The key's final combiner.
    fn finish<G: AggFns<C = C>>(self, s: &G::S) -> Option<C> {
        merge_opt::<G>(s, self.done, self.open)
    }
}

/// Adapts [`AggFns`] to the spillable aggregator over `(map, combiner)` records.
struct GroupedAdapter<G: AggFns>(Arc<G::S>);

impl<K, G: AggFns> Aggregate<K, (u32, G::C), Grouped<G::C>> for GroupedAdapter<G> {
    #[inline]
    fn create(&self, _: &K, (map, c): (u32, G::C)) -> Grouped<G::C> {
        Grouped {
            done: None,
            open: Some(c),
            map,
        }
    }

    #[inline]
    fn merge_value(&self, g: &mut Grouped<G::C>, (map, c): (u32, G::C)) {
        if g.map == map {
            g.open = merge_opt::<G>(&self.0, g.open.take(), Some(c));
        } else {
            g.done = merge_opt::<G>(&self.0, g.done.take(), g.open.take());
            g.open = Some(c);
            g.map = map;
        }
    }

    fn merge_combiners(&self, g: &mut Grouped<G::C>, other: Grouped<G::C>) {
        if other.done.is_none() && other.map == g.map {
            g.open = merge_opt::<G>(&self.0, g.open.take(), other.open);
            return;
        }
        let closed = merge_opt::<G>(&self.0, g.done.take(), g.open.take());
        g.done = merge_opt::<G>(&self.0, closed, other.done);
        g.open = other.open;
        g.map = other.map;
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
