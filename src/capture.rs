//! Closures that carry state: the [`capture!`](crate::capture!) macro.
//!
//! Operators run a closure in whatever process runs the task, so a closure is named in
//! the plan by its code alone and must capture nothing. `capture!(min, words => |w:
//! &String| ...)` lifts that rule for the variables it names: their values are
//! serialised when the closure is made, travel in the plan with the nodes of the
//! operator that receives it, and are handed back to the closure in every task.
//!
//! How it works:
//! - The macro makes a zero-sized closure `g` (unique to the call site: its type names
//!   a struct declared there) that calls a function pointer with the values, and
//!   registers the values and that pointer, serialised, under `g`'s type on this
//!   thread. The user's closure is coerced to a `fn` pointer, so a variable it uses
//!   without naming it is a type error, at `cargo check` time, pointing at the variable.
//! - The operator that receives `g` takes the registration (`assert_stateless` returns
//!   a `Scope`) and every lineage node it creates while the scope lives carries it,
//!   as do the plans of actions run meanwhile.
//! - A task rebuilds the values of every node of its plan once (`task/captures.rs`,
//!   which declares the `RebuildFn` each capture names and this module implements);
//!   `g`, when called, finds those of the node being computed.
//!
//! Invariants: a closure never runs with another closure's or another node's values:
//! values are found by (call site, node), and `g` is not `Copy`, so one closure value
//! is handed to one operator only (reusing it is a compile error); two closures of one
//! call site made before either is handed on are refused (the values could be
//! confused), as is a value that cannot be serialised; a closure whose values are
//! missing in a task fails that task naming its call site.

use std::any::TypeId;
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::Location;

use ember_proto::Capture;

use crate::plan::op::{BinaryChecked, OpRef};
use crate::task::{RebuildFn, Rebuilt};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A value `capture!` can ship to executors: serialisable, shareable, owned.
#[diagnostic::on_unimplemented(
    message = "ember::capture! cannot ship a value of type `{Self}` to executors",
    note = "captured values are serialised into the plan: they must implement serde's \
            `Serialize` and `Deserialize` and be `Send + Sync + 'static` (own their data)"
)]
pub trait Capturable: Serialize + DeserializeOwned + Send + Sync + 'static {}
impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Capturable for T {}

/// What a registration ships: the rebuild function, the values, and the call site.
#[derive(Clone)]
struct Registered {
    capture: Result<Capture, String>,
}

thread_local! {
    /// Closures made by `capture!` and not yet handed to an operator, by closure type.
    static PENDING: RefCell<HashMap<TypeId, Vec<Registered>>> = RefCell::new(HashMap::new());
    /// The captures of the operator calls running on this thread (innermost last),
    /// each rebuilt here too if the operator calls its closure in this process (an
    /// action merging partition results on the driver).
    static SCOPES: RefCell<Vec<ScopeEntry>> = const { RefCell::new(Vec::new()) };
}

fn register<G: 'static>(capture: Result<Capture, String>) {
    PENDING.with(|p| {
        p.borrow_mut()
            .entry(TypeId::of::<G>())
            .or_default()
            .push(Registered { capture })
    });
}

struct ScopeEntry {
    capture: Result<Capture, String>,
    rebuilt: Option<Rebuilt>,
}

/// The operator call an `assert_stateless` opened: while it lives, new nodes and plans
/// carry the closure's captures.
#[must_use = "the captures apply while the scope lives"]
pub(crate) struct Scope(bool);

impl Drop for Scope {
    fn drop(&mut self) {
        if self.0 {
            SCOPES.with(|s| {
                s.borrow_mut().pop();
            });
        }
    }
}

/// Takes the registration of the closure `F` (if `capture!` made it) into a scope.
pub(crate) fn open_scope<F: 'static>() -> Scope {
    let taken = PENDING.with(|p| {
        let mut p = p.borrow_mut();
        let list = p.get_mut(&TypeId::of::<F>())?;
        let first = list.remove(0);
        let ambiguous = list.iter().any(|r| !same(&r.capture, &first.capture));
        if list.is_empty() {
            p.remove(&TypeId::of::<F>());
        }
        Some(if ambiguous {
            let at = first
                .capture
                .as_ref()
                .map(|c| c.origin.clone())
                .unwrap_or_default();
            Err(format!(
                "the ember::capture! closure at {at} was made several times with different \
                 values before being handed to an operator; hand each one to its \
                 operator before making the next"
            ))
        } else {
            first.capture
        })
    });
    match taken {
        Some(capture) => {
            SCOPES.with(|s| {
                s.borrow_mut().push(ScopeEntry {
                    capture,
                    rebuilt: None,
                })
            });
            Scope(true)
        }
        None => Scope(false),
    }
}

fn same(a: &Result<Capture, String>, b: &Result<Capture, String>) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => a.state == b.state && a.rebuild_fn == b.rebuild_fn,
        _ => false,
    }
}

