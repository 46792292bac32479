//! The checker checked on small in-memory trees: each test builds a `src/` tree and a
//! floors block, then asserts the edges the graph holds or the violations reported.
//!
//! Invariants: no test reads the file system; each fixture is as small as the rule it
//! pins, and asserts both what must be found and what must not.

use std::collections::{BTreeMap, BTreeSet};

use crate::floors;
use crate::graph::Graph;

fn tree(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

fn graph(files: &[(&str, &str)]) -> Graph {
    Graph::build(&tree(files)).expect("the fixture has a lib.rs")
}

fn edges(files: &[(&str, &str)]) -> BTreeSet<String> {
    floors::edge_list(&graph(files), false)
        .lines()
        .map(str::to_string)
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(ToString::to_string).collect()
}

fn architecture(block: &str) -> String {
    format!(
        "# Architecture\n\nSome prose.\n\n```floors\n# bottom first\n{block}\n```\n\nMore prose.\n"
    )
}

fn violations(files: &[(&str, &str)], block: &str) -> Vec<String> {
    crate::run(&tree(files), &architecture(block)).violations
}

const LOW_HIGH: &str = "mod low;\nmod high;\n";

#[test]
fn an_upward_import_is_reported_with_file_line_path_and_floors() {
    let files = [
        ("lib.rs", LOW_HIGH),
        (
            "low.rs",
            "//! Low.\n\nuse crate::high::High;\n\npub fn f(_: High) {}\n",
        ),
        ("high.rs", "pub struct High;\n"),
    ];
    let v = violations(&files, "low\nhigh");
    assert_eq!(v.len(), 1, "{v:#?}");
    for part in [
        "upward",
        "src/low.rs:3 `crate::high::High`",
        "src/high.rs",
        "floor 1 `low`",
        "floor 2 `high`",
    ] {
        assert!(v[0].contains(part), "{part:?} missing from {:?}", v[0]);
    }
    // The same import downward is fine.
    assert!(violations(&files, "high\nlow").is_empty());
}

#[test]
fn a_circle_outside_the_circle_set_is_reported() {
    let files = [
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::b::B;\npub struct A(B);\n"),
        (
            "b.rs",
            "pub struct B;\npub fn f() -> crate::a::A { todo!() }\n",
        ),
        ("c.rs", "pub fn g() -> crate::a::A { todo!() }\n"),
    ];
    let v = violations(&files, "a b c");
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(
        v[0].starts_with("circle of 2 files not inside `circle:` (a, b outside it): a b"),
        "{}",
        v[0]
    );
    assert!(
        v[0].contains("a -> b: src/a.rs:1 `crate::b::B`"),
        "{}",
        v[0]
    );
    assert!(
        v[0].contains("b -> a: src/b.rs:2 `crate::a::A`"),
        "{}",
        v[0]
    );
    // Half inside the set is still outside it.
    let v = violations(&files, "a b c\ncircle: a");
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(v[0].contains("(b outside it)"), "{}", v[0]);
}

#[test]
fn a_circle_inside_the_circle_set_is_accepted_and_printed() {
    let files = [
        ("lib.rs", "mod context;\nmod rdd;\n"),
        (
            "context.rs",
            "pub struct Context;\n\
             impl Context { pub fn rdd(&self) -> crate::rdd::Rdd { crate::rdd::Rdd } }\n",
        ),
        ("rdd/mod.rs", "mod ops;\npub struct Rdd;\n"),
        (
            "rdd/ops.rs",
            "use crate::context::Context;\npub fn ctx(c: &Context) -> &Context { c }\n",
        ),
    ];
    assert_eq!(
        edges(&files),
        set(&["context -> rdd", "rdd::ops -> context"])
    );
    let cyclic = [
        files[0],
        files[1],
        (
            "rdd/mod.rs",
            "mod ops;\npub struct Rdd;\npub fn f() { ops::ctx(todo!()); }\n",
        ),
        files[3],
    ];
    let outcome = crate::run(
        &tree(&cyclic),
        &architecture("rdd\ncontext\ncircle: context rdd"),
    );
    assert!(outcome.violations.is_empty(), "{:#?}", outcome.violations);
    assert!(
        outcome
            .summary
            .contains("circle of 3: context rdd rdd::ops"),
        "{}",
        outcome.summary
    );
    assert!(
        outcome
            .summary
            .contains("1 upward (1 of them inside `circle:`)"),
        "{}",
        outcome.summary
    );
    // Without the circle line: the upward import and the circle.
    let v = violations(&cyclic, "rdd\ncontext");
    assert_eq!(v.len(), 2, "{v:#?}");
    assert!(
        v[0].starts_with("upward import: src/rdd/ops.rs:1 `crate::context::Context`"),
        "{}",
        v[0]
    );
    assert!(v[1].starts_with("circle of 3 files"), "{}", v[1]);
}

#[test]
fn a_reexport_is_followed_to_the_defining_file() {
    let files = [
        (
            "lib.rs",
            "mod defs;\nmod hub;\nmod user;\nmod via_root;\npub use hub::Thing;\n",
        ),
        ("defs.rs", "pub struct Thing;\npub fn make() {}\n"),
        (
            "hub/mod.rs",
            "mod inner;\npub use crate::defs::Thing;\npub use crate::defs::make as build;\n\
             pub use inner::*;\n",
        ),
        ("hub/inner.rs", "pub struct Inner;\n"),
        (
            "user.rs",
            "use crate::hub::{build, Inner};\npub fn f() -> Inner { build(); Inner }\n",
        ),
        (
            "via_root.rs",
            "pub fn g() -> crate::Thing { crate::Thing }\n",
        ),
    ];
    // hub's re-export of defs is an edge, its glob re-export of its own child is not;
    // nobody depends on hub/mod.rs, which defines nothing.
    assert_eq!(
        edges(&files),
        set(&[
            "hub -> defs",
            "user -> defs",
            "user -> hub::inner",
            "via_root -> defs"
        ])
    );
}

#[test]
fn a_module_using_its_own_child_depends_on_it() {
    let files = [
        ("lib.rs", "pub mod io;\n"),
        (
            "io/mod.rs",
            "mod excerpt;\nmod storage;\npub use excerpt::{excerpt, Excerpt};\n\
             pub(crate) use storage::open;\n\
             pub fn f() { open() }\n",
        ),
        (
            "io/excerpt.rs",
            "pub struct Excerpt;\npub fn excerpt() {}\n",
        ),
        (
            "io/storage.rs",
            "use crate::io::excerpt;\npub fn open() { excerpt() }\n",
        ),
    ];
    // io re-exports both children but its own code calls only `open`; in storage,
    // `crate::io::excerpt` names the module and, through io's re-export, the function.
    assert_eq!(
        edges(&files),
        set(&["io -> io::storage", "io::storage -> io::excerpt"])
    );
}

#[test]
fn test_code_is_not_part_of_the_graph() {
    let low = "pub fn f() {}\n\
               #[cfg(test)]\nmod tests {\n    use crate::high::High;\n\
               fn t() { crate::high::make(); }\n}\n\
               #[cfg(test)]\nmod fixtures;\n\
               #[cfg(test)]\nfn helper() -> crate::high::High { crate::high::High }\n\
               #[cfg(all(test, unix))]\nuse crate::high::High as H2;\n\
               pub struct S {\n    #[cfg(test)]\n    pub seen: crate::high::High,\n\
               pub n: u8,\n}\n";
    let files = [
        ("lib.rs", LOW_HIGH),
        ("low.rs", low),
        ("low/fixtures.rs", "use crate::high::High;\n"),
        ("high.rs", "pub struct High;\npub fn make() {}\n"),
    ];
    let g = graph(&files);
    assert!(g.edges.is_empty(), "{}", floors::edge_list(&g, false));
    assert_eq!(g.test_files, set(&["low/fixtures.rs"]));
    assert!(g.orphans.is_empty(), "{:?}", g.orphans);
    assert!(violations(&files, "low\nhigh").is_empty());
    // Code that is not test-only (`not(test)`, `any(test, ..)`) counts.
    let counted = format!("{low}#[cfg(not(test))]\nuse crate::high::make;\n");
    let files = [files[0], ("low.rs", counted.as_str()), files[2], files[3]];
    assert_eq!(edges(&files), set(&["low -> high"]));
}

#[test]
fn a_file_without_a_floor_is_reported() {
    let files = [
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", ""),
        ("b/mod.rs", "mod c;\n"),
        ("b/c.rs", ""),
    ];
    let v = violations(&files, "a");
    assert_eq!(v.len(), 2, "{v:#?}");
    assert!(
        v[0].starts_with("src/b/mod.rs (`b`) has no floor"),
        "{}",
        v[0]
    );
    assert!(
        v[1].starts_with("src/b/c.rs (`b::c`) has no floor"),
        "{}",
        v[1]
    );
    // An entry covers its descendants; the longest entry wins.
    assert!(violations(&files, "a b").is_empty());
    let files = [
        files[0],
        files[1],
        ("b/mod.rs", "mod c;\npub struct B;\n"),
        ("b/c.rs", "pub fn f() -> crate::b::B { todo!() }\n"),
    ];
    assert!(violations(&files, "b\nb::c a").is_empty());
    let v = violations(&files, "b::c a\nb");
    assert!(
        v.len() == 1 && v[0].contains("(floor 1 `b::c` imports from floor 2 `b`)"),
        "{v:#?}"
    );
}

#[test]
fn super_self_and_grouped_use_trees_resolve() {
    let files = [
        ("lib.rs", "mod a;\nmod x;\n"),
        ("a/mod.rs", "mod b;\nmod c;\npub struct Top;\n"),
        (
            "a/b.rs",
            "use super::{c::{cee as f, Cee}, Top};\nuse crate::{x::{self, Ex}};\n\n\
             pub fn g() -> (Cee, Top, Ex) { f(); x::run(); todo!() }\n",
        ),
        (
            "a/c.rs",
            "pub struct Cee;\npub fn cee() {}\n\
             pub fn h() -> super::super::x::Ex { self::cee(); todo!() }\n",
        ),
        ("x.rs", "pub struct Ex;\npub fn run() {}\n"),
    ];
    assert_eq!(
        edges(&files),
        set(&["a::b -> a", "a::b -> a::c", "a::b -> x", "a::c -> x"])
    );
}

#[test]
fn comments_literals_and_lifetimes_make_no_edges() {
    let a = r##"// use crate::b::B;
/* crate::b::B /* nested
   crate::b::B */ crate::b::B */
pub fn f<'a>(s: &'a str) -> &'a str { let _c = '"'; let _q = "crate::b::B \" x";
    let _r = r#"crate::b::B "q" "#; s }
pub const C: char = '\''; pub const D: &[u8] = br"crate::b::B";
pub fn g() -> crate::b::B { crate::b::B }
"##;
    let g = graph(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", a),
        ("b.rs", "pub struct B;\n"),
    ]);
    let sites: Vec<(usize, &str)> = g
        .edges
        .values()
        .flatten()
        .map(|s| (s.line, s.text.as_str()))
        .collect();
    assert_eq!(sites, vec![(7, "crate::b::B")]);
}

