//! Operator references: how a plan names a monomorphised function of the job binary.
//!
//! Closures cannot be serialised, so a plan names each operator by the address of its
//! monomorphised compute function relative to [`anchor`]. In every process that runs
//! the same binary this offset is the same number (ASLR moves the whole image, not the
//! distance between two functions), so a worker resolves it back to the function.
//!
//! This module is the one gate from an offset back to a function: every offset is
//! resolved by its one transmute, [`fn_at`] — through [`OpRef::from_offset`] for the
//! fields of one function type, directly (and `unsafe`) for the two that hold many —
//! and both take a [`BinaryChecked`]: the proof, minted once where a plan is accepted
//! (or for offsets this process made itself), that the offsets it resolves were made
//! by this very binary. That half of the safety argument is stated once, where the
//! proof is minted, not at each resolution.
//!
//! Invariants:
//! - An offset is only resolved in a process whose binary hash equals the plan's
//!   `binary_hash` (`TaskContext::new` checks it and mints the proof), or in the
//!   process that made it.
//! - An offset stored in a field of a given function type (`compute_fn`: a
//!   [`ComputeFn`](crate::task::ComputeFn), ...) was made by `to_offset` of that type;
//!   where one field can hold several types (a router loader per key type, a
//!   `capture!` closure's function), the resolution stays `unsafe` and its caller
//!   argues the type, never the binary.

/// The fixed point that operator offsets are measured from.
#[inline(never)]
pub fn anchor() -> u64 {
    0x0065_6d62_6572 // "ember"
}

/// The offset of a function address from the anchor.
pub(crate) fn offset_of(addr: usize) -> i64 {
    (addr as i64).wrapping_sub(anchor as fn() -> u64 as usize as i64)
}

/// The address an offset points to in this process.
fn address_of(offset: i64) -> usize {
    (anchor as fn() -> u64 as usize as i64).wrapping_add(offset) as usize
}

/// Proof that the offsets about to be resolved were made by the binary this process
/// runs. Zero-sized and `Copy`; only [`BinaryChecked::vouch`] makes one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BinaryChecked(());

impl BinaryChecked {
    /// The proof, for the offsets of one source (a plan, or values this process made).
    ///
    /// # Safety
    /// Every offset resolved with the returned proof (or a copy of it) must have been made
    /// by [`OpRef::to_offset`] (or [`offset_of`]) in a process running this same binary:
    /// a plan whose `binary_hash` was checked equal to this process's binary id, or an
    /// offset this process made itself.
    pub(crate) unsafe fn vouch() -> Self {
        BinaryChecked(())
    }
}

/// Declares a function-pointer kind that can be turned into an offset and back.
macro_rules! op_kind {
    ($(#[$m:meta])* $name:ident = $ty:ty) => {
        $(#[$m])*
        pub(crate) type $name = $ty;
        impl $crate::plan::op::OpRef for $ty {
            fn to_offset(self) -> i64 {
                $crate::plan::op::offset_of(self as usize)
            }
            fn from_offset(offset: i64, checked: $crate::plan::op::BinaryChecked) -> Self {
                // SAFETY: `checked` vouches that the offset was made in this binary, and
                // an offset of this kind's field was made by `to_offset` of this kind
                // (the module's invariants); `$ty` is a `fn` pointer.
                unsafe { $crate::plan::op::fn_at(offset, checked) }
            }
        }
    };
}
pub(crate) use op_kind;

/// A function pointer type that can travel in a plan as an offset.
pub(crate) trait OpRef: Sized + Copy {
    fn to_offset(self) -> i64;
    /// The function `offset` names in this process.
    fn from_offset(offset: i64, checked: BinaryChecked) -> Self;
}

/// The function of type `F` at `offset`: the one transmute every resolution goes
/// through.
///
/// # Safety
/// `F` is a `fn` pointer type and `offset` was made from a function of type `F`
/// (`checked` vouches for the binary).
#[inline]
pub(crate) unsafe fn fn_at<F: Copy>(offset: i64, checked: BinaryChecked) -> F {
    let _ = checked;
    assert_eq!(
        std::mem::size_of::<F>(),
        std::mem::size_of::<usize>(),
        "ember: a plan offset resolved as a type that is not a fn pointer"
    );
    let addr = address_of(offset);
    // SAFETY: per the contract, `F` is a `fn` pointer type (the size of a usize, asserted
    // above) and `addr` is the address of a function of that type in this process.
    unsafe { std::mem::transmute_copy::<usize, F>(&addr) }
}