/// The captures a node or plan made now carries, or why it cannot run.
pub(crate) fn in_scope() -> Result<Vec<Capture>, String> {
    SCOPES.with(|s| s.borrow().iter().map(|e| e.capture.clone()).collect())
}

/// The values of call site `K` in this thread's open scopes (outside any task).
fn in_driver_scope<K: 'static, B: 'static>() -> Result<&'static B, String> {
    SCOPES.with(|s| {
        let mut scopes = s.borrow_mut();
        for entry in scopes.iter_mut().rev() {
            let Ok(capture) = &entry.capture else {
                continue;
            };
            if entry.rebuilt.is_none() {
                // SAFETY: the scope's captures were shipped by this process (`ship`), so
                // their offsets were made here.
                let here = unsafe { BinaryChecked::vouch() };
                let f = RebuildFn::from_offset(capture.rebuild_fn, here);
                entry.rebuilt = Some(f(&capture.state, here).map_err(|e| e.to_string())?);
            }
            if let Some((site, value)) = &entry.rebuilt {
                if *site == TypeId::of::<K>() {
                    let b: *const B = value
                        .downcast_ref::<B>()
                        .ok_or("ember::capture!: values of an unexpected type")?;
                    // SAFETY: the value is boxed in the scope entry, which lives until
                    // the operator call that opened it returns; the closure calling
                    // here runs within that call and keeps no reference.
                    return Ok(unsafe { &*b });
                }
            }
        }
        Err(
            "ember::capture!: a captured closure was called outside an ember task and \
             outside the operator it was handed to"
                .to_string(),
        )
    })
}

/// A call site's values and the user's function over them, as a task holds them.
#[doc(hidden)]
pub struct Bound<S, F> {
    pub state: S,
    pub f: F,
}

/// Serialises `state` and `f` (a function pointer, as an offset) for the plan.
fn ship<K: 'static, S: Capturable, F: Copy + 'static>(
    state: &S,
    f: F,
    at: &Location<'_>,
) -> Result<Capture, String> {
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
    // SAFETY: `F` is a `fn` pointer type (every caller passes one), the size of a usize.
    let addr: usize = unsafe { std::mem::transmute_copy(&f) };
    let origin = format!("{}:{}", at.file(), at.line());
    let bytes = postcard::to_allocvec(&(crate::plan::op::offset_of(addr), state)).map_err(|e| {
        format!("the values captured by ember::capture! at {origin} cannot be serialised: {e}")
    })?;
    Ok(Capture {
        rebuild_fn: (rebuild::<K, S, F> as RebuildFn).to_offset(),
        state: bytes,
        origin,
    })
}

fn rebuild<K: 'static, S: Capturable, F: Copy + 'static>(
    bytes: &[u8],
    checked: BinaryChecked,
) -> crate::error::Result<Rebuilt> {
    let (offset, state): (i64, S) = crate::data::decode("captured values", bytes)?;
    // SAFETY: `rebuild::<K, S, F>` is the rebuild function of call site `K` only, whose
    // `ship::<K, S, F>` took this offset from a function pointer of type `F` (every
    // caller passes a `fn` pointer type); `checked` vouches for the binary.
    let f: F = unsafe { crate::plan::op::fn_at(offset, checked) };
    Ok((TypeId::of::<K>(), Box::new(Bound { state, f })))
}

/// The values of call site `K` for the node being computed.
fn current<K: 'static, B: 'static>() -> &'static B {
    match crate::task::captured::<K, B>() {
        Some(found) => found.unwrap_or_else(|why| panic!("{why}")),
        None => in_driver_scope::<K, B>().unwrap_or_else(|why| panic!("{why}")),
    }
}

/// Not `Copy`: a closure made by `capture!` is handed to one operator only.
#[doc(hidden)]
pub struct Once;

/// `capture!` for a closure of one argument taken by value.
#[doc(hidden)]
#[track_caller]
pub fn bind1<K: 'static, S: Capturable, A, R>(state: S, f: fn(&S, A) -> R) -> impl Fn(A) -> R
where
    A: 'static,
    R: 'static,
{
    let once = Once;
    let g = move |a: A| {
        let _ = &once;
        let b: &Bound<S, fn(&S, A) -> R> = current::<K, _>();
        (b.f)(&b.state, a)
    };
    register_for(&g, ship::<K, S, _>(&state, f, Location::caller()));
    g
}

/// `capture!` for a closure of one argument taken by reference.
#[doc(hidden)]
#[track_caller]
pub fn bind_ref1<K: 'static, S: Capturable, A: ?Sized + 'static, R: 'static>(
    state: S,
    f: for<'a> fn(&S, &'a A) -> R,
) -> impl for<'a> Fn(&'a A) -> R {
    let once = Once;
    let g = move |a: &A| {
        let _ = &once;
        let b: &Bound<S, for<'x> fn(&S, &'x A) -> R> = current::<K, _>();
        (b.f)(&b.state, a)
    };
    register_for(&g, ship::<K, S, _>(&state, f, Location::caller()));
    g
}

