//! SQL on ember's stages keeps ember's fault promise (issue 39): a query (a join, a
//! grouped aggregate with a distinct count, an ordered result) run by ember-sql's `sql`
//! example on a cluster of 2 one-core executors, one executor stopped once it holds
//! map output the query needs and then killed (kill -9): the answer is exactly the
//! fault-free one, computed here independently from the generated rows.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::faultjob::wait_for;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Sale {
    id: u64,
    store: u32,
    customer: u64,
    cents: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Store {
    store: u32,
    region: String,
}

const SALES: u64 = 600_000;
const STORES: u32 = 50;

fn sales() -> Vec<Sale> {
    let mut rng = common::SplitMix::new(0x5a1e5);
    (0..SALES)
        .map(|id| Sale {
            id,
            store: rng.below(STORES as u64) as u32,
            customer: rng.below(40_000),
            cents: rng.below(100_000) as i64 - 2_000,
        })
        .collect()
}

fn region_of(store: u32) -> String {
    ["north", "south", "east", "west", "centre"][(store % 5) as usize].to_string()
}

/// The query's answer computed here: per region, sales, total cents, distinct
/// customers; one `region,n,total,customers` line each, in region order.
fn reference(sales: &[Sale]) -> Vec<String> {
    let mut by: BTreeMap<String, (u64, i64, BTreeSet<u64>)> = BTreeMap::new();
    for s in sales {
        let e = by.entry(region_of(s.store)).or_default();
        e.0 += 1;
        e.1 += s.cents;
        e.2.insert(s.customer);
    }
    by.into_iter()
        .map(|(r, (n, total, c))| format!("{r},{n},{total},{}", c.len()))
        .collect()
}

const QUERY: &str = "SELECT st.region, count(*) AS n, sum(s.cents) AS total, \
     count(DISTINCT s.customer) AS customers \
     FROM sales s JOIN stores st ON s.store = st.store \
     GROUP BY st.region ORDER BY st.region";

/// The `sql` example of ember-sql, built for this test.
fn sql_bin() -> PathBuf {
    common::process::workspace_binaries("sql");
    std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples/sql")
}

/// A child process killed if the test ends first.
struct Query(Child);

impl Drop for Query {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(bin: &Path, master: &str, data: &Path, out: &Path, work: &Path) -> Query {
    let child = Command::new(bin)
        .args(["--master", master])
        .arg("--table")
        .arg(format!("sales={}", data.join("sales").display()))
        .arg("--table")
        .arg(format!("stores={}", data.join("stores").display()))
        .arg(QUERY)
        .arg(out)
        .env("EMBER_LOCAL_DIR", work)
        .env("EMBER_PROGRESS", "0")
        .env("EMBER_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the sql example");
    Query(child)
}

/// Waits (at most 5 minutes) for the query; its result lines without the headers.
fn finish(mut q: Query, out: &Path) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(s) = q.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the query did not end in 5 minutes"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    if let Some(mut e) = q.0.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    assert!(status.success(), "the query failed ({status}): {err}");
    assert!(out.join("_SUCCESS").exists());
    let mut parts: Vec<PathBuf> = fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("part-")
        })
        .collect();
    parts.sort();
    let mut lines = Vec::new();
    for p in parts {
        let text = fs::read_to_string(&p).unwrap();
        let mut it = text.lines();
        assert_eq!(
            it.next(),
            Some("region,n,total,customers"),
            "{}",
            p.display()
        );
        lines.extend(it.map(str::to_string));
    }
    lines
}

/// Map output files of executor `i` (any shuffle of any session).
fn outputs(cluster: &Cluster, i: usize) -> usize {
    let shuffle = cluster.executor_dir(i).join("shuffle");
    fs::read_dir(shuffle)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|s| fs::read_dir(s.path()).into_iter().flatten().flatten())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("shuffle_") && n.ends_with(".data")
        })
        .count()
}

#[test]
fn a_query_survives_a_killed_executor_with_the_exact_answer() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let data = s.join("data");
    let rows = sales();
    let want = reference(&rows);
    {
        let ctx = common::ctx(2);
        ctx.parallelize(rows, 6)
            .save_as_parquet(data.join("sales"))
            .unwrap();
        let stores: Vec<Store> = (0..STORES)
            .map(|store| Store {
                store,
                region: region_of(store),
            })
            .collect();
        ctx.parallelize(stores, 1)
            .save_as_parquet(data.join("stores"))
            .unwrap();
    }
    let bin = sql_bin();
    let work = s.join("work");
    fs::create_dir_all(&work).unwrap();
    // Fault-free, in local mode.
    let local = finish(
        start(&bin, "local[2]", &data, &s.join("local"), &work),
        &s.join("local"),
    );
    assert_eq!(local, want, "local mode");

    let mut cluster = Cluster::start(2, 1, None);
    let out = s.join("out");
    let mut q = start(&bin, &cluster.url, &data, &out, &work);
    // Executor 1 holds map output the later stages need: stop it there (so the query
    // cannot end meanwhile), make sure the query still runs, then kill it.
    wait_for("map output on executor 1", Duration::from_secs(120), || {
        assert!(q.0.try_wait().unwrap().is_none(), "the query ended early");
        outputs(&cluster, 1) > 0
    });
    cluster.signal_executor(1, "STOP");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        q.0.try_wait().unwrap().is_none(),
        "the query ended before the kill: nothing was recovered"
    );
    cluster.signal_executor(1, "KILL");
    let got = finish(q, &out);
    assert_eq!(
        got,
        want,
        "after kill -9 of an executor\n{}",
        cluster.logs()
    );
    let log = cluster.driver_log();
    assert!(log.contains("lost"), "the driver saw the loss:\n{log}");
}
