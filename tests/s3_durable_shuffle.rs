//! `storage:s3://` shuffle durability (issue 37) against a real S3-compatible server
//! (moto, started here): the gated faultjob on 3 one-core executors stores every map
//! output under the application's prefix; a kill -9 of an executor while the second
//! stage waits reruns no map task (its outputs are read from the bucket), the output is
//! exactly a fault-free run's, and the application's objects are gone when it ends.
//!
//! Needs `moto_server`; `.ci/run` runs this with the `s3` feature and `--ignored`.

mod common;

use common::cluster::Cluster;
use common::faultjob::*;
use common::moto::Moto;

#[test]
#[ignore = "needs moto_server: .ci/run installs it and runs this with --ignored"]
fn with_s3_stored_shuffle_outputs_a_killed_executor_reruns_no_map_task() {
    let moto = Moto::start();
    moto.create_bucket("shuffles");
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 4000);
    let want = reference(&input, s);
    let env = moto.env();
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut cluster = Cluster::start_with(3, 1, None, &[], &[], &env);
    env.push(("EMBER_SHUFFLE_DURABILITY", "storage:s3://shuffles/apps"));
    let run = start_gated_with_env(&cluster, &input, s, &env);
    let (shuffle, held) = first_shuffle(&cluster, 3);
    // One prefix of this application's own, with a copy of every output of the shuffle.
    let keys = moto.list_keys("shuffles", "apps/");
    let copies: Vec<&String> = keys
        .iter()
        .filter(|k| k.contains(&format!("/shuffle-{shuffle}/shuffle_{shuffle}_")))
        .collect();
    assert_eq!(copies.len(), 6, "{keys:?}");
    assert!(
        copies.iter().all(|k| k.starts_with("apps/ember-app-")),
        "{copies:?}"
    );
    let victim = (0..3).max_by_key(|i| held[*i].len()).unwrap();
    let kept = held[victim].len();
    let console = run.kill_and_finish(&mut cluster, victim, &want);
    assert!(
        console.contains(&format!("its {kept} map output(s) are read from storage")),
        "{console}"
    );
    let log = cluster.driver_log();
    assert_eq!(
        submissions(&log, shuffle),
        vec![6],
        "map stage submissions:\n{log}"
    );
    // The application's copies went with it.
    assert_eq!(moto.list_keys("shuffles", "apps/"), Vec::<String>::new());
}
