//! Lexing one Rust source file for the floors check: comments and literals blanked,
//! the text cut into tokens, and the tokens of `#[cfg(test)]` items set apart.
//!
//! Owns `blank`, `tokenize`, `split_test` and `LineIndex`; knows nothing of modules.
//!
//! Invariants:
//! - `blank` returns text of exactly the input's byte length with every newline in
//!   place, so a byte offset (and so a line number) means the same in both; comments,
//!   char literals and the insides of string literals (raw ones included) become spaces,
//!   and a string keeps two `"` at its delimiters' places (so `#[path = "..."]` is read
//!   from the original text at the offsets of its token);
//! - a lifetime or label (`'a`, `'static`) is never taken for a char literal;
//! - every token's `pos` is its byte offset in the original text;
//! - `split_test` drops whole items: the attribute `#[cfg(test)]` (or `cfg(all(test,
//!   ...))`) and the item, field, arm or statement it is on, up to its closing `}`, `;`
//!   or `,`; `#![cfg(test)]` makes the whole file test code.

/// What a token is; literals other than strings, lifetimes and numbers leave none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An identifier or keyword (`r#x` gives `x`); `$crate` is one identifier.
    Ident(String),
    /// `::`
    PathSep,
    /// Any other single punctuation byte.
    Punct(u8),
    /// A string literal, its content blanked; `end` is the offset just past it.
    Str { end: usize },
}

#[derive(Clone, Debug)]
pub struct Token {
    pub kind: Kind,
    pub pos: usize,
}

