//! Radix sort of the external sorter's chunked buffer when its key is one of Rust's
//! primitive integers: one scatter by the top digit into buckets of exact size, then
//! each bucket sorted on its own by an LSD radix sort (or, when small, by the standard
//! library's stable sort).
//!
//! Why: sort's profile (the kv set, `(u64, String)` records, local[2]) had 20 % of the
//! job in the comparison sort of each reduce task's buffer (3 M records of 32 bytes,
//! ~21 partitioning levels), which an LSD radix sort over the whole buffer replaced.
//! That sort needed one scratch buffer as large as the buffer (96 MB per reduce task),
//! and the buffer grew by doubling: its page faults (fresh memory each task) were 35 %
//! and 52 % of the sort's faults. Now the buffer is a list of chunks of at most
//! `sort::CHUNK_BYTES` (no doubling), and the scatter reads the chunks, freeing each once
//! read, into one bucket per top digit sized from a histogram: no allocation is larger
//! than a bucket, and each bucket's own sort runs in the cache.
//!
//! Invariants:
//! * The result is ordered by key, ascending or descending as asked, like the comparison
//!   sort; records with equal keys keep their input (chunk) order (the sort is stable, a
//!   valid outcome of `sort_unstable_by`, whose order of equal keys is unspecified).
//! * Signed keys are mapped to `u64` with their sign bit flipped, so the unsigned order
//!   of the mapped keys is the signed order of the keys. Keys are sorted relative to the
//!   smallest, on the bits in which they differ only.
//! * The buckets (as many records as the chunks) are reserved from the caller's
//!   reservation before they are allocated and given back once the chunks are freed;
//!   refused, nothing is sorted and the chunks go back to the caller.
//! * A bucket's LSD sort moves records bitwise between the bucket and one scratch buffer
//!   of the same length; exactly one of the two owns the records at any time (the other's
//!   length is zero), and the key function (a primitive cast) cannot panic in between, so
//!   no record is dropped twice or leaked.

use std::any::TypeId;
use std::mem::{size_of, ManuallyDrop};

use crate::memory::Reservation;

/// Fewest records worth a radix sort (below, the histogram pass costs more than it saves).
pub const MIN_RADIX_RECORDS: usize = 4096;
/// Widest digit, in bits: 2,048 buckets, whose write positions stay in the L1/L2 cache.
const MAX_DIGIT_BITS: u32 = 11;
/// Bits of the top digit: 256 buckets, whose write fronts (a cache line each) stay in the
/// L1 cache while the scatter streams every record into them.
const TOP_DIGIT_BITS: u32 = 8;
/// Buckets smaller than this are sorted by the standard library's stable sort.
const MIN_LSD_RECORDS: usize = 1024;

/// Bytes of `len` records of type `T`: what a second copy of them allocates (the radix
/// sort's buckets, or the sorter's one buffer for a comparison sort).
pub(super) fn records_bytes<T>(len: usize) -> u64 {
    (len as u64).saturating_mul(size_of::<T>() as u64)
}

/// Reinterprets a list of vectors of `A` as one of `B`.
///
/// # Safety
/// `A` and `B` must be the same type.
unsafe fn same_type<A, B>(v: Vec<Vec<A>>) -> Vec<Vec<B>> {
    let mut v = ManuallyDrop::new(v);
    // SAFETY: `A` is `B` (the caller's promise), so the allocation, length and capacity
    // describe a valid `Vec<Vec<B>>`; `v` is never dropped.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<Vec<B>>(), v.len(), v.capacity()) }
}

/// Records held as a list of vectors (the sorter's chunks, or sorted buckets).
pub type Chunks<K, V> = Vec<Vec<(K, V)>>;

