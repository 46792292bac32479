//! What one source file says about names, read from its tokens: the modules it
//! declares, the items it defines, its `use` trees, the paths in its code and the
//! macros it calls. Nothing here resolves a name; `graph` does.
//!
//! Invariants:
//! - test code (see `lex::split_test`) contributes only `mod x;` declarations, marked
//!   `test`, so their files are known as test files and never loaded;
//! - `defs` holds the names of items at the file's top level (not methods, not items in
//!   function bodies or inline modules, whose names are `defs` themselves);
//! - every `use` leaf keeps the inline-module nesting (`nest`) it was written in and
//!   whether it is module-level (not inside a block) and public (`pub`, `pub(...)`);
//! - `paths` are the code's paths of two or more segments (and `x::y!` macro paths)
//!   outside `use` declarations and `pub(in ...)` visibilities, with their first token's
//!   offset; a path's first segment is not preceded by `::`, `.` or `$`;
//! - `idents` holds every identifier of the (non-test) code outside `use` declarations,
//!   so whether a `use`d name is used at all can be told.

use std::collections::BTreeSet;

use crate::lex::{self, group_end, Kind, Token};

pub struct ModDecl {
    pub name: String,
    pub nest: Vec<String>,
    pub path_attr: Option<String>,
    pub test: bool,
}

pub struct UseLeaf {
    pub segs: Vec<String>,
    /// The name the leaf binds (`_` for `as _`); empty for a glob.
    pub alias: String,
    pub glob: bool,
    pub public: bool,
    pub nest: Vec<String>,
    pub module_level: bool,
    pub pos: usize,
}

impl UseLeaf {
    /// The leaf as written, for messages: `crate::a::B as C`, `super::x::*`.
    pub fn text(&self) -> String {
        let mut s = self.segs.join("::");
        if self.glob {
            s.push_str("::*");
        } else if self.segs.last() != Some(&self.alias) {
            s.push_str(" as ");
            s.push_str(&self.alias);
        }
        s
    }
}

pub struct PathRef {
    pub segs: Vec<String>,
    pub nest: Vec<String>,
    pub pos: usize,
}

pub struct MacroDef {
    pub name: String,
    pub exported: bool,
}

#[derive(Default)]
pub struct FileScan {
    pub mods: Vec<ModDecl>,
    pub defs: BTreeSet<String>,
    pub macros: Vec<MacroDef>,
    pub uses: Vec<UseLeaf>,
    pub paths: Vec<PathRef>,
    /// `name!` calls of a single-segment macro name, with the name's offset.
    pub macro_calls: Vec<(String, usize)>,
    /// Every identifier of the code outside `use` declarations.
    pub idents: BTreeSet<String>,
}

const DEF_KINDS: [&str; 9] = [
    "fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod",
];
const NOT_NAMES: [&str; 6] = ["fn", "unsafe", "async", "extern", "mut", "_"];

enum Scope {
    Module(String),
    Block,
}

