//! The `key,value` line format of the kv data set, shared by kvsum and join: `key` an
//! unsigned integer, `value` a decimal with at most three decimals, handled exactly as
//! integer thousandths.
//!
//! Included with `#[path = "support/kv.rs"] mod kv;`.

// Each example uses a different subset of this module.
#![allow(dead_code)]

/// A line of the kv set at `pos` as `(key, thousandths)`, for
/// `ctx.text_file_map(input, parts, kv::parsed)` (the line borrowed, never a `String`); a
/// malformed line panics, which fails its task and the job with the line's `file:line`
/// and a bounded excerpt of it.
pub fn parsed(pos: ember::LinePosition, line: &str) -> (u64, i64) {
    match parse_line(line) {
        Some(kv) => kv,
        None => panic!(
            "malformed line at {pos}: {}: expected key,value",
            ember::io::excerpt(line)
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
///
/// Each field's digits are found and converted eight bytes at a time ([`digits8`]), with
/// no branch per digit: kvsum's profile had the digit-by-digit version at 13.7 % of the
/// job, most of it mispredicted loop exits (a key has 1 to 7 digits, a value 1 to 4).
#[inline]
fn parse_plain(b: &[u8]) -> Option<(u64, i64)> {
    // The key: 1 to 15 digits here (a longer one takes the general path), then a comma.
    let (key, k) = digits15(b, 0)?;
    if b.get(k) != Some(&b',') {
        return None;
    }
    let mut i = k + 1;
    let negative = b.get(i) == Some(&b'-');
    if negative || b.get(i) == Some(&b'+') {
        i += 1;
    }
    // The integer part: 1 to 15 digits (so that thousandths cannot overflow).
    let (int, n) = digits15(b, i)?;
    i += n;
    let mut frac = 0;
    if i < b.len() {
        // A point, then 1 to 3 digits that end the line.
        let decimals = b.len() - i - 1;
        if b[i] != b'.' || !(1..=3).contains(&decimals) {
            return None;
        }
        let (f, m) = digits8(b, i + 1);
        if m != decimals {
            return None;
        }
        frac = f * [1, 100, 10, 1][decimals];
    }
    let magnitude = (int * 1000 + frac) as i64; // at most 15 + 3 digits
    Some((key, if negative { -magnitude } else { magnitude }))
}

/// The run of 1 to 15 ASCII digits at `b[at..]`: `(value, count)`; `None` if there is
/// none or more than 15 (the general parser's business).
#[inline(always)]
fn digits15(b: &[u8], at: usize) -> Option<(u64, usize)> {
    let (value, n) = digits8(b, at);
    match n {
        0 => None,
        8 => {
            let (low, m) = digits8(b, at + 8);
            (m < 8).then(|| (value * 10u64.pow(m as u32) + low, 8 + m))
        }
        _ => Some((value, n)),
    }
}

/// The run of ASCII digits at `b[at..]`, up to 8 of them: `(value, count)`; `count` is
/// 8 when the run may go on. Loads 8 bytes as one word (zero-padded past the end of `b`),
/// marks the non-digits with two carry-free byte tests, and converts the digits before
/// the first mark by three multiply-and-mask steps.
#[inline(always)]
fn digits8(b: &[u8], at: usize) -> (u64, usize) {
    let rest = b.get(at..).unwrap_or(&[]);
    let load = |w: &[u8]| u64::from_le_bytes(w.try_into().expect("8 bytes"));
    // Past the end of `b` the word holds zero bytes, which are not digits.
    let word = match (rest.get(..8), b.len().checked_sub(8)) {
        (Some(w), _) => load(w),
        // The last 8 bytes of `b`, shifted so that `rest` starts the word.
        (None, Some(last)) if !rest.is_empty() => load(&b[last..]) >> (8 * (8 - rest.len())),
        (None, _) => rest.iter().rev().fold(0, |w, &c| (w << 8) | u64::from(c)),
    };
    const ONES: u64 = 0x0101_0101_0101_0101;
    let lowered = word.wrapping_sub(ONES * u64::from(b'0'));
    // A byte's top bit is set in `lowered` if it is below '0' (or wrapped), in the sum if
    // it is above '9'. Borrows and carries only move toward later bytes, so every byte up
    // to and including the first non-digit is tested exactly.
    let marks = (lowered | word.wrapping_add(ONES * (0x80 - u64::from(b'9') - 1))) & (ONES * 0x80);
    let count = (marks.trailing_zeros() / 8) as usize;
    if count == 0 {
        return (0, 0);
    }
    // The digits' values moved to the top bytes, leading zeros below: then pairs, quads
    // and the eight combine as in a base-10 positional sum.
    let d = lowered << (8 * (8 - count));
    let d = (d.wrapping_mul(10) + (d >> 8)) & 0x00FF_00FF_00FF_00FF;
    let d = (d.wrapping_mul(100) + (d >> 16)) & 0x0000_FFFF_0000_FFFF;
    let d = (d.wrapping_mul(10_000) + (d >> 32)) & 0xFFFF_FFFF;
    (d, count)
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
