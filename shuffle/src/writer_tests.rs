//! The shuffle writer: round trips over many reducers and chunks, spills, memory
//! accounting, empty outputs and rewrites.

use super::*;
use crate::reader::{open_block_records, BlockId};
use proptest::prelude::*;

type Rec = (u64, String);

fn block(shuffle_id: u32, map: u32, reduce: u32) -> BlockId {
    BlockId {
        executor_id: "exec-1".into(),
        shuffle_id,
        map_partition: map,
        reduce_partition: reduce,
    }
}

/// Reads back every reducer's records of one map output.
fn read_all(dir: &Path, shuffle_id: u32, map: u32, n: u32) -> Vec<Vec<Rec>> {
    (0..n)
        .map(|r| {
            open_block_records::<Rec>(
                &crate::resident::View::now(),
                dir,
                &block(shuffle_id, map, r),
            )
            .unwrap()
            .collect::<Result<Vec<_>>>()
            .unwrap()
        })
        .collect()
}

/// Records routed to `n` reducers, leaving reducer 1 empty (when n > 2), with a few
/// records larger than a frame.
fn routed(n: u32, count: u64) -> Vec<(u32, Rec)> {
    (0..count)
        .map(|i| {
            let value = if i % 4999 == 17 {
                "big".repeat(70 * 1024) // ~210 KiB: bigger than a frame
            } else {
                format!("value-{}", i * 31)
            };
            // Scattered over the reducers (routing is the job library's business).
            let mut r = ((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % u64::from(n)) as u32;
            if n > 2 && r == 1 {
                r = 0;
            }
            (r, (i, value))
        })
        .collect()
}

fn write_out(dir: &Path, map: u32, n: u32, input: &[(u32, Rec)], spill_at: &[usize]) -> MapOutput {
    let mut w = ShuffleWriter::<Rec>::new(dir, 3, map, n);
    for (i, (r, rec)) in input.iter().enumerate() {
        if spill_at.contains(&i) {
            let before = w.buffered_bytes();
            assert_eq!(w.spill_buffers().unwrap(), before);
            assert_eq!(w.buffered_bytes(), 0);
        }
        w.write(*r, rec).unwrap();
    }
    assert_eq!(w.records_written(), input.len() as u64);
    w.finish().unwrap()
}

/// Writes `input` as map 0 without spills and as map 1 spilling before each record of
/// `spill_at`; checks both read back as the model, with the same record count.
fn plain_and_spilled(
    dir: &Path,
    n: u32,
    input: &[(u32, Rec)],
    spill_at: &[usize],
) -> (MapOutput, MapOutput) {
    let plain = write_out(dir, 0, n, input, &[]);
    let spilled = write_out(dir, 1, n, input, spill_at);
    let want = model(n, input);
    assert_eq!(read_all(dir, 3, 0, n), want);
    assert_eq!(read_all(dir, 3, 1, n), want);
    assert_eq!(plain.records_written, spilled.records_written);
    (plain, spilled)
}

fn model(n: u32, input: &[(u32, Rec)]) -> Vec<Vec<Rec>> {
    let mut want = vec![Vec::new(); n as usize];
    for (r, rec) in input {
        want[*r as usize].push(rec.clone());
    }
    want
}

#[test]
fn round_trip_1_to_17_reducers() {
    let dir = tempfile::tempdir().unwrap();
    for n in 1..=17u32 {
        let input = routed(n, 12_000);
        let out = write_out(dir.path(), n, n, &input, &[]);
        let want = model(n, &input);
        assert_eq!(read_all(dir.path(), 3, n, n), want, "n={n}");
        assert_eq!(out.records_written, input.len() as u64);
        assert_eq!(out.block_sizes.len(), n as usize);
        assert_eq!(out.block_sizes.iter().sum::<u64>(), out.bytes_written);
        for (r, recs) in want.iter().enumerate() {
            assert_eq!(out.block_sizes[r] == 0, recs.is_empty(), "n={n} r={r}");
        }
        let file_len = std::fs::metadata(data_path(dir.path(), 3, n))
            .unwrap()
            .len();
        let index = IndexFile::read(&data_path(dir.path(), 3, n)).unwrap();
        assert_eq!(index.num_reduce(), n);
        assert_eq!(index.data_len(), out.bytes_written);
        assert_eq!(file_len, index.file_len());
        let sizes: Vec<u64> = index.entries().iter().map(|e| e.len).collect();
        assert_eq!(sizes, out.block_sizes);
    }
    // Only committed files remain, one per map output: no temporaries, no spill
    // files, no separate index.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut want: Vec<String> = (1..=17).map(|n| format!("shuffle_3_{n}.data")).collect();
    want.sort();
    assert_eq!(names, want);
}

#[test]
fn buckets_over_many_chunks_read_back_in_order_with_and_without_spills() {
    let dir = tempfile::tempdir().unwrap();
    let n = 2;
    // ~7 MB of frames to two reducers: several 1 MiB chunks each, big records among
    // them.
    let input = routed(n, 1_000_000);
    let (plain, _) = plain_and_spilled(dir.path(), n, &input, &[150_000, 150_001, 700_000]);
    assert!(
        plain
            .block_sizes
            .iter()
            .all(|&b| b > 2 * CHUNK_BYTES as u64),
        "{plain:?}"
    );
}

#[test]
fn spilling_midway_gives_identical_records() {
    let dir = tempfile::tempdir().unwrap();
    let n = 7;
    let input = routed(n, 30_000);
    let (plain, spilled) = plain_and_spilled(dir.path(), n, &input, &[1, 5_000, 5_001, 20_000]);
    // Spilling only adds frame boundaries: sizes stay within a few frames' overhead.
    let diff = plain.bytes_written.abs_diff(spilled.bytes_written);
    assert!(diff < plain.bytes_written / 10, "{plain:?} vs {spilled:?}");
}

#[test]
fn buffered_bytes_tracks_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ShuffleWriter::<Rec>::new(dir.path(), 0, 0, 4);
    assert_eq!(w.buffered_bytes(), 0);
    w.write(2, &(1, "x".into())).unwrap();
    let one = w.buffered_bytes();
    assert!(
        (1024..64 * 1024).contains(&one),
        "a small pending buffer is reserved on first write, and counted: {one}"
    );
    for i in 0..100_000 {
        w.write((i % 4) as u32, &(i, format!("{i:020}"))).unwrap();
    }
    let expected: u64 = w.buckets.iter().map(Bucket::memory).sum();
    assert_eq!(w.buffered_bytes(), expected);
    assert!(w.spill_buffers().unwrap() == expected && w.spilled_bytes() > 0);
    assert!(w.buckets.iter().all(|b| b.memory() == 0));
    w.write(3, &(9, "after spill".into())).unwrap();
    w.finish().unwrap();
}

