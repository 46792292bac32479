//! One chunk of a [`super::BlockSizes`] matrix: its rows' stored sizes in the narrowest
//! unsigned width that holds every value stored in it so far (8, 16 or 32 bits).
//!
//! Most blocks of a wide shuffle are small (50,000 maps x 1,000 reducers of a few
//! bytes each), and a matrix of 32-bit sizes is 200 MB the driver's scheduler thread
//! faults in page by page while the statuses arrive; in 8 bits it is a quarter of that.
//!
//! Invariants: a chunk starts at 8 bits (all zero) and only ever widens, in place of
//! the whole chunk and before a value that needs it is written, so every value read is
//! exactly the value last written there; widening keeps every value.

/// A stored width: u8, u16 or u32.
pub(super) trait Stored: Copy + Into<u32> {
    /// The largest value it holds.
    const MAX: u32;
    /// `v`, which is at most `MAX`.
    fn narrow(v: u32) -> Self;
}

impl Stored for u8 {
    const MAX: u32 = u8::MAX as u32;
    fn narrow(v: u32) -> Self {
        v as u8
    }
}

impl Stored for u16 {
    const MAX: u32 = u16::MAX as u32;
    fn narrow(v: u32) -> Self {
        v as u16
    }
}

impl Stored for u32 {
    const MAX: u32 = u32::MAX;
    fn narrow(v: u32) -> Self {
        v
    }
}

/// A chunk's values.
#[derive(Debug)]
pub(super) enum Chunk {
    U8(Box<[u8]>),
    U16(Box<[u16]>),
    U32(Box<[u32]>),
}

/// A run of one chunk's values, borrowed.
#[derive(Debug, Clone, Copy)]
pub(super) enum Segment<'a> {
    U8(&'a [u8]),
    U16(&'a [u16]),
    U32(&'a [u32]),
}

impl Segment<'_> {
    /// The value at `i`.
    pub fn get(&self, i: usize) -> u32 {
        match self {
            Segment::U8(s) => u32::from(s[i]),
            Segment::U16(s) => u32::from(s[i]),
            Segment::U32(s) => s[i],
        }
    }

    /// How many values it has.
    pub fn len(&self) -> usize {
        match self {
            Segment::U8(s) => s.len(),
            Segment::U16(s) => s.len(),
            Segment::U32(s) => s.len(),
        }
    }
}

impl Chunk {
    /// `len` zeros, 8 bits each.
    pub fn new(len: usize) -> Chunk {
        Chunk::U8(vec![0; len].into())
    }

    /// Bytes per value.
    pub fn bytes(&self) -> usize {
        match self {
            Chunk::U8(_) => 1,
            Chunk::U16(_) => 2,
            Chunk::U32(_) => 4,
        }
    }

    /// Widens the chunk, if it must, so that it holds values up to `max`.
    pub fn fit(&mut self, max: u32) {
        const U8_MAX: u32 = <u8 as Stored>::MAX;
        const U16_MAX: u32 = <u16 as Stored>::MAX;
        let widened = match self {
            Chunk::U8(v) if max > U16_MAX => Chunk::U32(v.iter().map(|&x| x.into()).collect()),
            Chunk::U8(v) if max > U8_MAX => Chunk::U16(v.iter().map(|&x| x.into()).collect()),
            Chunk::U16(v) if max > U16_MAX => Chunk::U32(v.iter().map(|&x| x.into()).collect()),
            _ => return,
        };
        *self = widened;
    }

    /// The values of `range`.
    pub fn segment(&self, range: std::ops::Range<usize>) -> Segment<'_> {
        match self {
            Chunk::U8(v) => Segment::U8(&v[range]),
            Chunk::U16(v) => Segment::U16(&v[range]),
            Chunk::U32(v) => Segment::U32(&v[range]),
        }
    }

    /// Writes `values` from `at` on; each must fit (see [`Chunk::fit`]).
    pub fn write(&mut self, at: usize, values: &[u32]) {
        fn put<T: Stored>(dst: &mut [T], values: &[u32]) {
            for (d, &v) in dst.iter_mut().zip(values) {
                debug_assert!(v <= T::MAX, "a value the chunk was not widened for");
                *d = T::narrow(v);
            }
        }
        let end = at + values.len();
        match self {
            Chunk::U8(v) => put(&mut v[at..end], values),
            Chunk::U16(v) => put(&mut v[at..end], values),
            Chunk::U32(v) => put(&mut v[at..end], values),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_keeps_every_value_and_never_narrows() {
        let mut c = Chunk::new(6);
        assert_eq!(c.bytes(), 1);
        c.write(0, &[0, 1, 255]);
        c.fit(255);
        assert_eq!(c.bytes(), 1, "255 fits 8 bits");
        c.fit(256);
        assert_eq!(c.bytes(), 2);
        c.write(3, &[256, 65_535]);
        c.fit(10);
        assert_eq!(c.bytes(), 2, "a chunk never narrows");
        c.fit(65_536);
        assert_eq!(c.bytes(), 4);
        c.write(5, &[u32::MAX]);
        let s = c.segment(0..6);
        let got: Vec<u32> = (0..6).map(|i| s.get(i)).collect();
        assert_eq!(got, vec![0, 1, 255, 256, 65_535, u32::MAX]);
        // Straight from 8 to 32 bits.
        let mut d = Chunk::new(2);
        d.write(0, &[7, 9]);
        d.fit(1 << 20);
        d.write(1, &[1 << 20]);
        let s = d.segment(0..2);
        assert!(matches!(s, Segment::U32(_)));
        assert_eq!((s.get(0), s.get(1)), (7, 1 << 20));
    }
}
