//! Object storage end to end against a real S3-compatible server (moto, started here):
//! text, Parquet and CSV written to and read from `s3://` paths in local mode, byte-range
//! splits of one object, a multipart upload, the commit protocol (a failed job leaves
//! nothing under its prefix, an existing prefix is refused), files made by pyarrow read
//! from the bucket, and `examples/parquet_etl` on a cluster of real processes reading
//! and writing the bucket.
//!
//! Needs `moto_server` (`pip install 'moto[server]'`); `.ci/run` installs it and runs
//! these with `cargo test --test s3 -- --ignored`.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::cluster::Cluster;
use common::moto::Moto;
use ember::{Context, CsvOptions, EmberError};
use futures_util::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Kv {
    key: i64,
    value: f64,
}

fn store(moto: &Moto, bucket: &str) -> Arc<dyn ObjectStore> {
    let mut b = object_store::aws::AmazonS3Builder::new().with_bucket_name(bucket);
    for (k, v) in moto.env() {
        b = b.with_config(k.to_ascii_lowercase().parse().unwrap(), v);
    }
    Arc::new(b.build().unwrap())
}

/// Keys under `prefix`, sorted.
fn keys(store: &Arc<dyn ObjectStore>, prefix: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let p = object_store::path::Path::from(prefix);
    let mut k: Vec<String> = rt
        .block_on(store.list(Some(&p)).try_collect::<Vec<_>>())
        .unwrap()
        .into_iter()
        .map(|m| m.location.to_string())
        .collect();
    k.sort();
    k
}

fn put(store: &Arc<dyn ObjectStore>, key: &str, bytes: Vec<u8>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(store.put(&object_store::path::Path::from(key), bytes.into()))
        .unwrap();
}

#[test]
#[ignore = "needs moto_server: .ci/run installs it and runs this with --ignored"]
fn sources_and_sinks_on_s3_in_local_mode_and_on_a_cluster() {
    let moto = Moto::start();
    // Before any store is built in this process (stores are made once, from the env).
    for (k, v) in moto.env() {
        std::env::set_var(k, v);
    }
    moto.create_bucket("data");
    let s3 = store(&moto, "data");
    let ctx = Context::local(2).unwrap();

    // Text: written, listed, read back; an existing prefix is refused.
    let lines: Vec<String> = (0..5000).map(|i| format!("line {i} of the text")).collect();
    ctx.parallelize(lines.clone(), 3)
        .save_as_text_file("s3://data/text")
        .unwrap();
    assert_eq!(
        keys(&s3, "text"),
        [
            "text/_SUCCESS",
            "text/part-00000",
            "text/part-00001",
            "text/part-00002"
        ]
    );
    let back = ctx
        .text_file("s3://data/text", 2)
        .unwrap()
        .collect()
        .unwrap();
    assert_eq!(back, lines);
    let again = ctx
        .parallelize(lines.clone(), 1)
        .save_as_text_file("s3://data/text")
        .unwrap_err();
    assert!(matches!(again, EmberError::OutputExists { .. }), "{again}");

    // One object read as byte-range splits: every line once, in order.
    let big: String = (0..200_000).map(|i| format!("{i},{}\n", i * 3)).collect();
    put(&s3, "one/big.csv", big.clone().into_bytes());
    let rdd = ctx.text_file("s3://data/one/big.csv", 5).unwrap();
    assert_eq!(rdd.num_partitions(), 5);
    let got = rdd.collect().unwrap();
    assert_eq!(got, big.lines().map(str::to_string).collect::<Vec<_>>());

    // A part over 16 MiB goes up as a multipart upload.
    let wide: Vec<String> = (0..300_000).map(|i| format!("{i:0>60}")).collect();
    ctx.parallelize(wide.clone(), 1)
        .save_as_text_file("s3://data/wide")
        .unwrap();
    assert_eq!(
        ctx.text_file("s3://data/wide", 1).unwrap().count().unwrap(),
        wide.len() as u64
    );

    // A job that fails leaves nothing visible under its prefix: no _SUCCESS, no part
    // files. (A task still running when the job failed may finish its upload after the
    // cleanup: its attempt stays under the hidden `_temporary/`, which no reader lists.)
    let failed = ctx
        .parallelize((0..100).collect::<Vec<i32>>(), 4)
        .map(|i| {
            assert!(i != 77, "injected failure at record {i}");
            i.to_string()
        })
        .save_as_text_file("s3://data/failed");
    assert!(failed.unwrap_err().to_string().contains("injected failure"));
    let left = keys(&s3, "failed");
    assert!(
        left.iter().all(|k| k.starts_with("failed/_temporary/")),
        "{left:?}"
    );
    let e = ctx.text_file("s3://data/failed", 1).unwrap_err();
    assert!(matches!(e, EmberError::InputNotFound { .. }), "{e}");

    // Keys are used as they are: characters object_store would percent-encode read and
    // write back; a directory lists only its own objects, a glob's `*` stops at `/`,
    // and directory markers are skipped.
    ctx.parallelize(lines.clone(), 2)
        .save_as_text_file("s3://data/out~v2 #1")
        .unwrap();
    assert_eq!(
        ctx.text_file("s3://data/out~v2 #1", 1)
            .unwrap()
            .collect()
            .unwrap(),
        lines
    );
    put(&s3, "dir/a.txt", b"top\n".to_vec());
    put(&s3, "dir/sub/b.txt", b"deeper\n".to_vec());
    put(&s3, "dir2/", Vec::new());
    put(&s3, "dir2/x.txt", b"x\n".to_vec());
    for (path, want) in [
        ("s3://data/dir", vec!["top"]),
        ("s3://data/dir/*.txt", vec!["top"]),
        ("s3://data/dir/*/*.txt", vec!["deeper"]),
        ("s3://data/dir2", vec!["x"]),
    ] {
        assert_eq!(
            ctx.text_file(path, 1).unwrap().collect().unwrap(),
            want,
            "{path}"
        );
    }

    // Parquet: round trip, and a file pyarrow made, read from the bucket.
    let rows: Vec<Kv> = (0..10_000)
        .map(|i| Kv {
            key: i % 97,
            value: i as f64 * 0.5,
        })
        .collect();
    ctx.parallelize(rows.clone(), 2)
        .save_as_parquet("s3://data/pq")
        .unwrap();
    assert_eq!(
        keys(&s3, "pq"),
        [
            "pq/_SUCCESS",
            "pq/part-00000.parquet",
            "pq/part-00001.parquet"
        ]
    );
    assert_eq!(
        ctx.read_parquet::<Kv>("s3://data/pq")
            .unwrap()
            .collect()
            .unwrap(),
        rows
    );
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parquet");
    put(
        &s3,
        "fixtures/duckdb_kv.parquet",
        std::fs::read(fixture.join("duckdb_kv.parquet")).unwrap(),
    );
    let want: Vec<Kv> =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("duckdb_kv.json")).unwrap())
            .unwrap();
    let got = ctx
        .read_parquet::<Kv>("s3://data/fixtures/*.parquet")
        .unwrap()
        .collect()
        .unwrap();
    assert_eq!(got, want);
    let e = ctx
        .read_parquet::<Kv>("s3://data/nothing/here")
        .unwrap_err();
    assert!(matches!(e, EmberError::InputNotFound { .. }), "{e}");

    // CSV both ways.
    ctx.parallelize(rows.clone(), 2)
        .save_as_csv("s3://data/csv", CsvOptions::default())
        .unwrap();
    let got = ctx
        .read_csv::<Kv>("s3://data/csv", CsvOptions::default())
        .unwrap()
        .collect()
        .unwrap();
    assert_eq!(got, rows);

    // parquet_etl on a cluster: executors and client reach the bucket by the same env.
    let env: Vec<(&str, String)> = moto.env();
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cluster = Cluster::start_with(2, 1, None, &[], &[], &env_refs);
    let scratch = tempfile::tempdir().unwrap();
    let run = cluster.run_with_env(
        "parquet_etl",
        &["--partitions", "3", "s3://data/pq", "s3://data/sums"],
        scratch.path(),
        &env_refs,
    );
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct KeySum {
        key: i64,
        sum: f64,
    }
    let got: BTreeMap<i64, f64> = ctx
        .read_parquet::<KeySum>("s3://data/sums")
        .unwrap()
        .collect()
        .unwrap()
        .into_iter()
        .map(|r| (r.key, r.sum))
        .collect();
    let mut want = BTreeMap::new();
    for r in &rows {
        *want.entry(r.key).or_insert(0.0) += r.value;
    }
    assert_eq!(got, want, "sums of multiples of 0.5 are exact in any order");
    assert_eq!(keys(&s3, "sums").len(), 4, "3 parts and _SUCCESS");

    // One moto per test process: ember builds its object stores once, from the env.
    a_large_csv_object_is_split_and_multi_line_keeps_it_whole(&moto);
}

