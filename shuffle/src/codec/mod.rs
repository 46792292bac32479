//! The shuffle's record codec: postcard's wire format, byte for byte, with every varint
//! written and read in place.
//!
//! Why not postcard's own `Serializer` and `Deserializer`: postcard writes a varint byte
//! by byte into a stack buffer and then copies it out through its flavor, and reads one
//! back a byte at a time through `Flavor::pop`, each pop a bounds check. Neither hook can
//! be replaced from outside. In kvsum (50 M `(u64, i64)` records through the shuffle),
//! that was about 9 % of the job's time: `FrameDecoder::next_record` 4.6 % and
//! `try_take_varint_u64` 4.4 % on the read side, and on the write side a third of
//! `MapSide::write` (12 %), in the varint loop and the copy out of the stack buffer.
//! Here a varint of up to 8 bytes (any value below 2^56) is one unaligned 8-byte store
//! or load and a few shifts and masks; longer ones take postcard's byte loop.
//!
//! Invariants:
//! * [`encode_into`] appends exactly the bytes `postcard::to_extend` would, for every
//!   `Serialize` value, and fails exactly where postcard fails (an unknown sequence
//!   length, a `Display` that errors in `collect_str`, a user `Serialize` error).
//! * [`decode_prefix`] accepts exactly what `postcard::take_from_bytes` accepts (including
//!   varints that are not minimal), consumes the same bytes and yields the same value;
//!   it fails where postcard fails, with postcard's error. Bad input is an error, never
//!   a panic, and never allocates beyond the input's own size for a claimed length
//!   (`size_hint` is withheld when a sequence claims more elements than bytes remain).
//! * Both sides use `postcard::Error`, so messages naming a bad record read as before.
//!
//! postcard stays the format's definition: the tests compare both functions with it on
//! generated values of every serde shape and on corrupted bytes.

mod de;
mod ser;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use postcard::Error as CodecError;

/// Appends `value`'s postcard encoding to `out`. On an error, `out` may hold a part of
/// the value past its old length; the caller truncates.
#[inline]
pub fn encode_into<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
    value.serialize(&mut ser::Encoder { out })
}

/// Decodes one value from the front of `bytes`; returns it and the bytes it took.
#[inline]
pub fn decode_prefix<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<(T, usize), CodecError> {
    let mut d = de::Decoder {
        input: bytes,
        pos: 0,
    };
    let value = T::deserialize(&mut d)?;
    Ok((value, d.pos))
}

/// Bit 7 of every byte: the varint continuation flags of an 8-byte word.
const CONTINUE: u64 = 0x8080_8080_8080_8080;

/// Spreads the low 56 bits of `v` into eight 7-bit groups, one per byte (bit 7 clear),
/// least significant group first: the payload bits of `v`'s varint.
#[inline(always)]
fn spread7(v: u64) -> u64 {
    let x = (v & 0x0000_0000_0FFF_FFFF) | ((v & 0x00FF_FFFF_F000_0000) << 4);
    let x = (x & 0x0000_3FFF_0000_3FFF) | ((x & 0x0FFF_C000_0FFF_C000) << 2);
    (x & 0x007F_007F_007F_007F) | ((x & 0x3F80_3F80_3F80_3F80) << 1)
}

/// The inverse of [`spread7`]: eight 7-bit groups (bit 7 of each byte ignored) packed
/// into the low 56 bits.
#[inline(always)]
fn pack7(w: u64) -> u64 {
    let x = w & 0x7F7F_7F7F_7F7F_7F7F;
    let x = (x & 0x007F_007F_007F_007F) | ((x & 0x7F00_7F00_7F00_7F00) >> 1);
    let x = (x & 0x0000_3FFF_0000_3FFF) | ((x & 0x3FFF_0000_3FFF_0000) >> 2);
    (x & 0x0000_0000_0FFF_FFFF) | ((x & 0x0FFF_FFFF_0000_0000) >> 4)
}
