//! `text_file` ends lines where Hadoop's LineReader (and so Spark's `textFile`) does: at
//! `\n`, `\r` or `\r\n`, whatever the split boundaries; positions count the same lines.

mod common;

use common::*;

#[test]
fn lone_cr_crlf_and_lf_all_end_lines_across_many_splits() {
    let dir = tempfile::tempdir().unwrap();
    // Old Mac (\r), DOS (\r\n) and Unix (\n) endings mixed, an empty line made by "\r\r",
    // and no final terminator; long enough to be cut into many splits.
    let mut content = String::new();
    let mut want = Vec::new();
    for i in 0..3000 {
        let line = format!("line {i} {}", "x".repeat(i % 17));
        content.push_str(&line);
        want.push(line);
        content.push_str(match i % 4 {
            0 => "\r",
            1 => "\r\n",
            2 => "\n",
            _ => "\r\r",
        });
        if i % 4 == 3 {
            want.push(String::new());
        }
    }
    content.push_str("last, unterminated");
    want.push("last, unterminated".into());
    let path = dir.path().join("mixed.txt");
    std::fs::write(&path, &content).unwrap();
    let c = ctx(2);
    for parts in [1, 3, 16, 64] {
        let lines = c.text_file(path.to_str().unwrap(), parts).unwrap();
        assert!(lines.num_partitions() >= parts);
        assert_eq!(lines.collect().unwrap(), want, "{parts} partitions");
    }
    // Positions: line numbers count \r and \r\n as one terminator each.
    let positioned = c
        .text_file_with_positions(path.to_str().unwrap(), 8)
        .unwrap()
        .map(|(p, l): (ember::LinePosition, String)| (p.line_number().unwrap(), l))
        .collect()
        .unwrap();
    let numbered: Vec<(u64, String)> = want
        .iter()
        .cloned()
        .zip(1u64..)
        .map(|(l, n)| (n, l))
        .collect();
    assert_eq!(positioned, numbered);
}
