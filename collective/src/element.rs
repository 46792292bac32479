//! [`Element`]: the numeric types the slice collectives reduce (`f64`, `f32`, `i64`,
//! `u64`), [`ReduceOp`], and the element-wise kernels.
//!
//! Semantics, fixed for every algorithm:
//! - integers: `Sum` wraps on overflow (two's complement, as `wrapping_add`); `Min`/`Max`
//!   are exact;
//! - floats: `Sum` is IEEE addition in the order the algorithm fixes (a function of ranks
//!   and sizes only), so the bits are the same in every run; a NaN anywhere makes the sum
//!   NaN. `Min`/`Max` are `f64::min`/`f64::max` (`f32::…`): a NaN operand is ignored (the
//!   other is taken), so the result is NaN only where every rank has NaN; which zero
//!   `min(-0.0, 0.0)` gives is whatever the platform's instruction gives for that operand
//!   order, the same in every run since the order is fixed.
//!
//! Invariants: `Element` is sealed to plain-old-data types with no padding for which every
//! bit pattern is a value (`bytemuck::Pod`), so slices are sent and received as their
//! native bytes (the handshake refuses a peer of another byte order); the kernels take
//! the left and right operands in the order given, never swapped.

use bytemuck::Pod;

/// An element-wise reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Min,
    Max,
}

impl ReduceOp {
    pub(crate) fn code(self) -> u8 {
        match self {
            ReduceOp::Sum => 1,
            ReduceOp::Min => 2,
            ReduceOp::Max => 3,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f64 {}
    impl Sealed for f32 {}
    impl Sealed for i64 {}
    impl Sealed for u64 {}
}

/// A numeric type the slice collectives work on.
pub trait Element: Pod + Send + Sync + sealed::Sealed + 'static {
    /// The type's code in a frame header (so ranks that pass different types fail).
    #[doc(hidden)]
    const CODE: u8;
    #[doc(hidden)]
    fn sum(left: Self, right: Self) -> Self;
    #[doc(hidden)]
    fn min(left: Self, right: Self) -> Self;
    #[doc(hidden)]
    fn max(left: Self, right: Self) -> Self;

    /// `op(left, right)`.
    fn reduce(op: ReduceOp, left: Self, right: Self) -> Self {
        match op {
            ReduceOp::Sum => Self::sum(left, right),
            ReduceOp::Min => Self::min(left, right),
            ReduceOp::Max => Self::max(left, right),
        }
    }
}

macro_rules! float_element {
    ($t:ty, $code:expr) => {
        impl Element for $t {
            const CODE: u8 = $code;
            #[inline(always)]
            fn sum(left: Self, right: Self) -> Self {
                left + right
            }
            #[inline(always)]
            fn min(left: Self, right: Self) -> Self {
                left.min(right)
            }
            #[inline(always)]
            fn max(left: Self, right: Self) -> Self {
                left.max(right)
            }
        }
    };
}

macro_rules! int_element {
    ($t:ty, $code:expr) => {
        impl Element for $t {
            const CODE: u8 = $code;
            #[inline(always)]
            fn sum(left: Self, right: Self) -> Self {
                left.wrapping_add(right)
            }
            #[inline(always)]
            fn min(left: Self, right: Self) -> Self {
                Ord::min(left, right)
            }
            #[inline(always)]
            fn max(left: Self, right: Self) -> Self {
                Ord::max(left, right)
            }
        }
    };
}

float_element!(f64, 1);
float_element!(f32, 2);
int_element!(i64, 3);
int_element!(u64, 4);

/// The header detail byte of a slice collective: element type and reduce op.
pub(crate) fn detail<T: Element>(op: Option<ReduceOp>) -> u8 {
    T::CODE | op.map_or(0, |op| op.code() << 4)
}

#[inline(always)]
fn zip_with<T: Copy>(acc: &mut [T], other: &[T], f: impl Fn(T, T) -> T) {
    assert_eq!(acc.len(), other.len());
    for (a, b) in acc.iter_mut().zip(other) {
        *a = f(*a, *b);
    }
}

/// `acc[i] = op(acc[i], right[i])`: `acc` holds the lower ranks' part.
pub(crate) fn reduce_keep_left<T: Element>(op: ReduceOp, acc: &mut [T], right: &[T]) {
    match op {
        ReduceOp::Sum => zip_with(acc, right, T::sum),
        ReduceOp::Min => zip_with(acc, right, T::min),
        ReduceOp::Max => zip_with(acc, right, T::max),
    }
}

/// `acc[i] = op(left[i], acc[i])`: `left` holds the part that comes first.
pub(crate) fn reduce_keep_right<T: Element>(op: ReduceOp, left: &[T], acc: &mut [T]) {
    match op {
        ReduceOp::Sum => zip_with(acc, left, |a, l| T::sum(l, a)),
        ReduceOp::Min => zip_with(acc, left, |a, l| T::min(l, a)),
        ReduceOp::Max => zip_with(acc, left, |a, l| T::max(l, a)),
    }
}

/// A slice's native bytes.
pub(crate) fn bytes<T: Pod>(data: &[T]) -> &[u8] {
    bytemuck::cast_slice(data)
}

/// A slice's native bytes, writable.
pub(crate) fn bytes_mut<T: Pod>(data: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_keep_operand_order() {
        let mut acc = [1.0f64, f64::NAN, 3.0];
        reduce_keep_left(ReduceOp::Min, &mut acc, &[2.0, 5.0, f64::NAN]);
        assert_eq!(acc, [1.0, 5.0, 3.0]);
        let mut acc = [i64::MAX, -4];
        reduce_keep_right(ReduceOp::Sum, &[1, 10], &mut acc);
        assert_eq!(acc, [i64::MIN, 6]);
        let mut acc = [3u64, 9];
        reduce_keep_right(ReduceOp::Max, &[4, 1], &mut acc);
        assert_eq!(acc, [4, 9]);
        assert_ne!(
            detail::<f64>(Some(ReduceOp::Sum)),
            detail::<f32>(Some(ReduceOp::Sum))
        );
        assert_ne!(
            detail::<f64>(Some(ReduceOp::Sum)),
            detail::<f64>(Some(ReduceOp::Max))
        );
    }
}
