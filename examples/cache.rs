//! Caching, shown by counting: `cache [--master M] [--partitions P] INPUT OUTPUT`.
//!
//! Persists the lines of INPUT in memory and counts them twice; then unpersists them,
//! caches them again and counts once more. An accumulator counts every time a
//! partition is actually read from INPUT: with caching working, each partition is read
//! twice (the first count fills the cache, the second reads it, and the third must
//! recompute: unpersist dropped the cached partitions on every executor). OUTPUT gets
//! one line, `lines<TAB>N<TAB>partitions computed<TAB>C`; the same is printed.
//!
//! `--hold-until-stdin-closes 1` keeps the context (and the cached lines) alive after
//! that until standard input closes, to look at the web UI's Storage page meanwhile
//! (ui/tests/browser.py does).

#[path = "support/args.rs"]
mod args;

#[path = "support/alloc.rs"]
mod alloc;

use anyhow::Context as _;
use ember::{Accumulator, StorageLevel};

fn main() -> anyhow::Result<()> {
    alloc::keep_freed_memory();
    let ctx = ember::Context::from_env()?;
    let Some(args) = args::Args::parse("cache", &[("--hold-until-stdin-closes", "0|1")])? else {
        return Ok(()); // --help
    };
    let parts = args.partitions.unwrap_or(ctx.default_parallelism());
    let computed = ctx.accumulator::<u64>("partitions computed");
    let lines = ctx
        .text_file(&args.input, parts)
        .with_context(|| format!("reading {}", args.input))?
        .map_partitions_with_index_with(
            computed.clone(),
            |computed: &Accumulator<u64>, _: u32, it: ember::Records<String>| {
                computed.add(1);
                it
            },
        )
        .persist(StorageLevel::Memory);
    let first = lines.count()?;
    let second = lines.count()?;
    lines.unpersist();
    let third = lines.cache().count()?;
    anyhow::ensure!(
        first == second && second == third,
        "counts differ: {first}, {second}, {third}"
    );
    let report = format!("lines\t{first}\tpartitions computed\t{}", computed.value());
    ctx.parallelize(vec![report.clone()], 1)
        .save_as_text_file(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    println!("{report}");
    if args.get_or("--hold-until-stdin-closes", 0u8)? == 1 {
        use std::io::{Read, Write};
        std::io::stdout().flush()?;
        std::io::stdin().read_to_end(&mut Vec::new())?;
    }
    Ok(())
}
