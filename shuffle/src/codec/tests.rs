//! The codec against postcard itself: the same bytes for every value written, the same
//! value, length and error for every input read, valid or corrupted.

use std::collections::BTreeMap;
use std::fmt::Debug;

use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{decode_prefix, encode_into, pack7, spread7};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Unit;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Newtype(i32);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Pair(u16, i16);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Shape {
    Empty,
    One(u64),
    Two(i8, u128),
    Named { c: char, f: f32, name: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Everything {
    b: bool,
    small: (i8, u8, i16, u16, i32, u32),
    wide: (i64, u64, i128, u128),
    floats: (f32, f64),
    c: char,
    s: String,
    bytes: Vec<u8>,
    opt: Option<Option<u32>>,
    unit: (),
    unit_struct: Unit,
    newtype: Newtype,
    pair: Pair,
    shapes: Vec<Shape>,
    map: BTreeMap<String, Vec<i64>>,
}

/// Encodes with both after a prefix already in the buffer; the bytes must agree.
fn same_bytes<T: Serialize + Debug>(v: &T) -> Vec<u8> {
    let mut ours = vec![0xAA, 0xBB];
    encode_into(v, &mut ours).unwrap();
    let theirs = postcard::to_extend(v, vec![0xAA, 0xBB]).unwrap();
    assert_eq!(ours, theirs, "bytes of {v:?}");
    ours.split_off(2)
}

/// Decodes `bytes` with both; they must agree on the value and the bytes taken, or
/// both fail with the same error.
fn same_decode<T: DeserializeOwned + PartialEq + Debug>(bytes: &[u8]) -> Option<T> {
    let ours = decode_prefix::<T>(bytes);
    let theirs = postcard::take_from_bytes::<T>(bytes);
    match (ours, theirs) {
        (Ok((a, used)), Ok((b, rest))) => {
            assert_eq!(a, b, "value of {bytes:?}");
            assert_eq!(used, bytes.len() - rest.len(), "bytes taken of {bytes:?}");
            Some(a)
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b, "error of {bytes:?}");
            None
        }
        (a, b) => panic!("{bytes:?}: ours {a:?}, postcard {b:?}"),
    }
}

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(v: &T) {
    let mut bytes = same_bytes(v);
    // With and without bytes after the value (the fast paths read 8 at a time).
    assert_eq!(same_decode::<T>(&bytes).as_ref(), Some(v));
    bytes.extend_from_slice(&[0xFF; 9]);
    assert_eq!(same_decode::<T>(&bytes).as_ref(), Some(v));
}

#[test]
fn spread_and_pack_are_inverse_on_56_bits() {
    for shift in 0..56 {
        for v in [
            1u64 << shift,
            (1u64 << shift) - 1,
            0x00AB_CDEF_0123_4567 >> shift,
        ] {
            assert_eq!(pack7(spread7(v)), v, "{v:#x}");
            assert_eq!(spread7(v) & 0x8080_8080_8080_8080, 0, "{v:#x}");
        }
    }
}

#[test]
fn every_varint_length_at_its_edges_matches_postcard() {
    for bits in 0..=64u32 {
        let edge = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        for v in [edge, edge.wrapping_add(1), edge.saturating_sub(1)] {
            round_trip(&v);
            round_trip(&(v as u32));
            round_trip(&(v as u16));
            round_trip(&(v as i64));
            round_trip(&(v as i32));
            round_trip(&(v as i16));
            round_trip(&(u128::from(v) << 64 | u128::from(v)));
            round_trip(&((u128::from(v) << 64 | u128::from(v)) as i128));
            round_trip(&(v, v as i64));
        }
    }
    for v in [i64::MIN, i64::MAX, -1, 0] {
        round_trip(&v);
    }
    round_trip(&(i128::MIN, i128::MAX, u128::MAX));
}

#[test]
fn strings_and_bytes_of_every_short_length_match_postcard() {
    let text: String = "aé日😀".repeat(12);
    for end in (0..=text.len()).filter(|&e| text.is_char_boundary(e)) {
        round_trip(&text[..end].to_string());
        round_trip(&text.as_bytes()[..end].to_vec());
        same_bytes(&serde_bytes_like(&text.as_bytes()[..end]));
    }
    for c in ['\0', 'a', 'é', '日', '😀', char::MAX] {
        round_trip(&c);
    }
}

/// A string with a byte that breaks UTF-8 anywhere (in ASCII text, which the decoder
/// checks first, and in text with multi-byte characters) fails as in postcard, with
/// nothing decoded; the same bytes unbroken decode to the same string.
#[test]
fn strings_that_are_not_utf8_fail_as_in_postcard() {
    for text in [
        "",
        "abcdefghijklmnopqrstuvwxyz0123456789,.",
        "aé日😀 mixed ü",
    ] {
        let valid = |payload: &[u8]| {
            let mut bytes = vec![payload.len() as u8]; // a one-byte varint: under 128
            bytes.extend_from_slice(payload);
            bytes
        };
        assert_eq!(
            same_decode::<String>(&valid(text.as_bytes())).as_deref(),
            Some(text)
        );
        for at in 0..text.len() {
            for bad in [0x80u8, 0xBF, 0xC3, 0xE6, 0xF0, 0xFF] {
                let mut payload = text.as_bytes().to_vec();
                payload[at] = bad;
                let decoded = same_decode::<String>(&valid(&payload));
                assert_eq!(
                    decoded.is_some(),
                    std::str::from_utf8(&payload).is_ok(),
                    "byte {bad:#x} at {at} of {text:?}"
                );
            }
        }
    }
}

/// A value serialised with `serialize_bytes` (as `serde_bytes` would).
fn serde_bytes_like(b: &[u8]) -> impl Serialize + Debug + '_ {
    #[derive(Debug)]
    struct Bytes<'a>(&'a [u8]);
    impl Serialize for Bytes<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }
    Bytes(b)
}

