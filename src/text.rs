//! Text helpers for jobs: [`words`], `str::split_whitespace` as a block scan.
//!
//! Invariant: [`words`] yields exactly what `str::split_whitespace` yields, the same
//! slices in the same order, for every `&str`. A word is a maximal run of characters
//! that are not `char::is_whitespace` (Unicode's `White_Space`).
//!
//! How: the text is read in blocks of 64 bytes, each turned into a mask with one bit per
//! byte that belongs to a whitespace character (`Words::whitespace`); word starts
//! (a byte that is not whitespace after one that is) and word ends (the reverse) are
//! bit operations on that mask, and a word is the span between the next start and the
//! next end, found by counting trailing zeros. A block of ASCII text is classified 16
//! bytes at a time with SSE2 (every x86_64 has it): ASCII whitespace is `' '` and
//! `'\t'..='\r'` (the text's last, partial block padded with blanks). A block holding
//! any non-ASCII byte, and every block elsewhere than x86_64, is classified a byte at a
//! time through a 256-entry table: ASCII whitespace is decided there, and so is every
//! byte that cannot start a whitespace character (ASCII non-whitespace, UTF-8
//! continuation bytes, and lead bytes other than `0xC2`, `0xE1`, `0xE2` and `0xE3`).
//! Only those four lead bytes, which start every non-ASCII whitespace character (U+0085,
//! U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000) as well as
//! many that are not, make it decode the character; a whitespace character's later bytes
//! are marked too, into the next block if it straddles one. Continuation bytes (`0x80..=0xBF`) never equal a lead byte,
//! so a lead byte found anywhere starts a character. Whitespace characters are whole
//! characters, so every start and end is a character boundary.
//!
//! Why: std's `split_whitespace` decodes every character and tests it; the byte table
//! that replaced it still spent a load, a lookup and a branch on every byte, the larger
//! half of a word count's map side (wordcount's profile, text1g: 30 % of the job in the
//! job's loop, most of it the per-byte scan).

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

/// Bytes per block: one bit of a `u64` each.
const BLOCK: usize = 64;

/// The words of `s`: its maximal runs of non-whitespace, exactly as
/// `s.split_whitespace()` yields them.
///
/// ```
/// let line = "the  quick\tbrown\u{3000}fox ";
/// assert!(ember::text::words(line).eq(line.split_whitespace()));
/// ```
pub fn words(s: &str) -> Words<'_> {
    Words {
        s,
        base: 0,
        next: 0,
        starts: 0,
        ends: 0,
        open: None,
        prev_space: true,
        carry: 0,
    }
}

/// The iterator of [`words`].
///
/// Invariants: `starts` and `ends` hold the not yet consumed word starts and ends of the
/// block at `base` (bit `i` is byte `base + i`; an end bit marks the first byte after a
/// word); `open` is the start of the word whose end has not been found yet; starts and
/// ends alternate in text order, so the lowest end bit always closes `open`.
#[derive(Debug, Clone)]
pub struct Words<'a> {
    s: &'a str,
    /// Offset of the block `starts` and `ends` describe.
    base: usize,
    /// Offset of the next block to classify.
    next: usize,
    starts: u64,
    ends: u64,
    open: Option<usize>,
    /// The last byte of the previous block was whitespace (true before the first block).
    prev_space: bool,
    /// Bytes at the start of the next block that belong to a whitespace character begun
    /// in this one.
    carry: usize,
}

impl<'a> Words<'a> {
    /// Classifies the next block; false past the end of the text.
    #[inline]
    fn advance(&mut self) -> bool {
        let len = self.s.len();
        if self.next >= len {
            return false;
        }
        let base = self.next;
        let space = self.whitespace(base);
        let before = (space << 1) | u64::from(self.prev_space);
        self.starts = !space & before;
        self.ends = space & !before;
        self.prev_space = space >> (BLOCK - 1) != 0;
        self.base = base;
        self.next = base + BLOCK;
        true
    }

