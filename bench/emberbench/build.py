"""Building ember's example binaries (`cargo build --release --examples`) and snapshotting them
into OUT/bin, falling back to one example at a time when the full build fails."""
import json
import os
import shutil
import subprocess

from .config import REPO, log


def build_examples(out_dir, needed):
    """cargo build --release --examples; snapshot the binaries into out_dir/bin so that a
    concurrent rebuild cannot swap them mid-benchmark. Returns ({name: path}, {name: why})."""
    bindir = os.path.join(out_dir, "bin")
    os.makedirs(bindir, exist_ok=True)
    log("build: cargo build --release --examples")

    def cargo(extra):
        cmd = ["cargo", "build", "--release", "--message-format=json-render-diagnostics"] + extra
        r = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        built = {}
        for line in r.stdout.splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if (msg.get("reason") == "compiler-artifact" and msg.get("executable")
                    and "example" in msg.get("target", {}).get("kind", [])):
                built[msg["target"]["name"]] = msg["executable"]
        return r.returncode, built, r.stderr

    rc, built, err = cargo(["--examples"])
    missing = {}
    if rc != 0:
        log("build: building all examples failed (some are being written?); building the needed ones "
            "one by one. Last lines of cargo's output:")
        log("    " + "\n    ".join(err.strip().splitlines()[-8:]))
    for name in sorted(needed):
        if name in built:
            continue
        if not (os.path.exists(os.path.join(REPO, "examples", name + ".rs"))
                or os.path.exists(os.path.join(REPO, "examples", name, "main.rs"))):
            missing[name] = f"examples/{name}.rs does not exist yet"
            continue
        if rc == 0:
            missing[name] = "cargo did not report a binary for it"
            continue
        rc1, b1, err1 = cargo(["--example", name])
        if rc1 == 0 and name in b1:
            built[name] = b1[name]
        else:
            lines = [l for l in err1.splitlines() if l.startswith("error")]
            missing[name] = "does not build: " + (lines[0] if lines else f"cargo exit {rc1}")
    bins = {}
    for name, path in built.items():
        dst = os.path.join(bindir, name)
        shutil.copy2(path, dst + ".tmp")
        os.replace(dst + ".tmp", dst)
        bins[name] = dst
    log(f"build: ember examples available: {', '.join(sorted(bins)) or 'none'}")
    for name, why in sorted(missing.items()):
        if name in needed:
            log(f"build: MISSING ember example {name}: {why}")
    return bins, missing