#[test]
fn collect_str_and_unknown_lengths_match_postcard() {
    struct Shown(u32);
    impl Serialize for Shown {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_str(&format_args!("#{}-{}", self.0, "x".repeat(self.0 as usize)))
        }
    }
    impl Debug for Shown {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Shown({})", self.0)
        }
    }
    for n in [0, 1, 7, 200] {
        same_bytes(&Shown(n));
    }
    // A sequence of unknown length fails in both, with the same error.
    struct Unknown;
    impl Serialize for Unknown {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeSeq;
            let seq = s.serialize_seq(None)?;
            seq.end()
        }
    }
    let mut out = Vec::new();
    let ours = encode_into(&Unknown, &mut out).unwrap_err();
    let theirs = postcard::to_allocvec(&Unknown).unwrap_err();
    assert_eq!(ours, theirs);
}

#[test]
fn a_sequence_claiming_more_than_the_input_holds_fails_without_allocating_it() {
    // u64::MAX elements claimed, three bytes follow.
    let mut bytes = Vec::new();
    encode_into(&u64::MAX, &mut bytes).unwrap();
    bytes.extend_from_slice(&[1, 2, 3]);
    assert!(same_decode::<Vec<u8>>(&bytes).is_none());
    assert!(same_decode::<Vec<String>>(&bytes).is_none());
    assert!(same_decode::<BTreeMap<u8, u8>>(&bytes).is_none());
}

