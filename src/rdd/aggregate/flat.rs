//! `flat_map_reduce_by_key`: flat_map and reduce_by_key in one map-side step, with
//! borrowed keys.
//!
//! The classic `flat_map(..).map(..).reduce_by_key(..)` allocates an owned key for every
//! record it emits (a `String` per word in a word count), only to drop it again when the
//! map-side combine finds the key already present. Here the user's function emits
//! `(&Q, V)` pairs (for example `&str` slices of a line) straight into the map-side
//! combine, which copies a key into an owned `K` only the first time a task sees it.
//! The shuffle and the reduce side are exactly those of `reduce_by_key`, so results are
//! identical.
//!
//! Invariants of the map side's key queue ([`PENDING`]):
//! * Only keys whose bytes lie inside the current record's text (`String` records) are
//!   queued; they stay valid until the record is dropped, after the queue is applied.
//! * Keys are inserted in the order the function emitted them: a key that is not queued
//!   (a temporary, a static) drains the queue first, and the queue is drained when the
//!   function returns. Every key therefore folds its values in the plain order.

use std::any::TypeId;
use std::borrow::Borrow;
use std::hash::Hash;
use std::panic::Location;
use std::rc::Rc;
use std::sync::Arc;

use compact_str::CompactString;
use ember_proto::{MapStatus, ShuffleDependency};

use super::pass_through::PassThrough;
use super::{
    combine_probe_says_skip, drain_combined, read_combined, with_held, Adapter, AggFns, Held,
    MapCombiner, COMBINE_PROBE_RECORDS,
};
use crate::closure::{assert_stateless, conjure};
use crate::data::{decode, encode};
use crate::data::{Data, Key};
use crate::error::{EmberError, Result};
use crate::rdd::Rdd;
use crate::shuffle::hash_partition;
use crate::shuffle::write::{MapSide, WritePayload};
use crate::spill::aggregate::ExternalAggregator;
use crate::task::{ComputeFn, ShuffleWriteFn, TaskContext};

/// Where a `flat_map_reduce_by_key` function sends its `(key, value)` pairs.
pub struct Emit<'a, Q: ?Sized, V> {
    sink: &'a mut dyn FnMut(&Q, V),
}

impl<Q: ?Sized, V> Emit<'_, Q, V> {
    /// Emits one pair; the key is borrowed and copied only if it is new to this task.
    #[inline]
    pub fn emit(&mut self, key: &Q, value: V) {
        (self.sink)(key, value)
    }
}

