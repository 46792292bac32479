//! End-to-end tests of the example programs: each example runs as a real process
//! (`--master local[2]`, several `--partitions`) on generated multi-file input, and its
//! `part-*` output is compared with a plain-Rust computation of the same result.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::Path;

use common::process::run_example;

// ---------------------------------------------------------------------------------
// Running examples (see tests/common/process.rs)

/// Checks the output commit protocol's result and returns the lines of the part files,
/// read in part order.
fn read_output(out: &Path) -> Vec<String> {
    assert!(
        out.join("_SUCCESS").is_file(),
        "no _SUCCESS in {}",
        out.display()
    );
    assert!(
        !out.join("_temporary").exists(),
        "_temporary left in {}",
        out.display()
    );
    let mut parts = Vec::new();
    for entry in fs::read_dir(out).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name == "_SUCCESS" {
            continue;
        }
        assert!(
            name.starts_with("part-"),
            "unexpected {name} in {}",
            out.display()
        );
        parts.push(name);
    }
    parts.sort();
    assert!(!parts.is_empty(), "no part files in {}", out.display());
    for (i, p) in parts.iter().enumerate() {
        assert_eq!(
            p,
            &format!("part-{i:05}"),
            "part files are not numbered 0..n"
        );
    }
    let mut lines = Vec::new();
    for p in parts {
        let text = fs::read_to_string(out.join(&p)).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{p} does not end with a newline"
        );
        lines.extend(text.lines().map(str::to_string));
    }
    lines
}

// ---------------------------------------------------------------------------------
// Input generation

/// xorshift64*: deterministic test data without extra dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Writes the input directory: two plain files, one with `\r\n` endings, one without
/// a trailing newline, and an empty one. `line(rng)` makes each line; returns all lines
/// (without terminators).
fn write_inputs(dir: &Path, seed: u64, mut line: impl FnMut(&mut Rng) -> String) -> Vec<String> {
    let mut rng = Rng(seed | 1);
    fs::create_dir_all(dir).unwrap();
    let mut all = Vec::new();
    for (name, count, newline, trailing) in [
        ("a.txt", 1500, "\n", true),
        ("b.txt", 700, "\n", true),
        ("crlf.txt", 400, "\r\n", true),
        ("noeol.txt", 250, "\n", false),
        ("empty.txt", 0, "\n", true),
    ] {
        let lines: Vec<String> = (0..count).map(|_| line(&mut rng)).collect();
        let mut text = lines.join(newline);
        if trailing && !lines.is_empty() {
            text.push_str(newline);
        }
        fs::write(dir.join(name), text).unwrap();
        all.extend(lines);
    }
    all
}

const PARTITIONS: [&str; 3] = ["1", "3", "7"];

/// Runs `name` on `input` once per entry of [`PARTITIONS`], handing each output's lines
/// to `check`.
fn run_all_partitionings(
    name: &str,
    input: &Path,
    scratch: &Path,
    extra: &[&str],
    check: impl Fn(&str, Vec<String>),
) {
    for p in PARTITIONS {
        let out = scratch.join(format!("out-{p}"));
        let mut args = vec!["--master", "local[2]", "--partitions", p];
        args.extend_from_slice(extra);
        args.push(input.to_str().unwrap());
        args.push(out.to_str().unwrap());
        let run = run_example(name, &args, scratch);
        assert!(run.success, "{name} --partitions {p} failed: {run:?}");
        assert_eq!(
            fs::read_dir(&run.work).unwrap().count(),
            0,
            "{name} left its work dir behind"
        );
        check(p, read_output(&out));
    }
}

fn split_tab(line: &str) -> (&str, &str) {
    line.split_once('\t')
        .unwrap_or_else(|| panic!("output line without a tab: {line:?}"))
}

// ---------------------------------------------------------------------------------
// The examples

