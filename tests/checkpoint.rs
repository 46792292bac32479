//! Checkpoints (Spark's `CheckpointSuite` for RDDs, restated): `checkpoint()` writes the
//! partitions to the checkpoint directory and cuts the lineage, so later actions and
//! recomputation after lost shuffle data read the files, never the old lineage;
//! `local_checkpoint()` keeps them in the block store and fails clearly once they are
//! gone. The original lineage counts its runs with an accumulator.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{random_pairs, ref_reduce, sorted};
use ember::{Accumulator, Conf, Context, Partitioner};

fn ctx_in(dir: &Path) -> Context {
    let mut conf = Conf::local(2, 256 << 20);
    conf.progress = false;
    conf.local_dir = Some(dir.to_path_buf());
    Context::with_conf(conf).unwrap()
}

/// Every file under `dir` whose name starts with `prefix`.
fn files_under(dir: &Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if e.file_name().to_string_lossy().starts_with(prefix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

// CheckpointSuite "basic checkpointing" / "checkpointing partitioners": same records,
// same partitions and partitioner, files on disk, and the lineage is not run again.
#[test]
fn a_checkpoint_reads_its_files_not_its_lineage() {
    let work = tempfile::tempdir().unwrap();
    let cp = tempfile::tempdir().unwrap();
    let c = ctx_in(work.path());
    c.set_checkpoint_dir(cp.path()).unwrap();
    let data = random_pairs(5, 4000, 300);
    let runs: Accumulator<u64> = c.accumulator("lineage runs");
    let reduced = c
        .parallelize(data.clone(), 4)
        .map_with(runs.clone(), |r: &Accumulator<u64>, kv: (u64, i64)| {
            r.add(1);
            kv
        })
        .reduce_by_key_into(|a: i64, b: i64| a + b, 3);
    let checked = reduced.checkpoint().unwrap();
    assert_eq!(
        runs.value(),
        4000,
        "the checkpoint job ran the lineage once"
    );
    assert_eq!(checked.num_partitions(), 3);
    assert_eq!(checked.partitioner(), Some(Partitioner::hash::<u64>(3)));
    let want = ref_reduce(&data, |a, b| a + b);
    assert_eq!(sorted(checked.collect().unwrap()), want);
    assert_eq!(
        checked.glom().collect().unwrap(),
        reduced.glom().collect().unwrap(),
        "partition by partition"
    );
    let before = runs.value();
    assert_eq!(checked.count().unwrap(), want.len() as u64);
    // Only `reduced.glom()` above ran the lineage again; the checkpoint never does.
    assert_eq!(runs.value(), before);
    // The files: one object file per partition and _SUCCESS, in a private directory.
    let parts = files_under(cp.path(), "part-");
    assert_eq!(parts.len(), 3, "{parts:?}");
    assert_eq!(files_under(cp.path(), "_SUCCESS").len(), 1);
    let own = std::fs::read_dir(cp.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mode = std::fs::metadata(&own).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", own.display());
    // A key-wise operator on it needs no shuffle (the partitioner is kept).
    let doubled = checked
        .map_values(|v: i64| v * 2)
        .reduce_by_key_into(|a: i64, b: i64| a + b, 3);
    let want2: Vec<(u64, i64)> = want.iter().map(|(k, v)| (*k, v * 2)).collect();
    assert_eq!(sorted(doubled.collect().unwrap()), want2);
    assert_eq!(c.last_job_metrics().unwrap().stages_run, 1);
}

// CheckpointSuite "recovery from lost shuffle output reads the checkpoint": a shuffle
// of a checkpointed RDD whose files are deleted is rerun from the checkpoint files.
#[test]
fn lost_shuffle_output_is_recomputed_from_the_checkpoint() {
    let work = tempfile::tempdir().unwrap();
    let c = ctx_in(work.path());
    let data = random_pairs(6, 3000, 100);
    let runs: Accumulator<u64> = c.accumulator("lineage runs");
    let checked = c
        .parallelize(data.clone(), 3)
        .map_with(runs.clone(), |r: &Accumulator<u64>, kv: (u64, i64)| {
            r.add(1);
            kv
        })
        .checkpoint()
        .unwrap();
    assert_eq!(runs.value(), 3000);
    // Without a directory set, local mode checkpoints into its work dir.
    assert_eq!(files_under(work.path(), "part-").len(), 3);
    let sums = checked.reduce_by_key(|a: i64, b: i64| a + b);
    let want = ref_reduce(&data, |a, b| a + b);
    assert_eq!(sorted(sums.collect().unwrap()), want);
    let shuffle_files = files_under(work.path(), "shuffle_");
    assert!(!shuffle_files.is_empty());
    for f in shuffle_files {
        std::fs::remove_file(f).unwrap();
    }
    assert_eq!(sorted(sums.collect().unwrap()), want);
    assert_eq!(
        runs.value(),
        3000,
        "recomputed from the checkpoint, not the lineage"
    );
    assert!(
        !files_under(work.path(), "shuffle_").is_empty(),
        "rewritten"
    );
}

// An iterative job that checkpoints every few iterations stays correct (its plans no
// longer carry the whole lineage).
#[test]
fn an_iterative_job_with_periodic_checkpoints_gives_the_plain_answer() {
    let work = tempfile::tempdir().unwrap();
    let c = ctx_in(work.path());
    let base = c.parallelize((0..200u64).map(|k| (k % 20, 1i64)).collect::<Vec<_>>(), 2);
    let mut plain = base.reduce_by_key(|a: i64, b: i64| a + b);
    let mut checked = plain.clone();
    for i in 0..30 {
        plain = plain
            .map_values(|v: i64| (v * 3 + 1) % 1_000_003)
            .reduce_by_key(|a: i64, b: i64| a + b);
        checked = checked
            .map_values(|v: i64| (v * 3 + 1) % 1_000_003)
            .reduce_by_key(|a: i64, b: i64| a + b);
        if i % 10 == 9 {
            checked = checked.checkpoint().unwrap();
        }
    }
    assert_eq!(
        sorted(checked.collect().unwrap()),
        sorted(plain.collect().unwrap())
    );
}

// Spark's "localCheckpoint": the same records, no lineage run again, and a clear error
// once the blocks are gone (a local checkpoint cannot be recomputed).
#[test]
fn a_local_checkpoint_keeps_blocks_and_fails_clearly_without_them() {
    let work = tempfile::tempdir().unwrap();
    let c = ctx_in(work.path());
    let runs: Accumulator<u64> = c.accumulator("lineage runs");
    let data: Vec<i64> = (0..5000).collect();
    let local = c
        .parallelize(data.clone(), 4)
        .map_with(runs.clone(), |r: &Accumulator<u64>, x: i64| {
            r.add(1);
            x * 2
        })
        .local_checkpoint()
        .unwrap();
    assert_eq!(runs.value(), 5000);
    // The cleaner polls for dropped persisted RDDs every 250 ms: the staging node the
    // checkpoint was written through is gone, but its blocks belong to `local` now.
    std::thread::sleep(std::time::Duration::from_millis(700));
    let want: Vec<i64> = data.iter().map(|x| x * 2).collect();
    assert_eq!(local.collect().unwrap(), want);
    assert_eq!(local.map(|x: i64| x + 1).count().unwrap(), 5000);
    assert_eq!(runs.value(), 5000, "read from the blocks");
    assert_eq!(local.num_partitions(), 4);
    local.unpersist();
    let err = local.collect().unwrap_err().to_string();
    assert!(
        err.contains("local checkpoint") && err.contains("cannot be recomputed"),
        "{err}"
    );
}

// Cluster mode needs a directory every executor reaches; an empty RDD checkpoints to
// an empty RDD.
#[test]
fn degenerate_checkpoints() {
    let work = tempfile::tempdir().unwrap();
    let c = ctx_in(work.path());
    let empty = c.parallelize(Vec::<i64>::new(), 3).checkpoint().unwrap();
    assert_eq!(empty.collect().unwrap(), Vec::<i64>::new());
    let none: ember::Rdd<i64> = c.empty();
    assert_eq!(none.checkpoint().unwrap().num_partitions(), 0);
    let bad = tempfile::NamedTempFile::new_in(work.path()).unwrap();
    let err = c.set_checkpoint_dir(bad.path()).unwrap_err().to_string();
    assert!(err.contains(&bad.path().display().to_string()), "{err}");
}
