//! Memory estimation for records of user types that implement `serde::Serialize` but no
//! size trait (in the style of Spark's `SizeTracker` + `SizeEstimator`).
//!
//! [`SizeEstimator`] samples records at exponentially growing intervals: at updates 1, 2,
//! 4, 8, ..., 1024, and after that at every 1024th update. A sample walks the record with
//! serde, using a size-counting `Serializer` (no bytes are produced), and estimates the
//! **heap bytes** it owns:
//! * A string or byte buffer counts its length rounded up to 16, plus 16 bytes of allocator
//!   overhead.
//! * A sequence or map counts its elements' inline sizes and their own heap bytes, plus an
//!   allocation overhead. Maps also pay a per-entry overhead.
//! * Anything nested inside a heap allocation (the `String` headers inside a `Vec<String>`,
//!   for example) counts its inline size too.
//! * Inline data at the top level is not counted here, because `size_of` covers it.
//!
//! Capacity slack and shared (`Rc`/`Arc`) data cannot be seen through serde. Shared data is
//! counted once per reference, which errs on the high side. The estimator keeps a running
//! mean of the samples: a plain mean over the first 16 samples, then an exponentially
//! weighted mean with weight 1/16, so it follows records whose size drifts, such as growing
//! combiners. The per-record estimate is
//! `size_of::<T>() + per-entry overhead + mean sampled heap bytes`.
//!
//! Why not the postcard-encoded size: it leaves out every nested `String`/`Vec` header and
//! allocation. For a `Vec<String>` of short strings that undercounts real memory about
//! eight times.
//!
//! Invariant: `update` is a counter increment and one compare except on sampled updates.
//! Neither `update` nor `estimate` allocates.

use serde::ser::{self, Serialize, Serializer};

/// Updates seen before the sampling interval stops growing.
pub const MAX_SAMPLE_INTERVAL: u64 = 1024;
const EWMA_SAMPLES: u64 = 16;

/// Running per-record memory estimate, fed by sampling records.
#[derive(Debug, Clone)]
pub struct SizeEstimator {
    fixed: u64,
    updates: u64,
    next_sample: u64,
    samples: u64,
    mean: f64,
}

impl SizeEstimator {
    /// An estimator for records of type `T` held in a structure that adds
    /// `per_entry_overhead` bytes per record (such as hash table control bytes).
    pub fn new<T>(per_entry_overhead: usize) -> Self {
        Self::with_fixed((std::mem::size_of::<T>() + per_entry_overhead) as u64)
    }

    /// An estimator where each record costs `fixed_bytes` plus its sampled heap bytes.
    pub fn with_fixed(fixed_bytes: u64) -> Self {
        SizeEstimator {
            fixed: fixed_bytes,
            updates: 0,
            next_sample: 1,
            samples: 0,
            mean: 0.0,
        }
    }

    /// Counts one inserted or updated record and samples its size if it is due. Returns
    /// true if it sampled.
    #[inline]
    pub fn update<T: Serialize + ?Sized>(&mut self, record: &T) -> bool {
        self.updates += 1;
        if self.updates < self.next_sample {
            return false;
        }
        self.sample(record);
        true
    }

    #[cold]
    fn sample<T: Serialize + ?Sized>(&mut self, record: &T) {
        let size = heap_size(record) as f64;
        self.samples += 1;
        let weight = 1.0 / self.samples.min(EWMA_SAMPLES) as f64;
        self.mean += (size - self.mean) * weight;
        let interval = self.updates.min(MAX_SAMPLE_INTERVAL);
        self.next_sample = self.updates + interval;
    }

    /// Estimated bytes of one record (fixed part plus mean sampled heap bytes).
    pub fn bytes_per_record(&self) -> u64 {
        self.fixed + self.heap_bytes_per_record()
    }

    /// The fixed part per record (`size_of` plus overhead).
    pub fn fixed_bytes(&self) -> u64 {
        self.fixed
    }