#[test]
fn paths_through_a_module_alias_and_macros_resolve() {
    let files = [
        (
            "lib.rs",
            "#[macro_use]\nmod macros;\nmod rdd;\nmod user;\nmod user2;\n",
        ),
        (
            "macros.rs",
            "#[macro_export]\nmacro_rules! capture {\n    () => { $crate::rdd::decode() };\n}\n",
        ),
        ("rdd/mod.rs", "mod codec;\npub use codec::decode;\n"),
        ("rdd/codec.rs", "pub fn decode() {}\n"),
        (
            "user.rs",
            "use crate::rdd;\nuse ::rdd::x; // another crate\npub fn f() { rdd::decode(); }\n",
        ),
        (
            "user2.rs",
            "pub fn g() { capture!(); }\npub fn h() { crate::capture!() }\n",
        ),
    ];
    assert_eq!(
        edges(&files),
        set(&[
            "macros -> rdd::codec",
            "user -> rdd::codec",
            "user2 -> macros"
        ])
    );
}

#[test]
fn enum_variants_path_attributes_and_inline_modules_resolve() {
    let files = [
        (
            "lib.rs",
            "mod error;\n#[path = \"odd/place.rs\"]\nmod placed;\n",
        ),
        (
            "error.rs",
            "pub enum EmberError { Io }\npub mod codes {\n    pub const X: u8 = 1;\n}\n",
        ),
        (
            "odd/place.rs",
            "pub fn f() -> crate::error::EmberError { crate::error::EmberError::Io }\n\
             mod inner {\n    use super::super::error::codes::X;\n}\n",
        ),
    ];
    let g = graph(&files);
    assert_eq!(
        g.modules
            .iter()
            .map(|m| (m.name(), m.file.as_str()))
            .collect::<Vec<_>>()[2],
        ("placed".to_string(), "odd/place.rs")
    );
    assert_eq!(floors::edge_list(&g, false), "placed -> error");
    assert_eq!(
        g.edges
            .values()
            .flatten()
            .map(|s| s.line)
            .collect::<Vec<_>>(),
        vec![1, 3]
    );
}

