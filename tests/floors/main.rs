//! The job library's import structure checked against ARCHITECTURE.md's floors.
//!
//! `cargo test --test floors -- --nocapture` derives the file-level import graph of
//! `src/` (non-test code) and prints it in summary: files, edges, every circle (a
//! strongly connected component of more than one file) and how many edges cross floors
//! downward; `EMBER_FLOORS_EDGES=1` prints every edge `a -> b` too. The test fails,
//! listing every violation, when a file imports from a higher floor (unless both files
//! are in the `circle:` set), when a circle is not entirely inside the `circle:` set,
//! or when a file of `src/` has no floor (new modules must be placed).
//!
//! Layout: `lex` (blanking, tokens, test items), `scan` (one file's declarations, uses
//! and paths), `graph` (modules, name resolution, edges, circles), `floors` (the block,
//! the check, the summary), `fixtures` (the checker checked on small trees).
//!
//! Invariants: std only; the analysis reads nothing but an in-memory tree (path
//! relative to `src/` -> text) and the text of ARCHITECTURE.md, so the fixtures and the
//! real tree go through the same code; only `src_imports_respect_the_floors` touches
//! the file system.

mod fixtures;
mod floors;
mod graph;
mod lex;
mod scan;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// What one run of the check found.
pub struct Outcome {
    /// The graph's summary and, when the floors block is usable, the floors' counts.
    pub summary: String,
    /// Every edge, `a -> b` a line, each with the first line of `a` that imports from `b`.
    pub edges: String,
    pub violations: Vec<String>,
}

/// The whole check over an in-memory `src/` tree and the text of ARCHITECTURE.md.
pub fn run(tree: &BTreeMap<String, String>, architecture_md: &str) -> Outcome {
    let g = match graph::Graph::build(tree) {
        Ok(g) => g,
        Err(e) => {
            return Outcome {
                summary: String::new(),
                edges: String::new(),
                violations: vec![e],
            };
        }
    };
    let mut summary = floors::graph_summary(&g);
    let edges = floors::edge_list(&g, true);
    let violations = match floors::parse(architecture_md) {
        Ok(f) => {
            let report = floors::check(&g, &f);
            summary.push('\n');
            summary.push_str(&report.summary);
            report.violations
        }
        Err(e) => vec![e],
    };
    Outcome {
        summary,
        edges,
        violations,
    }
}

/// Every `.rs` file under `dir`, by its `/`-separated path relative to `dir`.
fn read_tree(dir: &Path) -> BTreeMap<String, String> {
    let mut tree = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let entries =
            fs::read_dir(&d).unwrap_or_else(|e| panic!("reading directory {}: {e}", d.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("listing {}: {e}", d.display()))
                .path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let rel = path
                    .strip_prefix(dir)
                    .expect("a file under the walked directory");
                let key = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                let text = fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
                tree.insert(key, text);
            }
        }
    }
    tree
}

#[test]
fn src_imports_respect_the_floors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tree = read_tree(&root.join("src"));
    let md_path = root.join("ARCHITECTURE.md");
    let md = fs::read_to_string(&md_path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", md_path.display()));
    let outcome = run(&tree, &md);
    println!("{}", outcome.summary);
    if std::env::var_os("EMBER_FLOORS_EDGES").is_some_and(|v| v == "1") {
        println!("edges (a -> b: a imports from b):\n{}", outcome.edges);
    }
    assert!(
        outcome.violations.is_empty(),
        "{} violation(s) of ARCHITECTURE.md's floors in src/:\n\n{}\n",
        outcome.violations.len(),
        outcome.violations.join("\n\n")
    );
}
