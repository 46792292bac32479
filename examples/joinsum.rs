//! Sum of the fact values per dimension attribute through a record-by-record join:
//! `joinsum [--master M] [--partitions P] --dim DIM FACT OUTPUT`.
//!
//! DIM lines are `key,attr`, two unsigned integers (the dimension set of the `bench/` join
//! jobs: every key once, `attr` its group); FACT lines are `key,value` as for kvsum. Each
//! fact record is joined with the dimension records of its key by `join`, record by record:
//! the fact side is not aggregated first, so all the records of a hot key meet in one task.
//! The values are then summed per attr, exactly, as integer thousandths, and OUTPUT gets
//! `attr<TAB>sum` lines (the sum with exactly three decimals, in no particular order) in
//! `part-NNNNN` files. A fact record whose key DIM lacks is dropped (an inner join). Any
//! other line of either input (including an empty one) fails the job with its `file:line`.
//!
//! The join runs in P partitions (`--partitions`, default 64), a count of its own like
//! Spark SQL's `spark.sql.shuffle.partitions` (200), not the cores: each join task then
//! holds a 64th of the dimension set, whose table stays near the cache (5 M keys: 3.47 s
//! in 8 partitions, 2.94 s in 64, `bench/results/2026-12-06-*-joins.md`).

#[path = "support/args.rs"]
mod args;

#[path = "support/alloc.rs"]
mod alloc;

#[path = "support/kv.rs"]
mod kv;

use anyhow::Context as _;
use ember::LinePosition;

const USAGE: &str = "usage: joinsum [--master M] [--partitions P] --dim DIM FACT OUTPUT";

/// Join partitions when `--partitions` is not given.
const JOIN_PARTITIONS: usize = 64;

/// `key,attr` with both unsigned integers (spaces around either field allowed); `None` if
/// malformed.
fn parse_dim_line(line: &str) -> Option<(u64, u64)> {
    let (key, attr) = line.split_once(',')?;
    let number = |s: &str| {
        let s = s.trim();
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    Some((number(key)?, number(attr)?))
}

fn main() -> anyhow::Result<()> {
    alloc::keep_freed_memory();
    let ctx = ember::Context::from_env()?;
    let Some(args) = args::Args::parse("joinsum", &[("--dim", "DIM")])? else {
        return Ok(()); // --help
    };
    let dim_path: String = args.get_or("--dim", String::new())?;
    anyhow::ensure!(
        !dim_path.is_empty(),
        "--dim DIM (the key,attr dimension set) is required\n{USAGE}"
    );
    let parts = ctx.default_parallelism();
    let join_parts = args.partitions.unwrap_or(JOIN_PARTITIONS);
    let dim = ctx
        .text_file_with_positions(&dim_path, parts)
        .with_context(|| format!("reading {dim_path}"))?
        .map(
            |(pos, line): (LinePosition, String)| match parse_dim_line(&line) {
                Some(key_attr) => key_attr,
                None => panic!(
                    "malformed line at {pos}: {}: expected key,attr",
                    ember::io::excerpt(&line)
                ),
            },
        );
    let facts = ctx
        .text_file_map(&args.input, parts, kv::parsed)
        .with_context(|| format!("reading {}", args.input))?;
    facts
        .join_into(&dim, join_parts)
        .map(|(_, (value, attr)): (u64, (i64, u64))| (attr, value))
        .reduce_by_key_into(
            |a: i64, b: i64| {
                a.checked_add(b)
                    .unwrap_or_else(|| panic!("sum overflows: {a} + {b} thousandths"))
            },
            parts,
        )
        .map(|(attr, sum): (u64, i64)| kv::key_thousandths_line(attr, sum))
        .save_as_text_file(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    Ok(())
}