#[test]
fn wordcount_counts_every_word() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    const WORDS: [&str; 12] = [
        "the", "a", "ember", "spark", "Rust", "rdd", "x", "the,", "é", "日本", "42", "-",
    ];
    let lines = write_inputs(&input, 7, |rng| {
        let n = rng.below(9);
        let mut line = String::new();
        for _ in 0..n {
            let sep = ["", " ", "  ", "\t", " \t "][rng.below(5) as usize];
            if !line.is_empty() || rng.chance(20) {
                line.push_str(if sep.is_empty() { " " } else { sep });
            }
            if rng.chance(85) {
                line.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
            } else {
                line.push_str(&format!("w{}", rng.below(400)));
            }
        }
        if rng.chance(10) {
            line.push(' ');
        }
        line
    });
    let mut want: HashMap<String, u64> = HashMap::new();
    for l in &lines {
        for w in l.split_whitespace() {
            *want.entry(w.to_string()).or_default() += 1;
        }
    }
    run_all_partitionings("wordcount", &input, tmp.path(), &[], |p, out| {
        let mut got: HashMap<String, u64> = HashMap::new();
        for line in &out {
            let (w, c) = split_tab(line);
            let c: u64 = c
                .parse()
                .unwrap_or_else(|_| panic!("bad count in {line:?}"));
            assert!(
                got.insert(w.to_string(), c).is_none(),
                "{w:?} twice (p={p})"
            );
        }
        assert_eq!(got, want, "partitions {p}");
    });
}

/// `t` thousandths as a decimal with 0 to 3 decimals (and sometimes a `+`).
fn decimal_text(rng: &mut Rng, t: i64) -> String {
    let sign = if t < 0 {
        "-"
    } else if rng.chance(5) {
        "+"
    } else {
        ""
    };
    let (int, frac) = (t.unsigned_abs() / 1000, t.unsigned_abs() % 1000);
    let min_decimals: u64 = match frac {
        0 => 0,
        f if f % 100 == 0 => 1,
        f if f % 10 == 0 => 2,
        _ => 3,
    };
    let decimals = (min_decimals + rng.below(4 - min_decimals)) as usize;
    let mut s = format!("{sign}{int}");
    if decimals > 0 {
        s.push('.');
        s.push_str(&format!("{frac:03}")[..decimals]);
        debug_assert!(format!("{frac:03}")[decimals..].bytes().all(|b| b == b'0'));
    }
    s
}

fn thousandths_text(t: i64) -> String {
    let abs = t.unsigned_abs();
    let int = abs / 1000;
    let frac = abs % 1000;
    if t < 0 {
        format!("-{int}.{frac:03}")
    } else {
        format!("{int}.{frac:03}")
    }
}

#[test]
fn kvsum_sums_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    let mut want: BTreeMap<u64, i64> = BTreeMap::new();
    let lines = write_inputs(&input, 11, |rng| {
        let key = match rng.below(20) {
            0 => u64::MAX - rng.below(3),
            1 => rng.below(1 << 40),
            _ => rng.below(60),
        };
        let t = match rng.below(10) {
            0 => rng.below(1000) as i64 - 500, // |v| < 1
            1 => (rng.below(2_000_000_000) as i64 - 1_000_000_000) * 1000, // big, integral
            _ => rng.below(200_000) as i64 - 100_000,
        };
        *want.entry(key).or_default() += t;
        format!("{key},{}", decimal_text(rng, t))
    });
    assert!(lines.len() > 2000);
    // Sums with a tricky sign: between -1 and 0, and exactly 0.
    fs::write(
        input.join("z-extra.txt"),
        "900001,-0.5\n900002,1.5\n900002,-1.500\n",
    )
    .unwrap();
    want.insert(900001, -500);
    want.insert(900002, 0);
    run_all_partitionings("kvsum", &input, tmp.path(), &[], |p, out| {
        let mut got: BTreeMap<u64, String> = BTreeMap::new();
        for line in &out {
            let (k, s) = split_tab(line);
            let k: u64 = k.parse().unwrap_or_else(|_| panic!("bad key in {line:?}"));
            assert!(
                got.insert(k, s.to_string()).is_none(),
                "key {k} twice (p={p})"
            );
        }
        let want_text: BTreeMap<u64, String> = want
            .iter()
            .map(|(&k, &t)| (k, thousandths_text(t)))
            .collect();
        assert_eq!(got, want_text, "partitions {p}");
        assert_eq!(got[&900001], "-0.500");
        assert_eq!(got[&900002], "0.000");
    });
}

