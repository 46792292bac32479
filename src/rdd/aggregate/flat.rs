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
//! The map side's key queue ([`KeyQueue`]) is filled by [`Emit::emit`] inline in the
//! user's loop; its invariants are on the type: queued keys lie inside the records of
//! the batch being combined, which lives until the queue is drained at the batch's end,
//! and keys are inserted in emission order, so every key folds its values in the plain
//! order.

use std::any::TypeId;
use std::borrow::Borrow;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash};
use std::panic::Location;
use std::rc::Rc;
use std::sync::Arc;

use compact_str::CompactString;
use ember_proto::{MapStatus, ShuffleDependency};
use foldhash::fast::FixedState;

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
    /// While the map side combines: the queue a key borrowed from the batch's text joins
    /// without leaving the user's loop (see [`KeyQueue`]).
    queue: Option<&'a mut KeyQueue<Q, V>>,
    /// Everything else: a key from elsewhere, a full queue, or a map side that has
    /// stopped combining.
    sink: &'a mut SinkFn<'a, Q, V>,
}

/// The slow path of [`Emit::emit`], given the queue when the map side combines.
type SinkFn<'a, Q, V> = dyn FnMut(&Q, V, Option<&mut KeyQueue<Q, V>>) + 'a;

impl<Q: ?Sized + Hash, V> Emit<'_, Q, V> {
    /// Emits one pair; the key is borrowed and copied only if it is new to this task.
    #[inline]
    pub fn emit(&mut self, key: &Q, value: V) {
        if let Some(q) = self.queue.as_deref_mut() {
            if q.pending.len() < QUEUED && within(&q.text, key) {
                q.push(key, value);
                return;
            }
        }
        (self.sink)(key, value, self.queue.as_deref_mut())
    }
}

/// Keys borrowed from the text of the batch being combined, hashed, waiting in emission
/// order to be inserted, so that their cache misses overlap: each is prefetched when a
/// drain finds it in the queue and inserted at the next drain, [`CARRIED`] keys later.
///
/// Why: wordcount's profile (text1g, local[2]): the map-side table of 600,000 distinct
/// words per task is far past the cache, and waiting on its lines was most of the job.
/// Before this queue lived in the job's loop, each word also cost an indirect call into
/// ember and back (the sink), and a prefetch issued from it (29 % of the job in that
/// closure, half of it on the prefetch instruction).
///
/// Invariants:
/// * Only keys whose bytes lie inside the current record's text (`String` records) join
///   the queue; the batch holding that record is kept alive until the queue is drained.
/// * Keys are inserted in the order they were emitted: a key that cannot join (a
///   temporary, a static) drains the queue first, and the queue is drained at the end
///   of every batch. Every key therefore folds its values in the plain order.
pub(crate) struct KeyQueue<Q: ?Sized, V> {
    /// The current record's bytes, as an address range (empty for a record that is not
    /// a `String`).
    text: std::ops::Range<usize>,
    /// A copy of the table's hasher.
    hasher: FixedState,
    pending: VecDeque<(u64, *const Q, V)>,
    /// The first `prefetched` keys of `pending` have been prefetched.
    prefetched: usize,
}

