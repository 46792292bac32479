//! A cached block as a file, to move it between executors: written by the worker of the
//! executor that holds it ([`export`]), pushed by the executor daemons (to whom it is
//! opaque bytes, crc-checked in transit), and adopted by a worker of the peer it went to
//! ([`adopt`]) as a disk block.
//!
//! Format (integers little-endian):
//!
//! ```text
//! file   := header run
//! header := b"EMBBLK01" records:u64 payload_max:u32 frame_max:u32 run_bytes:u64  (32 bytes)
//! run    := a spill run file of the partition's batches (`crate::spill::run`), run_bytes long
//! ```
//!
//! `records`, `payload_max` and `frame_max` are what the run's writer reported (its
//! batches and its largest frame), so the adopted run is read with the same checks as
//! any run: every frame's crc, no frame larger than its writer wrote, the batch count.
//!
//! Invariants: a file is written under a temporary name in its directory and renamed
//! into place whole, so a reader sees a complete file or none; [`adopt`] checks the
//! header against the file's length before trusting any of it, refuses sizes no run of
//! that length could have, and then walks every frame (its length within the header's
//! largest, its crc32, the frames ending exactly at the end of the file) before the
//! block is used: a damaged or foreign file is an error naming the file (the partition
//! is then computed from lineage), never an allocation sized from it and never a task
//! failing halfway through it; an adopted file stays where it is (its directory's
//! owner, the executor, deletes it with its RDD or session).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{EmberError, Result};
use crate::spill::run::RunFile;

/// First bytes of a moved block's file.
pub(crate) const MAGIC: [u8; 8] = *b"EMBBLK01";
/// Bytes before the run.
pub(crate) const HEADER_BYTES: u64 = 32;

/// Writes a block's run (a disk block's, or a memory block written as one) as a moved
/// block's file at `to`; the file's size.
pub(crate) fn export(run: &RunFile, to: &Path) -> Result<u64> {
    let dir = to
        .parent()
        .ok_or_else(|| EmberError::io(to, std::io::Error::other("no parent directory")))?;
    let io = |e: std::io::Error| EmberError::io(to, e);
    let tmp = tempfile::Builder::new()
        .prefix(".moving-")
        .tempfile_in(dir)
        .map_err(io)?;
    let (payload_max, frame_max) = run.largest();
    let mut header = Vec::with_capacity(HEADER_BYTES as usize);
    header.extend_from_slice(&MAGIC);
    header.extend_from_slice(&run.records().to_le_bytes());
    header.extend_from_slice(&payload_max.to_le_bytes());
    header.extend_from_slice(&frame_max.to_le_bytes());
    header.extend_from_slice(&run.bytes().to_le_bytes());
    let mut out = std::io::BufWriter::new(tmp.as_file());
    out.write_all(&header).map_err(io)?;
    let mut src = File::open(run.path()).map_err(|e| EmberError::io(run.path(), e))?;
    let skip = run.offset();
    if skip > 0 {
        use std::io::{Seek, SeekFrom};
        src.seek(SeekFrom::Start(skip))
            .map_err(|e| EmberError::io(run.path(), e))?;
    }
    let copied = std::io::copy(&mut (&mut src).take(run.bytes()), &mut out).map_err(io)?;
    if copied != run.bytes() {
        return Err(EmberError::Corrupt {
            what: run.path().display().to_string(),
            message: format!("run ends after {copied} of its {} bytes", run.bytes()),
        });
    }
    out.flush().map_err(io)?;
    drop(out);
    tmp.persist(to).map_err(|e| io(e.error))?;
    Ok(HEADER_BYTES + copied)
}