impl Token {
    pub fn ident(&self) -> Option<&str> {
        match &self.kind {
            Kind::Ident(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_ident(&self, s: &str) -> bool {
        self.ident() == Some(s)
    }

    pub fn is_punct(&self, c: u8) -> bool {
        self.kind == Kind::Punct(c)
    }
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

fn wipe(out: &mut [u8], from: usize, to: usize) {
    for b in &mut out[from..to] {
        if *b != b'\n' {
            *b = b' ';
        }
    }
}

/// The text with comments, char literals and string contents blanked (see the module
/// doc for what is kept).
pub fn blank(src: &str) -> String {
    let b = src.as_bytes();
    let n = b.len();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < n {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            let end = b[i..].iter().position(|&x| x == b'\n').map_or(n, |k| i + k);
            wipe(&mut out, i, end);
            i = end;
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let end = block_comment_end(b, i);
            wipe(&mut out, i, end);
            i = end;
        } else if c == b'"' {
            let end = string_end(b, i + 1);
            wipe(&mut out, i + 1, end.saturating_sub(1).max(i + 1));
            i = end;
        } else if c == b'\'' {
            match char_literal_end(b, i) {
                Some(end) => {
                    wipe(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else if is_ident_byte(c) {
            // i starts an identifier (or number): a raw string's prefix only here.
            if let Some((open, close, end)) = raw_string(b, i) {
                wipe(&mut out, i, end);
                out[open] = b'"';
                out[close] = b'"';
                i = end;
                continue;
            }
            while i < n && is_ident_byte(b[i]) {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking replaces whole UTF-8 characters")
}

fn block_comment_end(b: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut j = start;
    while j < b.len() {
        if b[j..].starts_with(b"/*") {
            depth += 1;
            j += 2;
        } else if b[j..].starts_with(b"*/") {
            depth -= 1;
            j += 2;
            if depth == 0 {
                return j;
            }
        } else {
            j += 1;
        }
    }
    b.len()
}

/// The offset just past the closing `"` of a string whose content starts at `j`.
fn string_end(b: &[u8], mut j: usize) -> usize {
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return j + 1,
            _ => j += 1,
        }
    }
    b.len()
}

/// `r"…"`, `r#"…"#`, `br"…"`, `cr#"…"#` starting at `i`: (opening quote, closing
/// quote, end).
fn raw_string(b: &[u8], i: usize) -> Option<(usize, usize, usize)> {
    let mut j = i;
    if matches!(b[j], b'b' | b'c') {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&x| x == b'#').count();
    j += hashes;
    if b.get(j) != Some(&b'"') {
        return None;
    }
    let open = j;
    let mut k = j + 1;
    while k < b.len() {
        if b[k] == b'"'
            && b[k + 1..]
                .iter()
                .take(hashes)
                .filter(|&&x| x == b'#')
                .count()
                == hashes
        {
            return Some((open, k, k + 1 + hashes));
        }
        k += 1;
    }
    Some((open, b.len() - 1, b.len()))
}

/// The end of the char literal starting at the `'` at `i`, or None for a lifetime or
/// label.
fn char_literal_end(b: &[u8], i: usize) -> Option<usize> {
    let first = *b.get(i + 1)?;
    if first == b'\\' {
        // `'\n'`, `'\''`, `'\u{1F600}'`: the escaped byte, then up to the closing quote.
        let mut j = i + 3;
        while j < b.len() && j < i + 16 && b[j] != b'\'' && b[j] != b'\n' {
            j += 1;
        }
        return (b.get(j) == Some(&b'\'')).then_some(j + 1);
    }
    if first == b'\'' || first == b'\n' {
        return None;
    }
    let len = match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    };
    (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 2 + len)
}

/// Tokens of blanked text (see `blank`); numbers and lifetimes leave no token.
pub fn tokenize(text: &str) -> Vec<Token> {
    let b = text.as_bytes();
    let n = b.len();
    let mut out = Vec::new();
    let mut i = 0;
    while i < n {
        let c = b[i];
        let pos = i;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'"' {
            let end = b[i + 1..]
                .iter()
                .position(|&x| x == b'"')
                .map_or(n, |k| i + k + 2);
            out.push(Token {
                kind: Kind::Str { end },
                pos,
            });
            i = end;
        } else if c == b'$'
            && b[i + 1..].starts_with(b"crate")
            && !b.get(i + 6).is_some_and(|&x| is_ident_byte(x))
        {
            out.push(Token {
                kind: Kind::Ident("$crate".into()),
                pos,
            });
            i += 6;
        } else if c == b'\'' {
            i += 1;
            while i < n && is_ident_byte(b[i]) {
                i += 1;
            }
        } else if is_ident_byte(c) {
            let mut start = i;
            while i < n && is_ident_byte(b[i]) {
                i += 1;
            }
            if c.is_ascii_digit() {
                continue;
            }
            if &b[start..i] == b"r"
                && b.get(i) == Some(&b'#')
                && b.get(i + 1).is_some_and(|&x| is_ident_byte(x))
            {
                start = i + 1;
                i = start;
                while i < n && is_ident_byte(b[i]) {
                    i += 1;
                }
            }
            out.push(Token {
                kind: Kind::Ident(text[start..i].to_string()),
                pos,
            });
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push(Token {
                kind: Kind::PathSep,
                pos,
            });
            i += 2;
        } else {
            out.push(Token {
                kind: Kind::Punct(c),
                pos,
            });
            i += 1;
        }
    }
    out
}

/// The index just past the bracket group opening at `open` (`(`, `[` or `{`).
pub fn group_end(toks: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t.kind {
            Kind::Punct(b'(' | b'[' | b'{') => depth += 1,
            Kind::Punct(b')' | b']' | b'}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// Whether the attribute whose `[` is at `open` is `cfg(test)` or `cfg(all(.., test, ..))`.
fn is_cfg_test(toks: &[Token], open: usize) -> bool {
    let end = group_end(toks, open);
    let inner = &toks[open + 1..end.saturating_sub(1)];
    if inner.len() < 3 || !inner[0].is_ident("cfg") || !inner[1].is_punct(b'(') {
        return false;
    }
    let pred = &inner[2..inner.len() - 1];
    let is_test = |p: &[Token]| p.len() == 1 && p[0].is_ident("test");
    if is_test(pred) {
        return true;
    }
    if pred.len() < 3 || !pred[0].is_ident("all") || !pred[1].is_punct(b'(') {
        return false;
    }
    let args = &pred[2..pred.len() - 1];
    let mut start = 0;
    let mut k = 0;
    while k <= args.len() {
        if k == args.len() || args[k].is_punct(b',') {
            if is_test(&args[start..k]) {
                return true;
            }
            start = k + 1;
            k += 1;
        } else if matches!(args[k].kind, Kind::Punct(b'(' | b'[' | b'{')) {
            k = group_end(args, k);
        } else {
            k += 1;
        }
    }
    false
}

const SEMI_ITEMS: [&str; 5] = ["const", "static", "let", "type", "use"];
const BRACE_ITEMS: [&str; 9] = [
    "fn",
    "mod",
    "impl",
    "trait",
    "enum",
    "union",
    "struct",
    "macro_rules",
    "extern",
];

/// The index just past the item (or field, arm, statement) starting at `start`.
fn item_end(toks: &[Token], start: usize) -> usize {
    let mut k = start;
    while k + 1 < toks.len() && toks[k].is_punct(b'#') && toks[k + 1].is_punct(b'[') {
        k = group_end(toks, k + 1);
    }
    // The item's keyword, past its visibility and qualifiers.
    let mut j = k;
    let mut keyword = None;
    while let Some(t) = toks.get(j) {
        match t.ident() {
            Some("pub") if toks.get(j + 1).is_some_and(|t| t.is_punct(b'(')) => {
                j = group_end(toks, j + 1)
            }
            Some("pub" | "unsafe" | "async" | "default") => j += 1,
            Some(word @ ("const" | "static")) => {
                let next = toks.get(j + 1).and_then(Token::ident);
                if matches!(next, Some("fn" | "unsafe" | "async" | "extern")) {
                    j += 1;
                } else {
                    keyword = Some(word);
                    break;
                }
            }
            Some("extern")
                if matches!(toks.get(j + 1).map(|t| &t.kind), Some(Kind::Str { .. })) =>
            {
                j += 2
            }
            Some(word) => {
                keyword = Some(word);
                break;
            }
            None => break,
        }
    }
    let is_item = keyword.is_some_and(|w| SEMI_ITEMS.contains(&w) || BRACE_ITEMS.contains(&w));
    let brace_ends = keyword.is_none_or(|w| !SEMI_ITEMS.contains(&w));
    let (mut depth, mut angle) = (0usize, 0usize);
    while k < toks.len() {
        match toks[k].kind {
            Kind::Punct(b'(' | b'[' | b'{') => depth += 1,
            Kind::Punct(b')' | b']' | b'}') => {
                if depth == 0 {
                    return k; // the enclosing scope closes: a field or arm ends here
                }
                depth -= 1;
                if depth == 0 && brace_ends && toks[k].is_punct(b'}') {
                    return k + 1;
                }
            }
            Kind::Punct(b';') if depth == 0 => return k + 1,
            Kind::Punct(b'<') if depth == 0 => angle += 1,
            Kind::Punct(b'>')
                if depth == 0 && !toks[k - 1].is_punct(b'-') && !toks[k - 1].is_punct(b'=') =>
            {
                angle = angle.saturating_sub(1)
            }
            Kind::Punct(b',') if depth == 0 && angle == 0 && !is_item => return k + 1,
            _ => {}
        }
        k += 1;
    }
    toks.len()
}

/// The file's tokens split into (kept, test-only): `#[cfg(test)]` items go to the
/// second list, as does everything after an inner `#![cfg(test)]`.
pub fn split_test(toks: Vec<Token>) -> (Vec<Token>, Vec<Token>) {
    let mut test = vec![false; toks.len()];
    let mut k = 0;
    while k + 1 < toks.len() {
        if toks[k].is_punct(b'#')
            && toks[k + 1].is_punct(b'!')
            && toks.get(k + 2).is_some_and(|t| t.is_punct(b'['))
            && is_cfg_test(&toks, k + 2)
        {
            return (Vec::new(), toks);
        }
        if toks[k].is_punct(b'#') && toks[k + 1].is_punct(b'[') && is_cfg_test(&toks, k + 1) {
            let end = item_end(&toks, k);
            test[k..end].iter_mut().for_each(|t| *t = true);
            k = end;
        } else {
            k += 1;
        }
    }
    let (mut kept, mut dropped) = (Vec::new(), Vec::new());
    for (t, is_test) in toks.into_iter().zip(test) {
        if is_test {
            dropped.push(t)
        } else {
            kept.push(t)
        }
    }
    (kept, dropped)
}

/// Byte offset -> 1-based line number.
pub struct LineIndex(Vec<usize>);

impl LineIndex {
    pub fn new(text: &str) -> Self {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex(starts.collect())
    }

    pub fn line(&self, pos: usize) -> usize {
        self.0.partition_point(|&start| start <= pos)
    }
}
