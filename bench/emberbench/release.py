"""What the side-by-side scripts outside bench/run.py (`collectives/compare.py`,
`logreg/compare.py`) share: building ember's release binaries in place, where they are,
and the environment their runs get.

Invariant: the environment names a private TMPDIR (the caller's temp dir, which it
removes) and no EMBER_MASTER, so every run's `--master` is the one the script gives.
"""
import os
import subprocess


def build(repo, *targets):
    """`cargo build --release -q` of each argument list in `targets` (for example
    `["-p", "ember", "--example", "logreg"]`); returns the release directory."""
    for t in targets:
        subprocess.run(["cargo", "build", "--release", "-q", *t], cwd=repo, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(repo, "target"))
    return os.path.join(target, "release")


def daemons(rel):
    """The two daemons' paths in release directory `rel`, as `cluster.Cluster` takes them."""
    return {"ember-driver": os.path.join(rel, "ember-driver"),
            "ember-executor": os.path.join(rel, "ember-executor")}


def run_env(tmp):
    """The environment of a benchmark's runs: quiet logs, temp files under `tmp`."""
    env = dict(os.environ, TMPDIR=tmp, EMBER_LOG="warn")
    env.pop("EMBER_MASTER", None)
    return env
