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

use anyhow::Context as _;
use ember::LinePosition;

fn main() -> anyhow::Result<()> {
    alloc::keep_freed_memory();
    let ctx = ember::Context::from_env()?;
    let Some(args) = args::Args::parse("kvsum", &[])? else {
        return Ok(()); // --help
    };
    let parts = args.partitions.unwrap_or(ctx.default_parallelism());
    let lines = ctx
        .text_file_with_positions(&args.input, parts)
        .with_context(|| format!("reading {}", args.input))?;
    let sums = lines
        .map(
            |(pos, line): (LinePosition, String)| match parse_line(&line) {
                Some(kv) => kv,
                None => panic!("malformed line at {pos}: {line:?}: expected key,value"),
            },
        )
        .reduce_by_key(|a: i64, b: i64| {
            a.checked_add(b)
                .unwrap_or_else(|| panic!("sum overflows: {a} + {b} thousandths"))
        })
        .map(|(k, sum): (u64, i64)| format!("{k}\t{}", format_thousandths(sum)));
    sums.save_as_text_file(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    Ok(())
}

/// `key,value` with `key` a u64 and `value` in thousandths; `None` if malformed.
/// Spaces around either field are allowed.
fn parse_line(line: &str) -> Option<(u64, i64)> {
    let (k, v) = line.split_once(',')?;
    let k = k.trim();
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((k.parse().ok()?, parse_thousandths(v.trim())?))
}

/// A decimal `[+-]DIGITS[.D{1,3}]` as integer thousandths; `None` if malformed or out
/// of range.
fn parse_thousandths(s: &str) -> Option<i64> {
    let (negative, digits) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) if (1..=3).contains(&f.len()) => (i, f),
        Some(_) => return None,
        None => (digits, ""),
    };
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !all_digits(int) || !all_digits(frac) {
        return None;
    }
    let mut value: i64 = 0;
    for b in int.bytes() {
        value = value.checked_mul(10)?.checked_add(i64::from(b - b'0'))?;
    }
    let mut frac_value = 0i64;
    for i in 0..3 {
        let digit = frac.as_bytes().get(i).map_or(0, |b| i64::from(b - b'0'));
        frac_value = frac_value * 10 + digit;
    }
    let magnitude = value.checked_mul(1000)?.checked_add(frac_value)?;
    Some(if negative { -magnitude } else { magnitude })
}

/// Thousandths as `[-]INT.DDD`.
fn format_thousandths(t: i64) -> String {
    let sign = if t < 0 { "-" } else { "" };
    let a = t.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}