#[test]
fn join_counts_and_maxes_per_key() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    let mut want: BTreeMap<u64, (u64, i64)> = BTreeMap::new();
    write_inputs(&input, 23, |rng| {
        let key = rng.below(300);
        let t = rng.below(200_000) as i64 - 100_000;
        let e = want.entry(key).or_insert((0, i64::MIN));
        e.0 += 1;
        e.1 = e.1.max(t);
        format!("{key},{}", decimal_text(rng, t))
    });
    let min_count = 3;
    let want: BTreeMap<u64, String> = want
        .into_iter()
        .filter(|(_, (c, _))| *c >= min_count)
        .map(|(k, (c, m))| (k, format!("{c}\t{}", thousandths_text(m))))
        .collect();
    assert!(want.len() > 50);
    run_all_partitionings(
        "join",
        &input,
        tmp.path(),
        &["--min-count", "3"],
        |p, out| {
            let mut got = BTreeMap::new();
            for line in &out {
                let (k, rest) = split_tab(line);
                let k: u64 = k.parse().unwrap_or_else(|_| panic!("bad key in {line:?}"));
                assert!(
                    got.insert(k, rest.to_string()).is_none(),
                    "key {k} twice (p={p})"
                );
            }
            assert_eq!(got, want, "partitions {p}");
        },
    );
}

fn sort_key(line: &str) -> u64 {
    line.split_once(',')
        .and_then(|(k, _)| k.parse().ok())
        .unwrap_or_else(|| panic!("output line without a u64 key: {line:?}"))
}

#[test]
fn sort_orders_by_numeric_key() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    let mut seen: Vec<u64> = Vec::new();
    let lines = write_inputs(&input, 23, |rng| {
        let key = if !seen.is_empty() && rng.chance(15) {
            seen[rng.below(seen.len() as u64) as usize] // duplicate keys
        } else if rng.chance(2) {
            u64::MAX
        } else {
            let digits = 1 + rng.below(19) as u32;
            rng.next() % 10u64.pow(digits)
        };
        seen.push(key);
        let value = match rng.below(4) {
            0 => String::new(),
            1 => format!("v{} with spaces, and commas", rng.below(1000)),
            _ => format!("v{}", rng.below(1_000_000)),
        };
        format!("{key},{value}")
    });
    let mut want = lines.clone();
    want.sort();
    run_all_partitionings("sort", &input, tmp.path(), &[], |p, out| {
        let keys: Vec<u64> = out.iter().map(|l| sort_key(l)).collect();
        if let Some(i) = keys.windows(2).position(|w| w[0] > w[1]) {
            panic!(
                "partitions {p}: out of order at output line {}: {:?} then {:?}",
                i + 1,
                out[i],
                out[i + 1]
            );
        }
        let mut got = out.clone();
        got.sort();
        assert_eq!(got.len(), want.len(), "partitions {p}: line count");
        assert!(
            got == want,
            "partitions {p}: output lines differ from input lines"
        );
    });
}

/// Spark's SparkPageRank iteration in plain Rust.
fn reference_pagerank(edges: &[(String, String)], iterations: u32) -> BTreeMap<String, f64> {
    let mut links: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (s, d) in edges {
        links.entry(s).or_default().insert(d);
    }
    let mut ranks: BTreeMap<String, f64> = links.keys().map(|s| (s.to_string(), 1.0)).collect();
    for _ in 0..iterations {
        let mut contribs: BTreeMap<String, f64> = BTreeMap::new();
        for (src, dsts) in &links {
            if let Some(&rank) = ranks.get(*src) {
                for d in dsts {
                    *contribs.entry(d.to_string()).or_default() += rank / dsts.len() as f64;
                }
            }
        }
        ranks = contribs
            .into_iter()
            .map(|(n, c)| (n, 0.15 + 0.85 * c))
            .collect();
    }
    ranks
}

