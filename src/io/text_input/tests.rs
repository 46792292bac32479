//! Tests of text input: split planning, line reading across split boundaries, listing.
use super::*;
use proptest::prelude::*;
use std::fs::File;
use std::io::Write;

fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, content).unwrap();
    p
}

/// Independent reference (Hadoop's LineReader): a line ends at '\n', '\r' or "\r\n"; an
/// unterminated last line counts, a final terminator makes no empty line.
fn reference_lines(content: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let (mut start, mut i) = (0usize, 0usize);
    while i < content.len() {
        match content[i] {
            b'\n' => {
                out.push((start as u64, content[start..i].to_vec()));
                i += 1;
                start = i;
            }
            b'\r' => {
                out.push((start as u64, content[start..i].to_vec()));
                i += if content.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                start = i;
            }
            _ => i += 1,
        }
    }
    if start < content.len() {
        out.push((start as u64, content[start..].to_vec()));
    }
    out
}

fn read_split(split: &FileSplit, cap: usize) -> Vec<(u64, Vec<u8>)> {
    let mut r = LineReader::open_with_capacity(split, cap).unwrap();
    let mut got = Vec::new();
    let done = r
        .for_each_line(|off, line| {
            got.push((off, line.to_vec()));
            true
        })
        .unwrap();
    assert!(done);
    got
}

fn split(path: &Path, start: u64, end: u64) -> FileSplit {
    FileSplit {
        path: Arc::from(path),
        start,
        end,
    }
}

fn content_strategy() -> impl Strategy<Value = Vec<u8>> {
    let line = (
        proptest::collection::vec(prop::sample::select(vec![b'a', b'b', b'\r', 0xC3]), 0..6),
        prop::sample::select(vec![&b"\n"[..], &b"\r\n"[..], &b"\r"[..]]),
    );
    (proptest::collection::vec(line, 0..30), any::<bool>()).prop_map(|(lines, term)| {
        let mut c = Vec::new();
        let n = lines.len();
        for (i, (body, end)) in lines.into_iter().enumerate() {
            c.extend_from_slice(&body);
            if i + 1 < n || term {
                c.extend_from_slice(end);
            }
        }
        c
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn splits_emit_every_line_exactly_once(
        content in content_strategy(),
        cuts in proptest::collection::vec(any::<u64>(), 0..8),
        cap in 1usize..40,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "f", &content);
        let len = content.len() as u64;
        let mut bounds: Vec<u64> = cuts.iter().map(|c| c % (len + 1)).collect();
        bounds.push(0);
        bounds.push(len);
        bounds.sort_unstable(); // duplicates kept: empty splits must emit nothing
        let mut got = Vec::new();
        for w in bounds.windows(2) {
            got.extend(read_split(&split(&p, w[0], w[1]), cap));
        }
        let want = reference_lines(&content);
        prop_assert_eq!(&got, &want);
        for (i, (off, _)) in want.iter().enumerate() {
            prop_assert_eq!(line_number_at(&p, *off).unwrap(), i as u64 + 1);
        }
    }

    #[test]
    fn planned_splits_cover_files(
        sizes in proptest::collection::vec(0u64..5000, 1..5),
        min_partitions in 0usize..20,
        min_split in 0u64..300,
        max_split in 1u64..2000,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<PathBuf> = sizes.iter().enumerate().map(|(i, &s)| {
            let p = dir.path().join(format!("f{i}"));
            File::create(&p).unwrap().set_len(s).unwrap();
            p
        }).collect();
        let splits = plan_splits_with(&files, min_partitions, min_split, max_split).unwrap();
        let mut it = splits.iter().peekable();
        for (f, &size) in files.iter().zip(&sizes) {
            let mut next = 0;
            let mut count = 0;
            while let Some(s) = it.next_if(|s| &*s.path == f.as_path()) {
                prop_assert_eq!(s.start, next);
                prop_assert!(s.end > s.start || size == 0);
                next = s.end;
                count += 1;
            }
            prop_assert_eq!(next, size);
            prop_assert!(count >= 1);
        }
        prop_assert!(it.next().is_none());
    }
}

#[test]
fn crlf_empty_lines_and_unterminated_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "f", b"a\r\n\nbb\r\n\r\nlast\r");
    let mut r = LineReader::open(&split(&p, 0, 17)).unwrap();
    let mut out = Vec::new();
    r.next_batch_with_offsets(1024, &mut out).unwrap();
    let want: Vec<(u64, String)> = [(0, "a"), (3, ""), (4, "bb"), (8, ""), (10, "last")]
        .iter()
        .map(|&(o, s)| (o, s.to_string()))
        .collect();
    assert_eq!(out, want);
    out.clear();
    r.next_batch_with_offsets(1024, &mut out).unwrap();
    assert!(out.is_empty());
}