/// Part of the test above (same moto server and env).
fn a_large_csv_object_is_split_and_multi_line_keeps_it_whole(moto: &Moto) {
    moto.create_bucket("csvs");
    let s3 = store(moto, "csvs");
    let ctx = Context::local(2).unwrap();
    // 100k rows (about 2 MB), CRLF line ends, columns in another order than `Kv`'s.
    let mut text = String::from("value,key\r\n");
    for i in 0..100_000i64 {
        text.push_str(&format!("{}.25,{i}\r\n", i % 1000));
    }
    // An independent parse: lines split on commas.
    let want: Vec<Kv> = text
        .lines()
        .skip(1)
        .map(|l| {
            let (v, k) = l.split_once(',').unwrap();
            Kv {
                key: k.parse().unwrap(),
                value: v.parse().unwrap(),
            }
        })
        .collect();
    put(&s3, "big/rows.csv", text.into_bytes());
    let rdd = ctx
        .read_csv::<Kv>("s3://csvs/big/rows.csv", CsvOptions::default())
        .unwrap();
    assert!(rdd.num_partitions() > 1, "{}", rdd.num_partitions());
    assert_eq!(rdd.collect().unwrap(), want);

    // Quoted newlines: read whole with multi_line, an error naming the option without.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Note {
        key: i64,
        note: String,
    }
    put(
        &s3,
        "notes/n.csv",
        b"key,note\n1,\"two\nlines\"\n2,one line\n".to_vec(),
    );
    let multi = CsvOptions {
        multi_line: true,
        ..Default::default()
    };
    let got = ctx
        .read_csv::<Note>("s3://csvs/notes/n.csv", multi)
        .unwrap()
        .collect()
        .unwrap();
    let note = |key: i64, note: &str| Note {
        key,
        note: note.to_string(),
    };
    assert_eq!(got, vec![note(1, "two\nlines"), note(2, "one line")]);
    let e = ctx
        .read_csv::<Note>("s3://csvs/notes/n.csv", CsvOptions::default())
        .unwrap()
        .collect()
        .unwrap_err();
    assert!(e.to_string().contains("n.csv line 2"), "{e}");
    assert!(e.to_string().contains("multi_line: true"), "{e}");
}