#[test]
fn pagerank_matches_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    let mut edges = Vec::new();
    write_inputs(&input, 31, |rng| {
        if rng.chance(3) {
            return ["", "# a comment", "   "][rng.below(3) as usize].to_string();
        }
        // Nodes 0..80 link anywhere; 80..100 only receive; some ids are long.
        let src = format!("n{}", rng.below(80));
        let dst = match rng.below(10) {
            0 => format!("sink-{}", rng.below(20)),
            _ => format!("n{}", rng.below(100)),
        };
        let sep = [" ", "\t", "   ", " \t"][rng.below(4) as usize];
        let line = format!("{src}{sep}{dst}");
        edges.push((src, dst));
        line
    });
    let want10 = reference_pagerank(&edges, 10);
    let want3 = reference_pagerank(&edges, 3);
    assert!(want10.len() > 50);
    let check = |want: &BTreeMap<String, f64>, p: &str, out: Vec<String>| {
        let mut got: BTreeMap<String, f64> = BTreeMap::new();
        for line in &out {
            let (n, r) = split_tab(line);
            let decimals = r.split_once('.').map(|(_, d)| d.len());
            assert_eq!(
                decimals,
                Some(6),
                "rank not printed with 6 decimals: {line:?}"
            );
            let r: f64 = r.parse().unwrap();
            assert!(got.insert(n.to_string(), r).is_none(), "{n} twice (p={p})");
        }
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "partitions {p}: node sets differ"
        );
        for (n, &w) in want {
            // The output is rounded to 6 decimals: allow half a unit of the last digit
            // on top of a 1e-9 relative difference in the computed rank.
            let tolerance = 0.5e-6 + 1e-9 * w.abs();
            assert!(
                (got[n] - w).abs() <= tolerance,
                "partitions {p}: rank of {n} is {} but the reference gives {w}",
                got[n]
            );
        }
    };
    run_all_partitionings("pagerank", &input, tmp.path(), &[], |p, out| {
        check(&want10, p, out)
    });
    let out = tmp.path().join("out-iter3");
    let run = run_example(
        "pagerank",
        &[
            "--master",
            "local[2]",
            "--iterations=3",
            "--partitions",
            "4",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert!(run.success, "pagerank --iterations=3 failed: {run:?}");
    check(&want3, "4 (3 iterations)", read_output(&out));
    // Checkpointing every 3 iterations changes nothing in the ranks.
    let out = tmp.path().join("out-checkpointed");
    let cp = tmp.path().join("checkpoints");
    let run = run_example(
        "pagerank",
        &[
            "--master",
            "local[2]",
            "--checkpoint-every",
            "3",
            "--checkpoint-dir",
            cp.to_str().unwrap(),
            input.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert!(run.success, "pagerank --checkpoint-every 3 failed: {run:?}");
    check(&want10, "checkpointed every 3", read_output(&out));
    let written = std::fs::read_dir(&cp).unwrap().count();
    assert_eq!(written, 1, "one directory for the context");
}

#[test]
fn wideshuffle_checks_its_counts_and_reports_each_run() {
    let tmp = tempfile::tempdir().unwrap();
    // More reducers than keys, a key count that does not divide the records.
    let run = run_example(
        "wideshuffle",
        &[
            "--master",
            "local[2]",
            "--maps",
            "40",
            "--reducers",
            "1500",
            "--records",
            "2345",
            "--runs",
            "2",
        ],
        tmp.path(),
    );
    assert!(run.success, "wideshuffle failed: {run:?}");
    let anchors: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("ANCHOR "))
        .collect();
    assert_eq!(anchors.len(), 4, "{}", run.stdout);
    assert!(anchors[0].starts_with("ANCHOR run0_s="), "{}", run.stdout);
    assert_eq!(anchors[3], "ANCHOR maps=40 reducers=1500 records=2345");
    // The records generated by `range` in the map tasks instead (it checks its counts).
    let ranged = run_example(
        "wideshuffle",
        &[
            "--master",
            "local[2]",
            "--maps",
            "7",
            "--reducers",
            "13",
            "--records",
            "2345",
            "--runs",
            "1",
            "--range",
            "1",
        ],
        tmp.path(),
    );
    assert!(ranged.success, "wideshuffle --range 1 failed: {ranged:?}");
    assert!(
        ranged
            .stdout
            .contains("ANCHOR maps=7 reducers=13 records=2345"),
        "{}",
        ranged.stdout
    );
    // A wrong argument is refused with the usage.
    let bad = run_example(
        "wideshuffle",
        &["--master", "local[2]", "--maps", "x"],
        tmp.path(),
    );
    assert!(!bad.success);
    assert!(
        bad.stderr.contains("--maps needs a number, got \"x\""),
        "{bad:?}"
    );
}

#[test]
fn the_readme_tour_is_examples_tour_and_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let start = readme
        .find("```rust\nuse ember::{capture")
        .expect("the tour in README.md")
        + 8;
    let end = start + readme[start..].find("```\n").unwrap();
    let tour = std::fs::read_to_string(root.join("examples/tour.rs")).unwrap();
    assert!(
        tour.ends_with(&readme[start..end]),
        "examples/tour.rs differs from the README's tour"
    );
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.txt");
    let text = "the cat which sat\nthe hat quietly\nwhich mouse mouse quietly\n";
    std::fs::write(&input, text).unwrap();
    let out = tmp.path().join("out");
    let run = run_example(
        "tour",
        &[
            "--master",
            "local[2]",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert!(run.success, "{run:?}");
    let mut got = read_output(&out);
    got.sort();
    assert_eq!(got, vec!["mouse\t2", "quietly\t2"]);
    assert!(run.stdout.contains("quietly: [2]"), "{run:?}");
}
