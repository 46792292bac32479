//! The run file's round trips, sharing, and every kind of damage it reports.

use super::*;

fn write(dir: &Path, n: u64) -> RunFile {
    let mut w = RunWriter::<(u64, String)>::create(dir).unwrap();
    for i in 0..n {
        w.push(&(i, format!("value-{}", i * 7919 % 1000))).unwrap();
    }
    assert_eq!(w.records(), n);
    w.finish().unwrap()
}

fn files_in(dir: &Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[test]
fn round_trips_many_frames_and_deletes_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let run = write(dir.path(), 50_000);
    assert_eq!(run.records(), 50_000);
    assert_eq!(run.bytes(), std::fs::metadata(run.path()).unwrap().len());
    assert!(run.bytes() < 50_000 * 12, "lz4 should compress this");
    let back: Vec<(u64, String)> = run.reader().unwrap().collect::<Result<_>>().unwrap();
    assert_eq!(back.len(), 50_000);
    for (i, (k, v)) in back.iter().enumerate() {
        assert_eq!(
            (*k, v.as_str()),
            (i as u64, &*format!("value-{}", i * 7919 % 1000))
        );
    }
    assert_eq!(files_in(dir.path()), 0);

    let run = write(dir.path(), 10);
    assert_eq!(files_in(dir.path()), 1);
    drop(run);
    assert_eq!(files_in(dir.path()), 0);

    let mut reader = write(dir.path(), 100_000)
        .reader::<(u64, String)>()
        .unwrap();
    reader.next().unwrap().unwrap(); // dropping a reader part-way deletes the file
    drop(reader);
    assert_eq!(files_in(dir.path()), 0);

    let w = RunWriter::<u8>::create(dir.path()).unwrap();
    drop(w); // abandoned writer
    assert_eq!(files_in(dir.path()), 0);
}

#[test]
fn shared_run_is_read_many_times_and_deleted_with_the_last_handle() {
    let dir = tempfile::tempdir().unwrap();
    let run = std::sync::Arc::new(write(dir.path(), 30_000));
    let a = RunReader::<(u64, String)>::open_shared(run.clone()).unwrap();
    let b = RunReader::<(u64, String)>::open_shared(run.clone()).unwrap();
    drop(run);
    assert_eq!(a.count(), 30_000); // a is dropped here
    assert_eq!(files_in(dir.path()), 1);
    assert_eq!(b.map(Result::unwrap).last().unwrap().0, 29_999);
    assert_eq!(files_in(dir.path()), 0);
}

#[test]
fn zero_sized_records_round_trip_with_their_count() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = RunWriter::<((), ())>::create(dir.path()).unwrap();
    for _ in 0..150_000 {
        w.push(&((), ())).unwrap();
    }
    let run = w.finish().unwrap();
    assert_eq!(run.records(), 150_000);
    let back: Vec<((), ())> = RunReader::<((), ())>::open(run)
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    assert_eq!(back.len(), 150_000);
}

#[test]
fn empty_run_and_missing_dir() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b");
    let run = RunWriter::<u32>::create(&nested).unwrap().finish().unwrap();
    assert_eq!(run.bytes(), 8);
    assert_eq!(run.reader::<u32>().unwrap().count(), 0);
}

#[test]
fn huge_record_gets_its_own_frame() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = RunWriter::<Vec<u8>>::create(dir.path()).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    w.push(&vec![1, 2, 3]).unwrap();
    w.push(&big).unwrap();
    w.push(&vec![]).unwrap();
    let back: Vec<Vec<u8>> = w
        .finish()
        .unwrap()
        .reader()
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(back, vec![vec![1, 2, 3], big, vec![]]);
}