/// The moved block's file at `path` as a run to read, or `None` if there is no file.
pub(crate) fn adopt(path: &Path) -> Result<Option<RunFile>> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(EmberError::io(path, e)),
    };
    let len = file.metadata().map_err(|e| EmberError::io(path, e))?.len();
    let damaged = |message: String| EmberError::Corrupt {
        what: path.display().to_string(),
        message,
    };
    let mut header = [0u8; HEADER_BYTES as usize];
    if len < HEADER_BYTES {
        return Err(damaged(format!(
            "{len} bytes: shorter than a moved block's header"
        )));
    }
    file.read_exact(&mut header)
        .map_err(|e| EmberError::io(path, e))?;
    if header[..8] != MAGIC {
        return Err(damaged("not a moved cached block (bad magic)".into()));
    }
    let u64_at = |i: usize| u64::from_le_bytes(header[i..i + 8].try_into().expect("8 bytes"));
    let u32_at = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().expect("4 bytes"));
    let (records, payload_max, frame_max, run_bytes) =
        (u64_at(8), u32_at(16), u32_at(20), u64_at(24));
    if HEADER_BYTES.checked_add(run_bytes) != Some(len) {
        return Err(damaged(format!(
            "its header promises a run of {run_bytes} bytes, but {} follow it",
            len - HEADER_BYTES
        )));
    }
    // lz4 expands at most ~255x; every batch takes at least one byte uncompressed.
    let frame_bound = u64::from(payload_max) * 256 + 64;
    if u64::from(payload_max) > run_bytes
        || u64::from(frame_max) > frame_bound
        || records > run_bytes.saturating_mul(256)
    {
        return Err(damaged(format!(
            "implausible header for a run of {run_bytes} bytes: {records} batches, \
             largest frame {payload_max} bytes ({frame_max} uncompressed)"
        )));
    }
    verify_frames(&mut file, run_bytes, payload_max, frame_max).map_err(|e| match e {
        Walk::Io(e) => EmberError::io(path, e),
        Walk::Damaged(m) => damaged(m),
    })?;
    Ok(Some(RunFile::adopt(
        PathBuf::from(path),
        HEADER_BYTES,
        run_bytes,
        records,
        (payload_max, frame_max),
    )))
}

/// Why a walk over a run's frames stopped.
enum Walk {
    Io(std::io::Error),
    Damaged(String),
}