impl<T: Data> Rdd<T> {
    /// For each record, `f(&record, emit)` emits zero or more `(key, value)` pairs with
    /// borrowed keys; values of equal keys are merged with the associative, commutative
    /// `reduce`. Equivalent to `flat_map(..).reduce_by_key(reduce)`, without allocating
    /// a key per emitted pair. A word count:
    ///
    /// ```no_run
    /// # let ctx = ember::Context::local(2).unwrap();
    /// let counts = ctx.text_file("input", 2).unwrap().flat_map_reduce_by_key(
    ///     |line: &String, out: &mut ember::Emit<str, u64>| {
    ///         for w in line.split_whitespace() {
    ///             out.emit(w, 1)
    ///         }
    ///     },
    ///     |a, b| a + b,
    /// );
    /// ```
    ///
    /// The result has as many hash partitions as `reduce_by_key` gives a keyed RDD
    /// without a partitioner: the configured default parallelism if set, else this RDD's
    /// partition count; [`flat_map_reduce_by_key_into`](Self::flat_map_reduce_by_key_into)
    /// takes the count.
    #[track_caller]
    pub fn flat_map_reduce_by_key<Q, K, V, F, R>(&self, f: F, reduce: R) -> Rdd<(K, V)>
    where
        Q: ?Sized + Hash + Eq + ToOwned<Owned = K> + 'static,
        K: Key + Borrow<Q>,
        V: Data,
        F: Fn(&T, &mut Emit<'_, Q, V>) + 'static,
        R: Fn(V, V) -> V + 'static,
    {
        let n = self
            .ctx
            .configured_shuffle_partitions()
            .unwrap_or(self.num_partitions());
        self.flat_map_reduce_by_key_into(f, reduce, n)
    }

    /// [`flat_map_reduce_by_key`](Self::flat_map_reduce_by_key) into `partitions` hash
    /// partitions (as `reduce_by_key_into`).
    #[track_caller]
    pub fn flat_map_reduce_by_key_into<Q, K, V, F, R>(
        &self,
        f: F,
        reduce: R,
        partitions: usize,
    ) -> Rdd<(K, V)>
    where
        Q: ?Sized + Hash + Eq + ToOwned<Owned = K> + 'static,
        K: Key + Borrow<Q>,
        V: Data,
        F: Fn(&T, &mut Emit<'_, Q, V>) + 'static,
        R: Fn(V, V) -> V + 'static,
    {
        let _capture_f = assert_stateless(&f);
        let _capture_reduce = assert_stateless(&reduce);
        fn shuffle<T: Data, Q, K, G, F>(
            rdd: &Rdd<T>,
            _: std::marker::PhantomData<G>,
            at: &'static Location<'static>,
            n: u32,
        ) -> Rdd<(K, G::C)>
        where
            Q: ?Sized + Hash + Eq + ToOwned<Owned = K> + 'static,
            K: Key + Borrow<Q>,
            G: AggFns<S = ()>,
            F: Fn(&T, &mut Emit<'_, Q, G::V>) + 'static,
        {
            let write: ShuffleWriteFn = write_flat_combined::<T, Q, K, G, F>;
            let read: ComputeFn = read_combined::<K, G, true>;
            let state = encode("flat_map_reduce_by_key", &());
            let payload = WritePayload {
                partitioner: Vec::new(),
                state: state.clone(),
            };
            rdd.shuffle_child(
                "flat_map_reduce_by_key",
                at,
                n,
                write,
                encode("flat_map_reduce_by_key", &payload),
                read,
                state,
            )
        }
        let marker = std::marker::PhantomData::<PassThrough<V, R>>;
        let n = u32::try_from(partitions).unwrap_or(u32::MAX);
        shuffle::<T, Q, K, _, F>(self, marker, Location::caller(), n)
    }
}

/// Map side of `flat_map_reduce_by_key`. String keys (`Q = str`) are held in the table
/// as inline small strings (`CompactString`, up to 24 bytes without a heap allocation),
/// so comparing a probed key does not chase a pointer; they serialise exactly like
/// `String`, so the reducers read them as `K`.
fn write_flat_combined<T, Q, K, G, F>(
    tc: &Rc<TaskContext>,
    dep: &ShuffleDependency,
    map: u32,
) -> Result<MapStatus>
where
    T: Data,
    Q: ?Sized + Hash + Eq + ToOwned<Owned = K> + 'static,
    K: Key + Borrow<Q>,
    G: AggFns,
    F: Fn(&T, &mut Emit<'_, Q, G::V>) + 'static,
{
    if TypeId::of::<Q>() == TypeId::of::<str>() {
        fn as_str<Q: ?Sized>(q: &Q) -> &str {
            // SAFETY: only called when `Q` is `str` (checked above), so `&Q` is `&str`.
            unsafe { std::mem::transmute_copy::<&Q, &str>(&q) }
        }
        fn compact(s: &str) -> CompactString {
            CompactString::from(s)
        }
        return with_held!(
            G,
            combine_into::<T, Q, str, CompactString, G, F>(tc, dep, map, as_str::<Q>, compact)
        );
    }
    fn same<Q: ?Sized>(q: &Q) -> &Q {
        q
    }
    fn owned<Q: ?Sized + ToOwned>(q: &Q) -> Q::Owned {
        q.to_owned()
    }
    with_held!(
        G,
        combine_into::<T, Q, Q, K, G, F>(tc, dep, map, same::<Q>, owned::<Q>)
    )
}

/// Keys of one record queued (hashed and prefetched) before they are inserted.
///
/// Why: wordcount's profile (text1g, local[2]): `ExternalAggregator::insert_ref` 60 % of
/// the job, most of it waiting on the map-side table's control group and entry (600,000
/// distinct words per map task, far past the cache). Hashing and prefetching a line's
/// words before inserting any lets their misses overlap.
const PENDING: usize = 64;

/// The bytes of a record that is a `String` (a line of a text file), as an address range.
fn text_range<T: 'static>(rec: &T) -> Option<std::ops::Range<usize>> {
    if TypeId::of::<T>() == TypeId::of::<String>() {
        // SAFETY: `T` is `String` (checked above).
        let s = unsafe { &*(rec as *const T).cast::<String>() };
        let start = s.as_ptr() as usize;
        Some(start..start + s.len())
    } else {
        None
    }
}

/// True if `key`'s bytes lie inside `text`: the key borrows from the record itself, not
/// from a temporary (two live allocations never overlap), so it stays valid while the
/// record does.
#[inline]
fn within<QV: ?Sized>(text: &Option<std::ops::Range<usize>>, key: &QV) -> bool {
    let Some(text) = text else { return false };
    let start = key as *const QV as *const u8 as usize;
    start >= text.start && start + std::mem::size_of_val(key) <= text.end
}

/// Inserts the queued keys in the order they were emitted, emptying the queue.
///
/// # Safety
/// Every key pointer in `pending` must point at live, unchanged memory (the record's).
unsafe fn apply_pending<QV, SK, G, H>(
    table: &mut MapCombiner<SK, G, H>,
    pending: &mut Vec<(u64, *const QV, G::V)>,
    make: &impl Fn(&QV) -> SK,
) -> Result<()>
where
    QV: ?Sized + Hash + Eq,
    SK: Key + Borrow<QV>,
    G: AggFns,
    H: Held<G::C>,
{
    for (hash, key, v) in pending.drain(..) {
        // SAFETY: the caller's promise.
        let key = unsafe { &*key };
        table.insert_ref_hashed(hash, key, v, make)?;
    }
    Ok(())
}

/// Runs the combine with table keys of type `SK`, found by `view(q)` and made by `make`.
fn combine_into<T, Q, QV, SK, G, F, H>(
    tc: &Rc<TaskContext>,
    dep: &ShuffleDependency,
    map: u32,
    view: impl Fn(&Q) -> &QV,
    make: impl Fn(&QV) -> SK,
) -> Result<MapStatus>
where
    T: Data,
    Q: ?Sized + 'static,
    QV: ?Sized + Hash + Eq,
    SK: Key + Borrow<QV>,
    G: AggFns,
    F: Fn(&T, &mut Emit<'_, Q, G::V>) + 'static,
    H: Held<G::C>,
{
    let payload: WritePayload = decode("shuffle write", &dep.write_payload)?;
    let state: Arc<G::S> = Arc::new(decode("aggregator state", &payload.state)?);
    let f = conjure::<F>();
    let mut agg: Option<MapCombiner<SK, G, H>> = Some(ExternalAggregator::new(
        Adapter::<G, H>::new(state.clone()),
        tc.reservation("map-side combine"),
        tc.env.spill_dir(),
    ));
    let mut out = MapSide::<(SK, G::C)>::new(tc, dep, map);
    let n = dep.num_reduce_partitions;
    let mut error: Option<EmberError> = None;
    let mut emitted = 0u64;
    let mut decided = !G::PASS_THROUGH;
    // Keys of the current record, hashed and prefetched, waiting to be inserted in order:
    // the cache misses of a line's words overlap instead of one after another.
    let mut pending: Vec<(u64, *const QV, G::V)> = Vec::with_capacity(PENDING);
    for batch in tc.compute::<T>(dep.parent, map)? {
        for rec in batch? {
            match agg.as_mut() {
                None => {
                    let mut sink = |q: &Q, v: G::V| {
                        if error.is_none() {
                            let k = make(view(q));
                            let r = hash_partition(&k, n);
                            if let Err(e) = out.write(r, &(k, G::create(&state, v))) {
                                error = Some(e);
                            }
                        }
                    };
                    f(&rec, &mut Emit { sink: &mut sink });
                }
                Some(table) => {
                    let text = text_range(&rec);
                    let mut sink = |q: &Q, v: G::V| {
                        if error.is_some() {
                            return;
                        }
                        emitted += 1;
                        let key = view(q);
                        let hash = table.hash_ref(key);
                        let done = if within(&text, key) {
                            // SAFETY: every queued key lies inside `rec`'s text (this
                            // one too), which stays alive and unchanged until the queue
                            // is applied below, after `f` returns.
                            let full = pending.len() == PENDING;
                            let r = if full {
                                unsafe { apply_pending(table, &mut pending, &make) }
                            } else {
                                Ok(())
                            };
                            table.prefetch(hash);
                            pending.push((hash, key as *const QV, v));
                            r
                        } else {
                            // A key from elsewhere (a temporary of `f`) goes in at once,
                            // after the queued ones, so the order of emission holds.
                            // SAFETY: as above.
                            unsafe { apply_pending(table, &mut pending, &make) }
                                .and_then(|()| table.insert_ref_hashed(hash, key, v, &make))
                        };
                        if let Err(e) = done {
                            error = Some(e);
                        }
                    };
                    f(&rec, &mut Emit { sink: &mut sink });
                    // SAFETY: `rec` is still alive and unchanged.
                    let done = unsafe { apply_pending(table, &mut pending, &make) };
                    if let (Err(e), None) = (done, &error) {
                        error = Some(e);
                    }
                    pending.clear();
                }
            }
            if let Some(e) = error.take() {
                return Err(e);
            }
        }
        if !decided && emitted >= COMBINE_PROBE_RECORDS {
            decided = true;
            let table = agg.as_mut().expect("table present");
            if combine_probe_says_skip(table, emitted, map) {
                drain_combined(tc, agg.take().expect("table present"), &mut out, n)?;
            }
        }
    }
    if let Some(table) = agg {
        drain_combined(tc, table, &mut out, n)?;
    }
    out.finish(tc, dep, map)
}

#[cfg(test)]
mod tests {
    use compact_str::CompactString;
    use ember_shuffle::frame::{FrameDecoder, FrameEncoder};

    use crate::shuffle::hash_partition;

    /// The map side of `flat_map_reduce_by_key` writes `CompactString` keys and the
    /// reducers read `String`: both must agree on bytes and on partitions.
    #[test]
    fn compact_and_owned_string_keys_serialise_and_partition_identically() {
        let keys: Vec<String> = vec![
            String::new(),
            "a".into(),
            "ü".into(),
            "x".repeat(23),
            "y".repeat(24), // the longest inline CompactString
            "z".repeat(25), // the shortest heap one
            "日本語のキー".repeat(5),
            "k".repeat(300),
        ];
        for key in &keys {
            let compact = CompactString::from(key.as_str());
            for n in [1u32, 2, 7, 200, 1000, 65_536] {
                assert_eq!(
                    hash_partition(&compact, n),
                    hash_partition(key, n),
                    "partition of {key:?} among {n}"
                );
            }
            assert_eq!(
                postcard::to_allocvec(&(&compact, 7u64)).unwrap(),
                postcard::to_allocvec(&(key, 7u64)).unwrap(),
                "bytes of {key:?}"
            );
        }
        // Through the shuffle's frame codec: written compact, read owned.
        let mut enc = FrameEncoder::new();
        let mut wire = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            enc.push(&(CompactString::from(key.as_str()), i as u64), &mut wire)
                .unwrap();
        }
        enc.flush(&mut wire).unwrap();
        let mut dec = FrameDecoder::new(&wire[..]);
        let mut read = Vec::new();
        while let Some(rec) = dec.next_record::<(String, u64)>().unwrap() {
            read.push(rec);
        }
        let expected: Vec<(String, u64)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), i as u64))
            .collect();
        assert_eq!(read, expected);
    }
}
