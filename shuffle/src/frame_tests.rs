//! The frame codec: round trips, stored frames and the compression hint, corrupt streams.

use super::*;

fn encode_all<T: Serialize>(records: &[T]) -> Vec<u8> {
    let mut enc = FrameEncoder::new();
    let mut sink = Vec::new();
    for r in records {
        enc.push(r, &mut sink).unwrap();
    }
    enc.flush(&mut sink).unwrap();
    sink
}

fn decode_all<T: DeserializeOwned>(bytes: &[u8]) -> Result<Vec<T>> {
    let mut dec = FrameDecoder::new(bytes);
    let mut out = Vec::new();
    while let Some(r) = dec.next_record()? {
        out.push(r);
    }
    Ok(out)
}

/// Bytes lz4 cannot shrink (a xorshift stream).
fn noise(n: usize, mut x: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The two header words (uncompressed length, body word) of each frame in `bytes`.
fn headers(bytes: &[u8]) -> Vec<(u32, u32)> {
    let mut at = 0;
    let mut words = Vec::new();
    while at < bytes.len() {
        let raw = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let word = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
        words.push((raw, word));
        at += FRAME_HEADER_BYTES + frame_body_len(raw, word).unwrap();
    }
    words
}

/// The second header word of each frame in `bytes`.
fn body_words(bytes: &[u8]) -> Vec<u32> {
    headers(bytes).into_iter().map(|(_, word)| word).collect()
}

#[test]
fn incompressible_frames_are_stored_and_compression_is_tried_again_later() {
    // 40 frames of noise, then 40 of zeros.
    let mut records: Vec<Vec<u8>> = (0..40).map(|i| noise(FRAME_TARGET_BYTES, i + 1)).collect();
    records.extend((0..40).map(|_| vec![0u8; FRAME_TARGET_BYTES]));
    let bytes = encode_all(&records);
    let words = body_words(&bytes);
    assert_eq!(words.len(), 80, "one record per frame");
    assert!(
        words[..40].iter().all(|w| w & STORED != 0),
        "noise is stored"
    );
    // After the noise, zeros are stored until the next try (at most 15 frames), then
    // compressed for good.
    let first_compressed = words[40..].iter().position(|w| w & STORED == 0).unwrap();
    assert!(
        first_compressed <= STORED_FRAMES_AFTER_A_POOR_ONE as usize,
        "{first_compressed}"
    );
    assert!(words[40 + first_compressed..]
        .iter()
        .all(|w| w & STORED == 0));
    assert_eq!(decode_all::<Vec<u8>>(&bytes).unwrap(), records);
}

#[test]
fn a_stored_frame_whose_lengths_disagree_is_corrupt() {
    let mut sink = Vec::new();
    store_frame(&noise(100, 9), &mut sink).unwrap();
    let word = u32::from_le_bytes(sink[4..8].try_into().unwrap());
    sink[4..8].copy_from_slice(&(word + 1).to_le_bytes());
    let e = FrameDecoder::new(&sink[..])
        .next_record::<u8>()
        .unwrap_err();
    assert!(e.to_string().contains("implausible frame header"), "{e}");
    // A truncated stored body.
    let mut sink = Vec::new();
    store_frame(&noise(100, 9), &mut sink).unwrap();
    sink.truncate(50);
    let e = FrameDecoder::new(&sink[..])
        .next_record::<u8>()
        .unwrap_err();
    assert!(e.to_string().contains("truncated frame body"), "{e}");
}

#[test]
fn round_trips_many_frames() {
    let records: Vec<(u64, String)> = (0..50_000).map(|i| (i, format!("v{i}"))).collect();
    let bytes = encode_all(&records);
    let mut dec = FrameDecoder::new(&bytes[..]);
    let mut back = Vec::new();
    while let Some(r) = dec.next_record::<(u64, String)>().unwrap() {
        back.push(r);
    }
    assert_eq!(back, records);
    assert!(dec.frames_read() > 5, "expected several frames");
    assert!(bytes.len() < 50_000 * 10, "expected compression");
}

#[test]
fn empty_stream_has_no_records() {
    assert!(decode_all::<u32>(&[]).unwrap().is_empty());
    assert!(encode_all::<u32>(&[]).is_empty());
}

#[test]
fn record_larger_than_a_frame() {
    let big = "x".repeat(200 * 1024);
    let records = vec![("a".to_string(), 1u8), (big, 2), ("b".to_string(), 3)];
    let bytes = encode_all(&records);
    assert_eq!(decode_all::<(String, u8)>(&bytes).unwrap(), records);
}

#[test]
fn truncated_and_garbled_streams_are_errors() {
    let records: Vec<u64> = (0..20_000).collect();
    let bytes = encode_all(&records);
    for cut in [3, 8, 20, bytes.len() - 1] {
        let err = decode_all::<u64>(&bytes[..cut]).unwrap_err();
        assert!(matches!(err, ShuffleError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("truncated"), "{err}");
    }
    let mut huge = bytes.clone();
    huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = decode_all::<u64>(&huge).unwrap_err();
    assert!(err.to_string().contains("implausible"), "{err}");
}

#[test]
fn zero_sized_records_round_trip_and_mismatched_types_do_not_loop() {
    // 200,000 unit records (several frames) come back as exactly as many.
    let units = vec![(); 200_000];
    let bytes = encode_all(&units);
    assert_eq!(decode_all::<()>(&bytes).unwrap().len(), 200_000);
    let pairs = vec![((), ()); 3];
    assert_eq!(decode_all::<((), ())>(&encode_all(&pairs)).unwrap(), pairs);
    // A type that does serialise to bytes is unaffected next to them.
    let mut enc = FrameEncoder::new();
    let mut sink = Vec::new();
    enc.push(&(), &mut sink).unwrap();
    assert_eq!(enc.pending_bytes(), 1, "one marker byte");
    enc.push(&7u32, &mut sink).unwrap();
    assert_eq!(enc.pending_bytes(), 2);
    // Decoding bytes of another type as a zero-sized one is an error, not a loop.
    let bytes = encode_all(&[1u32, 2, 3]);
    let err = decode_all::<()>(&bytes).unwrap_err();
    assert!(err.to_string().contains("consumed no bytes"), "{err}");
}

#[test]
fn flush_shrinks_and_release_frees() {
    let mut enc = FrameEncoder::new();
    let mut sink = Vec::new();
    enc.push(&vec![0u8; 1 << 20], &mut sink).unwrap();
    assert_eq!(enc.pending_bytes(), 0);
    assert!(enc.buffer_capacity() <= PENDING_CAPACITY);
    enc.release();
    assert_eq!(enc.buffer_capacity(), 0);
}

#[test]
fn encoders_sharing_a_hint_skip_compression_together() {
    // Encoder a's frame of noise compresses poorly; encoder b's zeros, pushed with the same
    // hint, are then stored without trying, as are the next frames of both, up to
    // STORED_FRAMES_AFTER_A_POOR_ONE in all. With its own hint b compresses at once.
    let mut hint = CompressHint::default();
    let (mut a, mut b) = (FrameEncoder::new(), FrameEncoder::new());
    let (mut sink_a, mut sink_b) = (Vec::new(), Vec::new());
    a.push_with(&noise(FRAME_TARGET_BYTES, 7), &mut sink_a, &mut hint)
        .unwrap();
    let zeros = vec![0u8; FRAME_TARGET_BYTES];
    for _ in 0..STORED_FRAMES_AFTER_A_POOR_ONE {
        b.push_with(&zeros, &mut sink_b, &mut hint).unwrap();
    }
    b.push_with(&zeros, &mut sink_b, &mut hint).unwrap();
    let words = body_words(&sink_b);
    assert_eq!(words.len(), STORED_FRAMES_AFTER_A_POOR_ONE as usize + 1);
    let stored = STORED_FRAMES_AFTER_A_POOR_ONE as usize;
    assert!(words[..stored].iter().all(|w| w & STORED != 0), "{words:?}");
    assert_eq!(words[stored] & STORED, 0, "tried again, and zeros compress");
    assert_eq!(
        decode_all::<Vec<u8>>(&sink_b).unwrap(),
        vec![zeros.clone(); stored + 1]
    );
    let mut own = FrameEncoder::new();
    let mut sink = Vec::new();
    own.push(&zeros, &mut sink).unwrap();
    assert_eq!(body_words(&sink)[0] & STORED, 0, "a hint of its own");
}

/// The uncompressed length of each frame in `bytes`.
fn raw_lens(bytes: &[u8]) -> Vec<usize> {
    headers(bytes)
        .into_iter()
        .map(|(raw, _)| raw as usize)
        .collect()
}

#[test]
fn an_encoder_cuts_frames_at_its_target_within_the_bounds() {
    let records: Vec<(u64, String)> = (0..40_000).map(|i| (i, format!("value {i}"))).collect();
    for (asked, target) in [
        (0, MIN_FRAME_TARGET_BYTES),
        (16 * 1024, 16 * 1024),
        (FRAME_TARGET_BYTES, FRAME_TARGET_BYTES),
        (usize::MAX, FRAME_TARGET_BYTES),
    ] {
        let mut enc = FrameEncoder::with_target(asked);
        let mut sink = Vec::new();
        for r in &records {
            enc.push(r, &mut sink).unwrap();
        }
        enc.flush(&mut sink).unwrap();
        assert_eq!(decode_all::<(u64, String)>(&sink).unwrap(), records);
        let lens = raw_lens(&sink);
        let (last, full) = lens.split_last().unwrap();
        assert!(*last <= target + 32, "target {target}: last frame {last}");
        // Every frame but the last is cut by the first record reaching the target.
        for len in full {
            assert!(
                (target..target + 32).contains(len),
                "asked {asked}: frame of {len} bytes, target {target}"
            );
        }
        let total: usize = lens.iter().sum();
        assert_eq!(lens.len(), total.div_ceil(target).max(1), "asked {asked}");
    }
}
