//! Directories of many small files: `text_file` packs them several to a partition, by
//! bytes with an open cost per file, and still reads every line exactly once, in file
//! order, with the right `file:line`, whatever the packing. Checked against plain Rust
//! reading the same files, with skipped names, empty files, CRLF endings, lines without
//! a final newline, and a file much larger than the packing target next to tiny ones.

mod common;

use std::path::{Path, PathBuf};

use common::{reference_lines, SplitMix};
use ember::io::text_input::{Packing, DEFAULT_PACKING};
use ember::{Conf, Context};

fn ctx_with(packing: Packing) -> Context {
    let mut conf = Conf::local(2, ember::DEFAULT_EXECUTOR_MEMORY);
    conf.progress = false;
    conf.packing = packing;
    Context::with_conf(conf).unwrap()
}

/// `n` files of 0 to ~6 KB (a few empty, some CRLF, some without a final newline), one
/// file of ~600 KB among them, and files that must be skipped. Returns the files that are
/// input, in the order a listing sorts them.
fn many_files(dir: &Path, n: usize) -> Vec<(PathBuf, String)> {
    let mut rng = SplitMix::new(11);
    let mut files = Vec::new();
    for i in 0..n {
        let lines = if i % 37 == 5 { 0 } else { rng.below(120) };
        let crlf = i % 5 == 0;
        let mut content = String::new();
        for l in 0..lines {
            content.push_str(&format!("f{i} l{l} w{}", rng.below(50)));
            content.push_str(if crlf { "\r\n" } else { "\n" });
        }
        if i % 7 == 3 {
            content.push_str("tail without newline");
        }
        if i == n / 2 {
            content = (0..30_000).map(|l| format!("big line {l}\n")).collect();
        }
        let path = dir.join(format!("file-{i:05}.txt"));
        std::fs::write(&path, &content).unwrap();
        files.push((path, content));
    }
    std::fs::write(dir.join("_SUCCESS"), "").unwrap();
    std::fs::write(dir.join(".file-00001.txt.crc"), "skipped\n").unwrap();
    std::fs::write(dir.join("_temporary"), "skipped\n").unwrap();
    files.sort();
    files
}

#[test]
fn many_small_files_are_packed_and_every_line_is_read_once_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let files = many_files(dir.path(), 400);
    let want: Vec<String> = files.iter().flat_map(|(_, c)| reference_lines(c)).collect();
    let input = dir.path().to_str().unwrap();
    let small = Packing {
        open_cost: 4 << 10,
        max_partition_bytes: 64 << 10,
    };
    for (packing, min_partitions) in [
        (DEFAULT_PACKING, 1),
        (DEFAULT_PACKING, 2),
        (DEFAULT_PACKING, 16),
        (small, 2),
        (small, 300),
    ] {
        let ctx = ctx_with(packing);
        let rdd = ctx.text_file(input, min_partitions).unwrap();
        let parts = rdd.num_partitions();
        assert!(
            parts >= min_partitions,
            "{parts} partitions for min {min_partitions}"
        );
        if min_partitions <= 16 {
            assert!(
                parts < files.len() / 4,
                "{parts} partitions for {} files: not packed ({packing:?})",
                files.len()
            );
        }
        // collect() is partition order: exactly the files' lines in file order.
        let got = rdd.collect().unwrap();
        assert_eq!(got.len(), want.len(), "{packing:?} min {min_partitions}");
        assert!(
            got == want,
            "{packing:?} min {min_partitions}: lines differ"
        );
        assert_eq!(rdd.count().unwrap(), want.len() as u64);
    }
    // With the default packing, 400 files of a few KB fit in very few partitions.
    let ctx = ctx_with(DEFAULT_PACKING);
    assert!(ctx.text_file(input, 2).unwrap().num_partitions() <= 16);
}

#[test]
fn packed_partitions_name_each_line_by_its_own_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let files = many_files(dir.path(), 120);
    let mut want = Vec::new();
    for (path, content) in &files {
        for (i, line) in reference_lines(content).into_iter().enumerate() {
            want.push((format!("{}:{}", path.display(), i + 1), line));
        }
    }
    let ctx = ctx_with(Packing {
        open_cost: 1 << 10,
        max_partition_bytes: 32 << 10,
    });
    let rdd = ctx
        .text_file_with_positions(dir.path().to_str().unwrap(), 3)
        .unwrap();
    assert!(rdd.num_partitions() < files.len());
    let got = rdd
        .map(|(pos, line): (ember::LinePosition, String)| (pos.to_string(), line))
        .collect()
        .unwrap();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "positions or order differ");
}

#[test]
fn word_count_over_many_small_files_matches_a_plain_count() {
    let dir = tempfile::tempdir().unwrap();
    let files = many_files(dir.path(), 300);
    let mut want: std::collections::BTreeMap<String, u64> = Default::default();
    for (_, c) in &files {
        for l in reference_lines(c) {
            for w in l.split_whitespace() {
                *want.entry(w.to_string()).or_default() += 1;
            }
        }
    }
    let ctx = ctx_with(DEFAULT_PACKING);
    let got: std::collections::BTreeMap<String, u64> = ctx
        .text_file(dir.path().to_str().unwrap(), 2)
        .unwrap()
        .flat_map(|l: String| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .map(|w: String| (w, 1u64))
        .reduce_by_key(|a, b| a + b)
        .collect()
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(got, want);
}
