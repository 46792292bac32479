//! A closure that captures a variable must be rejected when the job compiles, with a
//! message that tells the user what to do, once; `ember::capture!` closures build, and
//! their mistakes (a variable used but not named, a value that cannot be serialised, a
//! closure handed to two operators) are caught by `cargo check` already. This builds
//! small job crates against ember with cargo (offline, same lock file) and checks the
//! compiler's output.

use std::path::Path;
use std::process::Command;

/// Writes a job crate into `dir`. Each gets its own package name: the jobs share one
/// target dir, and cargo would take a job of the same name and version for one it has
/// already built (its fingerprint does not tell two crate roots apart).
fn write_job(dir: &Path, body: &str) {
    use std::hash::{Hash, Hasher};
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let ember = env!("CARGO_MANIFEST_DIR");
    let mut h = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut h);
    let name = format!("capture_job_{:016x}", h.finish());
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nember = {{ path = {ember:?}, default-features = false }}\n\n[workspace]\n"
        ),
    )
    .unwrap();
    std::fs::copy(Path::new(ember).join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    std::fs::write(dir.join("src/main.rs"), body).unwrap();
}

fn build(dir: &Path) -> (bool, String) {
    cargo(dir, "build")
}

fn check(dir: &Path) -> (bool, String) {
    cargo(dir, "check")
}

/// Runs `cargo COMMAND` on the job crate in `dir`, in the workspace's own target dir
/// (`CARGO_TARGET_TMPDIR` is its `tmp`), where the dependencies whose features a lone
/// crate resolves alike are built already. The jobs take ember without its optional
/// features (the capture checks are in its core): with arrow, parquet and axum in, and
/// a target dir of its own, the first build took 2 minutes of a CI run; now about 35 s.
fn cargo(dir: &Path, command: &str) -> (bool, String) {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is <target>/tmp");
    let out = Command::new(env!("CARGO"))
        .args([command, "--offline", "--quiet"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .expect("run cargo");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn capturing_closure_is_a_compile_error_and_stateless_one_builds() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad");
    write_job(
        &bad,
        "fn main() {\n    let ctx = ember::Context::local(1).unwrap();\n    let k: u64 = 3;\n    \
         let r = ctx.parallelize(vec![1u64, 2, 3, 4], 2).filter(move |x| *x > k);\n    \
         let _ = r.collect();\n}\n",
    );
    // The commonest case: `k` is `Copy + 'static`, so only `cargo build` catches it
    // (tests/own_crate/run.sh compares the whole message).
    let (ok, stderr) = build(&bad);
    assert!(!ok, "a capturing closure must not compile");
    assert!(
        stderr.contains("a closure handed to an RDD operator captures variables"),
        "unexpected compiler output:\n{stderr}"
    );
    assert!(
        stderr.contains("OperatorClosure::<{closure@src/main.rs:4:"),
        "the error should name the user's closure:\n{stderr}"
    );
    assert_eq!(
        stderr.matches("error[E0080]").count(),
        1,
        "the error is reported once:\n{stderr}"
    );
    assert!(
        stderr.contains("ember::capture!"),
        "it names the way out:\n{stderr}"
    );

    let good = tmp.path().join("good");
    write_job(
        &good,
        "fn main() {\n    let ctx = ember::Context::local(1).unwrap();\n    let offset = 5;\n    \
         let r = ctx.parallelize(vec![1, 2, 3], 2).map_with(offset, |o: &i32, x: i32| x + o);\n    \
         assert_eq!(r.collect().unwrap(), vec![6, 7, 8]);\n}\n",
    );
    let (ok, stderr) = build(&good);
    assert!(ok, "the map_with form must compile:\n{stderr}");
}

const CAPTURE_PRELUDE: &str = "fn main() {\n    let ctx = ember::Context::local(1).unwrap();\n";

#[test]
fn capture_mistakes_are_caught_by_cargo_check() {
    let tmp = tempfile::tempdir().unwrap();
    // It builds and runs when used as intended.
    let good = tmp.path().join("good");
    write_job(
        &good,
        &format!(
            "{CAPTURE_PRELUDE}    let offset = 5;\n    let name = String::from(\"x\");\n    \
             let r = ctx.parallelize(vec![1, 2, 3], 2)\n        \
             .map(ember::capture!(offset, name => |x: i32| x + offset + name.len() as i32));\n    \
             assert_eq!(r.collect().unwrap(), vec![7, 8, 9]);\n}}\n"
        ),
    );
    let (ok, stderr) = build(&good);
    assert!(ok, "a capture! closure must build:\n{stderr}");
    // A variable used but not named: a type error at check time, at the variable.
    let unnamed = tmp.path().join("unnamed");
    write_job(
        &unnamed,
        &format!(
            "{CAPTURE_PRELUDE}    let offset = 5;\n    let other = 7;\n    \
             let r = ctx.parallelize(vec![1, 2, 3], 2)\n        \
             .map(ember::capture!(offset => |x: i32| x + offset + other));\n    \
             let _ = r.collect();\n}}\n"
        ),
    );
    let (ok, stderr) = check(&unnamed);
    assert!(!ok, "an unnamed capture must not check");
    assert!(
        stderr.contains("closures can only be coerced to `fn` types if they do not capture"),
        "unexpected compiler output:\n{stderr}"
    );
    assert!(
        stderr.contains("src/main.rs:6"),
        "points at the closure:\n{stderr}"
    );
    // A value that cannot be serialised.
    let unserialisable = tmp.path().join("unserialisable");
    write_job(
        &unserialisable,
        &format!(
            "struct Opaque(u32);\n{CAPTURE_PRELUDE}    let o = Opaque(3);\n    \
             let r = ctx.parallelize(vec![1u32, 2], 2).map(ember::capture!(o => |x: u32| x + o.0));\n    \
             let _ = r.collect();\n}}\n"
        ),
    );
    let (ok, stderr) = check(&unserialisable);
    assert!(!ok, "a non-serialisable capture must not check");
    assert!(
        stderr.contains("`Opaque: serde::Serialize` is not satisfied")
            || stderr.contains("ember::capture! cannot ship a value of type `Opaque`"),
        "unexpected compiler output:\n{stderr}"
    );
    assert!(
        stderr.contains("src/main.rs:5"),
        "points at the capture:\n{stderr}"
    );
    // One closure, two operators.
    let reused = tmp.path().join("reused");
    write_job(
        &reused,
        &format!(
            "{CAPTURE_PRELUDE}    let k = 2;\n    let f = ember::capture!(k => |x: i32| x * k);\n    \
             let a = ctx.parallelize(vec![1, 2], 2).map(f);\n    \
             let b = ctx.parallelize(vec![3, 4], 2).map(f);\n    \
             let _ = (a.collect(), b.collect());\n}}\n"
        ),
    );
    let (ok, stderr) = check(&reused);
    assert!(!ok, "a closure handed to two operators must not check");
    assert!(
        stderr.contains("use of moved value: `f`"),
        "unexpected compiler output:\n{stderr}"
    );
}
