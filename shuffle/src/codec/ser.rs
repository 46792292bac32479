//! The write side of [`super`]: a serde `Serializer` appending postcard's bytes to a
//! `Vec`, varints stored whole.
//!
//! Invariant: every method appends exactly what postcard's serializer would for the same
//! call; only the bytes written become part of the vector (stores past its length land
//! in reserved spare capacity and are not part of it).

use serde::ser::{self, Serialize};

use super::{spread7, CodecError, CONTINUE};

type Result<T> = std::result::Result<T, CodecError>;

/// Appends postcard bytes to `out`.
pub(super) struct Encoder<'a> {
    pub(super) out: &'a mut Vec<u8>,
}

impl Encoder<'_> {
    /// Appends `v` as a varint (LEB128, least significant group first, minimal length).
    #[inline(always)]
    fn varint(&mut self, v: u64) {
        if v >= 1 << 56 {
            return self.varint_long(v as u128);
        }
        // 1 to 8 bytes: one store of the whole word, continuation bits on all but the last.
        let len = (64 - (v | 1).leading_zeros() as usize).div_ceil(7);
        let word = spread7(v) | (CONTINUE & ((1u64 << (8 * (len - 1))) - 1));
        self.out.reserve(8);
        let at = self.out.len();
        // SAFETY: `reserve(8)` leaves 8 bytes of capacity past `at`; the store writes
        // exactly those, and only the first `len <= 8` become part of the vector.
        unsafe {
            self.out
                .as_mut_ptr()
                .add(at)
                .cast::<u64>()
                .write_unaligned(word.to_le());
            self.out.set_len(at + len);
        }
    }

    /// A varint of 9 or more bytes (postcard's byte loop).
    #[cold]
    fn varint_long(&mut self, mut v: u128) {
        while v >= 0x80 {
            self.out.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    /// A length or a variant index: most are one byte, which is a push. (Numbers skip
    /// this test: the word store costs the same for one byte as for eight.)
    #[inline(always)]
    fn small(&mut self, v: u64) {
        if v < 0x80 {
            self.out.push(v as u8);
        } else {
            self.varint(v);
        }
    }

    #[inline]
    fn varint128(&mut self, v: u128) {
        match u64::try_from(v) {
            Ok(v) => self.varint(v),
            Err(_) => self.varint_long(v),
        }
    }

    /// Appends `bytes`, short ones without a call to memcpy.
    #[inline(always)]
    fn bytes(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        if !(8..=16).contains(&n) {
            // Long ones are worth the call; those under 8 cannot be read as a word.
            self.out.extend_from_slice(bytes);
            return;
        }
        self.out.reserve(16);
        let (src, at) = (bytes.as_ptr(), self.out.len());
        // SAFETY: 8 <= n <= 16: both 8-byte reads lie within `bytes` (overlapping when
        // n < 16) and both writes within the 16 reserved bytes past `at`; only `n` of
        // them become part of the vector.
        unsafe {
            let dst = self.out.as_mut_ptr().add(at);
            let (a, b) = (
                src.cast::<u64>().read_unaligned(),
                src.add(n - 8).cast::<u64>().read_unaligned(),
            );
            dst.cast::<u64>().write_unaligned(a);
            dst.add(n - 8).cast::<u64>().write_unaligned(b);
            self.out.set_len(at + n);
        }
    }
}

/// Zigzag: small magnitudes of either sign get short varints (postcard's mapping).
#[inline(always)]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

impl<'a> ser::Serializer for &mut Encoder<'a> {
    type Ok = ();
    type Error = CodecError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn is_human_readable(&self) -> bool {
        false
    }

    #[inline]
    fn serialize_bool(self, v: bool) -> Result<()> {
        self.out.push(u8::from(v));
        Ok(())
    }

    #[inline]
    fn serialize_i8(self, v: i8) -> Result<()> {
        self.out.push(v as u8);
        Ok(())
    }

    #[inline]
    fn serialize_i16(self, v: i16) -> Result<()> {
        self.varint(u64::from(((v << 1) ^ (v >> 15)) as u16));
        Ok(())
    }

    #[inline]
    fn serialize_i32(self, v: i32) -> Result<()> {
        self.varint(u64::from(((v << 1) ^ (v >> 31)) as u32));
        Ok(())
    }

    #[inline]
    fn serialize_i64(self, v: i64) -> Result<()> {
        self.varint(zigzag(v));
        Ok(())
    }

    #[inline]
    fn serialize_i128(self, v: i128) -> Result<()> {
        self.varint128(((v << 1) ^ (v >> 127)) as u128);
        Ok(())
    }

    #[inline]
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.out.push(v);
        Ok(())
    }

    #[inline]
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.varint(u64::from(v));
        Ok(())
    }

    #[inline]
    fn serialize_u32(self, v: u32) -> Result<()> {
        self.varint(u64::from(v));
        Ok(())
    }

    #[inline]
    fn serialize_u64(self, v: u64) -> Result<()> {
        self.varint(v);
        Ok(())
    }

    #[inline]
    fn serialize_u128(self, v: u128) -> Result<()> {
        self.varint128(v);
        Ok(())
    }

    #[inline]
    fn serialize_f32(self, v: f32) -> Result<()> {
        self.out.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }

    #[inline]
    fn serialize_f64(self, v: f64) -> Result<()> {
        self.bytes(&v.to_bits().to_le_bytes());
        Ok(())
    }

    #[inline]
    fn serialize_char(self, v: char) -> Result<()> {
        let mut buf = [0u8; 4];
        self.serialize_str(v.encode_utf8(&mut buf))
    }

    #[inline]
    fn serialize_str(self, v: &str) -> Result<()> {
        self.small(v.len() as u64);
        self.bytes(v.as_bytes());
        Ok(())
    }

    #[inline]
    fn serialize_bytes(self, v: &[u8]) -> Result<()> {
        self.small(v.len() as u64);
        self.bytes(v);
        Ok(())
    }

    #[inline]
    fn serialize_none(self) -> Result<()> {
        self.out.push(0);
        Ok(())
    }

    #[inline]
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<()> {
        self.out.push(1);
        value.serialize(self)
    }

    #[inline]
    fn serialize_unit(self) -> Result<()> {
        Ok(())
    }

    #[inline]
    fn serialize_unit_struct(self, _name: &'static str) -> Result<()> {
        Ok(())
    }

    #[inline]
    fn serialize_unit_variant(self, _: &'static str, index: u32, _: &'static str) -> Result<()> {
        self.small(u64::from(index));
        Ok(())
    }

    #[inline]
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<()> {
        value.serialize(self)
    }

    #[inline]
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        value: &T,
    ) -> Result<()> {
        self.small(u64::from(index));
        value.serialize(self)
    }

    #[inline]
    fn serialize_seq(self, len: Option<usize>) -> Result<Self> {
        self.small(len.ok_or(CodecError::SerializeSeqLengthUnknown)? as u64);
        Ok(self)
    }

    #[inline]
    fn serialize_tuple(self, _len: usize) -> Result<Self> {
        Ok(self)
    }

    #[inline]
    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Self> {
        Ok(self)
    }

    #[inline]
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _len: usize,
    ) -> Result<Self> {
        self.small(u64::from(index));
        Ok(self)
    }

    #[inline]
    fn serialize_map(self, len: Option<usize>) -> Result<Self> {
        self.small(len.ok_or(CodecError::SerializeSeqLengthUnknown)? as u64);
        Ok(self)
    }

    #[inline]
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self> {
        Ok(self)
    }

    #[inline]
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self> {
        // The same bytes: the variant's index, then the fields back to back.
        ser::Serializer::serialize_tuple_variant(self, name, index, variant, len)
    }

    /// As postcard: the text's length first (one formatting pass to count), then the
    /// text (a second pass).
    fn collect_str<T: std::fmt::Display + ?Sized>(self, value: &T) -> Result<()> {
        use std::fmt::Write;
        struct Count(usize);
        impl Write for Count {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                self.0 += s.len();
                Ok(())
            }
        }
        struct Append<'b>(&'b mut Vec<u8>);
        impl Write for Append<'_> {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                self.0.extend_from_slice(s.as_bytes());
                Ok(())
            }
        }
        let mut count = Count(0);
        write!(count, "{value}").map_err(|_| CodecError::CollectStrError)?;
        self.small(count.0 as u64);
        write!(Append(self.out), "{value}").map_err(|_| CodecError::CollectStrError)
    }
}

