//! Parquet through ember: round trips of every supported field type (nulls, nested
//! structs, lists, empty partitions), projection of a record type's columns, row-group
//! partitions, the commit protocol, and clear errors for files that are not Parquet,
//! truncated files and schemas that do not fit.

use ember::{Context, EmberError, ParquetCompression, ParquetWriteOptions};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Point {
    x: f64,
    y: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Everything {
    id: i64,
    small: i32,
    tiny: i8,
    unsigned: u64,
    ratio: f32,
    value: f64,
    flag: bool,
    name: String,
    maybe_int: Option<i64>,
    maybe_name: Option<String>,
    tags: Vec<String>,
    scores: Vec<f64>,
    at: Point,
    maybe_at: Option<Point>,
    path: Vec<Point>,
}

fn everything(i: i64) -> Everything {
    Everything {
        id: i,
        small: (i as i32).wrapping_mul(7) - 50,
        tiny: (i % 100) as i8,
        unsigned: (i as u64) << 33,
        ratio: i as f32 / 3.0,
        value: i as f64 * 1.5 - 10.0,
        flag: i % 3 == 0,
        name: format!("name-{i}-é"),
        maybe_int: (i % 4 != 0).then_some(i * 10),
        maybe_name: (i % 5 != 0).then(|| format!("m{i}")),
        tags: (0..(i % 4)).map(|t| format!("t{t}")).collect(),
        scores: (0..(i % 3)).map(|s| s as f64 + 0.25).collect(),
        at: Point {
            x: i as f64,
            y: -(i as f64),
        },
        maybe_at: (i % 2 == 0).then_some(Point {
            x: 1.0,
            y: i as f64,
        }),
        path: (0..(i % 3))
            .map(|k| Point {
                x: k as f64,
                y: i as f64,
            })
            .collect(),
    }
}

fn ctx() -> Context {
    Context::local(2).unwrap()
}

fn parts_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn every_field_type_round_trips_with_nulls_nesting_and_empty_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("all");
    let want: Vec<Everything> = (0..1000).map(everything).collect();
    let ctx = ctx();
    // 5 partitions, the last two empty.
    let rdd = ctx
        .parallelize(want.clone(), 3)
        .union(&ctx.parallelize(Vec::<Everything>::new(), 2));
    assert_eq!(rdd.num_partitions(), 5);
    rdd.save_as_parquet(&out).unwrap();
    assert_eq!(
        parts_in(&out),
        [
            "_SUCCESS",
            "part-00000.parquet",
            "part-00001.parquet",
            "part-00002.parquet",
            "part-00003.parquet",
            "part-00004.parquet"
        ]
    );
    let back = ctx
        .read_parquet::<Everything>(out.to_str().unwrap())
        .unwrap();
    assert_eq!(back.collect().unwrap(), want, "same records, same order");
    // An empty partition's file is a Parquet file of no rows with the columns.
    let empty = ctx
        .read_parquet::<Everything>(out.join("part-00004.parquet").to_str().unwrap())
        .unwrap();
    assert_eq!(empty.count().unwrap(), 0);
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct KeyOnly {
    id: i64,
    maybe_name: Option<String>,
    /// No such column: an `Option` reads as `None`.
    absent: Option<i32>,
}

#[test]
fn a_record_type_reads_only_its_columns_and_row_groups_make_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rg");
    let ctx = ctx();
    let want: Vec<Everything> = (0..10_000).map(everything).collect();
    ctx.parallelize(want.clone(), 1)
        .save_as_parquet_with(
            &out,
            ParquetWriteOptions {
                row_group_rows: 1000,
                compression: ParquetCompression::Snappy,
                ..Default::default()
            },
        )
        .unwrap();
    let file = out.join("part-00000.parquet");
    let meta = parquet::file::reader::FileReader::metadata(
        &parquet::file::reader::SerializedFileReader::new(std::fs::File::open(&file).unwrap())
            .unwrap(),
    )
    .clone();
    assert_eq!(meta.num_row_groups(), 10, "1000 rows per row group");
    assert_eq!(
        meta.row_group(0).column(0).compression(),
        parquet::basic::Compression::SNAPPY
    );
    let keys = ctx.read_parquet::<KeyOnly>(out.to_str().unwrap()).unwrap();
    let got = keys.collect().unwrap();
    let expect: Vec<KeyOnly> = want
        .iter()
        .map(|e| KeyOnly {
            id: e.id,
            maybe_name: e.maybe_name.clone(),
            absent: None,
        })
        .collect();
    assert_eq!(got, expect);
    assert!(
        keys.num_partitions() >= 2,
        "row groups spread over the default parallelism"
    );
}