#[test]
fn a_missing_or_ambiguous_floors_block_fails() {
    let files = [("lib.rs", "mod a;\n"), ("a.rs", "")];
    let v = crate::run(&tree(&files), "# Architecture\n\nno block\n").violations;
    assert!(
        v.len() == 1 && v[0].contains("no ```floors block"),
        "{v:#?}"
    );
    let v = violations(&files, "a\na");
    assert!(
        v.len() == 1 && v[0].contains("names a more than once"),
        "{v:#?}"
    );
    assert!(violations(&files, "a\n\n# a comment\n").is_empty());
}

#[test]
fn the_spec_example_block_parses() {
    let block = "error data plan::op text io::excerpt logging\n\
                 memory block_store spill io conf interrupt progress\n\
                 env\ntask\nshuffle accumulator broadcast\ncapture plan\nrdd output\n\
                 cleaner job context\nlocal local_ui cluster\ncircle: context job rdd";
    let f = floors::parse(&architecture(block)).expect("the spec's example parses");
    let path = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        f.place(&path("plan::op")),
        Some((1, "plan::op".to_string()))
    );
    assert_eq!(
        f.place(&path("plan::lineage")),
        Some((6, "plan".to_string()))
    );
    assert_eq!(
        f.place(&path("io::storage::store")),
        Some((2, "io".to_string()))
    );
    assert_eq!(
        f.place(&path("io::excerpt")),
        Some((1, "io::excerpt".to_string()))
    );
    assert_eq!(f.place(&path("iox")), None);
}
