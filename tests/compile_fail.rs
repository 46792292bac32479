//! A closure that captures a variable must be rejected when the job compiles, with a
//! message that tells the user what to do. This builds a small job crate against
//! ember with cargo (offline, same lock file) and checks the compiler's output.

use std::path::Path;
use std::process::Command;

fn write_job(dir: &Path, body: &str) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let ember = env!("CARGO_MANIFEST_DIR");
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"capture_job\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nember = {{ path = {ember:?} }}\n\n[workspace]\n"
        ),
    )
    .unwrap();
    std::fs::copy(Path::new(ember).join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    std::fs::write(dir.join("src/main.rs"), body).unwrap();
}

fn build(dir: &Path) -> (bool, String) {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compile-fail-target");
    let out = Command::new(env!("CARGO"))
        .args(["build", "--offline", "--quiet"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .env("CARGO_TERM_COLOR", "never")
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
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
        "fn main() {\n    let ctx = ember::Context::local(1).unwrap();\n    let offset = 5;\n    \
         let r = ctx.parallelize(vec![1, 2, 3], 2).map(move |x: i32| x + offset);\n    \
         let _ = r.collect();\n}\n",
    );
    let (ok, stderr) = build(&bad);
    assert!(!ok, "a capturing closure must not compile");
    assert!(
        stderr.contains("a closure passed to an RDD operator must not capture variables"),
        "unexpected compiler output:\n{stderr}"
    );
    assert!(
        stderr.contains("src/main.rs:4"),
        "the error should point at the user's closure:\n{stderr}"
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