#[test]
fn empty_file_and_trailing_newline() {
    let dir = tempfile::tempdir().unwrap();
    let e = write(dir.path(), "e", b"");
    assert!(read_split(&split(&e, 0, 0), 4).is_empty());
    let t = write(dir.path(), "t", b"x\ny\n");
    assert_eq!(read_split(&split(&t, 0, 4), 4).len(), 2);
    // A line starting exactly at `end` belongs to the next split.
    assert_eq!(read_split(&split(&t, 0, 2), 4), vec![(0, b"x".to_vec())]);
    assert_eq!(read_split(&split(&t, 2, 4), 4), vec![(2, b"y".to_vec())]);
}

#[test]
fn batches_and_early_stop_resume() {
    let dir = tempfile::tempdir().unwrap();
    let content: String = (0..10).map(|i| format!("line{i}\n")).collect();
    let p = write(dir.path(), "f", content.as_bytes());
    let mut r = LineReader::open(&split(&p, 0, content.len() as u64)).unwrap();
    let mut out = Vec::new();
    r.next_batch(3, &mut out).unwrap();
    assert_eq!(out, ["line0", "line1", "line2"]);
    r.next_batch(0, &mut out).unwrap();
    assert_eq!(out.len(), 3);
    let mut seen = Vec::new();
    let done = r
        .for_each_line(|_, l| {
            seen.push(String::from_utf8(l.to_vec()).unwrap());
            seen.len() < 2
        })
        .unwrap();
    assert!(!done);
    assert_eq!(seen, ["line3", "line4"]);
    out.clear();
    r.next_batch(100, &mut out).unwrap();
    assert_eq!(out, ["line5", "line6", "line7", "line8", "line9"]);
    out.clear();
    r.next_batch(100, &mut out).unwrap();
    assert!(out.is_empty());
}

#[test]
fn long_lines_spanning_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let long = "x".repeat(READ_BUFFER_SIZE * 2 + 17);
    let content = format!("{long}\r\nshort\n{long}");
    let p = write(dir.path(), "f", content.as_bytes());
    let len = content.len() as u64;
    let mid = len / 2;
    let mut out = Vec::new();
    LineReader::open(&split(&p, 0, mid))
        .unwrap()
        .next_batch_with_offsets(10, &mut out)
        .unwrap();
    LineReader::open(&split(&p, mid, len))
        .unwrap()
        .next_batch_with_offsets(10, &mut out)
        .unwrap();
    let second = long.len() as u64 + 2;
    let want = vec![
        (0, long.clone()),
        (second, "short".to_string()),
        (second + 6, long),
    ];
    assert_eq!(out, want);
}

#[test]
fn invalid_utf8_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "bad.txt", b"ok\nfine\nb\xffd\nafter\n");
    let mut r = LineReader::open(&split(&p, 0, 100)).unwrap();
    let mut out = Vec::new();
    let err = r.next_batch(10, &mut out).unwrap_err();
    assert!(matches!(err, EmberError::Corrupt { .. }));
    let msg = err.to_string();
    assert!(msg.contains("bad.txt"), "{msg}");
    assert!(msg.contains("line 3"), "{msg}");
    assert!(msg.contains("offset 8"), "{msg}");
    assert_eq!(out, ["ok", "fine"]);
    out.clear();
    r.next_batch(10, &mut out).unwrap();
    assert_eq!(out, ["after"]);

    let err = read_whole_file(&p).unwrap_err().to_string();
    assert!(err.contains("bad.txt") && err.contains("line 3"), "{err}");
}

#[test]
fn read_whole_file_and_io_errors_name_path() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "w", "héllo\nworld\n".as_bytes());
    assert_eq!(read_whole_file(&p).unwrap(), "héllo\nworld\n");
    let missing = dir.path().join("missing.txt");
    for err in [
        read_whole_file(&missing).unwrap_err(),
        LineReader::open(&split(&missing, 0, 1)).unwrap_err(),
        line_number_at(&missing, 0).unwrap_err(),
        plan_splits(std::slice::from_ref(&missing), 1).unwrap_err(),
    ] {
        assert!(matches!(&err, EmberError::Io { path, .. } if *path == missing));
        assert!(err.to_string().contains("missing.txt"));
    }
}

#[test]
fn line_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "f", b"a\nbb\n\nccc");
    let got: Vec<u64> = [0, 2, 5, 6]
        .iter()
        .map(|&o| line_number_at(&p, o).unwrap())
        .collect();
    assert_eq!(got, [1, 2, 3, 4]);
    assert_eq!(line_number_at(&p, 1000).unwrap(), 4);
}

fn bounds(splits: &[FileSplit]) -> Vec<(u64, u64)> {
    splits.iter().map(|s| (s.start, s.end)).collect()
}

fn sized(dir: &Path, name: &str, len: u64) -> PathBuf {
    let p = dir.join(name);
    File::create(&p).unwrap().set_len(len).unwrap();
    p
}