/// The compound serialisers: postcard writes a compound's parts back to back, with
/// nothing between or after them, so each one forwards its parts to the encoder.
macro_rules! compound {
    ($($trait:ident :: $method:ident ($($name:ident : $ty:ty),*)),* $(,)?) => {$(
        impl ser::$trait for &mut Encoder<'_> {
            type Ok = ();
            type Error = CodecError;
            #[inline]
            fn $method<T: Serialize + ?Sized>(&mut self, $($name: $ty,)* value: &T) -> Result<()> {
                $(let _ = $name;)*
                value.serialize(&mut **self)
            }
            #[inline]
            fn end(self) -> Result<()> {
                Ok(())
            }
        }
    )*};
}

compound!(
    SerializeSeq::serialize_element(),
    SerializeTuple::serialize_element(),
    SerializeTupleStruct::serialize_field(),
    SerializeTupleVariant::serialize_field(),
    SerializeStruct::serialize_field(key: &'static str),
    SerializeStructVariant::serialize_field(key: &'static str),
);

impl ser::SerializeMap for &mut Encoder<'_> {
    type Ok = ();
    type Error = CodecError;
    #[inline]
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        key.serialize(&mut **self)
    }
    #[inline]
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        value.serialize(&mut **self)
    }
    #[inline]
    fn end(self) -> Result<()> {
        Ok(())
    }
}
