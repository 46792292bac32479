//! Tests of [`words`](super::words): `split_whitespace` as the reference.

use super::words;
use rand::{Rng, SeedableRng};

/// Every character `char::is_whitespace` accepts, found by scanning all of them.
fn all_whitespace() -> Vec<char> {
    (0..=char::MAX as u32)
        .filter_map(char::from_u32)
        .filter(|c| c.is_whitespace())
        .collect()
}

#[test]
fn the_byte_table_covers_every_whitespace_character() {
    let spaces = all_whitespace();
    assert!(spaces.len() >= 25, "{spaces:?}");
    for c in spaces {
        let mut buf = [0u8; 4];
        let lead = c.encode_utf8(&mut buf).as_bytes()[0];
        assert_ne!(
            super::CLASS[lead as usize],
            super::WORD,
            "{c:?} (U+{:04X})",
            c as u32
        );
        let line = format!("a{c}b");
        assert_eq!(
            words(&line).collect::<Vec<_>>(),
            ["a", "b"],
            "U+{:04X}",
            c as u32
        );
    }
}

#[test]
fn words_are_split_whitespace_on_fixed_cases() {
    for s in [
        "",
        " ",
        "a",
        " a ",
        "a b",
        "\t\n\x0B\x0C\r a\u{85}b\u{a0}c\u{1680}d\u{2000}e\u{200a}f\u{2028}g\u{2029}h",
        "i\u{202f}j\u{205f}k\u{3000}l  ",
        "\u{1c}\u{1d}\u{1e}\u{1f}", // separators that are not White_Space
        "é ü日本語 \u{a1}\u{e100}\u{2030}\u{3001}\u{1681}", // lead bytes C2/E1/E2/E3, not spaces
        "😀 🦀x",
        "x\u{200b}y", // zero-width space is not White_Space
    ] {
        check(s);
    }
}

#[test]
fn words_are_split_whitespace_on_random_strings() {
    let spaces = all_whitespace();
    let others = [
        'a',
        'Z',
        '0',
        ',',
        '\u{0}',
        '\u{7f}',
        'é',
        '\u{a1}',
        '\u{c0}',
        'ß',
        '\u{1681}',
        '\u{2010}',
        '\u{2030}',
        '\u{3001}',
        '日',
        '\u{e000}',
        '😀',
        '\u{10ffff}',
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(16);
    for _ in 0..20_000 {
        let n = rng.gen_range(0..24);
        let s: String = (0..n)
            .map(|_| {
                if rng.gen_bool(0.35) {
                    spaces[rng.gen_range(0..spaces.len())]
                } else {
                    others[rng.gen_range(0..others.len())]
                }
            })
            .collect();
        check(&s);
    }
}

/// Checks `words(s)` against `split_whitespace` and says which string failed.
fn check(s: &str) {
    assert_eq!(
        words(s).collect::<Vec<_>>(),
        s.split_whitespace().collect::<Vec<_>>(),
        "{s:?}"
    );
}

#[test]
fn ascii_blocks_agree_at_the_edges_of_every_byte_class() {
    // Bytes at the edges of the SIMD path's compares (`\t - 1`, `\r + 1`, `' '` and its
    // neighbours, NUL, DEL), in strings of 0 to 400 bytes: one to seven whole blocks of
    // 64 and a partial one.
    let alphabet = b"ab \t\n\x0B\x0C\r\x08\x0E\x1F!\x21~\x7F\x00";
    let mut rng = rand::rngs::StdRng::seed_from_u64(64);
    for _ in 0..20_000 {
        let n = rng.gen_range(0..400);
        let spaces = rng.gen_range(1..8);
        let s: String = (0..n)
            .map(|_| {
                let b = if rng.gen_range(0..8) < spaces {
                    alphabet[rng.gen_range(0..alphabet.len())]
                } else {
                    b'a' + rng.gen_range(0..26)
                };
                b as char
            })
            .collect();
        check(&s);
    }
}

#[test]
fn a_multibyte_character_at_every_offset_around_block_edges() {
    // Whitespace and non-whitespace characters of 2 and 3 bytes, placed so that they start
    // at every byte offset up to 200: straddling the 64- and 128-byte block edges, after
    // a word, after a space, and at the text's end.
    for c in [
        '\u{85}', '\u{a0}', '\u{3000}', '\u{2029}', 'é', '\u{3001}', '😀',
    ] {
        for at in 0..200 {
            for pad in ["", " ", "x"] {
                let word: String = "w".repeat(at % 7 + 1);
                let mut s = String::new();
                while s.len() < at {
                    s.push_str(&word);
                    s.push(' ');
                }
                s.truncate(at);
                s.push(c);
                s.push_str(pad);
                check(&s);
                s.push_str("tail words after it");
                check(&s);
            }
        }
    }
}

#[test]
fn long_mixed_texts_agree() {
    // Mostly ASCII text with a rare non-ASCII character: most blocks take the SIMD path,
    // the rest the bytewise one, and words run across blocks of either kind.
    let spaces = all_whitespace();
    let mut rng = rand::rngs::StdRng::seed_from_u64(65);
    for _ in 0..3_000 {
        let n = rng.gen_range(0..600);
        let s: String = (0..n)
            .map(|_| match rng.gen_range(0..100) {
                0 => spaces[rng.gen_range(0..spaces.len())],
                1 => 'é',
                2 => '日',
                3..=17 => ' ',
                18 => '\n',
                _ => (b'a' + rng.gen_range(0..26)) as char,
            })
            .collect();
        check(&s);
    }
}
