//! The context cleaner in local mode, checked on the files in the work directory: a
//! context running 500 shuffle jobs keeps bounded disk use with exact results; a
//! shuffle a live RDD still reaches (directly or through a child) keeps its files and
//! map outputs, so a later action skips its map stage; a dropped persisted RDD loses its
//! disk blocks; a 100,000-deep lineage drops without overflowing the stack.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::sorted;
use ember::{Conf, Context, Master, StorageLevel};

/// Longest wait for the cleaner to catch up.
const CLEAN_WAIT: Duration = Duration::from_secs(10);

fn ctx_in(dir: &Path, threads: usize) -> Context {
    let mut conf = Conf::local(threads, 64 << 20);
    conf.master = Master::Local {
        threads,
        max_failures: 1,
    };
    conf.local_dir = Some(dir.to_path_buf());
    conf.progress = false;
    Context::with_conf(conf).unwrap()
}

/// The context's work directory (the only entry of `parent`).
fn work_dir(parent: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "one work dir per context: {dirs:?}");
    dirs[0].clone()
}

/// What a shuffle directory holds: the shuffle ids, the number of files and their bytes.
#[derive(Debug, Default, Clone)]
struct OnDisk {
    shuffles: BTreeSet<u32>,
    files: usize,
    bytes: u64,
}

fn scan(shuffle_dir: &Path) -> OnDisk {
    let mut out = OnDisk::default();
    for e in std::fs::read_dir(shuffle_dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let id = ember::shuffle::shuffle_id_of_file(&name);
        out.shuffles.extend(id);
        out.files += 1;
        out.bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
    }
    out
}

/// Polls `cond` until it holds, at most [`CLEAN_WAIT`]; returns whether it did.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + CLEAN_WAIT;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The records of job `i`: 200 numbers, offset by `i`.
fn data(i: u64) -> Vec<u64> {
    (0..200).map(|x| x * 7 + i).collect()
}

/// What `reduce_by_key` over `(x % 8, x)` must give.
fn expected(i: u64) -> Vec<(u64, u64)> {
    let mut sums = [0u64; 8];
    for x in data(i) {
        sums[(x % 8) as usize] += x;
    }
    (0..8).map(|k| (k, sums[k as usize])).collect()
}

/// Runs job `i` (one new shuffle) on `ctx` and checks its result; the RDD is dropped
/// at the end.
fn shuffle_job(ctx: &Context, i: u64) {
    let rdd = ctx
        .parallelize(data(i), 4)
        .map(|x: u64| (x % 8, x))
        .reduce_by_key(|a, b| a + b);
    assert_eq!(sorted(rdd.collect().unwrap()), expected(i), "job {i}");
}

/// Shuffles whose files may exist right after a job: the cleaner is asynchronous, so a
/// few of the latest may still be on their way out (a leak would reach 500).
const BOUND: usize = 16;

#[test]
fn a_context_running_500_shuffle_jobs_keeps_bounded_disk_use() {
    let parent = tempfile::tempdir().unwrap();
    let ctx = ctx_in(parent.path(), 2);
    let shuffle_dir = work_dir(parent.path()).join("shuffle");
    let mut worst = OnDisk::default();
    let mut seen = BTreeSet::new();
    for i in 0..500u64 {
        shuffle_job(&ctx, i);
        let now = scan(&shuffle_dir);
        seen.extend(now.shuffles.iter().copied());
        assert!(
            now.shuffles.len() <= BOUND,
            "after job {i}: files of {} shuffles on disk: {now:?}",
            now.shuffles.len()
        );
        if now.files > worst.files {
            worst = now;
        }
    }
    assert!(seen.len() > 1, "the jobs wrote shuffle files: {seen:?}");
    let mut last = OnDisk::default();
    assert!(
        eventually(|| {
            last = scan(&shuffle_dir);
            last.files == 0
        }),
        "every shuffle was dropped, yet files remain: {last:?}"
    );
    eprintln!(
        "500 jobs: at most {} files ({} bytes, {} shuffles) on disk after a job; \
         {} distinct shuffles seen; 0 files at the end",
        worst.files,
        worst.bytes,
        worst.shuffles.len(),
        seen.len()
    );
}

