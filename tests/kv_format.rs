//! The examples' `key,value` parser (`examples/support/kv.rs`): its one-pass path for
//! plain lines must give exactly the field-by-field parser's answer, for every line.

#[path = "../examples/support/kv.rs"]
mod kv;

use rand::{Rng, SeedableRng};

fn check(line: &str) -> Option<(u64, i64)> {
    let fast = kv::parse_line(line);
    assert_eq!(fast, kv::parse_line_general(line), "{line:?}");
    fast
}

#[test]
fn plain_lines_parse_to_exact_thousandths() {
    let cases: [(&str, Option<(u64, i64)>); 24] = [
        ("1,2", Some((1, 2000))),
        ("0,0", Some((0, 0))),
        ("007,-0.5", Some((7, -500))),
        ("42,+12.034", Some((42, 12_034))),
        ("42,12.03", Some((42, 12_030))),
        ("42,-0.001", Some((42, -1))),
        ("18446744073709551615,1", Some((u64::MAX, 1000))),
        ("18446744073709551616,1", None), // key overflows u64
        (
            "9223372036854775,807",
            Some((9_223_372_036_854_775, 807_000)),
        ),
        ("1,9223372036854775.807", Some((1, i64::MAX))),
        ("1,9223372036854775.808", None), // value overflows i64 thousandths
        ("1,-9223372036854775.807", Some((1, -i64::MAX))),
        (" 1 , 2.5 ", Some((1, 2500))), // spaces: the general path
        ("1,\t2", Some((1, 2000))),
        ("", None),
        (",", None),
        ("1,", None),
        (",1", None),
        ("1,2.", None),
        ("1,.5", None),
        ("1,2.5000", None),
        ("+1,2", None),
        ("1,2,3", None),
        ("1,--2", None),
    ];
    for (line, want) in cases {
        assert_eq!(check(line), want, "{line:?}");
    }
}

#[test]
fn the_fast_path_agrees_with_the_general_parser_on_random_lines() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(16);
    let alphabet = b"0123456789,.+- \t9x";
    let mut parsed = 0;
    for round in 0..200_000 {
        let line: String = if round % 2 == 0 {
            // Near the plain form: digits, a comma, a signed decimal, some noise.
            let key: u64 = match rng.gen_range(0..4) {
                0 => u64::MAX - rng.gen_range(0..20),
                1 => rng.gen_range(0..1000),
                _ => rng.gen(),
            };
            let int: u64 = match rng.gen_range(0..3) {
                0 => (i64::MAX as u64 / 1000) - rng.gen_range(0..3) + rng.gen_range(0..3),
                _ => rng.gen_range(0..100_000),
            };
            let sign = ["", "-", "+"][rng.gen_range(0..3)];
            let decimals = rng.gen_range(0..5);
            let frac: String = (0..decimals)
                .map(|_| char::from(b'0' + rng.gen_range(0..10)))
                .collect();
            let dot = if decimals > 0 || rng.gen_bool(0.05) {
                "."
            } else {
                ""
            };
            let mut s = format!("{key},{sign}{int}{dot}{frac}");
            if rng.gen_bool(0.1) {
                let at = rng.gen_range(0..=s.len());
                let c = alphabet[rng.gen_range(0..alphabet.len())] as char;
                s.insert(at, c);
            }
            s
        } else {
            let n = rng.gen_range(0..12);
            (0..n)
                .map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char)
                .collect()
        };
        if check(&line).is_some() {
            parsed += 1;
        }
    }
    assert!(
        parsed > 50_000,
        "only {parsed} lines parsed: the generator drifted"
    );
}

/// Every length of key and of integer part, from 1 digit past the lengths the fast path
/// takes (15) to past what fits (20), and the bytes on either side of the digits
/// (`/` and `:`) and non-ASCII text right after a field.
#[test]
fn every_field_length_and_the_bytes_beside_the_digits_parse_as_the_general_parser_does() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(18);
    let digits = |rng: &mut rand::rngs::StdRng, n: usize| -> String {
        (0..n)
            .map(|_| char::from(b'0' + rng.gen_range(0..10)))
            .collect()
    };
    let mut parsed = 0;
    for key_len in 1..=21 {
        for int_len in 1..=21 {
            for decimals in 0..=4 {
                for _ in 0..3 {
                    let key = digits(&mut rng, key_len);
                    let int = digits(&mut rng, int_len);
                    let frac = digits(&mut rng, decimals);
                    let dot = if decimals > 0 { "." } else { "" };
                    let sign = ["", "-", "+"][rng.gen_range(0..3)];
                    let line = format!("{key},{sign}{int}{dot}{frac}");
                    if check(&line).is_some() {
                        parsed += 1;
                    }
                    for odd in ["/", ":", "é", "\u{7f}"] {
                        for at in [key_len, key_len + 1, line.len()] {
                            let mut bad = line.clone();
                            bad.insert_str(at, odd);
                            check(&bad);
                        }
                    }
                }
            }
        }
    }
    assert!(parsed > 2_000, "only {parsed} lines parsed");
    for line in [
        "12345678,1",
        "123456789,1",
        "1,12345678",
        "1,12345678.5",
        "0000000000000001,7",
    ] {
        assert!(check(line).is_some(), "{line:?}");
    }
}

#[test]
fn a_key_sum_line_is_the_formatted_line() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let check_line = |k: u64, t: i64| {
        let want = format!("{k}\t{}", kv::format_thousandths(t));
        assert_eq!(
            kv::key_thousandths_line(k, t),
            want,
            "key {k}, thousandths {t}"
        );
    };
    for (k, t) in [
        (0, 0),
        (0, -1),
        (1, 1),
        (7, -999),
        (7, 1000),
        (7, -1001),
        (u64::MAX, i64::MAX),
        (u64::MAX, i64::MIN),
        (u64::MAX, i64::MIN + 1),
    ] {
        check_line(k, t);
    }
    for _ in 0..100_000 {
        let k: u64 = rng.gen();
        let t: i64 = match rng.gen_range(0..3) {
            0 => rng.gen(),
            1 => rng.gen_range(-5000..5000),
            _ => rng.gen_range(-10_000_000..10_000_000),
        };
        check_line(k, t);
    }
}
