//! Large CSV files are cut at line boundaries by default (Spark's `multiLine = false`)
//! and read in parallel: a 100k-row file gives several partitions and exactly the rows
//! a plain-Rust parse of the file gives, with LF and CRLF line ends; the header is
//! applied to every split; an error in a later split names the file's own line; and
//! `multi_line` keeps files whole so quoted fields may hold newlines.

mod common;

use common::ctx;
use ember::CsvOptions;
use serde::{Deserialize, Serialize};

/// Fields in another order than the file's columns: only the header maps them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Reading {
    city: String,
    day: u32,
    temp: Option<f64>,
}

/// A 100k-row file of city temperatures (`day,temp,city`), about 2.5 MB.
fn temperatures(eol: &str) -> String {
    let cities = ["Helsinki", "Oslo", "Lisbon", "Quito", "Perth", "Nairobi"];
    let mut text = format!("day,temp,city{eol}");
    for i in 0..100_000u32 {
        let temp = if i % 97 == 0 {
            String::new()
        } else {
            format!("{}.{}", (i * 7) % 45, i % 10)
        };
        text.push_str(&format!(
            "{},{temp},{}{eol}",
            i % 365,
            cities[i as usize % 6]
        ));
    }
    text
}

/// The rows of `text` parsed without the `csv` crate: lines split on commas.
fn parse(text: &str) -> Vec<Reading> {
    text.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Reading {
                day: f[0].parse().unwrap(),
                temp: (!f[1].is_empty()).then(|| f[1].parse().unwrap()),
                city: f[2].to_string(),
            }
        })
        .collect()
}

#[test]
fn a_100k_row_file_is_split_and_reads_exactly_its_rows() {
    let c = ctx(2);
    let dir = tempfile::tempdir().unwrap();
    for (name, eol) in [("lf.csv", "\n"), ("crlf.csv", "\r\n")] {
        let text = temperatures(eol);
        let path = dir.path().join(name);
        std::fs::write(&path, &text).unwrap();
        let want = parse(&text);
        assert_eq!(want.len(), 100_000);
        let rdd = c
            .read_csv::<Reading>(path.to_str().unwrap(), CsvOptions::default())
            .unwrap();
        assert!(rdd.num_partitions() > 1, "{name}: {}", rdd.num_partitions());
        // Every partition holds rows: the split edges fall inside the file.
        let sizes: Vec<usize> = rdd.glom().collect().unwrap().iter().map(Vec::len).collect();
        assert!(sizes.iter().all(|&n| n > 0), "{name}: {sizes:?}");
        assert_eq!(rdd.collect().unwrap(), want, "{name}");

        // multi_line: the file whole, one partition, the same rows.
        let multi = CsvOptions {
            multi_line: true,
            ..Default::default()
        };
        let whole = c
            .read_csv::<Reading>(path.to_str().unwrap(), multi)
            .unwrap();
        assert_eq!(whole.num_partitions(), 1);
        assert_eq!(whole.collect().unwrap(), want);
    }
}

#[test]
fn an_error_late_in_a_split_file_names_the_files_own_line() {
    let c = ctx(2);
    let dir = tempfile::tempdir().unwrap();
    let mut text = temperatures("\r\n");
    // Row 99,990 sits on line 99,992 (after the header), in the last split.
    let bad_line = 99_992usize;
    let mut lines: Vec<&str> = text.split("\r\n").collect();
    let f: Vec<&str> = lines[bad_line - 1].split(',').collect();
    let replaced = format!("{},hot,{}", f[0], f[2]);
    lines[bad_line - 1] = &replaced;
    text = lines.join("\r\n");
    let path = dir.path().join("bad.csv");
    std::fs::write(&path, &text).unwrap();
    let rdd = c
        .read_csv::<Reading>(path.to_str().unwrap(), CsvOptions::default())
        .unwrap();
    assert!(rdd.num_partitions() > 1);
    let e = rdd.count().unwrap_err();
    let m = e.to_string();
    assert!(m.contains(&format!("bad.csv line {bad_line}")), "{m}");
    assert!(
        m.contains("\"temp\" (column 2)") && m.contains("hot"),
        "{m}"
    );
}

#[test]
fn quoted_newlines_read_with_multi_line_and_fail_clearly_without() {
    let c = ctx(2);
    let dir = tempfile::tempdir().unwrap();
    // Large enough to be cut without multi_line; every 1000th city spans two lines.
    let mut text = String::from("day,temp,city\n");
    let mut want = Vec::new();
    for i in 0..100_000u32 {
        let city = if i % 1000 == 999 {
            format!("New\nCity {i}")
        } else {
            format!("City {i}")
        };
        text.push_str(&format!("{},{}.5,\"{city}\"\n", i % 365, i % 40));
        want.push(Reading {
            city,
            day: i % 365,
            temp: Some(f64::from(i % 40) + 0.5),
        });
    }
    let path = dir.path().join("multi.csv");
    std::fs::write(&path, &text).unwrap();
    let multi = CsvOptions {
        multi_line: true,
        ..Default::default()
    };
    let got = c
        .read_csv::<Reading>(path.to_str().unwrap(), multi)
        .unwrap()
        .collect()
        .unwrap();
    assert_eq!(got, want);

    let rdd = c
        .read_csv::<Reading>(path.to_str().unwrap(), CsvOptions::default())
        .unwrap();
    assert!(rdd.num_partitions() > 1);
    let e = rdd.collect().unwrap_err();
    let m = e.to_string();
    assert!(m.contains("multi_line: true"), "{m}");
    assert!(m.contains("multi.csv line "), "{m}");
}
