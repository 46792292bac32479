//! The file-level import graph of a crate's `src/`, built from an in-memory tree
//! (path relative to `src/` -> text): modules found from `lib.rs` through `mod x;`
//! declarations, every name resolved to the file that defines it, and the graph's
//! strongly connected components.
//!
//! Invariants:
//! - node 0 is `lib.rs`, the crate root; it has no edges in or out (it is exempt), and
//!   there are no self edges;
//! - an edge `a -> b` means a non-test line of `a` names an item that `b` defines
//!   (through `use`, a path in code, a path through a `use`d alias, or a macro's name);
//!   a re-export names its definer, found by following `use`/`pub use` chains, aliases
//!   and globs; enum variants and associated items count as their type's;
//! - a `use` of a module (`use crate::rdd;`) is no edge by itself: the paths through it
//!   are; a module's `pub use` of its own descendants is no edge either, unless the
//!   module's own code uses the name;
//! - files declared `#[cfg(test)] mod x;` are never loaded (they are `test_files`);
//!   `.rs` files that no declaration reaches are `orphans`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::lex::LineIndex;
use crate::scan::{self, FileScan};

/// Where an edge comes from: a line of the importing file and the path written there.
pub struct Site {
    pub line: usize,
    pub text: String,
}

pub struct Module {
    /// Module path from the crate root (empty for `lib.rs`).
    pub path: Vec<String>,
    /// File path relative to `src/`.
    pub file: String,
    scan: FileScan,
    lines: LineIndex,
    /// The absolute path of each `use` leaf of `scan.uses` (None: another crate's).
    use_abs: Vec<Option<Vec<String>>>,
    /// (inline-module nest, name) -> the absolute path a `use` binds the name to.
    aliases: BTreeMap<(Vec<String>, String), Vec<String>>,
    /// Names the module binds by `use`s of other crates.
    provided: BTreeSet<String>,
}

impl Module {
    pub fn name(&self) -> String {
        if self.path.is_empty() {
            "crate".to_string()
        } else {
            self.path.join("::")
        }
    }
}

pub struct Graph {
    pub modules: Vec<Module>,
    pub edges: BTreeMap<(usize, usize), Vec<Site>>,
    pub test_files: BTreeSet<String>,
    pub orphans: Vec<String>,
    pub notes: Vec<String>,
    by_path: BTreeMap<Vec<String>, usize>,
    /// Macro name -> the modules defining it with `macro_rules!` (exported first).
    macro_homes: BTreeMap<String, Vec<usize>>,
}

fn parent_dir(file: &str) -> &str {
    file.rfind('/').map_or("", |i| &file[..i])
}

