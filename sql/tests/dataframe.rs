//! The DataFrame API and SQL on ember's stages in local mode, each answer compared with
//! the same computation done here in plain Rust over the generated rows; and the cut:
//! a grouped, ordered query runs as a scan stage, an aggregate stage and a merge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{Float64Type, Int64Type};
use datafusion::arrow::record_batch::RecordBatch;
use ember_sql::{avg, col, count, lit, max, min, sum, JoinType, SqlContext};

/// (id, city, temp) rows and (city, country) rows, written as CSV under `dir`.
/// Readings (id, city, temp) and countries (city, country).
type Tables = (Vec<(i64, String, f64)>, Vec<(String, String)>);

fn write_tables(dir: &Path) -> Tables {
    let cities = ["Oslo", "Lima", "Rome", "Pune", "Kyiv", "Nuuk"];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rows = Vec::new();
    for id in 0..5_000i64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let city = cities[(x % 6) as usize].to_string();
        let temp = ((x >> 8) % 4_000) as f64 / 100.0 - 10.0;
        rows.push((id, city, temp));
    }
    let mut text = String::from("id,city,temp\n");
    for (id, c, t) in &rows {
        text += &format!("{id},{c},{t}\n");
    }
    std::fs::write(dir.join("w.csv"), text).unwrap();
    let countries: Vec<(String, String)> = [
        ("Oslo", "NO"),
        ("Lima", "PE"),
        ("Rome", "IT"),
        ("Pune", "IN"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    let mut text = String::from("city,country\n");
    for (c, k) in &countries {
        text += &format!("{c},{k}\n");
    }
    std::fs::write(dir.join("c.csv"), text).unwrap();
    (rows, countries)
}

fn strings(b: &[RecordBatch], i: usize) -> Vec<String> {
    b.iter()
        .flat_map(|b| {
            let a = datafusion::arrow::compute::cast(
                b.column(i),
                &datafusion::arrow::datatypes::DataType::Utf8,
            )
            .unwrap();
            let a = a.as_string::<i32>().clone();
            (0..a.len())
                .map(move |r| a.value(r).to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn floats(b: &[RecordBatch], i: usize) -> Vec<f64> {
    b.iter()
        .flat_map(|b| b.column(i).as_primitive::<Float64Type>().values().to_vec())
        .collect()
}

fn ints(b: &[RecordBatch], i: usize) -> Vec<i64> {
    b.iter()
        .flat_map(|b| b.column(i).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

fn setup() -> (tempfile::TempDir, ember::Context, Tables) {
    let dir = tempfile::tempdir().unwrap();
    let (rows, countries) = write_tables(dir.path());
    let mut conf = ember::Conf::local(2, ember::DEFAULT_EXECUTOR_MEMORY);
    conf.progress = false;
    let ctx = ember::Context::with_conf(conf).unwrap();
    (dir, ctx, (rows, countries))
}

#[test]
fn group_by_agg_order_by_gives_the_plain_computation() {
    let (dir, ctx, (rows, _)) = setup();
    let sql = SqlContext::new(&ctx).unwrap();
    sql.register_csv("w", dir.path().join("w.csv").to_str().unwrap())
        .unwrap();
    let df = sql
        .table("w")
        .unwrap()
        .filter(col("temp").gt(lit(0.0)))
        .unwrap()
        .group_by(vec![col("city")])
        .agg(vec![
            min(col("temp")).alias("lo"),
            max(col("temp")).alias("hi"),
            count(col("id")).alias("n"),
            sum(col("temp")).alias("total"),
        ])
        .unwrap()
        .order_by(vec![col("city").sort(true, false)])
        .unwrap();
    let got = df.collect().unwrap();
    let mut want: BTreeMap<String, (f64, f64, i64, f64)> = BTreeMap::new();
    for (_, c, t) in rows.iter().filter(|r| r.2 > 0.0) {
        let e = want
            .entry(c.clone())
            .or_insert((f64::MAX, f64::MIN, 0, 0.0));
        e.0 = e.0.min(*t);
        e.1 = e.1.max(*t);
        e.2 += 1;
        e.3 += t;
    }
    assert_eq!(
        strings(&got, 0),
        want.keys().cloned().collect::<Vec<_>>(),
        "ordered by city"
    );
    assert_eq!(
        floats(&got, 1),
        want.values().map(|v| v.0).collect::<Vec<_>>()
    );
    assert_eq!(
        floats(&got, 2),
        want.values().map(|v| v.1).collect::<Vec<_>>()
    );
    assert_eq!(
        ints(&got, 3),
        want.values().map(|v| v.2).collect::<Vec<_>>()
    );
    for (g, w) in floats(&got, 4).iter().zip(want.values().map(|v| v.3)) {
        assert!((g - w).abs() <= 1e-9 * w.abs().max(1.0), "{g} vs {w}");
    }
    // A scan stage, the aggregate's stage after the hash repartition, the final merge.
    let explain = df.explain().unwrap();
    assert!(
        explain.contains("stage 2:") && !explain.contains("stage 3:"),
        "{explain}"
    );
    assert!(
        explain.contains("StageInputExec: input=0, mode=Hash"),
        "{explain}"
    );
}

#[test]
fn joins_distinct_union_limit_and_windows() {
    let (dir, ctx, (rows, countries)) = setup();
    let sql = SqlContext::new(&ctx).unwrap();
    sql.register_csv("w", dir.path().join("w.csv").to_str().unwrap())
        .unwrap();
    sql.register_csv("c", dir.path().join("c.csv").to_str().unwrap())
        .unwrap();
    let known: BTreeMap<&str, &str> = countries
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    // Each join type, counted.
    for (how, want) in [
        (
            JoinType::Inner,
            rows.iter()
                .filter(|r| known.contains_key(r.1.as_str()))
                .count(),
        ),
        (JoinType::Left, rows.len()),
        (
            JoinType::LeftSemi,
            rows.iter()
                .filter(|r| known.contains_key(r.1.as_str()))
                .count(),
        ),
        (
            JoinType::LeftAnti,
            rows.iter()
                .filter(|r| !known.contains_key(r.1.as_str()))
                .count(),
        ),
    ] {
        let w = sql.table("w").unwrap();
        let c = sql.table("c").unwrap();
        let got: usize = w
            .join(c, how, &["city"], &["city"])
            .unwrap()
            .collect()
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum();
        assert_eq!(got, want, "{how:?}");
    }
    // Distinct cities, union of the two tables' city columns.
    let cities = sql
        .table("w")
        .unwrap()
        .select_columns(&["city"])
        .unwrap()
        .union(sql.table("c").unwrap().select_columns(&["city"]).unwrap())
        .unwrap()
        .distinct()
        .unwrap()
        .collect()
        .unwrap();
    let got: BTreeSet<String> = strings(&cities, 0).into_iter().collect();
    let want: BTreeSet<String> = rows.iter().map(|r| r.1.clone()).collect();
    assert_eq!(got, want);
    // The three warmest readings, and a window: each city's rank of its readings.
    let top = sql
        .sql("SELECT id, temp FROM w ORDER BY temp DESC, id LIMIT 3")
        .unwrap()
        .collect()
        .unwrap();
    let mut sorted = rows.clone();
    sorted.sort_by(|a, b| b.2.partial_cmp(&a.2).unwrap().then(a.0.cmp(&b.0)));
    assert_eq!(
        ints(&top, 0),
        sorted.iter().take(3).map(|r| r.0).collect::<Vec<_>>()
    );
    let ranked = sql
        .sql("SELECT city, id, row_number() OVER (PARTITION BY city ORDER BY temp DESC, id) AS r FROM w")
        .unwrap()
        .collect()
        .unwrap();
    let firsts: BTreeMap<String, i64> = strings(&ranked, 0)
        .into_iter()
        .zip(ints(&ranked, 1))
        .zip(ranked.iter().flat_map(|b| {
            let a = datafusion::arrow::compute::cast(
                b.column(2),
                &datafusion::arrow::datatypes::DataType::Int64,
            )
            .unwrap();
            a.as_primitive::<Int64Type>().values().to_vec()
        }))
        .filter(|(_, r)| *r == 1)
        .map(|((c, id), _)| (c, id))
        .collect();
    let mut want: BTreeMap<String, (f64, i64)> = BTreeMap::new();
    for (id, c, t) in &rows {
        let e = want.entry(c.clone()).or_insert((f64::MIN, i64::MAX));
        if *t > e.0 || (*t == e.0 && *id < e.1) {
            *e = (*t, *id);
        }
    }
    assert_eq!(
        firsts,
        want.into_iter().map(|(c, (_, id))| (c, id)).collect()
    );
    // An average over all rows, through SQL and a scalar subquery.
    let above = sql
        .sql("SELECT count(*) AS n FROM w WHERE temp > (SELECT avg(temp) FROM w)")
        .unwrap()
        .collect()
        .unwrap();
    let mean = rows.iter().map(|r| r.2).sum::<f64>() / rows.len() as f64;
    assert_eq!(
        ints(&above, 0),
        vec![rows.iter().filter(|r| r.2 > mean).count() as i64]
    );
    let _ = avg(col("temp"));
}

#[test]
fn errors_name_what_was_wrong() {
    let (dir, ctx, _) = setup();
    let sql = SqlContext::new(&ctx).unwrap();
    sql.register_csv("w", dir.path().join("w.csv").to_str().unwrap())
        .unwrap();
    let e = sql
        .sql("SELECT nope FROM w")
        .err()
        .expect("an unknown column")
        .to_string();
    assert!(e.contains("nope"), "{e}");
    let e = sql
        .sql("SELECT * FROM missing")
        .err()
        .expect("an unknown table")
        .to_string();
    assert!(e.contains("missing"), "{e}");
    let e = sql.sql("SELEC 1").err().expect("a parse error").to_string();
    assert!(e.contains("SELEC"), "{e}");
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Reading {
    id: i64,
    city: String,
    temp: f64,
}

/// An `Rdd<T>` of serde records as a table, joined and unioned with a file table; a
/// union of two aggregates (each behind its own hash exchange) puts the second one's
/// partitions after the first's, and each must reach its own tasks.
#[test]
fn an_rdd_is_a_table_and_unions_of_exchanges_keep_their_partitions() {
    let (dir, ctx, (rows, _)) = setup();
    let sql = SqlContext::new(&ctx).unwrap();
    sql.register_csv("w", dir.path().join("w.csv").to_str().unwrap())
        .unwrap();
    let records: Vec<Reading> = rows
        .iter()
        .map(|(id, city, temp)| Reading {
            id: *id,
            city: city.clone(),
            temp: *temp,
        })
        .collect();
    sql.register_rdd("r", &ctx.parallelize(records, 5)).unwrap();
    let got = sql
        .sql("SELECT city, count(*) AS n, max(temp) AS hi FROM r WHERE id % 2 = 0 GROUP BY city ORDER BY city")
        .unwrap()
        .collect()
        .unwrap();
    let mut want: BTreeMap<String, (i64, f64)> = BTreeMap::new();
    for (_, c, t) in rows.iter().filter(|r| r.0 % 2 == 0) {
        let e = want.entry(c.clone()).or_insert((0, f64::MIN));
        e.0 += 1;
        e.1 = e.1.max(*t);
    }
    assert_eq!(strings(&got, 0), want.keys().cloned().collect::<Vec<_>>());
    assert_eq!(
        ints(&got, 1),
        want.values().map(|v| v.0).collect::<Vec<_>>()
    );
    assert_eq!(
        floats(&got, 2),
        want.values().map(|v| v.1).collect::<Vec<_>>()
    );
    let both = sql
        .sql(
            "SELECT city, n FROM (SELECT city, count(*) AS n FROM r GROUP BY city \
             UNION ALL SELECT city, count(*) AS n FROM w GROUP BY city) ORDER BY city, n",
        )
        .unwrap()
        .collect()
        .unwrap();
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for (_, c, _) in &rows {
        *counts.entry(c.clone()).or_default() += 1;
    }
    let want: Vec<(String, i64)> = counts
        .iter()
        .flat_map(|(c, n)| [(c.clone(), *n), (c.clone(), *n)])
        .collect();
    let got: Vec<(String, i64)> = strings(&both, 0).into_iter().zip(ints(&both, 1)).collect();
    assert_eq!(got, want);
    // The RDD joined with a file table: readings of cities with a country.
    sql.register_csv("c", dir.path().join("c.csv").to_str().unwrap())
        .unwrap();
    let joined = sql
        .sql("SELECT count(*) AS n FROM r JOIN c ON r.city = c.city")
        .unwrap()
        .collect()
        .unwrap();
    let known = ["Oslo", "Lima", "Rome", "Pune"];
    let want = rows
        .iter()
        .filter(|r| known.contains(&r.1.as_str()))
        .count() as i64;
    assert_eq!(ints(&joined, 0), vec![want]);
    // Typed records out: the rows of a query as serde records, in its order; a type
    // the rows do not fit fails naming it.
    let typed: Vec<Reading> = sql
        .sql("SELECT id, city, temp FROM r WHERE id < 20 ORDER BY id")
        .unwrap()
        .collect_as()
        .unwrap();
    let mut want: Vec<&(i64, String, f64)> = rows.iter().filter(|r| r.0 < 20).collect();
    want.sort_by_key(|r| r.0);
    assert_eq!(
        typed
            .iter()
            .map(|r| (r.id, r.city.clone(), r.temp))
            .collect::<Vec<_>>(),
        want.into_iter().cloned().collect::<Vec<_>>()
    );
    let e = sql
        .sql("SELECT city FROM r")
        .unwrap()
        .collect_as::<Reading>()
        .expect_err("rows without id and temp do not decode")
        .to_string();
    assert!(e.contains("Reading"), "{e}");
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Band {
    name: String,
    lo: f64,
    hi: f64,
}

/// A join that collects a side every task executes whole (cross and nested-loop joins,
/// a one-partition RDD as that side) against a table of several partitions: every task
/// must see all of the collected side.
#[test]
fn a_collected_side_from_another_stage_reaches_every_task() {
    let (dir, ctx, (rows, _)) = setup();
    let parts = dir.path().join("parts");
    std::fs::create_dir_all(&parts).unwrap();
    for (i, chunk) in rows.chunks(1700).enumerate() {
        let mut text = String::from("id,city,temp\n");
        for (id, c, t) in chunk {
            text += &format!("{id},{c},{t}\n");
        }
        std::fs::write(parts.join(format!("p{i}.csv")), text).unwrap();
    }
    let sql = SqlContext::new(&ctx).unwrap();
    sql.register_csv("w", parts.to_str().unwrap()).unwrap();
    let bands = vec![
        Band {
            name: "cold".into(),
            lo: -100.0,
            hi: 0.0,
        },
        Band {
            name: "mild".into(),
            lo: 0.0,
            hi: 15.0,
        },
        Band {
            name: "warm".into(),
            lo: 15.0,
            hi: 100.0,
        },
    ];
    sql.register_rdd("b", &ctx.parallelize(bands.clone(), 1))
        .unwrap();
    let n = |q: &str| -> i64 { ints(&sql.sql(q).unwrap().collect().unwrap(), 0)[0] };
    assert_eq!(
        n("SELECT count(*) FROM b CROSS JOIN w"),
        3 * rows.len() as i64
    );
    let in_band = |t: f64| bands.iter().filter(|b| t >= b.lo && t < b.hi).count() as i64;
    assert_eq!(
        n("SELECT count(*) FROM b JOIN w ON w.temp >= b.lo AND w.temp < b.hi"),
        rows.iter().map(|r| in_band(r.2)).sum::<i64>()
    );
}
