//! Operator references: how a plan names a monomorphised function of the job binary.
//!
//! Closures cannot be serialised, so a plan names each operator by the address of its
//! monomorphised compute function relative to [`anchor`]. In every process that runs
//! the same binary this offset is the same number (ASLR moves the whole image, not the
//! distance between two functions), so a worker resolves it back to the function.
//!
//! Invariants:
//! - An offset is only resolved in a process whose binary hash equals the plan's
//!   `binary_hash` (checked by the task runtime before anything is resolved).
//! - Closures handed to operators are zero-sized (they capture nothing), so a worker can
//!   conjure the closure value from its type alone ([`conjure`]).

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
pub(crate) fn address_of(offset: i64) -> usize {
    (anchor as fn() -> u64 as usize as i64).wrapping_add(offset) as usize
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
            unsafe fn from_offset(offset: i64) -> Self {
                // SAFETY: the caller guarantees that the offset was produced by
                // `to_offset` on a function of this exact type in the same binary.
                unsafe { std::mem::transmute::<usize, $ty>($crate::plan::op::address_of(offset)) }
            }
        }
    };
}
pub(crate) use op_kind;

/// A function pointer type that can travel in a plan as an offset.
pub(crate) trait OpRef: Sized + Copy {
    fn to_offset(self) -> i64;
    /// # Safety
    /// `offset` must come from `to_offset` of a function of the same type in a process
    /// running the same binary.
    unsafe fn from_offset(offset: i64) -> Self;
}

/// Produces the value of a zero-sized closure type from the type alone.
///
/// Closures handed to operators were checked to capture nothing by `assert_stateless`.
#[inline(always)]
pub(crate) fn conjure<F>() -> F {
    // Checked at compile time where the closure was handed over (`assert_stateless`);
    // this runtime check (folded away) keeps the read below sound for any caller.
    assert!(
        std::mem::size_of::<F>() == 0,
        "ember: conjure of a closure that captures"
    );
    // SAFETY: `F` is zero-sized (asserted just above) and, being the type of a
    // closure or fn item value the user handed us, inhabited. Reading a zero-sized value
    // through a dangling, well-aligned pointer reads no bytes and is valid.
    unsafe { std::ptr::NonNull::<F>::dangling().as_ptr().read() }
}

/// The compile-time check that a closure handed to an operator captures nothing: its
/// one constant fails to evaluate for a closure with captures. The error names the
/// user's closure in its first note (`evaluation of
/// <OperatorClosure<{closure@src/main.rs:..}>>::CAPTURES_NOTHING failed`); `cargo
/// check` does not evaluate it (it is evaluated when the operator is instantiated for
/// that closure, i.e. by `cargo build`), see the crate docs' "Closures and outer values".
pub(crate) struct OperatorClosure<F>(std::marker::PhantomData<F>);

impl<F> OperatorClosure<F> {
    pub(crate) const CAPTURES_NOTHING: () = assert!(
        std::mem::size_of::<F>() == 0,
        "ember: a closure handed to an RDD operator captures variables (the closure \
         named on the next line); it runs in other processes, so it must capture nothing. \
         Name the outer values it uses in `ember::capture!`, with the parameters' types: \
         `let k: u64 = 3; rdd.filter(ember::capture!(k => |x: &u64| *x > k))` (the values \
         are serialised with the plan and given back to the closure in every task), or \
         pass state with the operator's `*_with(state, f)` variant or a broadcast variable."
    );
}

/// Compile-time check, called where the user hands a closure to an operator, so the
/// error names the user's closure ([`OperatorClosure`]); the only compile-time check,
/// so it is reported once. Opens the closure's
/// [`capture`](crate::capture) scope: a closure `capture!` made is zero-sized too, and
/// the values it names travel with the nodes the operator makes while the scope lives.
#[inline(always)]
pub(crate) fn assert_stateless<F: 'static>(_f: &F) -> crate::capture::Scope {
    #[allow(clippy::let_unit_value)]
    let () = OperatorClosure::<F>::CAPTURES_NOTHING;
    crate::capture::open_scope::<F>()
}
