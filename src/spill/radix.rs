//! LSD radix sort of `(K, V)` buffers by an integer key, for the external sorter's
//! in-memory sort when `K` is one of Rust's primitive integers.
//!
//! Why: sort's profile (the kv set, `(u64, String)` records, local[2]) had 20 % of the
//! job in the comparison sort of each reduce task's buffer (3 M records of 32 bytes,
//! ~21 partitioning levels). A radix sort moves each record once per significant key
//! byte: the reduce partitions of a range-partitioned shuffle hold a narrow key range,
//! so three passes or fewer, and bytes every record shares are skipped.
//!
//! Invariants:
//! * The result is ordered by key, ascending or descending as asked, like the comparison
//!   sort; records with equal keys keep their input order (the sort is stable, a valid
//!   outcome of `sort_unstable_by`, whose order of equal keys is unspecified).
//! * Signed keys are mapped to `u64` with their sign bit flipped, so the unsigned order
//!   of the mapped keys is the signed order of the keys. Keys are sorted relative to the
//!   smallest, on the bits in which they differ only.
//! * The scatter moves records bitwise between the buffer and one scratch buffer of the
//!   same length; exactly one of the two owns the records at any time (the other's length
//!   is zero), and the key function (a primitive cast) cannot panic in between, so no
//!   record is dropped twice or leaked.
//! * The scratch buffer (as large as the buffer) is reserved from the caller's
//!   reservation before it is allocated and given back after; refused, nothing is sorted
//!   and the caller sorts by comparison.

use std::any::TypeId;
use std::mem::size_of;

use crate::memory::Reservation;

/// Fewest records worth a radix sort (below, the histogram pass costs more than it saves).
pub const MIN_RADIX_RECORDS: usize = 4096;
/// Widest digit, in bits: 2,048 buckets, whose write positions stay in the L1/L2 cache.
const MAX_DIGIT_BITS: u32 = 11;

/// Bytes of scratch a radix sort of `len` records of type `T` allocates.
fn scratch_bytes<T>(len: usize) -> u64 {
    (len as u64).saturating_mul(size_of::<T>() as u64)
}

/// Sorts `buf` by key, descending if asked, stably, and returns true, when `K` is a
/// primitive integer of at most 64 bits and `reservation` takes the scratch buffer;
/// otherwise returns false and leaves `buf` as it was.
pub fn sort<K: 'static, V>(
    buf: &mut Vec<(K, V)>,
    descending: bool,
    reservation: &mut Reservation,
) -> bool {
    macro_rules! by {
        ($($t:ty => $map:expr),* $(,)?) => {$(
            if TypeId::of::<K>() == TypeId::of::<$t>() {
                let scratch = scratch_bytes::<(K, V)>(buf.len());
                if reservation.try_grow(scratch).is_err() {
                    return false;
                }
                // SAFETY: `K` is `$t` (checked above): the two types are the same.
                let buf = unsafe { &mut *(buf as *mut Vec<(K, V)>).cast::<Vec<($t, V)>>() };
                sort_by(buf, $map, descending);
                reservation.shrink(scratch);
                return true;
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
    false
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
    /// would show under Miri or as a wrong value.
    fn check<K: Ord + Copy + std::fmt::Debug + 'static>(keys: Vec<K>, descending: bool) {
        let mut buf: Vec<(K, String)> = keys
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
        let pool = MemoryPool::new(1 << 30);
        let mut reservation = pool.reservation("radix test");
        assert!(
            sort(&mut buf, descending, &mut reservation),
            "an integer key"
        );
        assert_eq!(reservation.size(), 0, "the scratch is given back");
        assert_eq!(buf, want);
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
    fn only_primitive_integers_are_radix_sorted_and_only_with_their_scratch() {
        let pool = MemoryPool::new(1 << 30);
        let mut reservation = pool.reservation("radix test");
        let mut strings = vec![("b".to_string(), 1), ("a".to_string(), 2)];
        assert!(!sort(&mut strings, false, &mut reservation));
        assert_eq!(strings[0].0, "b", "left as it was");
        let mut pairs = vec![((2u64, 1u64), 0), ((1, 1), 0)];
        assert!(!sort(&mut pairs, false, &mut reservation));
        let mut wide = vec![(2u128, 0), (1u128, 0)];
        assert!(!sort(&mut wide, false, &mut reservation));
        // A pool that cannot take the scratch: nothing sorted, nothing kept reserved.
        let small = MemoryPool::new(16);
        let mut refused = small.reservation("radix test");
        let mut ints = vec![(2u64, 0u64), (1, 0)];
        assert!(!sort(&mut ints, false, &mut refused));
        assert_eq!(ints[0].0, 2, "left as it was");
        assert_eq!(small.used(), 0);
        assert!(sort(&mut ints, false, &mut reservation));
        assert_eq!(ints[0].0, 1);
    }
}
