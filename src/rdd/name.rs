//! The names the job library gives RDDs: `OPERATOR at FILE:LINE`, the operator text
//! (which for a source holds its path argument, e.g. `text_file(a,b,…)`) and the call
//! site both bounded, so a name, and every job description, stage name and event-log
//! line made from it, stays small whatever the user passed.
//!
//! Invariant: a name is at most [`NAME_CHARS`] characters; a part too long is cut on a
//! character boundary and ends with `…` and how many bytes were left out.

use std::borrow::Cow;
use std::panic::Location;

/// Characters of an RDD name at most.
pub(crate) const NAME_CHARS: usize = 256;

/// Characters of the operator part of a name at most.
const OP_CHARS: usize = 160;

/// Characters of the call site's file at most (the line number comes after it).
const FILE_CHARS: usize = 80;

// `OP at FILE:LINE` (a line number has 10 digits at most) fits in a name.
const _: () = assert!(OP_CHARS + " at ".len() + FILE_CHARS + 1 + 10 <= NAME_CHARS);

/// The longest suffix [`bounded`] adds: `… (` + 20 digits + ` more bytes)`.
const SUFFIX_CHARS: usize = 3 + 20 + 12;

/// The name of the RDD operator `op` called at `at`, at most [`NAME_CHARS`] characters.
/// A call site inside ember's own source (an operator built from others whose chain
/// lost the user's `#[track_caller]` location) is left out: a name never points into
/// ember, only at the user's line or nowhere.
pub(crate) fn op_name(op: &str, at: &Location<'_>) -> String {
    name_at(op, at.file(), at.line())
}

fn name_at(op: &str, file: &str, line: u32) -> String {
    if in_ember_source(file) {
        return bounded(op, OP_CHARS).into_owned();
    }
    format!(
        "{} at {}:{}",
        bounded(op, OP_CHARS),
        bounded(file, FILE_CHARS),
        line
    )
}

/// Whether `file` (as `Location::file` gives it) is one of ember's own sources: under
/// the `src/` next to this file's crate root, as the compiler named this file (a path
/// relative to the workspace when ember is built as a workspace member, absolute when
/// it is a dependency).
fn in_ember_source(file: &str) -> bool {
    let here = file!();
    let root = here
        .strip_suffix("src/rdd/name.rs")
        .or_else(|| here.strip_suffix("src\\rdd\\name.rs"));
    let Some(root) = root else {
        return false;
    };
    file.strip_prefix(root)
        .is_some_and(|rest| rest.starts_with("src/") || rest.starts_with("src\\"))
}

/// `s`, or when it is longer than `max` characters its first ones cut on a character
/// boundary followed by `… (N more bytes)`, `max` characters at most in all.
pub(crate) fn bounded(s: &str, max: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max) {
        None => Cow::Borrowed(s),
        Some(_) => {
            let keep = max.saturating_sub(SUFFIX_CHARS);
            let cut = s.char_indices().nth(keep).map_or(s.len(), |(i, _)| i);
            Cow::Owned(format!("{}… ({} more bytes)", &s[..cut], s.len() - cut))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_is_cut_on_a_char_boundary_saying_how_much_was_left_out() {
        assert_eq!(bounded("text_file(a,b)", 20), "text_file(a,b)");
        let exact = "é".repeat(20);
        assert_eq!(bounded(&exact, 20), exact.as_str());
        let long = "é".repeat(1000);
        let cut = bounded(&long, 100);
        let kept = 100 - SUFFIX_CHARS;
        assert_eq!(
            cut,
            format!("{}… ({} more bytes)", "é".repeat(kept), 2 * (1000 - kept))
        );
        assert!(cut.chars().count() <= 100);
        let op = format!("text_file({})", "/data/part.txt,".repeat(100_000));
        let name = name_at(&op, "examples/job.rs", 7);
        assert!(name.chars().count() <= NAME_CHARS, "{name}");
        assert!(name.starts_with("text_file(/data/part.txt,"), "{name}");
        assert!(
            name.ends_with(" more bytes) at examples/job.rs:7"),
            "{name}"
        );
    }

    #[test]
    fn a_call_site_inside_embers_own_source_is_left_out_of_the_name() {
        // This file is ember's: a location here is never shown.
        assert_eq!(op_name("map", Location::caller()), "map");
        let root = file!().strip_suffix("src/rdd/name.rs").unwrap();
        assert_eq!(
            name_at("lookup", &format!("{root}src/rdd/partitioning.rs"), 232),
            "lookup"
        );
        // The user's files, wherever they are, are named.
        for file in ["examples/tour.rs", "tests/x.rs", "/home/u/job/src/main.rs"] {
            assert_eq!(name_at("map", file, 3), format!("map at {file}:3"));
        }
    }
}
