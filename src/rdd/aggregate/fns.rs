//! What a key-wise aggregation computes: its three combine functions as a zero-sized
//! type ([`AggFns`]; [`FnAgg`] from user closures) and their adapter to the spilling
//! aggregation map ([`Adapter`]), shared by both sides of the shuffle.
//!
//! Invariant: a combiner is held ([`Held`]) so that a panic in a user function leaves a
//! value that is safe to drop behind, never a moved-from one that owns something: as
//! `Some(C)` (a panic leaves `None`), or, for a combiner without drop glue (a number, a
//! tuple of numbers), as itself ([`Bare`]: its stale bits own nothing).

use std::marker::PhantomData;
use std::mem::needs_drop;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

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
pub(crate) type MapCombiner<K, G, H> = ExternalAggregator<K, <G as AggFns>::V, H, Adapter<G, H>>;

/// How an aggregation table holds a combiner `C`, so that the user's by-value functions
/// update it in place.
pub(crate) trait Held<C>: Serialize + DeserializeOwned + Send + 'static {
    fn hold(c: C) -> Self;
    fn release(self) -> C;
    /// Replaces the combiner by `f(combiner)`; if `f` panics, what is left is safe to
    /// drop (and never read: the panic fails the task).
    fn update(&mut self, f: impl FnOnce(C) -> C);
}

impl<C: Data> Held<C> for Option<C> {
    #[inline]
    fn hold(c: C) -> Self {
        Some(c)
    }
    #[inline]
    fn release(self) -> C {
        self.expect("combiner present")
    }
    #[inline]
    fn update(&mut self, f: impl FnOnce(C) -> C) {
        let old = self.take().expect("combiner present");
        *self = Some(f(old));
    }
}

/// A combiner without drop glue, held as itself: the size of `C`, where `Option<C>` adds
/// a word to a number (a `u64` count in 16 bytes, and wordcount's map-side entry, a
/// 24-byte inline word and its count, in 40 bytes instead of 32, so that most entries
/// straddle two cache lines). Measured by holding the counts as `u32` (whose `Option`
/// fits 8 bytes): wordcount 3.81 s -> 3.54 s. Chosen by `with_held!` for every `C`
/// with `!needs_drop::<C>()`; `update` refuses any other `C`.
#[derive(Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Bare<C>(C);

impl<C: Data> Held<C> for Bare<C> {
    #[inline]
    fn hold(c: C) -> Self {
        Bare(c)
    }
    #[inline]
    fn release(self) -> C {
        self.0
    }
    #[inline]
    fn update(&mut self, f: impl FnOnce(C) -> C) {
        // A constant: no check is left in the code of a `C` without drop glue.
        assert!(
            !needs_drop::<C>(),
            "Bare holds combiners without drop glue only"
        );
        // SAFETY: `old` is a bitwise copy; the slot is overwritten with `f`'s result
        // before it is read again. If `f` unwinds instead, the slot keeps the old bits:
        // `C` has no drop glue (asserted above), so neither the copy given to `f` nor
        // the bits left here release anything, and dropping the slot later does nothing.
        let old = unsafe { std::ptr::read(&self.0) };
        let new = f(old);
        // SAFETY: writing over bits without drop glue leaks nothing.
        unsafe { std::ptr::write(&mut self.0, new) };
    }
}

/// Calls `$f::<.., H>(args)` with the way of holding `$g`'s combiner that suits it:
/// [`Bare`] for a combiner without drop glue, `Option` otherwise.
macro_rules! with_held {
    ($g:ty, $f:ident::<$($t:tt),*>($($arg:expr),* $(,)?)) => {
        if std::mem::needs_drop::<<$g as $crate::rdd::aggregate::AggFns>::C>() {
            $f::<$($t,)* Option<<$g as $crate::rdd::aggregate::AggFns>::C>>($($arg),*)
        } else {
            $f::<$($t,)* $crate::rdd::aggregate::Bare<<$g as $crate::rdd::aggregate::AggFns>::C>>(
                $($arg),*
            )
        }
    };
}
pub(crate) use with_held;

/// Adapts [`AggFns`] to the spillable aggregator, combiners held as `H`.
pub(crate) struct Adapter<G: AggFns, H>(Arc<G::S>, PhantomData<fn(H)>);

impl<G: AggFns, H> Adapter<G, H> {
    pub(crate) fn new(state: Arc<G::S>) -> Self {
        Adapter(state, PhantomData)
    }
}

impl<K, G: AggFns, H: Held<G::C>> Aggregate<K, G::V, H> for Adapter<G, H> {
    #[inline]
    fn create(&self, _: &K, v: G::V) -> H {
        H::hold(G::create(&self.0, v))
    }
    #[inline]
    fn merge_value(&self, c: &mut H, v: G::V) {
        c.update(|old| G::merge_value(&self.0, old, v));
    }
    #[inline]
    fn merge_combiners(&self, c: &mut H, other: H) {
        let other = other.release();
        c.update(|old| G::merge_combiners(&self.0, old, other));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    #[test]
    fn a_bare_combiner_is_the_size_of_the_combiner() {
        assert_eq!(std::mem::size_of::<Bare<u64>>(), 8);
        assert_eq!(std::mem::size_of::<Option<u64>>(), 16);
        assert_eq!(
            std::mem::size_of::<(compact_str::CompactString, Bare<u64>)>(),
            32
        );
        assert_eq!(
            postcard::to_allocvec(&Bare((7u64, -2.5f64))).unwrap(),
            postcard::to_allocvec(&(7u64, -2.5f64)).unwrap()
        );
    }

    #[test]
    fn both_holdings_fold_in_place_and_survive_a_panicking_function() {
        let mut bare = <Bare<u64> as Held<u64>>::hold(40);
        bare.update(|c| c + 2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            bare.update(|_| panic!("user function"))
        }));
        assert!(r.is_err());
        // `bare` keeps stale bits without drop glue: going out of scope releases nothing.

        let mut held = <Option<String> as Held<String>>::hold("a".to_string());
        held.update(|c| c + "b");
        assert_eq!(held.clone().release(), "ab");
        let r = catch_unwind(AssertUnwindSafe(|| {
            held.update(|_| panic!("user function"))
        }));
        assert!(r.is_err());
        assert_eq!(held, None, "the moved-out string is not left behind");
    }

    #[test]
    #[should_panic(expected = "without drop glue")]
    fn bare_refuses_a_combiner_with_drop_glue() {
        let mut bare = Bare(String::from("x"));
        bare.update(|s| s);
    }
}