#[test]
fn plan_slop_rule_and_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = sized(dir.path(), "a", 110);
    let b = sized(dir.path(), "b", 111);
    let e = sized(dir.path(), "e", 0);
    let c = sized(dir.path(), "c", 350);
    let splits =
        plan_splits_with(&[a.clone(), b.clone(), e.clone(), c.clone()], 1, 100, 100).unwrap();
    let paths: Vec<&Path> = splits.iter().map(|s| &*s.path).collect();
    assert_eq!(paths, [&a, &b, &b, &e, &c, &c, &c, &c].map(|p| p.as_path()));
    assert_eq!(
        bounds(&splits),
        [
            (0, 110),
            (0, 100),
            (100, 111),
            (0, 0),
            (0, 100),
            (100, 200),
            (200, 300),
            (300, 350)
        ]
    );
    // 350 with split 115: 115, 115, then the 120-byte rest (< 1.1 * 115) stays whole.
    let c_only = plan_splits_with(std::slice::from_ref(&c), 1, 115, 115).unwrap();
    assert_eq!(bounds(&c_only), [(0, 115), (115, 230), (230, 350)]);
}

#[test]
fn plan_respects_min_partitions_floor_and_ceiling() {
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let f = sized(dir.path(), "four", 4 * MIB);
    let files = std::slice::from_ref(&f);
    assert_eq!(plan_splits(files, 4).unwrap().len(), 4);
    assert_eq!(plan_splits(files, 0).unwrap().len(), 1); // 4 MiB < 64 MiB ceiling
    assert_eq!(plan_splits(files, 16).unwrap().len(), 16);
    // A floor above the goal wins.
    assert_eq!(plan_splits_with(files, 16, MIB, 64 * MIB).unwrap().len(), 4);
    let g = sized(dir.path(), "big", 200 * MIB); // sparse
    let splits = plan_splits(std::slice::from_ref(&g), 1).unwrap();
    assert_eq!(
        bounds(&splits),
        [
            (0, 64 * MIB),
            (64 * MIB, 128 * MIB),
            (128 * MIB, 192 * MIB),
            (192 * MIB, 200 * MIB)
        ]
    );
    // min_partitions is honoured for a single file whenever the goal is above the floor.
    let one = plan_splits_with(files, 7, 1, u64::MAX).unwrap();
    assert_eq!(one.len(), 7);
}

#[test]
fn list_dir_glob_comma_and_missing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for name in ["_SUCCESS", ".hidden", "part-1", "part-0"] {
        write(d, name, b"x\n");
    }
    fs::create_dir(d.join("sub")).unwrap();
    write(&d.join("sub"), "part-9", b"x\n");
    let parts = vec![d.join("part-0"), d.join("part-1")];
    let ds = d.to_str().unwrap();
    assert_eq!(list_input_files(ds).unwrap(), parts);
    assert_eq!(list_input_files(&format!("{ds}/part-*")).unwrap(), parts);
    assert_eq!(list_input_files(&format!("{ds}/*")).unwrap(), {
        let mut v = parts.clone();
        v.push(d.join("sub/part-9")); // a matched directory is expanded
        v
    });
    assert_eq!(
        list_input_files(&format!("{ds}/part-1, {ds}/part-0,{ds}/part-1")).unwrap(),
        parts
    );
    // As text_file reads a list: the order listed, repeats kept, a glob expanded sorted.
    assert_eq!(
        list_input_files_as_listed(&format!("{ds}/part-1, {ds}/part-*,{ds}/part-1")).unwrap(),
        [
            d.join("part-1"),
            d.join("part-0"),
            d.join("part-1"),
            d.join("part-1")
        ]
    );
    assert!(matches!(
        list_input_files_as_listed(" , "),
        Err(EmberError::InputNotFound { .. })
    ));
    // An explicitly named hidden file is taken.
    assert_eq!(
        list_input_files(&format!("{ds}/_SUCCESS")).unwrap(),
        [d.join("_SUCCESS")]
    );

    let missing = format!("{ds}/nope");
    let err = list_input_files(&format!("{ds}/part-0,{missing}")).unwrap_err();
    assert!(matches!(&err, EmberError::InputNotFound { path } if *path == missing));
    assert!(err.to_string().contains(&missing));
    let pat = format!("{ds}/zzz-*");
    let err = list_input_files(&pat).unwrap_err();
    assert!(matches!(&err, EmberError::InputNotFound { path } if *path == pat));
    // Only hidden matches counts as no match.
    assert!(matches!(
        list_input_files(&format!("{ds}/_*")),
        Err(EmberError::InputNotFound { .. })
    ));
    assert!(matches!(
        list_input_files(" , "),
        Err(EmberError::InputNotFound { .. })
    ));
    let empty = d.join("empty");
    fs::create_dir(&empty).unwrap();
    assert!(list_input_files(empty.to_str().unwrap())
        .unwrap()
        .is_empty());
}

#[test]
fn file_split_is_serde_and_clone() {
    // FileSplit must stay Clone + Eq + serde (without serde's `rc` feature).
    fn assert_serde<T: serde::Serialize + serde::de::DeserializeOwned>() {}
    assert_serde::<FileSplit>();
    let s = split(Path::new("/x"), 1, 2);
    assert_eq!(s.clone(), s);
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(b"q\n").unwrap();
    assert_eq!(
        read_split(&split(f.path(), 0, 2), 8),
        vec![(0, b"q".to_vec())]
    );
}
