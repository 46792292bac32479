#!/usr/bin/env python3
"""What shuffle durability costs: wordcount and sort on a cluster of 3 executors of 1 core,
`EMBER_SHUFFLE_DURABILITY=local` against `replicated:1` and `storage:DIR`, alternated run
by run.

    python3 bench/durability.py --data /work/bench/data [--bin-dir target/release] [--rounds 3]

Needs release builds of `ember-driver`, `ember-executor` and the `wordcount` and `sort`
examples (`cargo build --release -p ember-driver -p ember-executor` and
`cargo build --release -p ember --example wordcount --example sort`). Inputs: DATA/text1g
and DATA/kv (`bench/run.py` makes them). One cluster (`emberbench/cluster.py`: 127.0.0.1,
ephemeral ports) serves every run; the stored directory is a temp dir on the same disk
(a shared file system would add its network). Each run's output is checked against the
first `local` run's output of the same job (the same part files, byte for byte), and the
stored directory must be empty after every run (the client removes its copies). Prints
each run and, per job, the medians and each mode against local. Everything is removed at
the end.
"""
import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emberbench.cluster import Cluster  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def digest(out):
    """sha256 over the output's part files, in name order."""
    h = hashlib.sha256()
    for name in sorted(n for n in os.listdir(out) if n.startswith("part-")):
        with open(os.path.join(out, name), "rb") as f:
            h.update(name.encode())
            h.update(f.read())
    return h.hexdigest()


def run(exe, url, inp, out, durability, timeout_s=900):
    env = dict(os.environ, EMBER_LOG="warn", EMBER_PROGRESS="0", EMBER_MASTER=url,
               EMBER_SHUFFLE_DURABILITY=durability)
    t = time.time()
    p = subprocess.run([exe, "--master", url, inp, out], env=env, capture_output=True,
                       text=True, timeout=timeout_s)
    wall = time.time() - t
    if p.returncode != 0:
        raise RuntimeError(f"{exe} ({durability}) failed: {p.stderr[-2000:]}")
    return wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", default="wordcount,sort",
                    help="comma-separated subset of wordcount,sort (default both)")
    args = ap.parse_args()
    bins = {n: os.path.join(args.bin_dir, n) for n in ("ember-driver", "ember-executor")}
    inputs = {"wordcount": "text1g", "sort": "kv"}
    jobs = []
    for job in args.jobs.split(","):
        if job not in inputs:
            ap.error(f"--jobs: unknown job {job!r} (known: {', '.join(inputs)})")
        jobs.append((job, os.path.join(args.data, inputs[job])))
    scratch = tempfile.mkdtemp(prefix="ember-durability-")
    try:
        store = os.path.join(scratch, "store")
        os.makedirs(store)
        logs = os.path.join(scratch, "logs")
        os.makedirs(logs)
        modes = [("local", "local"), ("replicated", "replicated:1"),
                 ("storage", f"storage:{store}")]
        walls = {(j, m): [] for j, _ in jobs for m, _ in modes}
        want = {}
        with Cluster(bins, executors=3, cores=1, memory="1g", log_dir=logs) as cluster:
            for r in range(args.rounds):
                for job, inp in jobs:
                    exe = os.path.join(args.bin_dir, "examples", job)
                    for mode, durability in modes:
                        out = os.path.join(scratch, f"out-{job}-{mode}-{r}")
                        w = run(exe, cluster.url, inp, out, durability)
                        d = digest(out)
                        if want.setdefault(job, d) != d:
                            raise RuntimeError(f"{job} {mode} round {r}: output differs")
                        left = os.listdir(store)
                        if left:
                            raise RuntimeError(f"{job} {mode}: {store} still holds {left}")
                        shutil.rmtree(out)
                        walls[(job, mode)].append(w)
                        print(f"round {r + 1} {job} {mode}: {w:.2f} s", flush=True)
        for job, _ in jobs:
            loc = statistics.median(walls[(job, "local")])
            line = f"{job}: local {loc:.2f} s"
            for mode, _ in modes[1:]:
                m = statistics.median(walls[(job, mode)])
                line += f", {mode} {m:.2f} s ({mode}/local {m / loc:.3f})"
            print(f"{line} (medians of {args.rounds})")
        print(f"load average at the end: {os.getloadavg()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
