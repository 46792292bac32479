//! A cache prefetch hint, for loops whose next loads are known a few iterations ahead
//! (a hash table's buckets, the bytes of sorted records scattered over the heap).
//!
//! Invariant: a prefetch neither faults nor changes memory, whatever the address, so any
//! address may be passed; on targets without the instruction it does nothing.

/// A T0 prefetch (into every cache level) of the cache line holding `addr`.
#[inline]
pub(crate) fn line(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it neither faults nor changes memory, whatever the
    // address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}