    /// The whitespace mask of the block at `base`: bit `i` set if byte `base + i` belongs
    /// to a whitespace character or lies past the end of the text.
    #[inline]
    fn whitespace(&mut self, base: usize) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.carry == 0 {
            let bytes = self.s.as_bytes();
            let mask = if base + BLOCK <= bytes.len() {
                ascii_whitespace(&bytes[base..base + BLOCK])
            } else {
                // The last, partial block (most of a short line): padded with blanks,
                // which are whitespace as the bytes past the end must be.
                let mut padded = [b' '; BLOCK];
                padded[..bytes.len() - base].copy_from_slice(&bytes[base..]);
                ascii_whitespace(&padded)
            };
            if let Some(mask) = mask {
                return mask;
            }
        }
        self.whitespace_bytewise(base)
    }

    /// [`Self::whitespace`] a byte at a time, for any text.
    #[cold]
    fn whitespace_bytewise(&mut self, base: usize) -> u64 {
        let bytes = self.s.as_bytes();
        let mut mask = 0u64;
        let inside = (bytes.len() - base).min(BLOCK);
        if inside < BLOCK {
            mask = !0 << inside; // past the end
        }
        for j in 0..inside {
            let i = base + j;
            let space = if self.carry > 0 {
                self.carry -= 1;
                true
            } else {
                match CLASS[bytes[i] as usize] {
                    WORD => false,
                    SPACE => true,
                    _ => {
                        // A lead byte: `i` is a character boundary.
                        let c = self.s[i..].chars().next().expect("i < len");
                        if c.is_whitespace() {
                            self.carry = c.len_utf8() - 1;
                            true
                        } else {
                            false
                        }
                    }
                }
            };
            mask |= u64::from(space) << j;
        }
        mask
    }

    /// The text from `start` to `end`, both character boundaries (see the module doc).
    #[inline]
    fn word(&self, start: usize, end: usize) -> &'a str {
        debug_assert!(self.s.is_char_boundary(start) && self.s.is_char_boundary(end));
        // SAFETY: `start < end <= len`, and both are character boundaries: a start follows
        // the text's start or a whole whitespace character, an end is the text's end or
        // where a whitespace character begins.
        unsafe { self.s.get_unchecked(start..end) }
    }
}

/// The whitespace mask of 64 ASCII bytes (bit `i` for `block[i]`), or `None` if any byte
/// is not ASCII.
#[cfg(target_arch = "x86_64")]
#[inline]
fn ascii_whitespace(block: &[u8]) -> Option<u64> {
    use std::arch::x86_64::*;
    debug_assert_eq!(block.len(), BLOCK);
    let mut space = 0u64;
    let mut high = 0u32;
    // SAFETY: SSE2 is part of every x86_64 target; each unaligned load reads 16 of the 64
    // bytes of `block`.
    unsafe {
        let blank = _mm_set1_epi8(b' ' as i8);
        let below_tab = _mm_set1_epi8(b'\t' as i8 - 1);
        let past_cr = _mm_set1_epi8(b'\r' as i8 + 1);
        for k in 0..BLOCK / 16 {
            let v = _mm_loadu_si128(block.as_ptr().add(16 * k).cast());
            // Signed compares: a byte of 0x80 and up is negative, below `\t`.
            let control = _mm_and_si128(_mm_cmpgt_epi8(v, below_tab), _mm_cmplt_epi8(v, past_cr));
            let s = _mm_or_si128(_mm_cmpeq_epi8(v, blank), control);
            space |= u64::from(_mm_movemask_epi8(s) as u16) << (16 * k);
            high |= _mm_movemask_epi8(v) as u32;
        }
    }
    (high == 0).then_some(space)
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        loop {
            match self.open {
                None => {
                    if self.starts != 0 {
                        let i = self.starts.trailing_zeros() as usize;
                        self.starts &= self.starts - 1;
                        self.open = Some(self.base + i);
                    } else if !self.advance() {
                        return None;
                    }
                }
                Some(start) => {
                    if self.ends != 0 {
                        let i = self.ends.trailing_zeros() as usize;
                        self.ends &= self.ends - 1;
                        self.open = None;
                        return Some(self.word(start, self.base + i));
                    } else if !self.advance() {
                        // The word runs to the end of the text.
                        self.open = None;
                        return Some(self.word(start, self.s.len()));
                    }
                }
            }
        }
    }
}

impl std::iter::FusedIterator for Words<'_> {}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
