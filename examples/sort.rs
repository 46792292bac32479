//! Sort by numeric key: `sort [--master M] [--partitions P] INPUT OUTPUT`.
//!
//! INPUT lines are `key,value` with `key` an unsigned integer (u64) and `value` any
//! text. OUTPUT gets every input line exactly once (its original text), ordered by
//! key when the `part-NNNNN` files are read in order. A line without a comma or with
//! a key that is not a u64 fails the job with its `file:line`.

#[path = "support/args.rs"]
mod args;

#[path = "support/alloc.rs"]
mod alloc;

use anyhow::{bail, Context as _};
use ember::{CompactString, LinePosition};

fn main() -> anyhow::Result<()> {
    alloc::keep_freed_memory();
    let ctx = ember::Context::from_env()?;
    let Some(args) = args::Args::parse("sort", &[])? else {
        return Ok(()); // --help
    };
    // sort_by_key runs a sampling job at once: refuse an existing output before that.
    if std::path::Path::new(&args.output).exists() {
        bail!(
            "output directory already exists: {} (remove it first)",
            args.output
        );
    }
    let parts = args.partitions.unwrap_or(ctx.default_parallelism());
    // Each line is parsed where it lies in the read buffer, and copied once, into its
    // record: as a `CompactString`, inline in the record when it has at most 24 bytes
    // (every line of the kv set), so sorting moves the line with its key and writing the
    // sorted output reads the lines in order instead of chasing a pointer per line.
    let keyed = ctx
        .text_file_map(
            &args.input,
            parts,
            |pos: LinePosition, line: &str| match parse_key(line) {
                Some(k) => (k, CompactString::from(line)),
                None => panic!(
                    "malformed line at {pos}: {}: expected key,value",
                    ember::io::excerpt(line)
                ),
            },
        )
        .with_context(|| format!("reading {}", args.input))?;
    // As Spark's sortByKey: as many output partitions as input partitions unless asked.
    let sorted = match args.partitions {
        Some(n) => keyed.sort_by_key_into(true, n),
        None => keyed.sort_by_key(true),
    };
    sorted
        .values()
        .save_as_text_file(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    Ok(())
}

/// The u64 key before the first comma (spaces around it allowed); `None` if malformed.
fn parse_key(line: &str) -> Option<u64> {
    // Fast path for the common `DIGITS,...` line: one pass over the key's bytes, with no
    // overflow check (19 digits always fit a u64; a longer key takes the checked path).
    let bytes = line.as_bytes();
    let mut key = 0u64;
    let mut digits = 0;
    while let Some(d) = bytes.get(digits).map(|b| b.wrapping_sub(b'0')) {
        if d > 9 || digits == 19 {
            break;
        }
        key = key * 10 + u64::from(d);
        digits += 1;
    }
    if digits > 0 && bytes.get(digits) == Some(&b',') {
        return Some(key);
    }
    let (k, _) = line.split_once(',')?;
    let k = k.trim();
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    k.parse().ok()
}
