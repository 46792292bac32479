//! CSV splits against whole-file reads: a file cut at every byte offset (so that lines
//! straddle the boundary at every position: inside a field, on a delimiter, between
//! `\r` and `\n`, right after a terminator) gives exactly the whole file's records, the
//! header applied to every split, and errors with the file's own line numbers.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Row {
    id: u32,
    city: String,
    temp: Option<f64>,
}

fn read_all(pieces: Vec<CsvPiece>, options: CsvOptions) -> Result<Vec<Row>> {
    let mut r = CsvReader::<Row>::new(pieces, options);
    let mut out = Vec::new();
    while let Some(b) = r.next_batch() {
        out.extend(b?);
    }
    Ok(out)
}

/// The pieces of `path` cut at the given offsets, with its header if `has_header`.
fn cut(path: &Path, len: u64, at: &[u64], options: &CsvOptions) -> Vec<CsvPiece> {
    let header = options
        .has_header
        .then(|| read_header(path, options).unwrap());
    let mut bounds = vec![0];
    bounds.extend_from_slice(at);
    bounds.push(len);
    bounds
        .windows(2)
        .map(|w| CsvPiece::Split {
            split: FileSplit {
                path: Arc::from(path),
                start: w[0],
                end: w[1],
            },
            header: header.clone(),
        })
        .collect()
}

/// Records parsed independently of the `csv` crate: lines split on commas.
fn reference(text: &str, has_header: bool) -> Vec<Row> {
    let mut lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.is_empty())
        .collect();
    if has_header {
        lines.remove(0);
    }
    lines
        .into_iter()
        .map(|l| {
            // Columns are temp,id,city in the files below: the header maps them.
            let f: Vec<&str> = l.split(',').collect();
            Row {
                id: f[1].parse().unwrap(),
                city: f[2].to_string(),
                temp: if f[0].is_empty() {
                    None
                } else {
                    Some(f[0].parse().unwrap())
                },
            }
        })
        .collect()
}

#[test]
fn every_boundary_position_reads_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    for (name, eol) in [("lf.csv", "\n"), ("crlf.csv", "\r\n")] {
        let mut text = format!("temp,id,city{eol}");
        for i in 0..40u32 {
            let temp = if i % 7 == 3 {
                String::new()
            } else {
                format!("{}.{}", i % 30, i % 10)
            };
            text.push_str(&format!("{temp},{i},city{}{eol}", i % 5));
            if i % 13 == 5 {
                text.push_str(eol); // a blank line
            }
        }
        let path = dir.path().join(name);
        std::fs::write(&path, &text).unwrap();
        let len = text.len() as u64;
        let options = CsvOptions::default();
        let want = reference(&text, true);
        assert_eq!(want.len(), 40);
        let whole = read_all(vec![CsvPiece::Whole(path.clone())], options).unwrap();
        assert_eq!(whole, want, "{name} whole");
        // One boundary at every offset, then two boundaries a few bytes apart.
        for k in 1..len {
            let got = read_all(cut(&path, len, &[k], &options), options).unwrap();
            assert_eq!(got, want, "{name} cut at {k}");
        }
        for k in (1..len - 7).step_by(3) {
            let got = read_all(cut(&path, len, &[k, k + 1, k + 7], &options), options).unwrap();
            assert_eq!(got, want, "{name} cut at {k}, {}, {}", k + 1, k + 7);
        }
    }
}

#[test]
fn files_without_a_header_split_by_position() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..30u32)
        .map(|i| format!("{}.5,{i},c{i}\r\n", i % 9))
        .collect();
    let path = dir.path().join("plain.csv");
    std::fs::write(&path, &text).unwrap();
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Pos(f64, u32, String);
    let options = CsvOptions {
        has_header: false,
        ..Default::default()
    };
    let want: Vec<Pos> = reference(&text, false)
        .into_iter()
        .map(|r| Pos(r.temp.unwrap(), r.id, r.city))
        .collect();
    for k in 1..text.len() as u64 {
        let mut r = CsvReader::<Pos>::new(cut(&path, text.len() as u64, &[k], &options), options);
        let mut got = Vec::new();
        while let Some(b) = r.next_batch() {
            got.extend(b.unwrap());
        }
        assert_eq!(got, want, "cut at {k}");
    }
}

#[test]
fn errors_in_a_split_name_the_files_own_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("temp,id,city\r\n");
    for i in 0..50u32 {
        if i == 37 {
            text.push_str("warm,37,oslo\r\n"); // line 39: header, 37 rows, then this
        } else {
            text.push_str(&format!("1.5,{i},c\r\n"));
        }
    }
    let path = dir.path().join("bad.csv");
    std::fs::write(&path, &text).unwrap();
    let len = text.len() as u64;
    let options = CsvOptions::default();
    for k in [1, 40, len / 2, len - 200] {
        let e = read_all(cut(&path, len, &[k], &options), options).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("bad.csv line 39"), "cut at {k}: {m}");
        assert!(
            m.contains("\"temp\" (column 1)") && m.contains("warm"),
            "{m}"
        );
    }
    // A field too many, in the second split.
    let text = "temp,id,city\n1.0,1,a\n2.0,2,b\n3.0,3,c,extra\n4.0,4,d\n";
    std::fs::write(&path, text).unwrap();
    let e = read_all(cut(&path, text.len() as u64, &[25], &options), options).unwrap_err();
    assert!(
        e.to_string().contains("line 4") && e.to_string().contains("4 fields"),
        "{e}"
    );
}

#[test]
fn a_quoted_newline_needs_multi_line_and_reads_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let text = "temp,id,city\n1.0,1,\"new\nyork\"\n2.0,2,\"a, b\"\n3.0,3,\"x\r\ny\"\n";
    let path = dir.path().join("multi.csv");
    std::fs::write(&path, text).unwrap();
    let multi = CsvOptions {
        multi_line: true,
        ..Default::default()
    };
    let got = read_all(vec![CsvPiece::Whole(path.clone())], multi).unwrap();
    let city = |i: u32, c: &str, t: f64| Row {
        id: i,
        city: c.to_string(),
        temp: Some(t),
    };
    assert_eq!(
        got,
        vec![
            city(1, "new\nyork", 1.0),
            city(2, "a, b", 2.0),
            city(3, "x\r\ny", 3.0)
        ]
    );
    // Without multi_line: an error naming the record's line and the option, whole
    // or cut (never a record cut in two).
    let options = CsvOptions::default();
    let e = read_all(vec![CsvPiece::Whole(path.clone())], options).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("multi.csv line 2") && m.contains("multi_line: true"),
        "{m}"
    );
    assert!(m.contains("\"city\" (column 3)"), "{m}");
    for k in 1..text.len() as u64 {
        let e = read_all(cut(&path, text.len() as u64, &[k], &options), options).unwrap_err();
        assert!(
            e.to_string().contains("multi_line: true"),
            "cut at {k}: {e}"
        );
    }
}