/// Sorts the records of `chunks` (in insertion order) by key, descending if asked, stably,
/// and returns them as a list of vectors whose concatenation is in order, when `K` is a
/// primitive integer of at most 64 bits and `reservation` takes the buckets; otherwise
/// gives `chunks` back as they were.
pub fn sort_chunks<K: 'static, V>(
    chunks: Chunks<K, V>,
    descending: bool,
    reservation: &mut Reservation,
) -> Result<Chunks<K, V>, Chunks<K, V>> {
    macro_rules! by {
        ($($t:ty => $map:expr),* $(,)?) => {$(
            if TypeId::of::<K>() == TypeId::of::<$t>() {
                let n: usize = chunks.iter().map(Vec::len).sum();
                let scratch = records_bytes::<(K, V)>(n);
                if reservation.try_grow(scratch).is_err() {
                    return Err(chunks);
                }
                // SAFETY: `K` is `$t` (checked above): the two types are the same.
                let chunks = unsafe { same_type::<(K, V), ($t, V)>(chunks) };
                let sorted = msd_sort(chunks, n, $map, descending);
                reservation.shrink(scratch);
                // SAFETY: as above.
                return Ok(unsafe { same_type::<($t, V), (K, V)>(sorted) });
            }
        )*};
    }
    by!(
        u64 => |k: &u64| *k,
        u32 => |k: &u32| u64::from(*k),
        u16 => |k: &u16| u64::from(*k),
        u8 => |k: &u8| u64::from(*k),
        usize => |k: &usize| *k as u64,
        i64 => |k: &i64| (*k as u64) ^ (1 << 63),
        i32 => |k: &i32| (i64::from(*k) as u64) ^ (1 << 63),
        i16 => |k: &i16| (i64::from(*k) as u64) ^ (1 << 63),
        i8 => |k: &i8| (i64::from(*k) as u64) ^ (1 << 63),
        isize => |k: &isize| (*k as i64 as u64) ^ (1 << 63),
    );
    Err(chunks)
}

/// The top-digit scatter of `chunks` (`n` records) into exact-sized buckets, each then
/// sorted on the lower bits; the buckets come back in output order.
fn msd_sort<K, V>(
    chunks: Vec<Vec<(K, V)>>,
    n: usize,
    key: impl Fn(&K) -> u64 + Copy,
    descending: bool,
) -> Vec<Vec<(K, V)>> {
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for r in chunks.iter().flatten() {
        let k = key(&r.0);
        lo = lo.min(k);
        hi = hi.max(k);
    }
    let bits = 64 - hi.saturating_sub(lo).leading_zeros();
    if n < 2 || bits == 0 {
        return chunks; // every key equal: already in order
    }
    let width = bits.min(TOP_DIGIT_BITS);
    let shift = bits - width;
    let digit = move |k: &K| ((key(k) - lo) >> shift) as usize;
    let mut counts = vec![0usize; 1 << width];
    for r in chunks.iter().flatten() {
        counts[digit(&r.0)] += 1;
    }
    let mut buckets: Vec<Vec<(K, V)>> = counts.iter().map(|&c| Vec::with_capacity(c)).collect();
    // Each chunk is freed as soon as it is scattered; no bucket outgrows its count.
    for chunk in chunks {
        for r in chunk {
            buckets[digit(&r.0)].push(r);
        }
    }
    if shift > 0 {
        for b in buckets.iter_mut() {
            if b.len() >= MIN_LSD_RECORDS {
                sort_by(b, key, descending);
            } else if descending {
                b.sort_by_key(|x| std::cmp::Reverse(key(&x.0)));
            } else {
                b.sort_by_key(|x| key(&x.0));
            }
        }
    }
    if descending {
        buckets.reverse();
    }
    buckets
}

