//! What a key-wise aggregation computes: its three combine functions as a zero-sized
//! type ([`AggFns`]; [`FnAgg`] from user closures) and their adapter to the spilling
//! aggregation map ([`Adapter`]), shared by both sides of the shuffle.
//!
//! Invariant: a combiner is held as `Some(C)` while live; a panic in a user function
//! leaves `None` behind, never a moved-from value.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::closure::conjure;
use crate::data::Data;
use crate::rdd::partition_op::State;
use crate::spill::aggregate::{Aggregate, ExternalAggregator};

/// The combine functions of a key-wise aggregation, as a zero-sized type.
pub(crate) trait AggFns: 'static {
    type S: State + Send + Sync;
    type V: Data;
    type C: Data;
    /// `create` is the identity and `merge_value` is `merge_combiners`: a value is a
    /// combiner of its own, so the map side may stop combining (see `pass_through`).
    const PASS_THROUGH: bool = false;
    fn create(s: &Self::S, v: Self::V) -> Self::C;
    fn merge_value(s: &Self::S, c: Self::C, v: Self::V) -> Self::C;
    fn merge_combiners(s: &Self::S, a: Self::C, b: Self::C) -> Self::C;
}

/// [`AggFns`] from three user closures.
#[allow(clippy::type_complexity)]
pub(crate) struct FnAgg<S, V, C, Fc, Fm, Fmc>(PhantomData<fn(S, V, C, Fc, Fm, Fmc)>);
impl<S, V, C, Fc, Fm, Fmc> AggFns for FnAgg<S, V, C, Fc, Fm, Fmc>
where
    S: State + Send + Sync,
    V: Data,
    C: Data,
    Fc: Fn(&S, V) -> C + 'static,
    Fm: Fn(&S, C, V) -> C + 'static,
    Fmc: Fn(&S, C, C) -> C + 'static,
{
    type S = S;
    type V = V;
    type C = C;
    #[inline]
    fn create(s: &S, v: V) -> C {
        conjure::<Fc>()(s, v)
    }
    #[inline]
    fn merge_value(s: &S, c: C, v: V) -> C {
        conjure::<Fm>()(s, c, v)
    }
    #[inline]
    fn merge_combiners(s: &S, a: C, b: C) -> C {
        conjure::<Fmc>()(s, a, b)
    }
}

/// The map-side combine table of an aggregation.
pub(crate) type MapCombiner<K, G> =
    ExternalAggregator<K, <G as AggFns>::V, Option<<G as AggFns>::C>, Adapter<G>>;

/// Adapts [`AggFns`] to the spillable aggregator. Combiners are held as `Option<C>` so
/// the by-value user functions can be applied in place; a panic in one leaves `None`
/// behind, never a moved-from value.
pub(crate) struct Adapter<G: AggFns>(pub(crate) Arc<G::S>);
impl<K, G: AggFns> Aggregate<K, G::V, Option<G::C>> for Adapter<G> {
    #[inline]
    fn create(&self, _: &K, v: G::V) -> Option<G::C> {
        Some(G::create(&self.0, v))
    }
    #[inline]
    fn merge_value(&self, c: &mut Option<G::C>, v: G::V) {
        let old = c.take().expect("combiner present");
        *c = Some(G::merge_value(&self.0, old, v));
    }
    #[inline]
    fn merge_combiners(&self, c: &mut Option<G::C>, other: Option<G::C>) {
        let old = c.take().expect("combiner present");
        *c = Some(match other {
            Some(o) => G::merge_combiners(&self.0, old, o),
            None => old,
        });
    }
}
