//! A three-stage job with fault-injection switches, for fault-tolerance tests and demos:
//! `faultjob [--master M] [--partitions P] [--map-delay-ms D] [--gate DIR] [--reduce-delay-ms D]
//! [--cache-gate DIR] [--panic-once DIR] [--always-panic P] [--huge-panic-mb N]
//! [--big-result-mb N] INPUT OUTPUT`.
//!
//! INPUT lines are `key,value` as for kvsum. Stage 1 parses them and hash-partitions
//! them by key (shuffle 1, no map-side combine, so every record crosses it); stage 2
//! sums each key's values and groups the sums into 7 buckets by key (shuffle 2); stage
//! 3 writes `bucket<TAB>key<TAB>sum` lines, each bucket's keys in order. Without switches
//! it is an ordinary job whose output does not depend on how it was scheduled. It then
//! prints `records parsed: N`, counted by an accumulator in stage 1: N is the number of
//! input lines however many task attempts ran.
//!
//! Switches (all off by default):
//! - `--map-delay-ms D`: stage 1 sleeps D ms every 1,000 records (a slow map stage).
//! - `--gate DIR`: each stage-2 task creates `DIR/waiting-<partition>`, then waits for
//!   `DIR/open` before reading its shuffle input, so a test can act between the stages.
//! - `--reduce-delay-ms D`: each stage-3 task sleeps D ms before it writes (a slow last
//!   stage, so a test's damage between stages 2 and 3 takes effect before the job ends).
//! - `--cache-gate DIR`: stage 1's parsed records are cached (in memory); a first job
//!   counts them, caching each partition where its task ran, then the program creates
//!   `DIR/cached` and waits for `DIR/go` before the three-stage job, whose first stage
//!   reads the cached partitions. `records parsed` then says how often the input was
//!   parsed: the input's lines once if no cached partition was computed again.
//! - `--panic-once DIR`: partition 0 of stage 1 panics on its first attempt only (the
//!   attempt leaves `DIR/panicked` behind).
//! - `--always-panic P`: partition P of stage 1 panics on every attempt.
//! - `--huge-panic-mb N`: partition 0 of stage 1 panics on every attempt with a message
//!   of N MiB (`injected huge failure: xxx...`).
//! - `--big-result-mb N`: before the job, runs a one-task job whose result is a string
//!   of N MiB and prints `big result: <bytes> bytes` or `big result failed: <error>`;
//!   the three-stage job runs either way.

#[path = "support/args.rs"]
mod args;

#[path = "support/alloc.rs"]
mod alloc;

#[path = "support/kv.rs"]
mod kv;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use ember::{Accumulator, LinePosition, Records};

/// Stage-1 switches: (delay ms per 1,000 records, panic-once dir or "", always-panic
/// partition or -1, huge-panic MiB or 0), and the records-parsed accumulator.
type MapFaults = (u64, String, i64, u64, Accumulator<u64>);

