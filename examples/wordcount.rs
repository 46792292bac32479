//! Word count: `wordcount [--master M] [--partitions P] INPUT OUTPUT`.
//!
//! Words are maximal runs of non-whitespace; OUTPUT gets `word<TAB>count` lines in
//! `part-NNNNN` files.

#[path = "support/args.rs"]
mod args;

#[path = "support/alloc.rs"]
mod alloc;

use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    alloc::keep_freed_memory();
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
    // Equivalent to flat_map(split).map(|w| (w, 1)).reduce_by_key(+), but the words are
    // combined as borrowed slices of the line: a word is copied only the first time a
    // task sees it. `ember::text::words` is `split_whitespace` as a SIMD block scan.
    let counts = lines
        .flat_map_reduce_by_key(
            |line: &String, out: &mut ember::Emit<str, u64>| {
                for word in ember::text::words(line) {
                    out.emit(word, 1);
                }
            },
            |a, b| a + b,
        )
        .map(|(w, c): (String, u64)| format!("{w}\t{c}"));
    counts
        .save_as_text_file(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    Ok(())
}