fn join(dir: &str, rest: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in dir.split('/').chain(rest.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// The files a `mod` declaration of `file` may name, in rustc's order.
fn child_files(file: &str, decl: &scan::ModDecl) -> Vec<String> {
    let dir = parent_dir(file);
    let owns_dir =
        file == "lib.rs" || file == "main.rs" || file == "mod.rs" || file.ends_with("/mod.rs");
    let stem_dir = if owns_dir {
        dir.to_string()
    } else {
        file.trim_end_matches(".rs").to_string()
    };
    let nest = decl.nest.join("/");
    if let Some(p) = &decl.path_attr {
        let base = if decl.nest.is_empty() {
            dir.to_string()
        } else {
            join(&stem_dir, &nest)
        };
        return vec![join(&base, p)];
    }
    let base = join(&stem_dir, &nest);
    vec![
        join(&base, &format!("{}.rs", decl.name)),
        join(&base, &format!("{}/mod.rs", decl.name)),
    ]
}

impl Graph {
    pub fn build(tree: &BTreeMap<String, String>) -> Result<Graph, String> {
        if !tree.contains_key("lib.rs") {
            return Err("the tree has no lib.rs".to_string());
        }
        let mut g = Graph {
            modules: Vec::new(),
            edges: BTreeMap::new(),
            test_files: BTreeSet::new(),
            orphans: Vec::new(),
            notes: Vec::new(),
            by_path: BTreeMap::new(),
            macro_homes: BTreeMap::new(),
        };
        let mut queue = VecDeque::from([(Vec::new(), "lib.rs".to_string())]);
        let mut loaded = BTreeSet::new();
        while let Some((path, file)) = queue.pop_front() {
            if !loaded.insert(file.clone()) {
                g.notes
                    .push(format!("src/{file} is declared as a module more than once"));
                continue;
            }
            let text = &tree[&file];
            let scan = scan::scan(text);
            for decl in &scan.mods {
                let candidates = child_files(&file, decl);
                let found = candidates.iter().find(|c| tree.contains_key(c.as_str()));
                match found {
                    Some(f) if decl.test => {
                        g.test_files.insert(f.clone());
                    }
                    Some(f) => {
                        let mut child = path.clone();
                        child.extend(decl.nest.iter().cloned());
                        child.push(decl.name.clone());
                        queue.push_back((child, f.clone()));
                    }
                    None if decl.test => {}
                    None => g.notes.push(format!(
                        "src/{file}: `mod {};` names no file (looked for src/{})",
                        decl.name,
                        candidates.join(", src/")
                    )),
                }
            }
            g.by_path.insert(path.clone(), g.modules.len());
            let lines = LineIndex::new(text);
            g.modules.push(Module {
                path,
                file,
                scan,
                lines,
                use_abs: Vec::new(),
                aliases: BTreeMap::new(),
                provided: BTreeSet::new(),
            });
        }
        g.orphans = tree
            .keys()
            .filter(|f| f.ends_with(".rs") && !loaded.contains(*f) && !g.test_files.contains(*f))
            .cloned()
            .collect();
        for m in 0..g.modules.len() {
            g.bind_uses(m);
            for mac in &g.modules[m].scan.macros {
                let homes = g.macro_homes.entry(mac.name.clone()).or_default();
                if mac.exported {
                    homes.insert(0, m)
                } else {
                    homes.push(m)
                }
            }
        }
        for m in 1..g.modules.len() {
            g.add_edges(m);
        }
        Ok(g)
    }

    /// Absolute paths of module `m`'s `use` leaves, and the names they bind. A leaf may
    /// start from a name another leaf binds, so this runs until nothing changes.
    fn bind_uses(&mut self, m: usize) {
        let n = self.modules[m].scan.uses.len();
        let mut abs: Vec<Option<Vec<String>>> = vec![None; n];
        let mut aliases = BTreeMap::new();
        loop {
            let mut progress = false;
            for (i, u) in self.modules[m].scan.uses.iter().enumerate() {
                if abs[i].is_some() {
                    continue;
                }
                if let Some(p) = self.absolutize(m, &aliases, &u.nest, &u.segs) {
                    if !u.glob {
                        aliases
                            .entry((u.nest.clone(), u.alias.clone()))
                            .or_insert_with(|| p.clone());
                    }
                    abs[i] = Some(p);
                    progress = true;
                }
            }
            if !progress {
                break;
            }
        }
        let module = &mut self.modules[m];
        for (u, a) in module.scan.uses.iter().zip(&abs) {
            if a.is_none() && !u.glob && u.module_level && u.nest.is_empty() {
                module.provided.insert(u.alias.clone());
            }
        }
        module.use_abs = abs;
        module.aliases = aliases;
    }

    /// `segs`, written in module `m` inside inline modules `nest`, from the crate root;
    /// None when it names another crate's item (or nothing this crate has).
    fn absolutize(
        &self,
        m: usize,
        aliases: &BTreeMap<(Vec<String>, String), Vec<String>>,
        nest: &[String],
        segs: &[String],
    ) -> Option<Vec<String>> {
        let mut here = self.modules[m].path.clone();
        here.extend(nest.iter().cloned());
        let first = segs.first()?.as_str();
        let mut out = match first {
            "crate" | "$crate" => Vec::new(),
            "self" => here,
            "super" => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                if ups > here.len() {
                    return None;
                }
                here.truncate(here.len() - ups);
                here.extend(segs[ups..].iter().cloned());
                return Some(here);
            }
            _ => {
                let mut child = here.clone();
                child.push(first.to_string());
                if self.by_path.contains_key(&child)
                    || (nest.is_empty() && self.modules[m].scan.defs.contains(first))
                {
                    here.extend(segs.iter().cloned());
                    return Some(here);
                }
                let bound = aliases.get(&(nest.to_vec(), first.to_string()))?;
                bound.clone()
            }
        };
        out.extend(segs[1..].iter().cloned());
        Some(out)
    }

    /// The module file owning the longest prefix of `path`, and that prefix's length.
    fn walk(&self, path: &[String]) -> (usize, usize) {
        (0..=path.len())
            .rev()
            .find_map(|i| self.by_path.get(&path[..i]).map(|&m| (m, i)))
            .unwrap_or((0, 0))
    }

    /// The module that defines what the absolute `path` names, and whether it was found
    /// defined (false: the deepest module on the path, as the best guess).
    fn resolve(&self, path: &[String], seen: &mut BTreeSet<(usize, String)>) -> (usize, bool) {
        let (m, i) = self.walk(path);
        if i == path.len() {
            return (m, true);
        }
        self.lookup(m, &path[i], &path[i + 1..], seen)
            .unwrap_or((m, false))
    }

    /// What `name` (followed by `rest`) names in module `m`: its own item, or where the
    /// module's `use`s of that name lead; None when the module does not bind it.
    fn lookup(
        &self,
        m: usize,
        name: &str,
        rest: &[String],
        seen: &mut BTreeSet<(usize, String)>,
    ) -> Option<(usize, bool)> {
        if !seen.insert((m, name.to_string())) {
            return None;
        }
        let module = &self.modules[m];
        if module.scan.defs.contains(name) {
            return Some((m, true));
        }
        if m == 0 {
            let exported = self.macro_homes.get(name).and_then(|h| h.first());
            if let Some(&home) = exported.filter(|&&h| {
                self.modules[h]
                    .scan
                    .macros
                    .iter()
                    .any(|d| d.exported && d.name == name)
            }) {
                return Some((home, true));
            }
        }
        let file_level = module
            .scan
            .uses
            .iter()
            .zip(&module.use_abs)
            .filter(|(u, _)| u.module_level && u.nest.is_empty());
        for (_, abs) in file_level
            .clone()
            .filter(|(u, _)| !u.glob && u.alias == name)
        {
            if let Some(abs) = abs {
                let path: Vec<String> = abs.iter().chain(rest).cloned().collect();
                return Some(self.resolve(&path, seen));
            }
        }
        if module.provided.contains(name) {
            return Some((m, true));
        }
        for (_, abs) in file_level.filter(|(u, _)| u.glob) {
            if let Some(abs) = abs {
                let path: Vec<String> = abs
                    .iter()
                    .cloned()
                    .chain([name.to_string()])
                    .chain(rest.iter().cloned())
                    .collect();
                let found = self.resolve(&path, seen);
                if found.1 {
                    return Some(found);
                }
            }
        }
        None
    }

    fn is_within(&self, inner: usize, outer: usize) -> bool {
        self.modules[inner]
            .path
            .starts_with(&self.modules[outer].path)
    }

    fn add_edge(&mut self, from: usize, to: usize, pos: usize, text: String) {
        if from == to || to == 0 || from == 0 {
            return;
        }
        let line = self.modules[from].lines.line(pos);
        let sites = self.edges.entry((from, to)).or_default();
        if let Err(at) = sites.binary_search_by_key(&line, |s| s.line) {
            sites.insert(at, Site { line, text });
        }
    }

    fn add_edges(&mut self, f: usize) {
        let mut found = Vec::new();
        let module = &self.modules[f];
        for (u, abs) in module.scan.uses.iter().zip(&module.use_abs) {
            let Some(p) = abs else { continue };
            let (m, i) = self.walk(p);
            let target = if u.glob || i < p.len() || p.is_empty() {
                self.resolve(p, &mut BTreeSet::new()).0
            } else {
                // A module by name: an item import if its parent also binds the name
                // to an item (`io::excerpt`, the module and the function).
                let (parent, j) = self.walk(&p[..p.len() - 1]);
                let item = (j == p.len() - 1)
                    .then(|| self.lookup(parent, &p[p.len() - 1], &[], &mut BTreeSet::new()))
                    .flatten()
                    .filter(|r| r.1);
                match item {
                    Some((t, _)) => t,
                    None if u.public => m,
                    None => continue,
                }
            };
            // A re-export of the module's own descendant is no edge, unless the module's
            // code uses the name too.
            if u.public
                && self.is_within(target, f)
                && (u.glob || !module.scan.idents.contains(&u.alias))
            {
                continue;
            }
            found.push((target, u.pos, u.text()));
        }
        for pr in &module.scan.paths {
            if let Some(p) = self.absolutize(f, &module.aliases, &pr.nest, &pr.segs) {
                found.push((
                    self.resolve(&p, &mut BTreeSet::new()).0,
                    pr.pos,
                    pr.segs.join("::"),
                ));
            }
        }
        for (name, pos) in &module.scan.macro_calls {
            if module.scan.macros.iter().any(|d| &d.name == name) {
                continue;
            }
            let homes = self.macro_homes.get(name).map_or(&[][..], Vec::as_slice);
            let exported = homes.first().filter(|&&h| {
                self.modules[h]
                    .scan
                    .macros
                    .iter()
                    .any(|d| d.exported && &d.name == name)
            });
            if let Some(&home) = exported.or(if homes.len() == 1 {
                homes.first()
            } else {
                None
            }) {
                found.push((home, *pos, format!("{name}!")));
            }
        }
        for (to, pos, text) in found {
            self.add_edge(f, to, pos, text);
        }
    }

    /// Strongly connected components of more than one file, each sorted by name, the
    /// biggest first (Tarjan's algorithm, iterative).
    pub fn circles(&self) -> Vec<Vec<usize>> {
        let n = self.modules.len();
        let mut adj = vec![Vec::new(); n];
        for &(a, b) in self.edges.keys() {
            adj[a].push(b);
        }
        let (mut index, mut low) = (vec![usize::MAX; n], vec![0; n]);
        let (mut on_stack, mut stack, mut next, mut out) =
            (vec![false; n], Vec::new(), 0, Vec::new());
        for root in 0..n {
            if index[root] != usize::MAX {
                continue;
            }
            let mut work = vec![(root, 0usize)];
            index[root] = next;
            low[root] = next;
            next += 1;
            stack.push(root);
            on_stack[root] = true;
            while let Some(&mut (v, ref mut child)) = work.last_mut() {
                if let Some(&w) = adj[v].get(*child) {
                    *child += 1;
                    if index[w] == usize::MAX {
                        index[w] = next;
                        low[w] = next;
                        next += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        work.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                work.pop();
                if let Some(&(parent, _)) = work.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if comp.len() > 1 {
                        comp.sort_by_key(|&m| self.modules[m].name());
                        out.push(comp);
                    }
                }
            }
        }
        out.sort_by_key(|c| (std::cmp::Reverse(c.len()), self.modules[c[0]].name()));
        out
    }
}
