//! Local mode behaviour: the work directory's lifetime, task retries with `local[N,F]`,
//! and accumulators counting only successful attempts.

use std::path::PathBuf;

use ember::{Conf, Context, Master};

fn conf_in(dir: &std::path::Path, threads: usize, max_failures: u32) -> Conf {
    let mut conf = Conf::local(threads, 64 << 20);
    conf.master = Master::Local {
        threads,
        max_failures,
    };
    conf.local_dir = Some(dir.to_path_buf());
    conf.progress = false;
    conf
}

#[test]
fn work_dir_holds_shuffle_files_and_is_removed_on_drop() {
    let parent = tempfile::tempdir().unwrap();
    {
        let ctx = Context::with_conf(conf_in(parent.path(), 2, 1)).unwrap();
        // Held while the files are counted: the context cleaner deletes the shuffle
        // files of an RDD nothing reaches any more.
        let sums = ctx
            .range(0, 10_000, 4)
            .map(|x: i64| (x % 7, 1u64))
            .reduce_by_key(|a, b| a + b);
        let n = sums.count().unwrap();
        assert_eq!(n, 7);
        let work: Vec<PathBuf> = std::fs::read_dir(parent.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(
            work.len(),
            1,
            "one work dir while the context lives: {work:?}"
        );
        let shuffle_files = std::fs::read_dir(work[0].join("shuffle")).unwrap().count();
        assert!(
            shuffle_files >= 4,
            "4 map tasks write a file each (blocks and index), found {shuffle_files}"
        );
        drop(sums);
    }
    let left = std::fs::read_dir(parent.path()).unwrap().count();
    assert_eq!(
        left, 0,
        "the work dir must be removed when the context drops"
    );
}

#[test]
fn task_failing_once_is_retried_and_its_accumulator_update_discarded() {
    let parent = tempfile::tempdir().unwrap();
    let marker = parent.path().join("failed-once");
    let ctx = Context::with_conf(conf_in(parent.path(), 2, 3)).unwrap();
    let seen = ctx.accumulator::<u64>("records seen");
    let state = (seen.clone(), marker.to_string_lossy().into_owned());
    let out = ctx
        .range(0, 100, 4)
        .map_with(
            state,
            |(acc, marker): &(ember::Accumulator<u64>, String), x: i64| {
                acc.add(1);
                if x == 42
                    && std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(marker)
                        .is_ok()
                {
                    panic!("first attempt of the partition holding 42 fails");
                }
                x * 2
            },
        )
        .collect()
        .unwrap();
    assert_eq!(out, (0..100).map(|x| x * 2).collect::<Vec<_>>());
    assert!(marker.exists(), "the failing attempt ran");
    assert_eq!(
        seen.value(),
        100,
        "the failed attempt's additions must not count"
    );
}

#[test]
fn task_failing_every_attempt_fails_the_job_after_max_failures() {
    let parent = tempfile::tempdir().unwrap();
    let ctx = Context::with_conf(conf_in(parent.path(), 2, 3)).unwrap();
    let attempts = ctx.accumulator::<u64>("attempts");
    let err = ctx
        .range(0, 10, 2)
        .map(|x: i64| {
            if x == 7 {
                panic!("always broken at {x}");
            }
            x
        })
        .count()
        .unwrap_err()
        .to_string();
    assert!(err.contains("always broken at 7"), "{err}");
    assert!(err.contains("partition 1"), "{err}");
    assert!(err.contains("stage"), "{err}");
    assert_eq!(attempts.value(), 0);
    // The context stays usable after a failed job.
    assert_eq!(ctx.range(0, 10, 2).count().unwrap(), 10);
}