pub fn scan(original: &str) -> FileScan {
    let blanked = lex::blank(original);
    let (toks, test_toks) = lex::split_test(lex::tokenize(&blanked));
    let mut out = FileScan::default();
    for k in 0..test_toks.len() {
        if let Some(mut decl) = mod_decl(original, &test_toks, k) {
            decl.test = true;
            out.mods.push(decl);
        }
    }
    let mut stack: Vec<Scope> = Vec::new();
    let mut k = 0;
    while k < toks.len() {
        let module_level = stack.iter().all(|s| matches!(s, Scope::Module(_)));
        let nest: Vec<String> = stack
            .iter()
            .filter_map(|s| match s {
                Scope::Module(name) => Some(name.clone()),
                Scope::Block => None,
            })
            .collect();
        let t = &toks[k];
        let prev = k.checked_sub(1).map(|p| &toks[p]);
        let after_sep = prev.is_some_and(|p| p.kind == Kind::PathSep || p.is_punct(b'.'));
        match t.kind {
            Kind::Punct(b'{') => {
                let inline_mod = module_level && k >= 2 && toks[k - 2].is_ident("mod");
                match toks[k.saturating_sub(1)].ident().filter(|_| inline_mod) {
                    Some(name) => {
                        if stack.is_empty() {
                            out.defs.insert(name.to_string());
                        }
                        stack.push(Scope::Module(name.to_string()));
                    }
                    None => stack.push(Scope::Block),
                }
            }
            Kind::Punct(b'}') => {
                stack.pop();
            }
            Kind::Ident(ref word) if word == "use" && !after_sep => {
                let end = statement_end(&toks, k);
                let public = is_public(&toks, k);
                let mut leaves = Vec::new();
                let mut i = k + 1;
                let body_end = if toks[end - 1].is_punct(b';') {
                    end - 1
                } else {
                    end
                };
                let ok = use_tree(&toks[..body_end], &mut i, &mut Vec::new(), &mut leaves);
                if ok.is_some() {
                    for (mut segs, alias, glob, pos) in leaves {
                        if segs.last().is_some_and(|s| s == "self") {
                            segs.pop();
                        }
                        let Some(last) = segs.last().cloned() else {
                            continue;
                        };
                        let alias = if glob {
                            String::new()
                        } else {
                            alias.unwrap_or(last)
                        };
                        let (nest, module_level) = (nest.clone(), module_level);
                        out.uses.push(UseLeaf {
                            segs,
                            alias,
                            glob,
                            public,
                            nest,
                            module_level,
                            pos,
                        });
                    }
                }
                k = end;
                continue;
            }
            Kind::Ident(ref word) if word == "mod" && module_level => {
                if let Some(mut decl) = mod_decl(original, &toks, k) {
                    decl.nest = nest;
                    out.mods.push(decl);
                }
            }
            Kind::Ident(ref word)
                if word == "macro_rules" && toks.get(k + 1).is_some_and(|t| t.is_punct(b'!')) =>
            {
                if let Some(name) = toks
                    .get(k + 2)
                    .and_then(Token::ident)
                    .filter(|_| module_level)
                {
                    let exported = attrs_before(&toks, k)
                        .iter()
                        .any(|&(a, _)| toks[a + 2].is_ident("macro_export"));
                    out.macros.push(MacroDef {
                        name: name.to_string(),
                        exported,
                    });
                    if stack.is_empty() {
                        out.defs.insert(name.to_string());
                    }
                }
                k += 3;
                continue;
            }
            Kind::Ident(ref word) => {
                if !prev
                    .and_then(Token::ident)
                    .is_some_and(|p| DEF_KINDS.contains(&p))
                {
                    out.idents.insert(word.clone()); // a use, not the name an item defines
                }
                if stack.is_empty() && DEF_KINDS.contains(&word.as_str()) && !after_sep {
                    let mut j = k + 1;
                    if toks.get(j).is_some_and(|t| t.is_ident("mut")) {
                        j += 1;
                    }
                    if let Some(name) = toks.get(j).and_then(Token::ident) {
                        let is_union = word == "union";
                        let union_ok = !is_union
                            || toks
                                .get(j + 1)
                                .is_some_and(|t| t.is_punct(b'{') || t.is_punct(b'<'));
                        if !NOT_NAMES.contains(&name) && union_ok {
                            out.defs.insert(name.to_string());
                        }
                    }
                }
                let dollar = prev.is_some_and(|p| p.is_punct(b'$'));
                if !after_sep && !dollar && !in_visibility(&toks, k) {
                    k = code_path(&toks, k, nest, &mut out);
                    continue;
                }
            }
            _ => {}
        }
        k += 1;
    }
    out
}

/// The index just past the `;` ending the statement that starts at `k`.
fn statement_end(toks: &[Token], k: usize) -> usize {
    let mut j = k;
    while j < toks.len() {
        match toks[j].kind {
            Kind::Punct(b';') => return j + 1,
            Kind::Punct(b'{' | b'(' | b'[') => j = group_end(toks, j),
            Kind::Punct(b'}') => return j,
            _ => j += 1,
        }
    }
    toks.len()
}

/// Whether the item whose keyword is at `k` has a `pub` or `pub(...)` visibility.
fn is_public(toks: &[Token], k: usize) -> bool {
    match k.checked_sub(1).map(|p| &toks[p]) {
        Some(t) if t.is_ident("pub") => true,
        Some(t) if t.is_punct(b')') => {
            let mut depth = 0usize;
            let mut j = k - 1;
            loop {
                if toks[j].is_punct(b')') {
                    depth += 1;
                } else if toks[j].is_punct(b'(') {
                    depth -= 1;
                    if depth == 0 {
                        return j > 0 && toks[j - 1].is_ident("pub");
                    }
                }
                if j == 0 {
                    return false;
                }
                j -= 1;
            }
        }
        _ => false,
    }
}

/// Whether the identifier at `k` starts the path of a `pub(in path)`.
fn in_visibility(toks: &[Token], k: usize) -> bool {
    k >= 3
        && toks[k - 1].is_ident("in")
        && toks[k - 2].is_punct(b'(')
        && toks[k - 3].is_ident("pub")
}

