//! Text helpers for jobs: [`words`], `str::split_whitespace` as a byte scan.
//!
//! Invariant: [`words`] yields exactly what `str::split_whitespace` yields, the same
//! slices in the same order, for every `&str`. A word is a maximal run of characters
//! that are not `char::is_whitespace` (Unicode's `White_Space`).
//!
//! Why it exists: std's `split_whitespace` decodes every character and tests it, which
//! is most of a word count's map side. Here each byte is looked up in a 256-entry table.
//! ASCII whitespace is decided there, and so is every byte that cannot start a
//! whitespace character: ASCII non-whitespace, UTF-8 continuation bytes, and lead bytes
//! other than `0xC2`, `0xE1`, `0xE2` and `0xE3`. Only those four lead bytes, which start
//! every non-ASCII whitespace character (U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028,
//! U+2029, U+202F, U+205F, U+3000) as well as many that are not, make it decode the
//! character. Continuation bytes (`0x80..=0xBF`) never equal a lead byte, so stepping
//! one byte at a time through a multi-byte character never mistakes its tail for a
//! character start.

/// What a byte says about the character it starts (or continues).
const WORD: u8 = 0;
/// An ASCII whitespace byte: `\t`, `\n`, `\x0B`, `\x0C`, `\r`, `' '`.
const SPACE: u8 = 1;
/// The lead byte of a character that may be whitespace: decode it to know.
const DECODE: u8 = 2;

static CLASS: [u8; 256] = {
    let mut t = [WORD; 256];
    t[b'\t' as usize] = SPACE;
    t[b'\n' as usize] = SPACE;
    t[0x0B] = SPACE;
    t[0x0C] = SPACE;
    t[b'\r' as usize] = SPACE;
    t[b' ' as usize] = SPACE;
    t[0xC2] = DECODE;
    t[0xE1] = DECODE;
    t[0xE2] = DECODE;
    t[0xE3] = DECODE;
    t
};

/// The words of `s`: its maximal runs of non-whitespace, exactly as
/// `s.split_whitespace()` yields them, found by a byte scan.
///
/// ```
/// let line = "the  quick\tbrown\u{3000}fox ";
/// assert!(ember::text::words(line).eq(line.split_whitespace()));
/// ```
pub fn words(s: &str) -> Words<'_> {
    Words { s, pos: 0 }
}

/// The iterator of [`words`].
#[derive(Debug, Clone)]
pub struct Words<'a> {
    s: &'a str,
    /// Byte offset of the next byte to look at; always a character boundary.
    pos: usize,
}

impl<'a> Words<'a> {
    /// Length in bytes of the whitespace character at `i`, or 0 if the character at `i`
    /// is not whitespace. `i` is a character boundary below `s.len()`.
    #[inline(always)]
    fn space_at(&self, i: usize) -> usize {
        let bytes = self.s.as_bytes();
        match CLASS[bytes[i] as usize] {
            WORD => 0,
            SPACE => 1,
            _ => {
                // A lead byte of a two- or three-byte character; `i` is a boundary.
                let c = self.s[i..].chars().next().expect("i < len");
                if c.is_whitespace() {
                    c.len_utf8()
                } else {
                    0
                }
            }
        }
    }
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let bytes = self.s.as_bytes();
        let len = bytes.len();
        let mut i = self.pos;
        // Skip whitespace.
        loop {
            if i >= len {
                self.pos = len;
                return None;
            }
            match self.space_at(i) {
                0 => break,
                n => i += n,
            }
        }
        let start = i;
        // The word: up to the next whitespace character or the end. A non-whitespace
        // byte is stepped over alone, continuation bytes included (they are `WORD`).
        i += 1;
        while i < len {
            match CLASS[bytes[i] as usize] {
                WORD => i += 1,
                SPACE => break,
                _ => {
                    if self.space_at(i) != 0 {
                        break;
                    }
                    i += 1;
                }
            }
        }
        self.pos = i;
        Some(&self.s[start..i])
    }
}

impl std::iter::FusedIterator for Words<'_> {}

#[cfg(test)]
mod tests {
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
            assert_eq!(
                words(s).collect::<Vec<_>>(),
                s.split_whitespace().collect::<Vec<_>>(),
                "{s:?}"
            );
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
            assert_eq!(
                words(&s).collect::<Vec<_>>(),
                s.split_whitespace().collect::<Vec<_>>(),
                "{s:?}"
            );
        }
    }
}