impl<Q: ?Sized + Hash, V> KeyQueue<Q, V> {
    /// Queues `key` (which must lie inside the batch's text) with its hash.
    #[inline]
    fn push(&mut self, key: &Q, value: V) {
        let hash = self.hasher.hash_one(key);
        self.pending.push_back((hash, key as *const Q, value));
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

/// Keys a [`KeyQueue`] holds at most; a full queue is drained by the sink.
const QUEUED: usize = 64;
/// Keys a drain leaves queued (prefetched, to be inserted at the next drain): the
/// distance, in keys, between a key's prefetch and its insert.
const CARRIED: usize = 32;

/// The bytes of a record that is a `String` (a line of a text file), as an address range;
/// an empty range for any other record.
fn text_range<T: 'static>(rec: &T) -> std::ops::Range<usize> {
    if TypeId::of::<T>() == TypeId::of::<String>() {
        // SAFETY: `T` is `String` (checked above).
        let s = unsafe { &*(rec as *const T).cast::<String>() };
        let start = s.as_ptr() as usize;
        start..start + s.len()
    } else {
        0..0
    }
}

/// True if `key`'s bytes lie inside `text`: the key borrows from the record itself, not
/// from a temporary (two live allocations never overlap), so it stays valid while the
/// record does.
#[inline]
fn within<Q: ?Sized>(text: &std::ops::Range<usize>, key: &Q) -> bool {
    let start = key as *const Q as *const u8 as usize;
    start >= text.start && start + std::mem::size_of_val(key) <= text.end && !text.is_empty()
}

/// Inserts queued keys in the order they were emitted: all of them (`all`), or all but
/// the last [`CARRIED`]; the keys left are prefetched first, so those still queued
/// afterwards have been.
///
/// # Safety
/// Every key pointer in `queue` must point at live, unchanged memory (the batch's).
unsafe fn drain<Q, QV, SK, G, H>(
    table: &mut MapCombiner<SK, G, H>,
    queue: &mut KeyQueue<Q, G::V>,
    view: &impl Fn(&Q) -> &QV,
    make: &impl Fn(&QV) -> SK,
    all: bool,
) -> Result<u64>
where
    Q: ?Sized,
    QV: ?Sized + Hash + Eq,
    SK: Key + Borrow<QV>,
    G: AggFns,
    H: Held<G::C>,
{
    for (hash, _, _) in queue.pending.range(queue.prefetched..) {
        table.prefetch(*hash);
    }
    let n = if all {
        queue.pending.len()
    } else {
        queue.pending.len().saturating_sub(CARRIED)
    };
    for _ in 0..n {
        let (hash, key, v) = queue.pending.pop_front().expect("n <= len");
        // SAFETY: the caller's promise.
        let key = view(unsafe { &*key });
        table.insert_ref_hashed(hash, key, v, make)?;
    }
    queue.prefetched = queue.pending.len();
    Ok(n as u64)
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
    Q: ?Sized + Hash + 'static,
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
    let mut queue: KeyQueue<Q, G::V> = KeyQueue {
        text: 0..0,
        hasher: agg.as_ref().expect("table present").hasher().clone(),
        pending: VecDeque::with_capacity(QUEUED),
        prefetched: 0,
    };
    // The queue holds `Q` pointers, hashed as `Q`; the table is keyed by `QV`, which is
    // `Q` itself or (for `str`) the same type by another name, hashed alike
    // (`insert_ref_hashed` checks the hash in debug builds).
    for batch in tc.compute::<T>(dep.parent, map)? {
        // Held until the queue is drained: queued keys borrow from its records.
        let batch = batch?;
        for rec in &batch {
            match agg.as_mut() {
                None => {
                    let mut sink = |q: &Q, v: G::V, _: Option<&mut KeyQueue<Q, G::V>>| {
                        if error.is_none() {
                            let k = make(view(q));
                            let r = hash_partition(&k, n);
                            if let Err(e) = out.write(r, &(k, G::create(&state, v))) {
                                error = Some(e);
                            }
                        }
                    };
                    f(
                        rec,
                        &mut Emit {
                            queue: None,
                            sink: &mut sink,
                        },
                    );
                }
                Some(table) => {
                    queue.text = text_range(rec);
                    let mut sink = |q: &Q, v: G::V, queue: Option<&mut KeyQueue<Q, G::V>>| {
                        let queue = queue.expect("a combining map side has a queue");
                        if error.is_some() {
                            return;
                        }
                        let done = if within(&queue.text, q) {
                            // The queue is full: make room, then join it.
                            // SAFETY: every queued key lies inside this batch, which
                            // stays alive and unchanged until the queue is drained.
                            let r = unsafe { drain(table, queue, &view, &make, false) };
                            queue.push(q, v);
                            r
                        } else {
                            // A key from elsewhere (a temporary of `f`) goes in at once,
                            // after the queued ones, so the order of emission holds.
                            // SAFETY: as above.
                            unsafe { drain(table, queue, &view, &make, true) }
                                .and_then(|k| table.insert_ref(view(q), v, &make).map(|()| k + 1))
                        };
                        match done {
                            Ok(k) => emitted += k,
                            Err(e) => error = Some(e),
                        }
                    };
                    f(
                        rec,
                        &mut Emit {
                            queue: Some(&mut queue),
                            sink: &mut sink,
                        },
                    );
                }
            }
            if let Some(e) = error.take() {
                return Err(e);
            }
        }
        if let Some(table) = agg.as_mut() {
            // SAFETY: every queued key lies inside `batch`, still alive and unchanged.
            emitted += unsafe { drain(table, &mut queue, &view, &make, true) }?;
        }
        drop(batch);
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
