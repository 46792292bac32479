//! Sizes as users write them on command lines and in environment variables
//! (`--memory 4g`, `EMBER_EXECUTOR_MEMORY=512m`): one parser for the daemons and the
//! job library, so a size means the same everywhere.

/// Parses a memory size: a plain byte count (`"1048576"`) or a number with a binary unit
/// (`"64k"`, `"512m"`, `"2G"`, `"1.5g"`, `"1t"`, optionally followed by `b`/`ib`, like `"512mb"`
/// or `"64KiB"`). Case-insensitive, surrounding whitespace ignored. Fractions need a unit
/// and are rounded down to whole bytes. The error message quotes the bad value.
pub fn parse_memory_size(s: &str) -> Result<u64, String> {
    let bad = |why: &str| format!("invalid memory size {s:?}: {why}");
    let t = s.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim_start());
    let shift = match unit {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        "p" | "pb" | "pib" => 50,
        _ => {
            return Err(bad(
                "expected a number with an optional unit k, m, g, t or p",
            ))
        }
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(bad("no number"));
    }
    if frac.contains('.') {
        return Err(bad("more than one decimal point"));
    }
    if !frac.is_empty() && shift == 0 {
        return Err(bad("a byte count must be a whole number"));
    }
    let too_big = || bad("too large");
    let int: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_big())?
    };
    let mut bytes = int.checked_shl(shift).ok_or_else(too_big)?;
    if !frac.is_empty() {
        // At most 18 fractional digits matter; more are below a byte at any unit we accept.
        let digits = &frac[..frac.len().min(18)];
        let f: u128 = digits.parse().map_err(|_| bad("bad fraction"))?;
        bytes += (f << shift) / 10u128.pow(digits.len() as u32);
    }
    u64::try_from(bytes).map_err(|_| too_big())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_memory_sizes() {
        let ok = |s: &str| parse_memory_size(s).unwrap();
        assert_eq!(ok("1048576"), 1 << 20);
        assert_eq!(ok("64k"), 64 << 10);
        assert_eq!(ok("512m"), 512 << 20);
        assert_eq!(ok("1g"), 1 << 30);
        assert_eq!(ok("2G"), 2 << 30);
        assert_eq!(ok("1.5g"), 3 << 29);
        assert_eq!(ok(" 512MB "), 512 << 20);
        assert_eq!(ok("64KiB"), 64 << 10);
        assert_eq!(ok("100b"), 100);
        assert_eq!(ok("1 t"), 1 << 40);
        assert_eq!(ok(".5k"), 512);
        assert_eq!(ok("0"), 0);
        assert_eq!(ok("0.3k"), 307);
        for bad in [
            "",
            "m",
            "abc",
            "12x",
            "-1g",
            "1.5",
            "1..5g",
            "1.2.3g",
            ".g",
            "99999999999p",
            "1e9",
            "18446744073709551616",
        ] {
            let e = parse_memory_size(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
