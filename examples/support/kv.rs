//! The `key,value` line format of the kv data set, shared by kvsum and join: `key` an
//! unsigned integer, `value` a decimal with at most three decimals, handled exactly as
//! integer thousandths.
//!
//! Included with `#[path = "support/kv.rs"] mod kv;`.

// Each example uses a different subset of this module.
#![allow(dead_code)]

/// A line of the kv set with its position as `(key, thousandths)`, for
/// `text_file_with_positions(..).map(kv::parsed)`; a malformed line panics, which fails
/// its task and the job with the line's `file:line` and a bounded excerpt of it.
pub fn parsed((pos, line): (ember::LinePosition, String)) -> (u64, i64) {
    match parse_line(&line) {
        Some(kv) => kv,
        None => panic!(
            "malformed line at {pos}: {}: expected key,value",
            ember::io::excerpt(&line)
        ),
    }
}

/// `key,value` with `key` a u64 and `value` in thousandths; `None` if malformed.
/// Spaces around either field are allowed.
///
/// Lines in the plain form `DIGITS,[+-]DIGITS[.D{1,3}]` are parsed in one pass over
/// their bytes; any other line (spaces, a malformed field, an overflow) goes to
/// [`parse_line_general`], so the answer is always the general parser's.
#[inline]
pub fn parse_line(line: &str) -> Option<(u64, i64)> {
    parse_plain(line.as_bytes()).or_else(|| parse_line_general(line))
}

/// The plain form in one pass; `None` for anything else (the caller falls back).
#[inline]
fn parse_plain(b: &[u8]) -> Option<(u64, i64)> {
    let digit = |i: usize| {
        b.get(i)
            .and_then(|c| c.checked_sub(b'0'))
            .filter(|d| *d < 10)
    };
    let mut i = 0;
    let mut key: u64 = 0;
    while let Some(d) = digit(i) {
        key = key.checked_mul(10)?.checked_add(u64::from(d))?;
        i += 1;
    }
    if i == 0 || b.get(i) != Some(&b',') {
        return None;
    }
    i += 1;
    let negative = b.get(i) == Some(&b'-');
    if negative || b.get(i) == Some(&b'+') {
        i += 1;
    }
    let int_start = i;
    let mut int: i64 = 0;
    while let Some(d) = digit(i) {
        int = int.checked_mul(10)?.checked_add(i64::from(d))?;
        i += 1;
    }
    if i == int_start {
        return None;
    }
    let mut frac: i64 = 0;
    if i < b.len() {
        if b[i] != b'.' {
            return None;
        }
        i += 1;
        let frac_start = i;
        while i - frac_start < 3 {
            let Some(d) = digit(i) else { break };
            frac = frac * 10 + i64::from(d);
            i += 1;
        }
        let decimals = i - frac_start;
        if decimals == 0 || i != b.len() {
            return None;
        }
        frac *= [1, 100, 10, 1][decimals];
    }
    let magnitude = int.checked_mul(1000)?.checked_add(frac)?;
    Some((key, if negative { -magnitude } else { magnitude }))
}

/// [`parse_line`] for every form it accepts, field by field.
pub fn parse_line_general(line: &str) -> Option<(u64, i64)> {
    let (k, v) = line.split_once(',')?;
    let k = k.trim();
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((k.parse().ok()?, parse_thousandths(v.trim())?))
}

/// A decimal `[+-]DIGITS[.D{1,3}]` as integer thousandths; `None` if malformed or out
/// of range.
pub fn parse_thousandths(s: &str) -> Option<i64> {
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
pub fn format_thousandths(t: i64) -> String {
    let sign = if t < 0 { "-" } else { "" };
    let a = t.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

/// `KEY<TAB>[-]INT.DDD`, exactly `format!("{key}\t{}", format_thousandths(t))`, in one
/// allocation without the formatting machinery (kvsum prints five million of them; the
/// two `format!`s were 4.5 % of its profile).
pub fn key_thousandths_line(key: u64, t: i64) -> String {
    let mut digits = itoa::Buffer::new();
    let mut line = String::with_capacity(48);
    line.push_str(digits.format(key));
    line.push('\t');
    if t < 0 {
        line.push('-');
    }
    let a = t.unsigned_abs();
    line.push_str(digits.format(a / 1000));
    let frac = a % 1000;
    line.push('.');
    for digit in [frac / 100, frac / 10 % 10, frac % 10] {
        line.push(char::from(b'0' + digit as u8)); // a digit: 0..=9
    }
    line
}
