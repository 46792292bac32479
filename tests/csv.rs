//! CSV through ember: round trips with headers, delimiters, quoting (commas, quotes and
//! newlines inside fields), `None` as an empty field, files without a header read by
//! position, empty partitions; files made by pyarrow and DuckDB read as pyarrow reads
//! them; typed errors naming file, line and column.

use std::path::PathBuf;

use ember::{Context, CsvOptions, EmberError};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Person {
    id: i64,
    name: String,
    score: f64,
    maybe: Option<i64>,
}

fn people(n: i64) -> Vec<Person> {
    (0..n)
        .map(|i| Person {
            id: i,
            name: match i % 4 {
                0 => format!("plain {i}"),
                1 => format!("with, comma {i}"),
                2 => format!("with \"quotes\" {i}"),
                _ => format!("two\nlines {i}"),
            },
            score: i as f64 * 0.5,
            maybe: (i % 3 != 0).then_some(i * 100),
        })
        .collect()
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/csv")
        .join(name)
}

#[test]
fn records_round_trip_with_quoting_nulls_and_empty_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context::local(2).unwrap();
    let want = people(500);
    // The records hold newlines inside quoted fields: reading them back needs
    // `multi_line`, as Spark's `multiLine`.
    for options in [
        CsvOptions {
            multi_line: true,
            ..Default::default()
        },
        CsvOptions {
            delimiter: b';',
            multi_line: true,
            ..Default::default()
        },
        CsvOptions {
            delimiter: b'\t',
            has_header: false,
            multi_line: true,
            ..Default::default()
        },
    ] {
        let out = dir
            .path()
            .join(format!("out-{}-{}", options.delimiter, options.has_header));
        ctx.parallelize(want.clone(), 3)
            .union(&ctx.parallelize(Vec::<Person>::new(), 1))
            .save_as_csv(&out, options)
            .unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "_SUCCESS",
                "part-00000.csv",
                "part-00001.csv",
                "part-00002.csv",
                "part-00003.csv"
            ]
        );
        let first = std::fs::read_to_string(out.join("part-00000.csv")).unwrap();
        let empty = std::fs::read_to_string(out.join("part-00003.csv")).unwrap();
        let sep = options.delimiter as char;
        if options.has_header {
            let header = format!("id{sep}name{sep}score{sep}maybe\n");
            assert!(first.starts_with(&header), "{first:.200}");
            assert_eq!(empty, header, "an empty partition still has its header");
        } else {
            assert!(
                first.starts_with(&format!("0{sep}plain 0{sep}0.0{sep}\n")),
                "{first:.200}"
            );
            assert_eq!(empty, "");
        }
        assert!(
            first.contains("\"with \"\"quotes\"\" 2\""),
            "quotes doubled inside quotes"
        );
        let back = ctx
            .read_csv::<Person>(out.to_str().unwrap(), options)
            .unwrap()
            .collect()
            .unwrap();
        assert_eq!(back, want);
    }
}

#[test]
fn files_written_by_pyarrow_and_duckdb_read_as_pyarrow_reads_them() {
    let ctx = Context::local(2).unwrap();
    for (file, options) in [
        ("pyarrow_people.csv", CsvOptions::default()),
        (
            "duckdb_people.csv",
            CsvOptions {
                delimiter: b';',
                ..Default::default()
            },
        ),
    ] {
        let got = ctx
            .read_csv::<Person>(fixture(file).to_str().unwrap(), options)
            .unwrap()
            .collect()
            .unwrap();
        let json = fixture(file).with_extension("json");
        let want: Vec<Person> =
            serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
        assert!(want.len() >= 15);
        assert_eq!(got, want, "{file}");
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Typed {
    id: i64,
    score: f64,
}

#[test]
fn a_bad_field_fails_naming_file_line_column_and_a_prefix_of_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context::local(1).unwrap();
    let file = dir.path().join("scores.csv");
    let long = "x".repeat(10_000);
    std::fs::write(
        &file,
        format!("id,score\n1,2.5\n2,\"multi\nline\"\n3,{long}\n"),
    )
    .unwrap();
    let e = ctx
        .read_csv::<Typed>(file.to_str().unwrap(), CsvOptions::default())
        .unwrap()
        .collect()
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("scores.csv line 3") && text.contains("\"score\" (column 2)"),
        "the record starting on line 3: {text}"
    );
    assert!(text.contains("multi"), "{text}");
    // A field of 10,000 characters is quoted by a bounded prefix.
    std::fs::write(&file, format!("id,score\n1,2.5\n3,{long}\n")).unwrap();
    let text = ctx
        .read_csv::<Typed>(file.to_str().unwrap(), CsvOptions::default())
        .unwrap()
        .count()
        .unwrap_err()
        .to_string();
    assert!(text.contains("line 3") && text.contains("xxxx"), "{text}");
    assert!(text.len() < 1000, "{} chars", text.len());
    // A record with a field too many.
    std::fs::write(&file, "id,score\n1,2.5\n2,3.5,extra\n").unwrap();
    let text = ctx
        .read_csv::<Typed>(file.to_str().unwrap(), CsvOptions::default())
        .unwrap()
        .count()
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("line 3") && text.contains("3 fields"),
        "{text}"
    );
    let e = ctx
        .read_csv::<Typed>(
            dir.path().join("nope.csv").to_str().unwrap(),
            CsvOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(e, EmberError::InputNotFound { .. }), "{e}");
}