#[test]
fn snappy_is_the_default_and_options_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("z");
    let ctx = ctx();
    ctx.parallelize((0..100).map(everything).collect::<Vec<_>>(), 1)
        .save_as_parquet(&out)
        .unwrap();
    let r = parquet::file::reader::SerializedFileReader::new(
        std::fs::File::open(out.join("part-00000.parquet")).unwrap(),
    )
    .unwrap();
    let c = parquet::file::reader::FileReader::metadata(&r)
        .row_group(0)
        .column(0)
        .compression();
    assert!(matches!(c, parquet::basic::Compression::SNAPPY), "{c:?}");
    let bad = ctx
        .parallelize(vec![everything(1)], 1)
        .save_as_parquet_with(
            dir.path().join("bad"),
            ParquetWriteOptions {
                row_group_rows: 0,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(bad.to_string().contains("row_group_rows"), "{bad}");
    assert!(!dir.path().join("bad").exists());
    // An existing output is refused unless overwrite is asked for.
    let again = ctx
        .parallelize(vec![everything(1)], 1)
        .save_as_parquet(&out)
        .unwrap_err();
    assert!(matches!(again, EmberError::OutputExists { .. }), "{again}");
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct WrongType {
    id: i64,
    name: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Missing {
    id: i64,
    nope: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct NotNull {
    maybe_int: i64,
}

#[test]
fn a_schema_that_does_not_fit_is_an_error_before_any_task_naming_file_column_and_types() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let ctx = ctx();
    ctx.parallelize((0..100).map(everything).collect::<Vec<_>>(), 2)
        .save_as_parquet(&out)
        .unwrap();
    let path = out.to_str().unwrap();
    let e = ctx.read_parquet::<WrongType>(path).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, EmberError::SchemaMismatch { .. }), "{text}");
    assert!(
        text.contains("part-00000.parquet")
            && text.contains("`name`")
            && text.contains("Utf8")
            && text.contains("Float64"),
        "{text}"
    );
    let e = ctx.read_parquet::<Missing>(path).unwrap_err().to_string();
    assert!(e.contains("`nope`") && e.contains("no such column"), "{e}");
    let e = ctx.read_parquet::<NotNull>(path).unwrap_err().to_string();
    assert!(
        e.contains("`maybe_int`") && e.contains("nulls") && e.contains("Option"),
        "{e}"
    );
}

#[test]
fn files_that_are_not_parquet_or_are_truncated_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let ctx = ctx();
    ctx.parallelize((0..2000).map(everything).collect::<Vec<_>>(), 1)
        .save_as_parquet(&out)
        .unwrap();
    let good = out.join("part-00000.parquet");
    let bytes = std::fs::read(&good).unwrap();
    let truncated = dir.path().join("truncated.parquet");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let e = ctx
        .read_parquet::<Everything>(truncated.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("truncated.parquet"), "{e}");
    let text = dir.path().join("notes.parquet");
    std::fs::write(&text, "just some text, not Parquet at all\n").unwrap();
    let e = ctx
        .read_parquet::<Everything>(text.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("notes.parquet"), "{e}");
    // Damaged data pages (footer intact): the task fails naming the file, no panic.
    let mut damaged = bytes.clone();
    for b in &mut damaged[8..bytes.len() / 3] {
        *b = b.wrapping_mul(31).wrapping_add(7);
    }
    let bad = dir.path().join("damaged.parquet");
    std::fs::write(&bad, &damaged).unwrap();
    let e = ctx
        .read_parquet::<Everything>(bad.to_str().unwrap())
        .and_then(|r| r.count())
        .unwrap_err()
        .to_string();
    assert!(e.contains("damaged.parquet"), "{e}");
    let e = ctx
        .read_parquet::<Everything>(dir.path().join("nothing-here").to_str().unwrap())
        .unwrap_err();
    assert!(matches!(e, EmberError::InputNotFound { .. }), "{e}");
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct NoneOfItsColumns {
    not_here: Option<i64>,
    nor_this: Option<String>,
}

#[test]
fn a_record_type_of_only_absent_option_columns_reads_one_record_per_row() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("n");
    let ctx = ctx();
    ctx.parallelize((0..777).map(everything).collect::<Vec<_>>(), 2)
        .save_as_parquet(&out)
        .unwrap();
    let got = ctx
        .read_parquet::<NoneOfItsColumns>(out.to_str().unwrap())
        .unwrap()
        .collect()
        .unwrap();
    assert_eq!(got.len(), 777, "no row is lost for want of a column");
    assert!(got
        .iter()
        .all(|r| r.not_here.is_none() && r.nor_this.is_none()));
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct KeyedRow {
    key: i64,
    bucket: i64,
    label: String,
}

#[test]
fn columns_of_unique_values_are_written_without_a_dictionary_and_read_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d");
    let rows: Vec<KeyedRow> = (0..20_000)
        .map(|i| KeyedRow {
            key: i * 7919 % 20_011,
            bucket: i % 10,
            label: format!("l{}", i % 4),
        })
        .collect();
    let ctx = ctx();
    ctx.parallelize(rows.clone(), 1)
        .save_as_parquet(&out)
        .unwrap();
    let r = parquet::file::reader::SerializedFileReader::new(
        std::fs::File::open(out.join("part-00000.parquet")).unwrap(),
    )
    .unwrap();
    let meta = parquet::file::reader::FileReader::metadata(&r);
    let dictionary = |c: usize| {
        meta.row_group(0).column(c).encodings().any(|e| {
            matches!(
                e,
                parquet::basic::Encoding::RLE_DICTIONARY
                    | parquet::basic::Encoding::PLAIN_DICTIONARY
            )
        })
    };
    assert!(!dictionary(0), "key: 20,000 distinct values, no dictionary");
    assert!(dictionary(1), "bucket: 10 distinct values, a dictionary");
    assert!(dictionary(2), "label: 4 distinct values, a dictionary");
    let back = ctx
        .read_parquet::<KeyedRow>(out.to_str().unwrap())
        .unwrap()
        .collect()
        .unwrap();
    assert_eq!(back, rows);
}