fn expect_corrupt(run: RunFile) -> String {
    let path = run.path().display().to_string();
    let r = run
        .reader::<(u64, String)>()
        .and_then(|r| r.collect::<Result<Vec<_>>>());
    match r {
        Err(e @ EmberError::Corrupt { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&path), "{msg} should name {path}");
            msg
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn flipped_byte_is_reported_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    for offset in [20u64, 2000, 8 + 3, 8 + 5, 2] {
        let run = write(dir.path(), 20_000);
        let mut bytes = std::fs::read(run.path()).unwrap();
        bytes[offset as usize] ^= 0x40;
        std::fs::write(run.path(), &bytes).unwrap();
        let msg = expect_corrupt(run);
        assert!(
            msg.contains("checksum")
                || msg.contains("truncated")
                || msg.contains("magic")
                || msg.contains("implausible"),
            "{msg}"
        );
    }
    assert_eq!(files_in(dir.path()), 0);
}

#[test]
fn truncation_is_reported_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let run = write(dir.path(), 20_000);
    let len = run.bytes();
    // Cut mid-frame.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(run.path())
        .unwrap();
    f.set_len(len - 10).unwrap();
    assert!(expect_corrupt(run).contains("truncated"));
    // Cut exactly at a frame boundary: caught by the record count.
    let run = write(dir.path(), 20_000);
    let bytes = std::fs::read(run.path()).unwrap();
    let first = 8 + 8 + u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    std::fs::write(run.path(), &bytes[..first]).unwrap();
    assert!(expect_corrupt(run).contains("records"));
}

/// A frame length read back larger than any frame the writer wrote (the payload
/// length in the frame header, or the uncompressed length inside a payload whose
/// crc still matches) is refused before a buffer is sized from it.
#[test]
fn lengths_larger_than_any_frame_written_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = write(dir.path(), 20_000);
    let (payload, frame) = run.largest;
    let mut bytes = std::fs::read(run.path()).unwrap();
    bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(run.path(), &bytes).unwrap();
    let msg = expect_corrupt(run);
    assert!(
        msg.contains(&format!(
            "implausible frame: it claims a payload of {} bytes, but no frame written to \
             this run was larger than {payload}",
            u32::MAX
        )),
        "{msg}"
    );

    let run = write(dir.path(), 20_000);
    let mut bytes = std::fs::read(run.path()).unwrap();
    let clen = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let claim = frame + 1;
    bytes[16..20].copy_from_slice(&claim.to_le_bytes());
    let crc = crc32fast::hash(&bytes[16..16 + clen]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(run.path(), &bytes).unwrap();
    let msg = expect_corrupt(run);
    assert!(
        msg.contains(&format!(
            "implausible frame: it claims {claim} uncompressed bytes, but no frame \
             written to this run was larger than {frame}"
        )),
        "{msg}"
    );
    assert_eq!(files_in(dir.path()), 0);
}

/// A record whose serialisation fails half way (after writing some bytes).
struct FailsHalfWay(u64);

impl serde::Serialize for FailsHalfWay {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeTuple};
        let mut t = s.serialize_tuple(2)?;
        t.serialize_element(&self.0)?;
        if self.0 % 3 == 1 {
            return Err(S::Error::custom("refused"));
        }
        t.serialize_element(&self.0)?;
        t.end()
    }
}

#[test]
fn a_record_that_fails_to_serialise_leaves_the_others_intact() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = RunWriter::<FailsHalfWay>::create(dir.path()).unwrap();
    let mut kept = Vec::new();
    for i in 0..30_000u64 {
        match w.push(&FailsHalfWay(i)) {
            Ok(()) => kept.push((i, i)),
            Err(e) => {
                assert_eq!(i % 3, 1, "{e}");
                assert!(e.to_string().contains("spill run"), "{e}");
            }
        }
    }
    assert_eq!(w.records(), kept.len() as u64);
    let run = w.finish().unwrap();
    let back: Vec<(u64, u64)> = RunReader::<(u64, u64)>::open_shared(std::sync::Arc::new(run))
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    assert_eq!(back, kept);
}
