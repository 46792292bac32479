//! Operator closures: the check that a closure handed to an operator captures nothing,
//! the `capture!` scope that opening it starts, and conjuring the closure back from its
//! type alone in a task.
//!
//! Invariants: a closure reaches a compute function only through [`assert_stateless`]
//! (checked zero-sized at compile time, when `cargo build` instantiates the operator for
//! it), so [`conjure`] can make its value in any process from the type alone.

use crate::capture::{open_scope, Scope};

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
pub(crate) fn assert_stateless<F: 'static>(_f: &F) -> Scope {
    #[allow(clippy::let_unit_value)]
    let () = OperatorClosure::<F>::CAPTURES_NOTHING;
    open_scope::<F>()
}
