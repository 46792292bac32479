//! The read side of [`super`]: a serde `Deserializer` over a byte slice in postcard's
//! format, varints of up to 8 bytes read as one word.
//!
//! Invariants: `pos <= input.len()` always; every read checks the bytes it takes are
//! there and fails with `DeserializeUnexpectedEnd` otherwise. A varint is accepted
//! exactly when postcard accepts it: at most `varint_max` bytes for its type, and a last
//! byte that fits the type's remaining bits.

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use super::{pack7, CodecError, CONTINUE};

type Result<T> = std::result::Result<T, CodecError>;

/// Reads postcard values from `input[pos..]`.
pub(super) struct Decoder<'de> {
    pub(super) input: &'de [u8],
    pub(super) pos: usize,
}

/// Bytes a varint of `bits` payload bits takes at most.
const fn varint_max(bits: u32) -> usize {
    bits.div_ceil(7) as usize
}

/// The largest last byte of a varint of the most bytes for `bits` payload bits.
const fn max_last_byte(bits: u32) -> u8 {
    ((1u32 << (bits % 7)) - 1) as u8
}

impl<'de> Decoder<'de> {
    #[inline]
    fn remaining(&self) -> usize {
        self.input.len() - self.pos
    }

    #[inline]
    fn pop(&mut self) -> Result<u8> {
        let b = *self
            .input
            .get(self.pos)
            .ok_or(CodecError::DeserializeUnexpectedEnd)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'de [u8]> {
        if n > self.remaining() {
            return Err(CodecError::DeserializeUnexpectedEnd);
        }
        let s = &self.input[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// A varint of at most `bits` payload bits (16, 32 or 64).
    #[inline(always)]
    fn varint<const BITS: u32>(&mut self) -> Result<u64> {
        if self.remaining() >= 8 {
            // SAFETY: 8 bytes from `pos` lie within `input` (checked above).
            let word = u64::from_le(unsafe {
                self.input
                    .as_ptr()
                    .add(self.pos)
                    .cast::<u64>()
                    .read_unaligned()
            });
            let stops = !word & CONTINUE;
            if stops != 0 {
                let len = stops.trailing_zeros() as usize / 8 + 1;
                let max = varint_max(BITS);
                if len > max
                    || (len == max && (word >> (8 * (len - 1))) as u8 > max_last_byte(BITS))
                {
                    // Longer than the type allows, or too large for it.
                    return Err(CodecError::DeserializeBadVarint);
                }
                let keep = if len == 8 {
                    u64::MAX
                } else {
                    (1u64 << (8 * len)) - 1
                };
                self.pos += len;
                return Ok(pack7(word & keep));
            }
        }
        self.varint_slow(BITS).map(|v| v as u64)
    }

    /// postcard's byte loop: near the end of the input, and for varints over 8 bytes.
    #[cold]
    fn varint_slow(&mut self, bits: u32) -> Result<u128> {
        let max = varint_max(bits);
        let mut out = 0u128;
        for i in 0..max {
            let b = self.pop()?;
            out |= u128::from(b & 0x7F) << (7 * i);
            if b & 0x80 == 0 {
                if i == max - 1 && b > max_last_byte(bits) {
                    return Err(CodecError::DeserializeBadVarint);
                }
                return Ok(out);
            }
        }
        Err(CodecError::DeserializeBadVarint)
    }

    /// A length or variant index of up to `BITS` bits: most are one byte, which fits
    /// every type. (Numbers skip this test, see the encoder's `small`.)
    #[inline(always)]
    fn small<const BITS: u32>(&mut self) -> Result<u64> {
        if let Some(&b) = self.input.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.varint::<BITS>()
    }

    #[inline]
    fn usize(&mut self) -> Result<usize> {
        // postcard reads a usize as a u64 varint on 64-bit targets.
        self.small::<64>().map(|v| v as usize)
    }

    /// A length-prefixed UTF-8 string.
    #[inline]
    fn str(&mut self) -> Result<&'de str> {
        let n = self.usize()?;
        utf8(self.take(n)?).ok_or(CodecError::DeserializeBadUtf8)
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self.take(N)?;
        Ok(s.try_into().expect("took N bytes"))
    }
}

/// `bytes` as a `str` exactly when `std::str::from_utf8` accepts it, ASCII first: a
/// record's strings are short and mostly ASCII, and `is_ascii` is a few word tests where
/// the full validation costs a call and its setup per string (sort's profile, 50 M
/// records of a 16-byte line each: `from_utf8` at 4.9 % of the job; a microbenchmark of
/// 10-25-byte ASCII strings, 26-27 ns each with `from_utf8` alone, 18 ns with this).
#[inline(always)]
fn utf8(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        // SAFETY: every ASCII byte sequence is valid UTF-8.
        return Some(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).ok()
}

impl<'de> de::Deserializer<'de> for &mut Decoder<'de> {
    type Error = CodecError;

    fn is_human_readable(&self) -> bool {
        false
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(CodecError::WontImplement)
    }

