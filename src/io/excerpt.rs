//! Quoting bad input in error messages: a bounded prefix, never the whole record.
//!
//! Invariant: the text of an [`Excerpt`] is at most [`EXCERPT_CHARS`] characters of
//! input (escaped as Rust's `{:?}` escapes them) plus a short suffix saying how much was
//! left out, whatever the size of the input; it never cuts a character in two.

use std::fmt;

/// Characters of input an [`Excerpt`] quotes at most.
pub const EXCERPT_CHARS: usize = 120;

/// A record quoted for an error message: `"its first 120 characters"… (N more bytes)`.
///
/// ```
/// let line = "x".repeat(1_000_000);
/// let msg = format!("malformed line {}", ember::io::excerpt(&line));
/// assert!(msg.len() < 200);
/// assert!(msg.ends_with("(999880 more bytes)"));
/// ```
pub fn excerpt(s: &str) -> Excerpt<'_> {
    Excerpt(s)
}

/// See [`excerpt`].
pub struct Excerpt<'a>(&'a str);

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cut = self
            .0
            .char_indices()
            .nth(EXCERPT_CHARS)
            .map_or(self.0.len(), |(i, _)| i);
        write!(f, "{:?}", &self.0[..cut])?;
        if cut < self.0.len() {
            write!(f, "… ({} more bytes)", self.0.len() - cut)?;
        }
        Ok(())
    }
}

impl fmt::Debug for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_input_is_quoted_whole_and_long_input_is_cut_on_a_char_boundary() {
        assert_eq!(excerpt("a,b").to_string(), "\"a,b\"");
        let long = "é".repeat(500);
        let text = excerpt(&long).to_string();
        assert_eq!(text, format!("{:?}… (760 more bytes)", "é".repeat(120)));
        assert_eq!(excerpt("").to_string(), "\"\"");
    }
}