/// The LSD radix sort by `key` (an order-preserving map to `u64`): keys are taken
/// relative to the smallest, and only the bits in which they differ are sorted on, in
/// as few digits of at most [`MAX_DIGIT_BITS`] as cover them.
fn sort_by<K, V>(buf: &mut Vec<(K, V)>, key: impl Fn(&K) -> u64, descending: bool) {
    let n = buf.len();
    if n < 2 {
        return;
    }
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for r in buf.iter() {
        let k = key(&r.0);
        lo = lo.min(k);
        hi = hi.max(k);
    }
    let bits = 64 - (hi - lo).leading_zeros();
    if bits == 0 {
        return; // every key equal: already in order
    }
    let passes = bits.div_ceil(MAX_DIGIT_BITS);
    let width = bits.div_ceil(passes);
    let buckets = 1usize << width;
    let mask = (buckets - 1) as u64;
    let mut counts = vec![0usize; buckets * passes as usize];
    for r in buf.iter() {
        let k = key(&r.0) - lo;
        for p in 0..passes as usize {
            counts[p * buckets + ((k >> (width as usize * p)) & mask) as usize] += 1;
        }
    }
    let mut src = std::mem::take(buf);
    let mut dst: Vec<(K, V)> = Vec::with_capacity(n);
    let mut offsets = vec![0usize; buckets];
    for p in 0..passes as usize {
        let counts = &counts[p * buckets..(p + 1) * buckets];
        if counts.contains(&n) {
            continue; // one bucket holds every record: this digit changes nothing
        }
        let mut at = 0;
        for j in 0..buckets {
            let b = if descending { buckets - 1 - j } else { j };
            offsets[b] = at;
            at += counts[b];
        }
        let shift = width as usize * p;
        // SAFETY: `src` holds `n` initialised records and `dst` has room for `n`. Each
        // record is read once and written once, to a distinct slot (the offsets of the
        // buckets partition 0..n by this digit's counts, which were counted on the same
        // keys). Both lengths are zero while the records are in flight (nothing in
        // between can panic: `key` is a primitive cast, the rest is arithmetic on
        // in-bounds indices); afterwards `dst` owns all `n` and `src` none.
        unsafe {
            src.set_len(0);
            let from = src.as_ptr();
            let to = dst.as_mut_ptr();
            for i in 0..n {
                let r = from.add(i);
                let b = (((key(&(*r).0) - lo) >> shift) & mask) as usize;
                let slot = offsets.get_unchecked_mut(b);
                std::ptr::copy_nonoverlapping(r, to.add(*slot), 1);
                *slot += 1;
            }
            dst.set_len(n);
        }
        std::mem::swap(&mut src, &mut dst);
    }
    *buf = src;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryPool;

    /// A deterministic pseudo-random stream (splitmix64).
    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
    }

    /// Radix-sorts, and checks against the standard library's stable sort (the same
    /// order, equal keys in input order), with owned values so a double drop or a leak
    /// would show under Miri or as a wrong value. The records come in chunks of
    /// `chunk` records (the last one shorter), as the sorter holds them.
    fn check<K: Ord + Copy + std::fmt::Debug + 'static>(keys: Vec<K>, descending: bool) {
        let buf: Vec<(K, String)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, format!("v{i}")))
            .collect();
        let mut want = buf.clone();
        if descending {
            want.sort_by_key(|r| std::cmp::Reverse(r.0));
        } else {
            want.sort_by_key(|r| r.0);
        }
        for chunk in [1usize, 7, 1000, usize::MAX] {
            let chunks: Vec<Vec<(K, String)>> = buf
                .chunks(chunk.min(buf.len().max(1)))
                .map(<[_]>::to_vec)
                .collect();
            let pool = MemoryPool::new(1 << 30);
            let mut reservation = pool.reservation("radix test");
            let Ok(sorted) = sort_chunks(chunks, descending, &mut reservation) else {
                panic!("an integer key is radix-sorted");
            };
            assert_eq!(
                reservation.size(),
                0,
                "the buckets' reservation is given back"
            );
            let got: Vec<(K, String)> = sorted.into_iter().flatten().collect();
            assert_eq!(got, want, "chunks of {chunk}");
        }
    }

    #[test]
    fn sorts_every_integer_type_both_ways_stably_like_the_stable_comparison_sort() {
        let mut r = rng(7);
        for descending in [false, true] {
            // Wide random keys: all eight digits differ.
            check((0..5000).map(|_| r()).collect::<Vec<u64>>(), descending);
            // Negative and positive, and the extremes.
            let mut signed: Vec<i64> = (0..5000).map(|_| r() as i64 >> (r() % 60)).collect();
            signed.extend([i64::MIN, i64::MAX, 0, -1, 1, i64::MIN, i64::MAX]);
            check(signed, descending);
            check(
                (0..3000).map(|_| r() as i32).collect::<Vec<i32>>(),
                descending,
            );
            check(
                (0..3000).map(|_| r() as u32).collect::<Vec<u32>>(),
                descending,
            );
            check(
                (0..3000).map(|_| r() as i8).collect::<Vec<i8>>(),
                descending,
            );
            check(
                (0..3000).map(|_| r() as u16).collect::<Vec<u16>>(),
                descending,
            );
            check(
                (0..3000).map(|_| r() as isize).collect::<Vec<isize>>(),
                descending,
            );
            check(
                (0..3000).map(|_| r() as usize).collect::<Vec<usize>>(),
                descending,
            );
            // A narrow range with many repeats (a range partition of the kv set): the
            // stable order of equal keys is checked, high digits are skipped.
            check(
                (0..20_000)
                    .map(|_| 1_000_000 + r() % 300)
                    .collect::<Vec<u64>>(),
                descending,
            );
            // All keys equal, one record, none.
            check(vec![42u64; 100], descending);
            check(vec![5i32], descending);
            check(Vec::<u64>::new(), descending);
        }
    }

    #[test]
    fn buckets_over_the_lsd_threshold_are_sorted_on_their_low_bits() {
        let mut r = rng(3);
        for descending in [false, true] {
            // Few top digits, so buckets of thousands of records take the LSD sort,
            // with repeats whose order must hold.
            check(
                (0..40_000)
                    .map(|_| (r() % 4) << 40 | (r() % 5000))
                    .collect::<Vec<u64>>(),
                descending,
            );
            check(
                (0..20_000)
                    .map(|_| (r() % 3) as i64 * -(1 << 50) + (r() % 700) as i64)
                    .collect::<Vec<i64>>(),
                descending,
            );
        }
    }

    #[test]
    fn only_primitive_integers_are_radix_sorted_and_only_with_their_buckets() {
        let pool = MemoryPool::new(1 << 30);
        let mut reservation = pool.reservation("radix test");
        let strings = vec![vec![("b".to_string(), 1), ("a".to_string(), 2)]];
        let back = sort_chunks(strings, false, &mut reservation).unwrap_err();
        assert_eq!(back[0][0].0, "b", "given back as it was");
        let pairs = vec![vec![((2u64, 1u64), 0), ((1, 1), 0)]];
        assert!(sort_chunks(pairs, false, &mut reservation).is_err());
        let wide = vec![vec![(2u128, 0), (1u128, 0)]];
        assert!(sort_chunks(wide, false, &mut reservation).is_err());
        // A pool that cannot take the buckets: nothing sorted, nothing kept reserved.
        let small = MemoryPool::new(16);
        let mut refused = small.reservation("radix test");
        let ints = vec![vec![(2u64, 0u64)], vec![(1, 0)]];
        let back = sort_chunks(ints, false, &mut refused).unwrap_err();
        assert_eq!(
            back,
            vec![vec![(2, 0)], vec![(1, 0)]],
            "given back as it was"
        );
        assert_eq!(small.used(), 0);
        let sorted = sort_chunks(back, false, &mut reservation).unwrap();
        let got: Vec<(u64, u64)> = sorted.into_iter().flatten().collect();
        assert_eq!(got, vec![(1, 0), (2, 0)]);
        assert_eq!(pool.used(), 0);
    }
}