#[test]
fn a_held_rdd_keeps_its_shuffle_and_reuses_its_map_outputs() {
    let parent = tempfile::tempdir().unwrap();
    let ctx = ctx_in(parent.path(), 2);
    let shuffle_dir = work_dir(parent.path()).join("shuffle");
    let kept = ctx
        .parallelize(data(1000), 4)
        .map(|x: u64| (x % 8, x))
        .reduce_by_key(|a, b| a + b);
    // Reached only through a child: the shuffle is still live.
    let child = kept.map(|(k, v): (u64, u64)| (k, v * 2));
    let first = sorted(kept.collect().unwrap());
    assert_eq!(first, expected(1000));
    let kept_shuffles = scan(&shuffle_dir).shuffles;
    assert_eq!(kept_shuffles.len(), 1, "{kept_shuffles:?}");
    drop(kept);
    for i in 0..20 {
        shuffle_job(&ctx, i);
    }
    let mut now = OnDisk::default();
    assert!(
        eventually(|| {
            now = scan(&shuffle_dir);
            now.shuffles == kept_shuffles
        }),
        "only the held RDD's shuffle stays: {now:?}, kept {kept_shuffles:?}"
    );
    assert_eq!(now.files, 4, "4 map outputs, one file each: {now:?}");
    let doubled = sorted(child.collect().unwrap());
    let want: Vec<(u64, u64)> = first.iter().map(|(k, v)| (*k, v * 2)).collect();
    assert_eq!(doubled, want);
    let m = ctx.last_job_metrics().unwrap();
    assert_eq!(
        (m.stages_run, m.stages_skipped),
        (1, 1),
        "the map stage was skipped: its outputs survived the cleaning: {m:?}"
    );
    assert_eq!(scan(&shuffle_dir).shuffles, kept_shuffles);
    // Now the last handle goes: so do the files.
    drop(child);
    assert!(
        eventually(|| {
            now = scan(&shuffle_dir);
            now.files == 0
        }),
        "the last handle was dropped: {now:?}"
    );
}

#[test]
fn a_dropped_persisted_rdd_loses_its_disk_blocks_and_a_held_one_keeps_them() {
    let parent = tempfile::tempdir().unwrap();
    let ctx = ctx_in(parent.path(), 2);
    let blocks = work_dir(parent.path()).join("blocks");
    let count = |dir: &Path| std::fs::read_dir(dir).unwrap().count();
    let held = ctx
        .range(0, 3000, 3)
        .map(|x: i64| x * 3)
        .persist(StorageLevel::Disk);
    assert_eq!(held.count().unwrap(), 3000);
    let dropped = ctx
        .range(0, 4000, 4)
        .map(|x: i64| x + 1)
        .persist(StorageLevel::Disk);
    assert_eq!(dropped.count().unwrap(), 4000);
    assert_eq!(count(&blocks), 7, "3 + 4 partitions on disk");
    drop(dropped);
    assert!(
        eventually(|| count(&blocks) == 3),
        "the dropped RDD's blocks stay: {} files",
        count(&blocks)
    );
    // The held one still reads from its blocks.
    let sum: i64 = held.map(|x: i64| x / 3).collect().unwrap().iter().sum();
    assert_eq!(sum, 2999 * 3000 / 2);
    assert_eq!(count(&blocks), 3);
}

#[test]
fn a_lineage_100_000_deep_drops_without_overflowing_the_stack() {
    let parent = tempfile::tempdir().unwrap();
    let ctx = ctx_in(parent.path(), 1);
    let c = ctx.clone();
    // A small stack: a recursive drop of 100,000 nodes would need far more.
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            let mut rdd = c.parallelize(vec![(1u64, 1u64)], 1);
            for i in 0..100_000 {
                rdd = if i % 10_000 == 9_999 {
                    rdd.reduce_by_key(|a, b| a + b)
                } else {
                    rdd.map(|p: (u64, u64)| p)
                };
            }
            drop(rdd);
        })
        .unwrap()
        .join()
        .expect("dropping a deep lineage panicked or overflowed");
    // The context is unharmed.
    shuffle_job(&ctx, 7);
}
