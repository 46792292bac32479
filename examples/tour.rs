//! The DSL tour of README.md, kept identical to it by `tests/examples.rs`:
//! `tour [--master M] INPUT OUTPUT`.

use ember::{capture, KeyPartitioner, Partitioner};

fn main() -> Result<(), ember::EmberError> {
    // First thing in main: picks the master from --master / EMBER_MASTER
    // (default local[N], N = cores).
    let ctx = ember::Context::from_env()?;
    let args = ember::job_args(); // the command line without --master
    let (input, output) = (&args[1], &args[2]);

    let lines = ctx.text_file(input, 4)?; // file, directory or glob
    let counts = lines
        .flat_map(|l: String| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .map(|w: String| (w, 1u64))
        .reduce_by_key(|a: u64, b: u64| a + b); // shuffle with map-side combine

    let top = counts.map(|(w, c): (String, u64)| (c, w)).top(3)?; // action: runs a job
    println!("top: {top:?}");

    // Closures capture nothing by default (a compile error says so); name what they
    // need in capture!: the values are serialised with the plan and handed back to the
    // closure in every task (Copy values by value, others by reference).
    let min_len = 5usize;
    let stop = vec!["which".to_string()];
    let long = counts.filter(capture!(min_len, stop => |(w, _): &(String, u64)| {
        w.len() >= min_len && !stop.contains(w)
    }));

    // Partitioners: a key-wise operator on data already partitioned its way needs no
    // shuffle, and joins of co-partitioned RDDs move neither side.
    let by_word = long.partition_by(4);
    assert_eq!(by_word.partitioner(), Some(Partitioner::hash::<String>(4)));
    let lengths = by_word.map_values(|c: u64| c * 2); // map_values keeps the partitioner
    let joined = by_word.join(&lengths); // no new shuffle: both sides are partitioned alike
    println!("joined {} words", joined.count()?);

    // A partitioner of your own: keys by first letter.
    #[derive(Clone, serde::Serialize, serde::Deserialize)]
    struct FirstLetter;
    impl KeyPartitioner<String> for FirstLetter {
        fn num_partitions(&self) -> u32 {
            26
        }
        fn partition(&self, w: &String) -> u32 {
            u32::from(
                w.bytes()
                    .next()
                    .unwrap_or(b'a')
                    .to_ascii_lowercase()
                    .saturating_sub(b'a'),
            ) % 26
        }
    }
    let lettered = long.partition_by_with(FirstLetter);
    println!("quietly: {:?}", lettered.lookup("quietly".into())?); // computes one partition

    // Checkpoints cut the lineage of iterative jobs: later actions and recomputation
    // after a lost executor read the files, never the lineage behind them.
    let mut scores = counts.map_values(|c: u64| c as f64);
    for i in 0..30 {
        scores = scores
            .map_values(|s: f64| s * 0.9 + 1.0)
            .reduce_by_key(|a: f64, b: f64| a + b);
        if i % 10 == 9 {
            scores = scores.checkpoint()?; // local mode: into the work dir
        }
    }
    println!("scores: {}", scores.count()?);

    long.map(|(w, c): (String, u64)| format!("{w}\t{c}"))
        .save_as_text_file(output)?;
    Ok(())
}