#[test]
fn overlong_and_oversized_varints_fail_as_in_postcard() {
    // Non-minimal encodings are accepted by both; too long or too large ones are not.
    let cases: Vec<Vec<u8>> = vec![
        vec![0x80, 0x00],
        vec![0x80, 0x80, 0x80, 0x00],
        vec![0xFF, 0xFF, 0x03],
        vec![0xFF, 0xFF, 0x04],
        vec![0xFF, 0xFF, 0xFF, 0xFF, 0x0F],
        vec![0xFF, 0xFF, 0xFF, 0xFF, 0x10],
        vec![0xFF; 9],
        [vec![0xFF; 9], vec![0x01]].concat(),
        [vec![0xFF; 9], vec![0x02]].concat(),
        vec![0xFF; 12],
        vec![0x80; 20],
    ];
    for case in cases {
        for pad in [0usize, 3, 10] {
            let bytes = [case.clone(), vec![0x00; pad]].concat();
            same_decode::<u16>(&bytes);
            same_decode::<i16>(&bytes);
            same_decode::<u32>(&bytes);
            same_decode::<i32>(&bytes);
            same_decode::<u64>(&bytes);
            same_decode::<i64>(&bytes);
            same_decode::<u128>(&bytes);
            same_decode::<Shape>(&bytes);
            same_decode::<String>(&bytes);
        }
    }
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Empty),
        any::<u64>().prop_map(Shape::One),
        (any::<i8>(), any::<u128>()).prop_map(|(a, b)| Shape::Two(a, b)),
        (any::<char>(), any::<f32>(), ".{0,20}").prop_map(|(c, f, name)| Shape::Named {
            c,
            f,
            name
        }),
    ]
}

prop_compose! {
    fn everything()(
        b in any::<bool>(),
        small in any::<(i8, u8, i16, u16, i32, u32)>(),
        wide in any::<(i64, u64, i128, u128)>(),
        floats in any::<(f32, f64)>(),
        c in any::<char>(),
        s in ".{0,40}",
        bytes in proptest::collection::vec(any::<u8>(), 0..40),
        opt in any::<Option<Option<u32>>>(),
        newtype in any::<i32>(),
        pair in any::<(u16, i16)>(),
        shapes in proptest::collection::vec(shape(), 0..5),
        map in proptest::collection::btree_map(".{0,8}", proptest::collection::vec(any::<i64>(), 0..4), 0..4),
    ) -> Everything {
        Everything {
            b, small, wide, floats, c, s, bytes, opt, unit: (), unit_struct: Unit,
            newtype: Newtype(newtype), pair: Pair(pair.0, pair.1), shapes, map,
        }
    }
}

/// NaN != NaN: compare floats by bits by comparing the encodings of the decoded values.
fn round_trip_by_bytes<T: Serialize + DeserializeOwned + Debug>(v: &T) {
    let bytes = same_bytes(v);
    let (ours, used) = decode_prefix::<T>(&bytes).unwrap();
    let (theirs, rest) = postcard::take_from_bytes::<T>(&bytes).unwrap();
    assert_eq!(used, bytes.len());
    assert!(rest.is_empty());
    assert_eq!(same_bytes(&ours), bytes);
    assert_eq!(same_bytes(&theirs), bytes);
}

proptest! {
    #[test]
    fn any_value_of_every_serde_shape_matches_postcard(v in everything()) {
        round_trip_by_bytes(&v);
    }

    #[test]
    fn any_shuffle_pair_matches_postcard(k in any::<u64>(), v in any::<i64>(), f in any::<f64>()) {
        round_trip(&(k, v));
        round_trip_by_bytes(&(v, f));
        round_trip(&(k.to_string(), v));
    }

    /// Corrupted encodings and arbitrary bytes: the same value or the same error.
    #[test]
    fn any_bytes_decode_as_in_postcard(
        v in everything(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        noise in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = Vec::new();
        encode_into(&v, &mut bytes).unwrap();
        for (at, x) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        decode_everything_by_bytes(&bytes);
        decode_everything_by_bytes(&noise);
        same_decode::<(u64, i64)>(&noise);
        same_decode::<Vec<Shape>>(&noise);
    }
}

/// Like [`same_decode`] for `Everything`, whose floats may be NaN.
fn decode_everything_by_bytes(bytes: &[u8]) {
    let ours = decode_prefix::<Everything>(bytes);
    let theirs = postcard::take_from_bytes::<Everything>(bytes);
    match (ours, theirs) {
        (Ok((a, used)), Ok((b, rest))) => {
            assert_eq!(used, bytes.len() - rest.len());
            assert_eq!(same_bytes(&a), same_bytes(&b));
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "error of {bytes:?}"),
        (a, b) => panic!("{bytes:?}: ours {a:?}, postcard {b:?}"),
    }
}
