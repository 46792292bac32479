use super::*;
use proptest::prelude::*;
use std::os::unix::fs::PermissionsExt;

/// Bytes that differ at every offset within a long stretch (so a block written at the
/// wrong offset shows).
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

/// Writes `chunks` of `data` (their lengths in turn, cycling) and reads the file back.
fn write_in_chunks(path: &Path, data: &[u8], chunks: &[usize]) -> Vec<u8> {
    let mut f = ColdFile::create(path, 0o600).unwrap();
    let mut at = 0;
    let mut i = 0;
    while at < data.len() {
        let n = chunks[i % chunks.len()].min(data.len() - at);
        f.write_all(&data[at..at + n]).unwrap();
        at += n;
        i += 1;
    }
    let file = f.finish().unwrap();
    assert_eq!(file.metadata().unwrap().len(), data.len() as u64);
    std::fs::read(path).unwrap()
}

#[test]
fn the_file_is_the_bytes_written_for_lengths_around_the_alignment_and_the_stage() {
    let dir = tempfile::tempdir().unwrap();
    let lengths = [
        0,
        1,
        ALIGN - 1,
        ALIGN,
        ALIGN + 1,
        STAGE_BYTES - 1,
        STAGE_BYTES,
        STAGE_BYTES + 1,
        3 * STAGE_BYTES + 4095,
    ];
    for (k, &len) in lengths.iter().enumerate() {
        let data = pattern(len, k as u32);
        for chunks in [&[1 << 20][..], &[1000, 7, 65_536], &[STAGE_BYTES + 3]] {
            let path = dir.path().join(format!("copy-{k}-{}", chunks[0]));
            assert!(
                write_in_chunks(&path, &data, chunks) == data,
                "{len} bytes in chunks of {chunks:?}"
            );
        }
    }
}

#[test]
fn a_copy_is_created_new_with_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy");
    let f = ColdFile::create(&path, 0o600).unwrap();
    drop(f.finish().unwrap());
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let e = ColdFile::create(&path, 0o600)
        .err()
        .expect("the file exists");
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
}

#[test]
fn falling_back_to_buffered_writes_mid_stage_keeps_every_byte() {
    // What a file system refusing a direct write leads to, forced at several points.
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(2 * STAGE_BYTES + 12_345, 9);
    for (k, split) in [0, 1, ALIGN, STAGE_BYTES + 100, 2 * STAGE_BYTES + 5]
        .into_iter()
        .enumerate()
    {
        let path = dir.path().join(format!("copy-{k}"));
        let mut f = ColdFile::create(&path, 0o600).unwrap();
        f.write_all(&data[..split]).unwrap();
        if f.is_direct() {
            let staged = f.stage.as_ref().unwrap().len;
            // Pretend the first half of the stage went out before the refusal.
            let done = staged / 2 / ALIGN * ALIGN;
            let at = f.written;
            f.file
                .write_at(&f.stage.as_ref().unwrap().bytes()[..done], at)
                .unwrap();
            f.go_buffered(done, staged).unwrap();
            assert!(!f.is_direct());
        }
        f.write_all(&data[split..]).unwrap();
        drop(f.finish().unwrap());
        assert!(
            std::fs::read(&path).unwrap() == data,
            "fallback after {split} bytes"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn any_chunking_gives_the_bytes_written(
        len in 0usize..(3 * STAGE_BYTES),
        chunks in prop::collection::vec(1usize..(STAGE_BYTES + 5000), 1..6),
        seed in any::<u32>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let data = pattern(len, seed);
        let path = dir.path().join("copy");
        prop_assert!(write_in_chunks(&path, &data, &chunks) == data);
    }
}

/// Pages of `path` in the page cache (`mincore` over a shared mapping of it).
fn resident_pages(path: &Path) -> usize {
    use std::os::unix::io::AsRawFd;
    let file = File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    // SAFETY: a read-only shared mapping of a file this test wrote and nobody changes;
    // only `mincore` looks at it, and it is unmapped before returning.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(addr, libc::MAP_FAILED);
        let pages = len.div_ceil(4096);
        let mut vec = vec![0u8; pages];
        assert_eq!(libc::mincore(addr, len, vec.as_mut_ptr()), 0);
        libc::munmap(addr, len);
        vec.iter().filter(|b| *b & 1 == 1).count()
    }
}

#[test]
fn a_direct_copy_leaves_nothing_in_the_page_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy");
    let data = pattern(4 * STAGE_BYTES + 100, 3);
    let mut f = ColdFile::create(&path, 0o600).unwrap();
    let direct = f.is_direct();
    f.write_all(&data).unwrap();
    drop(f.finish().unwrap());
    if direct {
        // The check sees cached pages: a file written the usual way has them.
        let control = dir.path().join("control");
        std::fs::write(&control, &data).unwrap();
        let cached = resident_pages(&control);
        assert!(cached > 1000, "{cached} pages of the control cached");
        // The padded tail's last page may be cached by the truncate; nothing else is.
        let cached = resident_pages(&path);
        assert!(cached <= 1, "{cached} pages of the copy cached");
    } else {
        eprintln!("this file system refuses O_DIRECT: the copy was written buffered");
    }
    assert!(std::fs::read(&path).unwrap() == data);
}
