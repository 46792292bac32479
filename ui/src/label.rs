//! Labels of the UI's SVG pictures: text wrapped at word boundaries into a few lines of
//! a given width, so a stage name such as `reduce_by_key at src/main.rs:12` reads whole
//! instead of cut mid-word.
//!
//! Invariants: lines break only between words (at spaces) unless one word alone is wider
//! than a line, which is then cut at a character boundary; text left over after the
//! last line is replaced by `…`; every line is HTML-escaped.

use std::fmt::Write as _;

use crate::html::esc;

/// `text` in lines of at most `width` characters, at most `max_lines` of them.
pub(crate) fn wrap(text: &str, width: usize, max_lines: usize) -> Vec<String> {
    let width = width.max(2);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    let mut words = text.split_whitespace().peekable();
    let mut cut = false;
    for word in words.by_ref() {
        let len = line.chars().count();
        let wlen = word.chars().count();
        if len > 0 && len + 1 + wlen <= width {
            line.push(' ');
            line.push_str(word);
            continue;
        }
        if len > 0 {
            if lines.len() + 1 == max_lines {
                cut = true;
                break;
            }
            lines.push(std::mem::take(&mut line));
        }
        if wlen <= width {
            line.push_str(word);
            continue;
        }
        // A word wider than a line: cut it, its rest goes on.
        let mut rest: Vec<char> = word.chars().collect();
        while rest.len() > width {
            if lines.len() + 1 == max_lines {
                line = rest.iter().collect();
                cut = true;
                break;
            }
            lines.push(rest.drain(..width).collect());
        }
        if cut {
            break;
        }
        line = rest.into_iter().collect();
    }
    if cut || words.peek().is_some() {
        let keep: String = line.chars().take(width - 1).collect();
        line = format!("{}…", keep.trim_end());
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// [`wrap`]ped `text` as SVG `<tspan>`s at `x`, one line every `line_height`.
pub(crate) fn tspans(
    text: &str,
    width: usize,
    max_lines: usize,
    x: u32,
    line_height: u32,
) -> String {
    let mut out = String::new();
    for (i, line) in wrap(text, width, max_lines).iter().enumerate() {
        let dy = if i == 0 { 0 } else { line_height };
        let _ = write!(out, "<tspan x=\"{x}\" dy=\"{dy}\">{}</tspan>", esc(line));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn lines_break_between_words() {
        assert_eq!(
            wrap("reduce_by_key at src/main.rs:12", 20, 2),
            ["reduce_by_key at", "src/main.rs:12"]
        );
        assert_eq!(wrap("map at a.rs:1", 30, 2), ["map at a.rs:1"]);
    }

    #[test]
    fn what_does_not_fit_ends_in_an_ellipsis_at_a_word() {
        let lines = wrap(
            "flat_map at src/bin/wordcount.rs:40 and more words here",
            16,
            2,
        );
        assert_eq!(lines, ["flat_map at", "src/bin/wordcou…"]);
        assert!(lines.iter().all(|l| l.chars().count() <= 16), "{lines:?}");
        let lines = wrap("one two three four", 9, 2);
        assert_eq!(lines, ["one two", "three…"]);
    }

    #[test]
    fn a_word_wider_than_a_line_is_cut() {
        assert_eq!(wrap("abcdefghij", 4, 3), ["abcd", "efgh", "ij"]);
        assert_eq!(wrap("abcdefghij", 4, 2), ["abcd", "efg…"]);
    }
}
