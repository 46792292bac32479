"""Building ember's example binaries (`cargo build --release --examples`) and the cluster
daemons (`cargo build --release -p ember-driver -p ember-executor`) in one cargo profile, and
snapshotting them into OUT/bin, falling back to one example at a time when the full build
fails. OUT/bin/PROFILES.json records which profile each snapshot binary came from."""
import json
import os
import shutil
import subprocess

from .config import DAEMONS, PROFILES, REPO, log

PROFILE_FILE = "PROFILES.json"


def cargo_build(profile, extra, kind):
    """cargo build in `profile` with `extra` arguments. Returns (exit status,
    {target name: executable} of the artifacts whose target kind includes `kind`, stderr)."""
    cmd = ["cargo", "build"] + PROFILES[profile] + ["--message-format=json-render-diagnostics"] + extra
    r = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    built = {}
    for line in r.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if (msg.get("reason") == "compiler-artifact" and msg.get("executable")
                and kind in msg.get("target", {}).get("kind", [])):
            built[msg["target"]["name"]] = msg["executable"]
    return r.returncode, built, r.stderr


def cargo_cmd_text(profile, extra):
    return " ".join(["cargo", "build"] + PROFILES[profile] + extra)


def snapshot(out_dir, built, profile):
    """Copies the built binaries into out_dir/bin (atomically per file); {name: path}."""
    bindir = os.path.join(out_dir, "bin")
    os.makedirs(bindir, exist_ok=True)
    bins = {}
    for name, path in built.items():
        dst = os.path.join(bindir, name)
        shutil.copy2(path, dst + ".tmp")
        os.replace(dst + ".tmp", dst)
        bins[name] = dst
    profiles = read_profiles(out_dir)
    profiles.update({name: profile for name in bins})
    with open(os.path.join(bindir, PROFILE_FILE + ".tmp"), "w") as f:
        json.dump(profiles, f, indent=1, sort_keys=True)
    os.replace(os.path.join(bindir, PROFILE_FILE + ".tmp"), os.path.join(bindir, PROFILE_FILE))
    return bins


def read_profiles(out_dir):
    """{binary name: cargo profile} of the snapshot in out_dir/bin ({} if not recorded)."""
    try:
        with open(os.path.join(out_dir, "bin", PROFILE_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def snapshot_profile(out_dir, names):
    """The profile the snapshot binaries `names` were built in (for --skip-build): one name,
    "mixed (...)", or "unknown" when not recorded."""
    recorded = read_profiles(out_dir)
    found = sorted({recorded.get(n, "unknown") for n in names}) or ["unknown"]
    return found[0] if len(found) == 1 else f"mixed ({', '.join(found)})"


def first_error(stderr, rc):
    lines = [l for l in stderr.splitlines() if l.startswith("error")]
    return lines[0] if lines else f"cargo exit {rc}"


def build_examples(out_dir, needed, profile="release"):
    """cargo build [--release] --examples; snapshot the binaries into out_dir/bin so that a
    concurrent rebuild cannot swap them mid-benchmark. Returns ({name: path}, {name: why})."""
    log(f"build: {cargo_cmd_text(profile, ['--examples'])}")
    rc, built, err = cargo_build(profile, ["--examples"], "example")
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
        rc1, b1, err1 = cargo_build(profile, ["--example", name], "example")
        if rc1 == 0 and name in b1:
            built[name] = b1[name]
        else:
            missing[name] = "does not build: " + first_error(err1, rc1)
    bins = snapshot(out_dir, built, profile)
    log(f"build: ember examples available: {', '.join(sorted(bins)) or 'none'}")
    for name, why in sorted(missing.items()):
        if name in needed:
            log(f"build: MISSING ember example {name}: {why}")
    return bins, missing


def build_daemons(out_dir, profile="release"):
    """cargo build [--release] -p ember-driver -p ember-executor, snapshotted into out_dir/bin
    next to the examples. Returns ({name: path}, {name: why})."""
    extra = [a for d in DAEMONS for a in ("-p", d)]
    log(f"build: {cargo_cmd_text(profile, extra)}")
    rc, built, err = cargo_build(profile, extra, "bin")
    built = {n: p for n, p in built.items() if n in DAEMONS}
    missing = {n: "does not build: " + first_error(err, rc) if rc != 0 else "cargo did not report a binary for it"
               for n in DAEMONS if n not in built}
    if rc != 0:
        log("build: building the daemons failed. Last lines of cargo's output:")
        log("    " + "\n    ".join(err.strip().splitlines()[-8:]))
    bins = snapshot(out_dir, built, profile)
    log(f"build: cluster daemons available: {', '.join(sorted(bins)) or 'none'}")
    return bins, missing