    #[inline]
    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.pop()? {
            0 => visitor.visit_bool(false),
            1 => visitor.visit_bool(true),
            _ => Err(CodecError::DeserializeBadBool),
        }
    }

    #[inline]
    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_i8(self.pop()? as i8)
    }

    #[inline]
    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let n = self.varint::<16>()? as u16;
        visitor.visit_i16(((n >> 1) as i16) ^ -((n & 1) as i16))
    }

    #[inline]
    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let n = self.varint::<32>()? as u32;
        visitor.visit_i32(((n >> 1) as i32) ^ -((n & 1) as i32))
    }

    #[inline]
    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let n = self.varint::<64>()?;
        visitor.visit_i64(((n >> 1) as i64) ^ -((n & 1) as i64))
    }

    #[inline]
    fn deserialize_i128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let n = self.varint_slow(128)?;
        visitor.visit_i128(((n >> 1) as i128) ^ -((n & 1) as i128))
    }

    #[inline]
    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_u8(self.pop()?)
    }

    #[inline]
    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_u16(self.varint::<16>()? as u16)
    }

    #[inline]
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_u32(self.varint::<32>()? as u32)
    }

    #[inline]
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_u64(self.varint::<64>()?)
    }

    #[inline]
    fn deserialize_u128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_u128(self.varint_slow(128)?)
    }

    #[inline]
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_f32(f32::from_le_bytes(self.array()?))
    }

    #[inline]
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_f64(f64::from_le_bytes(self.array()?))
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let n = self.usize()?;
        if n > 4 {
            return Err(CodecError::DeserializeBadChar);
        }
        let bytes = self.take(n)?;
        let mut chars = std::str::from_utf8(bytes)
            .map_err(|_| CodecError::DeserializeBadChar)?
            .chars();
        let c = chars.next().ok_or(CodecError::DeserializeBadChar)?;
        if chars.next().is_some() {
            return Err(CodecError::DeserializeBadChar);
        }
        visitor.visit_char(c)
    }

    #[inline]
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_borrowed_str(self.str()?)
    }

    #[inline]
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_str(self.str()?)
    }

    #[inline]
    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let n = self.usize()?;
        visitor.visit_borrowed_bytes(self.take(n)?)
    }

    #[inline]
    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let n = self.usize()?;
        visitor.visit_bytes(self.take(n)?)
    }

    #[inline]
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.pop()? {
            0 => visitor.visit_none(),
            1 => visitor.visit_some(self),
            _ => Err(CodecError::DeserializeBadOption),
        }
    }

    #[inline]
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_unit()
    }

    #[inline]
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_unit()
    }

    #[inline]
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_newtype_struct(self)
    }

    #[inline]
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let len = self.usize()?;
        visitor.visit_seq(Elements { d: self, len })
    }

    #[inline]
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value> {
        visitor.visit_seq(Elements { d: self, len })
    }

    #[inline]
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_tuple(len, visitor)
    }

    #[inline]
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let len = self.usize()?;
        visitor.visit_map(Elements { d: self, len })
    }

    #[inline]
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        // A struct is its fields back to back, as a tuple.
        self.deserialize_tuple(fields.len(), visitor)
    }

    #[inline]
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_enum(self)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(CodecError::WontImplement)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(CodecError::WontImplement)
    }
}

/// The elements of a sequence, tuple, struct or map: `len` more to read.
struct Elements<'a, 'de> {
    d: &'a mut Decoder<'de>,
    len: usize,
}

impl<'de> Elements<'_, 'de> {
    /// The claimed count, unless fewer bytes remain than that (each element takes at
    /// least one byte, so the claim is false and must not size an allocation).
    fn hint(&self) -> Option<usize> {
        (self.d.remaining() >= self.len).then_some(self.len)
    }

    /// The next element (or map key), `None` after the last.
    #[inline]
    fn next<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if self.len == 0 {
            return Ok(None);
        }
        self.len -= 1;
        seed.deserialize(&mut *self.d).map(Some)
    }
}

impl<'de> de::SeqAccess<'de> for Elements<'_, 'de> {
    type Error = CodecError;

    #[inline]
    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        self.next(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.hint()
    }
}

impl<'de> de::MapAccess<'de> for Elements<'_, 'de> {
    type Error = CodecError;

    #[inline]
    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        self.next(seed)
    }

    #[inline]
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        seed.deserialize(&mut *self.d)
    }

    fn size_hint(&self) -> Option<usize> {
        self.hint()
    }
}

impl<'de> de::EnumAccess<'de> for &mut Decoder<'de> {
    type Error = CodecError;
    type Variant = Self;

    #[inline]
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self)> {
        let index = self.small::<32>()? as u32;
        let v = seed.deserialize(index.into_deserializer())?;
        Ok((v, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Decoder<'de> {
    type Error = CodecError;

    #[inline]
    fn unit_variant(self) -> Result<()> {
        Ok(())
    }

    #[inline]
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value> {
        seed.deserialize(self)
    }

    #[inline]
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value> {
        de::Deserializer::deserialize_tuple(self, len, visitor)
    }

    #[inline]
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        de::Deserializer::deserialize_tuple(self, fields.len(), visitor)
    }
}
