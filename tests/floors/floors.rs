//! The floors block of ARCHITECTURE.md (its format is summed up below), the check of
//! an import graph against it, and the printed summary.
//!
//! The block is a fenced code block with the info string `floors`; each non-comment
//! line is one floor, bottom first, of module paths (`plan::op`, `io`); an entry covers
//! its descendants and a file takes the floor of its longest matching entry; a
//! `circle:` line names the modules allowed to import each other both ways.
//!
//! Invariants:
//! - a block that is missing, unterminated, empty, or names an entry twice is an error,
//!   never an empty set of floors;
//! - `lib.rs` (the crate root) is exempt: it has no floor and no edges;
//! - every violation is one self-contained line (or block) naming the file(s), the
//!   line(s), the imported path and both floors, so a failing run says what to fix.

use std::collections::BTreeSet;

use crate::graph::{Graph, Site};

pub struct Floors {
    /// Entries of each floor, bottom first, as module path segments.
    levels: Vec<Vec<Vec<String>>>,
    circle: Vec<Vec<String>>,
}

fn entry(text: &str, line: usize) -> Result<Vec<String>, String> {
    let segs: Vec<String> = text.split("::").map(str::to_string).collect();
    let ident = |s: &String| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
    if segs.iter().all(ident) {
        Ok(segs)
    } else {
        Err(format!(
            "floors block, line {line}: `{text}` is not a module path"
        ))
    }
}

pub fn parse(md: &str) -> Result<Floors, String> {
    let mut lines = md.lines().enumerate();
    let fence = loop {
        let Some((_, line)) = lines.next() else {
            return Err(
                "ARCHITECTURE.md has no ```floors block: add one (each line a floor of \
                        module paths, bottom first; `circle: ...` for the allowed circle)"
                    .to_string(),
            );
        };
        let t = line.trim_start();
        let fence: String = t.chars().take_while(|&c| c == '`' || c == '~').collect();
        if fence.len() >= 3 && t[fence.len()..].trim() == "floors" {
            break fence;
        }
    };
    let (mut levels, mut circle, mut closed) = (Vec::new(), Vec::new(), false);
    for (i, line) in lines {
        if line.trim_start().starts_with(&fence) {
            closed = true;
            break;
        }
        let text = line.split('#').next().unwrap_or_default().trim();
        if let Some(rest) = text.strip_prefix("circle:") {
            for word in rest.split_whitespace() {
                circle.push(entry(word, i + 1)?);
            }
        } else if !text.is_empty() {
            levels.push(
                text.split_whitespace()
                    .map(|w| entry(w, i + 1))
                    .collect::<Result<Vec<_>, _>>()?,
            );
        }
    }
    if !closed {
        return Err("ARCHITECTURE.md: the floors block is not closed".to_string());
    }
    if levels.is_empty() {
        return Err("ARCHITECTURE.md: the floors block names no floor".to_string());
    }
    let mut seen = BTreeSet::new();
    let twice: Vec<String> = levels
        .iter()
        .flatten()
        .filter(|e| !seen.insert(*e))
        .map(|e| e.join("::"))
        .collect();
    if !twice.is_empty() {
        return Err(format!(
            "ARCHITECTURE.md: the floors block names {} more than once",
            twice.join(", ")
        ));
    }
    Ok(Floors { levels, circle })
}

impl Floors {
    /// The floor (1 = bottom) of a module path and the entry that places it.
    pub fn place(&self, module: &[String]) -> Option<(usize, String)> {
        let mut best: Option<(usize, &Vec<String>)> = None;
        for (level, entries) in self.levels.iter().enumerate() {
            for e in entries.iter().filter(|e| module.starts_with(e)) {
                if best.is_none_or(|(_, b)| e.len() > b.len()) {
                    best = Some((level + 1, e));
                }
            }
        }
        best.map(|(level, e)| (level, e.join("::")))
    }

    fn in_circle(&self, module: &[String]) -> bool {
        self.circle.iter().any(|e| module.starts_with(e))
    }
}

pub struct Report {
    pub violations: Vec<String>,
    /// What the floors add to the graph's summary: edge counts across floors, warnings.
    pub summary: String,
}

fn sites_text(file: &str, sites: &[Site]) -> String {
    let first = &sites[0];
    let mut s = format!("src/{file}:{} `{}`", first.line, first.text);
    if sites.len() > 1 {
        let more: Vec<String> = sites[1..]
            .iter()
            .take(12)
            .map(|s| s.line.to_string())
            .collect();
        let etc = if sites.len() > 13 { ", ..." } else { "" };
        let lines = if more.len() == 1 { "line" } else { "lines" };
        s.push_str(&format!(" (also {lines} {}{etc})", more.join(", ")));
    }
    s
}