/// Reads the run from `file`'s position (its `run_bytes` to the end of the file): the
/// run's magic, then every frame, each at most `payload_max` bytes with a crc32 that
/// matches and claiming at most `frame_max` uncompressed bytes.
fn verify_frames(
    file: &mut File,
    run_bytes: u64,
    payload_max: u32,
    frame_max: u32,
) -> std::result::Result<(), Walk> {
    let mut r = std::io::BufReader::new(file);
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic).map_err(Walk::Io)?;
    if magic != crate::spill::run::MAGIC {
        return Err(Walk::Damaged(
            "its run does not start with a run's magic".into(),
        ));
    }
    let mut at = magic.len() as u64;
    let mut payload = Vec::new();
    while at < run_bytes {
        let mut header = [0u8; 8];
        if run_bytes - at < 8 {
            return Err(Walk::Damaged(format!(
                "a frame header is cut off at byte {at} of the run"
            )));
        }
        r.read_exact(&mut header).map_err(Walk::Io)?;
        let clen = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        if clen < 4 || clen > payload_max || u64::from(clen) > run_bytes - at - 8 {
            return Err(Walk::Damaged(format!(
                "the frame at byte {at} of the run claims {clen} bytes (at most {payload_max} were written)"
            )));
        }
        payload.resize(clen as usize, 0);
        r.read_exact(&mut payload).map_err(Walk::Io)?;
        if crc32fast::hash(&payload) != crc {
            return Err(Walk::Damaged(format!(
                "the frame at byte {at} of the run fails its checksum"
            )));
        }
        let ulen = u32::from_le_bytes(payload[..4].try_into().expect("4 bytes"));
        if ulen > frame_max {
            return Err(Walk::Damaged(format!(
                "the frame at byte {at} of the run claims {ulen} uncompressed bytes (at most {frame_max} were written)"
            )));
        }
        at += 8 + u64::from(clen);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::block_store::Block;
    use crate::spill::run::RunReader;

    /// `block` exported as the store does it (a memory block as a scratch run first).
    fn export_block(block: &Block, scratch: &Path, to: &Path) -> Result<u64> {
        match block {
            Block::Memory(b) => export(&b.write_run(scratch)?, to),
            Block::Disk(run) => export(run, to),
        }
    }

    fn batches() -> Vec<Vec<(u64, String)>> {
        (0..5)
            .map(|b| {
                (0..3000u64)
                    .map(|i| (b * 3000 + i, format!("v{i}")))
                    .collect()
            })
            .collect()
    }

    fn read_back(run: RunFile) -> Vec<Vec<(u64, String)>> {
        RunReader::<Vec<(u64, String)>>::open_shared(Arc::new(run))
            .unwrap()
            .map(|b| b.unwrap())
            .collect()
    }

    #[test]
    fn memory_and_disk_blocks_move_and_read_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let (scratch, arrivals) = (dir.path().join("scratch"), dir.path().join("arrivals"));
        std::fs::create_dir_all(&arrivals).unwrap();
        let want = batches();
        let memory = Block::Memory(Arc::new(want.clone()));
        let to = ember_shuffle::cached_block_path(&arrivals, 7, 1);
        let bytes = export_block(&memory, &scratch, &to).unwrap();
        assert_eq!(bytes, std::fs::metadata(&to).unwrap().len());
        // The memory block's scratch run is gone; only the moved file is left.
        assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
        let adopted = adopt(&to).unwrap().expect("a file");
        assert_eq!(read_back(adopted), want);
        assert!(to.exists(), "an adopted file stays in place");
        // An adopted block moves on again (its run starts after the header).
        let again = Block::Disk(Arc::new(adopt(&to).unwrap().unwrap()));
        let to2 = ember_shuffle::cached_block_path(&arrivals, 7, 2);
        assert_eq!(export_block(&again, &scratch, &to2).unwrap(), bytes);
        assert_eq!(read_back(adopt(&to2).unwrap().unwrap()), want);
        assert!(adopt(&arrivals.join("missing")).unwrap().is_none());
    }

    #[test]
    fn damaged_or_foreign_files_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let to = ember_shuffle::cached_block_path(dir.path(), 1, 0);
        export_block(&Block::Memory(Arc::new(batches())), dir.path(), &to).unwrap();
        let good = std::fs::read(&to).unwrap();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("shorter than", good[..20].to_vec()),
            ("bad magic", [b"NOTBLOCK".as_slice(), &good[8..]].concat()),
            ("promises a run", good[..good.len() - 1].to_vec()),
            ("implausible header", {
                let mut b = good.clone();
                b[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
                b
            }),
        ];
        for (want, bytes) in cases {
            std::fs::write(&to, &bytes).unwrap();
            let e = adopt(&to).unwrap_err().to_string();
            assert!(
                e.contains(want) && e.contains("rdd_1_0.cached"),
                "{want}: {e}"
            );
        }
        // A flipped byte inside the run passes the header and fails its frame's crc,
        // before the block is used.
        let mut flipped = good.clone();
        let at = good.len() - 10;
        flipped[at] ^= 0xff;
        std::fs::write(&to, &flipped).unwrap();
        let e = adopt(&to).unwrap_err().to_string();
        assert!(
            e.contains("checksum") && e.contains("rdd_1_0.cached"),
            "{e}"
        );
        // A frame length past the largest written.
        let mut long = good.clone();
        let first_frame = (HEADER_BYTES + 8) as usize;
        long[first_frame..first_frame + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&to, &long).unwrap();
        let e = adopt(&to).unwrap_err().to_string();
        assert!(e.contains("claims"), "{e}");
    }
}