#[test]
fn empty_output_and_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ShuffleWriter::<u32>::new(dir.path(), 1, 2, 3);
    let err = w.write(3, &5).unwrap_err();
    assert!(err.to_string().contains("reduce partition 3"), "{err}");
    assert_eq!(w.spill_buffers().unwrap(), 0);
    let out = w.finish().unwrap();
    assert_eq!(
        out,
        MapOutput {
            block_sizes: vec![0, 0, 0],
            records_written: 0,
            bytes_written: 0
        }
    );
    let recs: Vec<u32> =
        open_block_records(&crate::resident::View::now(), dir.path(), &block(1, 2, 1))
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
    assert!(recs.is_empty());
}

#[test]
fn a_second_attempt_replaces_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let first = routed(3, 1000);
    write_out(dir.path(), 0, 3, &first, &[]);
    let second = routed(3, 10);
    write_out(dir.path(), 0, 3, &second, &[]);
    assert_eq!(read_all(dir.path(), 3, 0, 3), model(3, &second));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn any_records_any_spills(
        n in 1u32..=17,
        input in prop::collection::vec((0u32..17, any::<u64>(), ".{0,40}"), 0..3000),
        spills in prop::collection::vec(0usize..3000, 0..4),
    ) {
        let input: Vec<(u32, Rec)> = input.into_iter().map(|(r, k, v)| (r % n, (k, v))).collect();
        let dir = tempfile::tempdir().unwrap();
        write_out(dir.path(), 0, n, &input, &spills);
        prop_assert_eq!(read_all(dir.path(), 3, 0, n), model(n, &input));
    }
}
