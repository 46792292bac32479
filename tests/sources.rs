//! Source RDDs over files: directories, globs and comma lists, skipped `_`/`.` files,
//! byte-range splits honouring `min_partitions`, `\r\n` endings, a last line without a
//! newline, empty files, line positions, and `whole_text_files`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::reference_lines;

fn write(dir: &Path, name: &str, content: &str) {
    std::fs::write(dir.join(name), content).unwrap();
}

fn fixture() -> (tempfile::TempDir, BTreeMap<&'static str, String>) {
    let dir = tempfile::tempdir().unwrap();
    let mut files = BTreeMap::new();
    let long: String = (0..2000)
        .map(|i| format!("line {i} {}\n", "x".repeat(i % 37)))
        .collect();
    files.insert("part-0", long);
    files.insert(
        "part-1",
        "crlf one\r\ncrlf two\r\n\r\nafter empty\r\n".to_string(),
    );
    files.insert("part-2", "no trailing newline\nlast".to_string());
    files.insert("part-3", String::new());
    for (name, content) in &files {
        write(dir.path(), name, content);
    }
    write(dir.path(), "_SUCCESS", "");
    write(dir.path(), ".hidden", "must not be read\n");
    (dir, files)
}

#[test]
fn text_file_reads_every_line_once_for_any_partition_count() {
    let (dir, files) = fixture();
    let mut expected: Vec<String> = files.values().flat_map(|c| reference_lines(c)).collect();
    expected.sort();
    let ctx = common::ctx(2);
    for min_partitions in [1, 2, 7, 64] {
        let rdd = ctx
            .text_file(dir.path().to_str().unwrap(), min_partitions)
            .unwrap();
        assert!(
            rdd.num_partitions() >= min_partitions.min(4),
            "{} partitions for min {min_partitions}",
            rdd.num_partitions()
        );
        let mut got = rdd.collect().unwrap();
        got.sort();
        assert_eq!(got, expected, "min_partitions {min_partitions}");
    }
}

#[test]
fn globs_and_comma_lists_select_files() {
    let (dir, files) = fixture();
    let ctx = common::ctx(2);
    let d = dir.path().to_str().unwrap();
    let got = ctx
        .text_file(&format!("{d}/part-[12]"), 2)
        .unwrap()
        .collect()
        .unwrap();
    let mut expected: Vec<String> = ["part-1", "part-2"]
        .iter()
        .flat_map(|f| reference_lines(&files[f]))
        .collect();
    let mut got_sorted = got.clone();
    got_sorted.sort();
    expected.sort();
    assert_eq!(got_sorted, expected);
    let list = format!("{d}/part-2,{d}/part-3");
    assert_eq!(
        ctx.text_file(&list, 1).unwrap().collect().unwrap(),
        reference_lines(&files["part-2"])
    );
    let err = ctx
        .text_file(&format!("{d}/nothing-*"), 1)
        .unwrap_err()
        .to_string();
    assert!(err.contains("nothing-*"), "{err}");
}

#[test]
fn positions_name_the_file_and_line() {
    let (dir, files) = fixture();
    let ctx = common::ctx(2);
    let got = ctx
        .text_file_with_positions(dir.path().to_str().unwrap(), 5)
        .unwrap()
        .map(|(pos, line): (ember::LinePosition, String)| (pos.to_string(), line))
        .collect()
        .unwrap();
    let mut expected = Vec::new();
    for (name, content) in &files {
        let path = dir.path().join(name);
        for (i, line) in reference_lines(content).into_iter().enumerate() {
            expected.push((format!("{}:{}", path.display(), i + 1), line));
        }
    }
    let mut got_sorted = got;
    got_sorted.sort();
    expected.sort();
    assert_eq!(got_sorted, expected);
}

/// `text_file_map` hands every line to the function once, borrowed, with the position
/// `text_file_with_positions` gives it: the same records for any split of the input.
#[test]
fn text_file_map_sees_every_line_once_at_its_position() {
    let (dir, files) = fixture();
    let ctx = common::ctx(2);
    let path = dir.path().to_str().unwrap();
    let mut expected = Vec::new();
    for (name, content) in &files {
        let file = dir.path().join(name);
        for (i, line) in reference_lines(content).into_iter().enumerate() {
            expected.push((format!("{}:{}", file.display(), i + 1), line));
        }
    }
    expected.sort();
    for parts in [1, 2, 5, 17] {
        let mut got = ctx
            .text_file_map(path, parts, |pos: ember::LinePosition, line: &str| {
                (pos.to_string(), line.to_owned())
            })
            .unwrap()
            .collect()
            .unwrap();
        got.sort();
        assert_eq!(got, expected, "{parts} partitions");
        let with_positions = ctx.text_file_with_positions(path, parts).unwrap();
        assert_eq!(
            ctx.text_file_map(path, parts, |_: ember::LinePosition, _: &str| ())
                .unwrap()
                .num_partitions(),
            with_positions.num_partitions(),
            "{parts} partitions"
        );
    }
    // A sort samples its input first (windows of each split): the records it samples
    // are made by the same function.
    let sorted = ctx
        .text_file_map(path, 3, |_: ember::LinePosition, line: &str| {
            (line.len(), line.to_owned())
        })
        .unwrap()
        .sort_by_key(false)
        .collect()
        .unwrap();
    let mut want: Vec<(usize, String)> = expected
        .iter()
        .map(|(_, line)| (line.len(), line.clone()))
        .collect();
    want.sort_by_key(|r| std::cmp::Reverse(r.0));
    let lengths = |v: &[(usize, String)]| v.iter().map(|r| r.0).collect::<Vec<_>>();
    assert_eq!(lengths(&sorted), lengths(&want));
    let mut lines: Vec<String> = sorted.into_iter().map(|r| r.1).collect();
    lines.sort();
    let mut want_lines: Vec<String> = want.into_iter().map(|r| r.1).collect();
    want_lines.sort();
    assert_eq!(lines, want_lines);
}

#[test]
fn whole_text_files_yields_each_file_once() {
    let (dir, files) = fixture();
    let ctx = common::ctx(2);
    for parts in [1, 3, 10] {
        let mut got = ctx
            .whole_text_files(dir.path().to_str().unwrap(), parts)
            .unwrap()
            .collect()
            .unwrap();
        got.sort();
        let expected: Vec<(String, String)> = files
            .iter()
            .map(|(name, content)| {
                (
                    dir.path().join(name).to_string_lossy().into_owned(),
                    content.clone(),
                )
            })
            .collect();
        assert_eq!(got, expected, "{parts} partitions");
    }
}
