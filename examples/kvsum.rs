//! Sum of values per key: `kvsum [--master M] [--partitions P] INPUT OUTPUT`.
//!
//! INPUT lines are `key,value`: `key` an unsigned integer (u64), `value` a decimal
//! number with at most three decimals (`12`, `-0.5`, `12.034`). OUTPUT gets
//! `key<TAB>sum` lines in `part-NNNNN` files, the sum printed with exactly three
//! decimals. Values are summed exactly, as integer thousandths. Any other line
//! (including an empty one) fails the job with its `file:line`.

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
    let Some(args) = args::Args::parse("kvsum", &[])? else {
        return Ok(()); // --help
    };
    let parts = args.partitions.unwrap_or(ctx.default_parallelism());
    let lines = ctx
        .text_file_map(&args.input, parts, kv::parsed)
        .with_context(|| format!("reading {}", args.input))?;
    let sums = lines
        .reduce_by_key(|a: i64, b: i64| {
            a.checked_add(b)
                .unwrap_or_else(|| panic!("sum overflows: {a} + {b} thousandths"))
        })
        .map(|(k, sum): (u64, i64)| kv::key_thousandths_line(k, sum));
    sums.save_as_text_file(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    Ok(())
}