    /// Mean sampled heap bytes per record, rounded up.
    pub fn heap_bytes_per_record(&self) -> u64 {
        self.mean.ceil() as u64
    }

    /// Estimated bytes of `n_records` records.
    pub fn estimate(&self, n_records: u64) -> u64 {
        n_records.saturating_mul(self.bytes_per_record())
    }

    /// Updates seen so far.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// Samples taken so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }
}

/// Estimated heap bytes owned by `value` (see the module doc). A value whose `Serialize`
/// fails counts what was seen before the failure.
pub fn heap_size<T: Serialize + ?Sized>(value: &T) -> u64 {
    let mut sizer = HeapSizer { bytes: 0, depth: 0 };
    let _ = value.serialize(&mut sizer);
    sizer.bytes
}

/// `String` / `Vec` header (pointer, capacity, length).
const VEC_HEADER: u64 = 24;
/// `HashMap` header.
const MAP_HEADER: u64 = 48;
/// Hash map control byte and slack per entry.
const MAP_ENTRY_OVERHEAD: u64 = 8;
/// An enum discriminant, or a `None` in a collection.
const TAG: u64 = 4;
/// Allocator bookkeeping per allocation.
const ALLOC_OVERHEAD: u64 = 16;

fn alloc(len: usize) -> u64 {
    if len == 0 {
        0
    } else {
        (len as u64).next_multiple_of(16) + ALLOC_OVERHEAD
    }
}

struct HeapSizer {
    bytes: u64,
    /// 0 while walking the record's own inline data; > 0 inside a heap allocation.
    depth: u32,
}

impl HeapSizer {
    fn inline(&mut self, n: u64) {
        if self.depth > 0 {
            self.bytes += n;
        }
    }
}

#[derive(Debug)]
struct SizeError;

impl std::fmt::Display for SizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("size estimation failed")
    }
}

impl std::error::Error for SizeError {}

impl ser::Error for SizeError {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        SizeError
    }
}

type Res = Result<(), SizeError>;

macro_rules! primitives {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(fn $method(self, _: $ty) -> Res {
            self.inline(std::mem::size_of::<$ty>() as u64);
            Ok(())
        })*
    };
}

impl Serializer for &mut HeapSizer {
    type Ok = ();
    type Error = SizeError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    primitives!(
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_i128: i128, serialize_u8: u8, serialize_u16: u16,
        serialize_u32: u32, serialize_u64: u64, serialize_u128: u128, serialize_f32: f32,
        serialize_f64: f64, serialize_char: char,
    );

