//! Word count: `wordcount [--master M] [--partitions P] INPUT OUTPUT`.
//!
//! Words are maximal runs of non-whitespace; OUTPUT gets `word<TAB>count` lines in
//! `part-NNNNN` files.

#[path = "support/args.rs"]
mod args;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    let ctx = ember::Context::from_env()?;
    let Some(args) = args::Args::parse("wordcount", &[])? else {
        return Ok(()); // --help
    };
    let lines = ctx
        .text_file(
            &args.input,
            args.partitions.unwrap_or(ctx.default_parallelism()),
        )
        .with_context(|| format!("reading {}", args.input))?;
    let counts = lines
        .flat_map(|line: String| {
            line.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .map(|w: String| (w, 1u64))
        .reduce_by_key(|a, b| a + b)
        .map(|(w, c): (String, u64)| format!("{w}\t{c}"));
    counts
        .save_as_text_file(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    Ok(())
}