/// The user's function of a two-argument `capture!` closure.
type Fn2<S, A, B, R> = fn(&S, A, B) -> R;

/// `capture!` for a closure of two arguments taken by value.
#[doc(hidden)]
#[track_caller]
pub fn bind2<K: 'static, S: Capturable, A: 'static, B: 'static, R: 'static>(
    state: S,
    f: fn(&S, A, B) -> R,
) -> impl Fn(A, B) -> R {
    let once = Once;
    let g = move |a: A, b2: B| {
        let _ = &once;
        let b: &Bound<S, Fn2<S, A, B, R>> = current::<K, _>();
        (b.f)(&b.state, a, b2)
    };
    register_for(&g, ship::<K, S, _>(&state, f, Location::caller()));
    g
}

fn register_for<G: 'static>(_: &G, capture: Result<Capture, String>) {
    register::<G>(capture);
}

/// Picks how a captured value is seen in the closure body: by value if it is `Copy`,
/// else by reference (autoref-based selection, resolved where the macro expands).
#[doc(hidden)]
pub struct Pick<'a, T>(pub &'a T);

#[doc(hidden)]
pub trait PickCopy {
    type Out;
    fn pick(self) -> Self::Out;
}
impl<T: Copy> PickCopy for &&Pick<'_, T> {
    type Out = T;
    fn pick(self) -> T {
        *self.0
    }
}

#[doc(hidden)]
pub trait PickRef<'a> {
    type Out;
    fn pick(self) -> Self::Out;
}
impl<'a, T> PickRef<'a> for &Pick<'a, T> {
    type Out = &'a T;
    fn pick(self) -> &'a T {
        self.0
    }
}

/// A closure that captures the named variables, for any RDD operator:
/// `capture!(a, b => |x: T| body)`, `capture!(a => |x: &T| body)` or
/// `capture!(a => |x: T, y: U| body)`.
///
/// The variables are moved into the closure when it is made, serialised with the plan
/// (they must implement serde's `Serialize` and `Deserialize`), and given back to the
/// closure in every task: by value if their type is `Copy`, else as references. The
/// closure's parameters need type annotations. Using a variable the list does not name
/// is a compile error; one closure goes to one operator (it is not `Copy`).
///
/// ```
/// let ctx = ember::Context::local(2).unwrap();
/// let min = 3;
/// let stop = vec!["the".to_string()];
/// let words = ctx
///     .parallelize(vec!["the".to_string(), "cat".into(), "sat".into(), "on".into()], 2)
///     .filter(ember::capture!(min, stop => |w: &String| w.len() >= min && !stop.contains(w)));
/// assert_eq!(words.collect().unwrap(), vec!["cat", "sat"]);
/// ```
#[macro_export]
macro_rules! capture {
    ($($cap:ident),+ $(,)? => |$a:tt : & $ta:ty| $body:expr) => {{
        struct EmberCaptureSite;
        $crate::capture::bind_ref1::<EmberCaptureSite, _, $ta, _>(
            ($($cap,)+),
            |ember_captured, $a: &$ta| {
                #[allow(unused_imports)]
                use $crate::capture::{PickCopy as _, PickRef as _};
                let ($($cap,)+) = ember_captured;
                $( #[allow(unused_variables)] let $cap = (&&$crate::capture::Pick($cap)).pick(); )+
                $body
            },
        )
    }};
    ($($cap:ident),+ $(,)? => |$a:tt : $ta:ty, $b:tt : $tb:ty| $body:expr) => {{
        struct EmberCaptureSite;
        $crate::capture::bind2::<EmberCaptureSite, _, $ta, $tb, _>(
            ($($cap,)+),
            |ember_captured, $a: $ta, $b: $tb| {
                #[allow(unused_imports)]
                use $crate::capture::{PickCopy as _, PickRef as _};
                let ($($cap,)+) = ember_captured;
                $( #[allow(unused_variables)] let $cap = (&&$crate::capture::Pick($cap)).pick(); )+
                $body
            },
        )
    }};
    ($($cap:ident),+ $(,)? => |$a:tt : $ta:ty| $body:expr) => {{
        struct EmberCaptureSite;
        $crate::capture::bind1::<EmberCaptureSite, _, $ta, _>(
            ($($cap,)+),
            |ember_captured, $a: $ta| {
                #[allow(unused_imports)]
                use $crate::capture::{PickCopy as _, PickRef as _};
                let ($($cap,)+) = ember_captured;
                $( #[allow(unused_variables)] let $cap = (&&$crate::capture::Pick($cap)).pick(); )+
                $body
            },
        )
    }};
}