fn main() -> anyhow::Result<()> {
    alloc::keep_freed_memory();
    let ctx = ember::Context::from_env()?;
    let flags = [
        ("--map-delay-ms", "D"),
        ("--gate", "DIR"),
        ("--reduce-delay-ms", "D"),
        ("--cache-gate", "DIR"),
        ("--panic-once", "DIR"),
        ("--always-panic", "P"),
        ("--huge-panic-mb", "N"),
        ("--big-result-mb", "N"),
    ];
    let Some(args) = args::Args::parse("faultjob", &flags)? else {
        return Ok(()); // --help
    };
    let faults: MapFaults = (
        args.get_or("--map-delay-ms", 0u64)?,
        args.get_or("--panic-once", String::new())?,
        args.get_or("--always-panic", -1i64)?,
        args.get_or("--huge-panic-mb", 0u64)?,
        ctx.accumulator::<u64>("records parsed"),
    );
    let parsed = faults.4.clone();
    let big_mb: usize = args.get_or("--big-result-mb", 0usize)?;
    if big_mb > 0 {
        let big = ctx
            .parallelize(vec![big_mb], 1)
            .map(|mb: usize| "y".repeat(mb << 20))
            .collect();
        match big {
            Ok(v) => println!(
                "big result: {} bytes",
                v.iter().map(String::len).sum::<usize>()
            ),
            Err(e) => println!("big result failed: {e}"),
        }
    }
    let gate: String = args.get_or("--gate", String::new())?;
    let parts = args.partitions.unwrap_or(ctx.default_parallelism());
    let parsed_records = ctx
        .text_file_with_positions(&args.input, parts)
        .with_context(|| format!("reading {}", args.input))?
        .map_partitions_with_index_with(faults, inject_map_faults);
    let cache_gate: String = args.get_or("--cache-gate", String::new())?;
    let parsed_records = if cache_gate.is_empty() {
        parsed_records
    } else {
        let cached = parsed_records.cache();
        let n = cached.count()?;
        println!("cached records: {n}");
        wait_at(Path::new(&cache_gate), "cached", "go")?;
        cached
    };
    let buckets = parsed_records
        .partition_by(parts)
        .map_partitions_with_index_with(gate, sum_after_gate)
        .map(|(k, sum): (u64, i64)| (k % 7, (k, sum)))
        .group_by_key();
    let reduce_delay_ms: u64 = args.get_or("--reduce-delay-ms", 0u64)?;
    let buckets = if reduce_delay_ms > 0 {
        buckets.map_partitions_with_index_with(reduce_delay_ms, hold_reduce)
    } else {
        buckets
    };
    buckets
        .flat_map(|(bucket, mut members): (u64, Vec<(u64, i64)>)| {
            members.sort_unstable();
            members
                .into_iter()
                .map(|(k, sum)| format!("{bucket}\t{k}\t{}", kv::format_thousandths(sum)))
                .collect::<Vec<_>>()
        })
        .save_as_text_file(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    println!("records parsed: {}", parsed.value());
    Ok(())
}

/// Says `DIR/<here>`, then waits (at most 120 s) for `DIR/<until>`.
fn wait_at(dir: &Path, here: &str, until: &str) -> anyhow::Result<()> {
    std::fs::write(dir.join(here), b"").with_context(|| format!("writing {}", dir.display()))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !dir.join(until).exists() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} never appeared",
            dir.join(until).display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A stage-3 task's records, handed on after `delay_ms`.
fn hold_reduce(
    delay_ms: &u64,
    _partition: u32,
    records: Records<(u64, Vec<(u64, i64)>)>,
) -> Vec<(u64, Vec<(u64, i64)>)> {
    std::thread::sleep(Duration::from_millis(*delay_ms));
    records.collect()
}

/// Parses stage 1's records, applying its fault switches.
fn inject_map_faults(
    faults: &MapFaults,
    partition: u32,
    records: Records<(LinePosition, String)>,
) -> Vec<(u64, i64)> {
    let (delay_ms, panic_once, always_panic, huge_panic_mb, parsed) = faults;
    if i64::from(partition) == *always_panic {
        panic!("injected failure in partition {partition}");
    }
    if partition == 0 && *huge_panic_mb > 0 {
        let filler = "x".repeat((*huge_panic_mb as usize) << 20);
        panic!("injected huge failure: {filler}");
    }
    if partition == 0 && !panic_once.is_empty() {
        let marker = Path::new(panic_once).join("panicked");
        if !marker.exists() {
            std::fs::write(&marker, b"").expect("writing the panic-once marker");
            panic!("injected failure in partition 0, first attempt");
        }
    }
    let mut out = Vec::new();
    for (i, (pos, line)) in records.enumerate() {
        if *delay_ms > 0 && i % 1000 == 0 {
            std::thread::sleep(Duration::from_millis(*delay_ms));
        }
        match kv::parse_line(&line) {
            Some(kv) => out.push(kv),
            None => panic!(
                "malformed line at {pos}: {}: expected key,value",
                ember::io::excerpt(&line)
            ),
        }
    }
    parsed.add(out.len() as u64);
    out
}

/// Stage 2: sums the values of each key (all of a key's records are in this partition),
/// after waiting at the gate, if any, before the shuffle files are read.
fn sum_after_gate(gate: &String, partition: u32, records: Records<(u64, i64)>) -> Vec<(u64, i64)> {
    if !gate.is_empty() {
        let dir = Path::new(gate);
        std::fs::write(dir.join(format!("waiting-{partition}")), b"")
            .expect("writing the gate marker");
        let deadline = Instant::now() + Duration::from_secs(120);
        while !dir.join("open").exists() {
            assert!(Instant::now() < deadline, "the gate {gate} never opened");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut sums = std::collections::BTreeMap::new();
    for (k, v) in records {
        *sums.entry(k).or_insert(0i64) += v;
    }
    sums.into_iter().collect()
}