pub fn check(g: &Graph, floors: &Floors) -> Report {
    let mut violations = Vec::new();
    let placed: Vec<Option<(usize, String)>> =
        g.modules.iter().map(|m| floors.place(&m.path)).collect();
    let show = |m: usize| match &placed[m] {
        Some((level, e)) => format!("floor {level} `{e}`"),
        None => "no floor".to_string(),
    };
    for (m, module) in g.modules.iter().enumerate().skip(1) {
        if placed[m].is_none() {
            violations.push(format!(
                "src/{} (`{}`) has no floor: place it (or a module above it) on a floor \
                 of the floors block",
                module.file,
                module.name()
            ));
        }
    }
    let (mut down, mut level, mut up, mut up_ok, mut unplaced) = (0, 0, 0, 0, 0);
    for (&(a, b), sites) in &g.edges {
        let (Some((fa, _)), Some((fb, _))) = (&placed[a], &placed[b]) else {
            unplaced += 1;
            continue;
        };
        match fa.cmp(fb) {
            std::cmp::Ordering::Greater => down += 1,
            std::cmp::Ordering::Equal => level += 1,
            std::cmp::Ordering::Less
                if floors.in_circle(&g.modules[a].path) && floors.in_circle(&g.modules[b].path) =>
            {
                up += 1;
                up_ok += 1;
            }
            std::cmp::Ordering::Less => {
                up += 1;
                violations.push(format!(
                    "upward import: {} from src/{} ({} imports from {})",
                    sites_text(&g.modules[a].file, sites),
                    g.modules[b].file,
                    show(a),
                    show(b)
                ));
            }
        }
    }
    for comp in g.circles() {
        let outside: Vec<String> = comp
            .iter()
            .filter(|&&m| !floors.in_circle(&g.modules[m].path))
            .map(|&m| g.modules[m].name())
            .collect();
        if outside.is_empty() {
            continue;
        }
        let members: BTreeSet<usize> = comp.iter().copied().collect();
        let mut text = format!(
            "circle of {} files not inside `circle:` ({} outside it): {}\n  files: {}\n  \
             edges inside it:",
            comp.len(),
            outside.join(", "),
            comp.iter()
                .map(|&m| g.modules[m].name())
                .collect::<Vec<_>>()
                .join(" "),
            comp.iter()
                .map(|&m| format!("src/{}", g.modules[m].file))
                .collect::<Vec<_>>()
                .join(" ")
        );
        for (&(a, b), sites) in g
            .edges
            .iter()
            .filter(|((a, b), _)| members.contains(a) && members.contains(b))
        {
            text.push_str(&format!(
                "\n    {} -> {}: {}",
                g.modules[a].name(),
                g.modules[b].name(),
                sites_text(&g.modules[a].file, sites)
            ));
        }
        violations.push(text);
    }
    let mut summary = format!(
        "edges across floors: {down} downward, {level} within a floor, {up} upward \
         ({up_ok} of them inside `circle:`), \
         {unplaced} from or to a file with no floor"
    );
    for e in floors.levels.iter().flatten().chain(&floors.circle) {
        if !g.modules.iter().any(|m| m.path.starts_with(e)) {
            summary.push_str(&format!(
                "\nwarning: floors entry `{}` names no module of src/",
                e.join("::")
            ));
        }
    }
    Report {
        violations,
        summary,
    }
}

/// Files, edges, circles and what was left out: printed whether or not floors exist.
pub fn graph_summary(g: &Graph) -> String {
    let circles = g.circles();
    let mut s = format!(
        "import graph of src/: {} files (src/lib.rs exempt), {} edges, {} circles \
         (strongly connected, more than one file)",
        g.modules.len(),
        g.edges.len(),
        circles.len()
    );
    for comp in &circles {
        let names: Vec<String> = comp.iter().map(|&m| g.modules[m].name()).collect();
        s.push_str(&format!(
            "\n  circle of {}: {}",
            comp.len(),
            names.join(" ")
        ));
    }
    if !g.test_files.is_empty() {
        let files: Vec<&str> = g.test_files.iter().map(String::as_str).collect();
        s.push_str(&format!(
            "\ntest-only files (not in the graph): {}",
            files.join(" ")
        ));
    }
    if !g.orphans.is_empty() {
        s.push_str(&format!(
            "\nnot declared by any `mod` (not compiled): {}",
            g.orphans.join(" ")
        ));
    }
    for note in &g.notes {
        s.push_str(&format!("\nnote: {note}"));
    }
    s
}

/// Every edge, one `a -> b` a line; with `sites`, followed by where `a` first imports
/// from `b`.
pub fn edge_list(g: &Graph, sites: bool) -> String {
    let line = |(&(a, b), s): (&(usize, usize), &Vec<Site>)| {
        let edge = format!("{} -> {}", g.modules[a].name(), g.modules[b].name());
        if sites {
            format!("{edge:<48} {}", sites_text(&g.modules[a].file, &s[..1]))
        } else {
            edge
        }
    };
    g.edges.iter().map(line).collect::<Vec<_>>().join("\n")
}