/// The outer attributes right before the item whose keyword is at `k` (past its
/// visibility), as (`#` index, end) pairs.
fn attrs_before(toks: &[Token], k: usize) -> Vec<(usize, usize)> {
    let mut j = k;
    if j > 0 && toks[j - 1].is_ident("pub") {
        j -= 1;
    } else if j >= 2 && toks[j - 1].is_punct(b')') {
        if let Some(open) = (0..j - 1).rev().find(|&o| toks[o].is_punct(b'(')) {
            if open > 0 && toks[open - 1].is_ident("pub") {
                j = open - 1;
            }
        }
    }
    let mut attrs = Vec::new();
    while j > 0 && toks[j - 1].is_punct(b']') {
        let mut depth = 0usize;
        let mut o = j - 1;
        loop {
            if toks[o].is_punct(b']') {
                depth += 1;
            } else if toks[o].is_punct(b'[') {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            if o == 0 {
                return attrs;
            }
            o -= 1;
        }
        if o == 0 || !toks[o - 1].is_punct(b'#') {
            return attrs;
        }
        attrs.push((o - 1, j));
        j = o - 1;
    }
    attrs
}

/// `mod name;` at `k` (the `mod` keyword), with its `#[path = "..."]` if any.
fn mod_decl(original: &str, toks: &[Token], k: usize) -> Option<ModDecl> {
    if !toks[k].is_ident("mod") || !toks.get(k + 2)?.is_punct(b';') {
        return None;
    }
    let name = toks[k + 1].ident()?.to_string();
    let path_attr = attrs_before(toks, k).into_iter().find_map(|(a, end)| {
        let attr = &toks[a + 2..end - 1];
        match (
            attr.first(),
            attr.get(1),
            attr.get(2).map(|t| (&t.kind, t.pos)),
        ) {
            (Some(p), Some(eq), Some((Kind::Str { end }, pos)))
                if p.is_ident("path") && eq.is_punct(b'=') =>
            {
                Some(original[pos + 1..end - 1].to_string())
            }
            _ => None,
        }
    });
    Some(ModDecl {
        name,
        nest: Vec::new(),
        path_attr,
        test: false,
    })
}

type RawLeaf = (Vec<String>, Option<String>, bool, usize);

/// One use tree at `*i`, its leaves appended to `out`; None if it is not one.
fn use_tree(
    toks: &[Token],
    i: &mut usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<RawLeaf>,
) -> Option<()> {
    let base = prefix.len();
    if toks.get(*i)?.kind == Kind::PathSep {
        *i += 1;
        if base == 0 {
            prefix.push("::".to_string()); // `use ::x`: another crate, never a module here
        }
    }
    loop {
        let t = toks.get(*i)?;
        match &t.kind {
            Kind::Punct(b'{') => {
                *i += 1;
                while !toks.get(*i)?.is_punct(b'}') {
                    use_tree(toks, i, prefix, out)?;
                    if toks.get(*i)?.is_punct(b',') {
                        *i += 1;
                    }
                }
                *i += 1;
                break;
            }
            Kind::Punct(b'*') => {
                out.push((prefix.clone(), None, true, t.pos));
                *i += 1;
                break;
            }
            Kind::Ident(name) => {
                prefix.push(name.clone());
                *i += 1;
                if toks.get(*i).is_some_and(|t| t.kind == Kind::PathSep) {
                    *i += 1;
                    continue;
                }
                let mut alias = None;
                if toks.get(*i).is_some_and(|t| t.is_ident("as")) {
                    alias = Some(toks.get(*i + 1)?.ident()?.to_string());
                    *i += 2;
                }
                out.push((prefix.clone(), alias, false, t.pos));
                break;
            }
            _ => return None,
        }
    }
    prefix.truncate(base);
    Some(())
}

/// Records the path (or macro call) starting at identifier `k`; returns the index
/// just past it.
fn code_path(toks: &[Token], k: usize, nest: Vec<String>, out: &mut FileScan) -> usize {
    let mut segs = vec![toks[k].ident().unwrap_or_default().to_string()];
    let mut j = k + 1;
    while j + 1 < toks.len() && toks[j].kind == Kind::PathSep {
        match toks[j + 1].ident() {
            Some(seg) => segs.push(seg.to_string()),
            None => break, // `::<` or `::{`
        }
        j += 2;
    }
    let bang = toks.get(j).is_some_and(|t| t.is_punct(b'!'))
        && !toks.get(j + 1).is_some_and(|t| t.is_punct(b'='));
    if segs.len() > 1 {
        out.paths.push(PathRef {
            segs,
            nest,
            pos: toks[k].pos,
        });
    } else if bang {
        out.macro_calls.push((segs.remove(0), toks[k].pos));
    }
    j
}
