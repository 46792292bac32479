//! Per-key statistics through a join:
//! `join [--master M] [--partitions P] [--min-count N] INPUT OUTPUT`.
//!
//! INPUT lines are `key,value` as for kvsum. The job counts the records of each key and
//! finds each key's largest value in two separate shuffles, joins the two by key, keeps
//! the keys seen at least N times (N travels to the executors as a broadcast variable,
//! default 1), and writes `key<TAB>count<TAB>max` lines (max with three decimals) in
//! `part-NNNNN` files. A malformed line fails the job with its `file:line`.

#[path = "support/args.rs"]
mod args;

#[path = "support/alloc.rs"]
mod alloc;

#[path = "support/kv.rs"]
mod kv;

use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    alloc::keep_freed_memory();
    let ctx = ember::Context::from_env()?;
    let Some(args) = args::Args::parse("join", &[("--min-count", "N")])? else {
        return Ok(()); // --help
    };
    let min_count: u64 = args.get_or("--min-count", 1)?;
    let parts = args.partitions.unwrap_or(ctx.default_parallelism());
    let records = ctx
        .text_file_map(&args.input, parts, kv::parsed)
        .with_context(|| format!("reading {}", args.input))?;
    let counts = records
        .map(|(k, _): (u64, i64)| (k, 1u64))
        .reduce_by_key(|a: u64, b: u64| a + b);
    let maxes = records.reduce_by_key(|a: i64, b: i64| a.max(b));
    counts
        .join(&maxes)
        .filter(
            ember::capture!(min_count => |(_, (count, _)): &(u64, (u64, i64))| {
                *count >= min_count
            }),
        )
        .map(|(k, (count, max)): (u64, (u64, i64))| {
            format!("{k}\t{count}\t{}", kv::format_thousandths(max))
        })
        .save_as_text_file(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    Ok(())
}