    fn serialize_str(self, v: &str) -> Res {
        self.serialize_bytes(v.as_bytes())
    }
    fn serialize_bytes(self, v: &[u8]) -> Res {
        self.inline(VEC_HEADER);
        self.bytes += alloc(v.len());
        Ok(())
    }
    fn serialize_none(self) -> Res {
        self.inline(TAG);
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Res {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Res {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Res {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Res {
        self.inline(TAG);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Res {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        v: &T,
    ) -> Res {
        self.inline(TAG);
        v.serialize(self)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self, SizeError> {
        self.inline(VEC_HEADER);
        if len != Some(0) {
            self.bytes += ALLOC_OVERHEAD;
        }
        self.depth += 1;
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, SizeError> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, SizeError> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, SizeError> {
        self.inline(TAG);
        Ok(self)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self, SizeError> {
        self.inline(MAP_HEADER);
        if len != Some(0) {
            self.bytes += ALLOC_OVERHEAD;
        }
        self.depth += 1;
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, SizeError> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, SizeError> {
        self.inline(TAG);
        Ok(self)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

macro_rules! compound {
    ($($trait:ident :: $method:ident ($($key:ident)?), pops: $pops:expr;)*) => {
        $(impl ser::$trait for &mut HeapSizer {
            type Ok = ();
            type Error = SizeError;
            fn $method<T: Serialize + ?Sized>(&mut self, $($key: &'static str,)? v: &T) -> Res {
                $(let _ = $key;)?
                v.serialize(&mut **self)
            }
            fn end(self) -> Res {
                if $pops {
                    self.depth -= 1;
                }
                Ok(())
            }
        })*
    };
}

compound! {
    SerializeSeq::serialize_element(), pops: true;
    SerializeTuple::serialize_element(), pops: false;
    SerializeTupleStruct::serialize_field(), pops: false;
    SerializeTupleVariant::serialize_field(), pops: false;
    SerializeStruct::serialize_field(key), pops: false;
    SerializeStructVariant::serialize_field(key), pops: false;
}

impl ser::SerializeMap for &mut HeapSizer {
    type Ok = ();
    type Error = SizeError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Res {
        self.bytes += MAP_ENTRY_OVERHEAD;
        k.serialize(&mut **self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Res {
        v.serialize(&mut **self)
    }
    fn end(self) -> Res {
        self.depth -= 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_at_growing_intervals_then_every_1024th() {
        let mut e = SizeEstimator::new::<u64>(0);
        let sampled: Vec<u64> = (1..=5000u64).filter(|_| e.update(&1u8)).collect();
        let first: Vec<u64> = (0..=10).map(|i| 1u64 << i).collect();
        assert_eq!(&sampled[..11], &first[..]);
        assert_eq!(&sampled[11..], &[2048, 3072, 4096]);
        assert_eq!(e.samples(), 14);
        assert_eq!(e.updates(), 5000);
    }

    #[test]
    fn estimate_includes_fixed_and_heap_size() {
        let mut e = SizeEstimator::new::<String>(8);
        assert_eq!(e.estimate(10), 10 * 32);
        let s = "x".repeat(99); // one allocation: 112 + 16
        for _ in 0..100 {
            e.update(&s);
        }
        assert_eq!(e.heap_bytes_per_record(), 128);
        assert_eq!(e.bytes_per_record(), 24 + 8 + 128);
        assert_eq!(e.estimate(1000), 160_000);
        assert_eq!(e.estimate(u64::MAX), u64::MAX);
    }

    #[test]
    fn heap_size_of_common_shapes() {
        #[derive(serde::Serialize)]
        struct Rec {
            id: u64,
            name: String,
            tags: Vec<String>,
            opt: Option<Box<str>>,
        }
        assert_eq!(heap_size(&7u64), 0);
        assert_eq!(heap_size(&(1u64, String::new())), 0);
        assert_eq!(heap_size(&"abc".to_string()), 32);
        // Vec buffer: 16 overhead + 2 inline u32; nothing else.
        assert_eq!(heap_size(&vec![1u32, 2]), 16 + 8);
        // Vec<String> of 8 short strings: 8 headers + 8 allocations + the buffer.
        let v: Vec<String> = (0..8).map(|i| format!("v1234{i}")).collect();
        assert_eq!(heap_size(&v), 16 + 8 * (24 + 32));
        let r = Rec {
            id: 1,
            name: "n".into(),
            tags: vec!["a".into()],
            opt: Some("xy".into()),
        };
        assert_eq!(heap_size(&r), 32 + (16 + 24 + 32) + 32);
        let m: std::collections::BTreeMap<u8, u16> = [(1, 2), (3, 4)].into();
        assert_eq!(heap_size(&m), 16 + 2 * (8 + 1 + 2));
        assert_eq!(heap_size(&vec![None, Some(1u8)]), 16 + 4 + 1);
    }

    #[test]
    fn follows_drifting_sizes() {
        let mut e = SizeEstimator::with_fixed(0);
        for _ in 0..100_000 {
            e.update(&vec![0u8; 10]);
        }
        for _ in 0..100_000 {
            e.update(&vec![0u8; 1000]);
        }
        // 1008 + 16 bytes, after ~100 samples of the new size.
        assert!(e.heap_bytes_per_record() > 1000, "{e:?}");
    }
}
