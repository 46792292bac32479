#!/usr/bin/env python3
"""The first job on a fresh cluster against a warm one: what shipping the job binary costs.

    python3 bench/first_job.py [--bin-dir target/release] [--rounds 5] [--files 1758]

Each round starts a fresh cluster (driver + 2 executors of 1 core on 127.0.0.1, ephemeral
ports, fresh work dirs and binary store: `emberbench/cluster.py`), runs `wordcount` over a
directory of many small files twice (cold: the client uploads its binary, both executors
fetch it and start their workers; warm: all of that is in place), checks both outputs
against the word counts computed here, and reads the bytes the driver's binary store and
each executor's `binaries/` hold. Prints each round and the medians (cold, warm, cold -
warm), the job binary's size and the stored sizes. The input is generated (deterministic:
`--files` files of 5-50 KB of words from a fixed vocabulary) into a temp dir unless `--data`
names one; everything is removed at the end.
"""
import argparse
import collections
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emberbench.cluster import Cluster  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def generate(dir_, files, seed=33):
    """`files` files of 5-50 KB of words; returns the exact word counts."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(5000)] + ["ember", "spark", "Ünïcode", "x"]
    counts = collections.Counter()
    for f in range(files):
        target = rng.randint(5_000, 50_000)
        words, size = [], 0
        while size < target:
            w = vocab[min(int(rng.paretovariate(1.2)) - 1, len(vocab) - 1)] if rng.random() < 0.5 \
                else rng.choice(vocab)
            words.append(w)
            size += len(w.encode()) + 1
        counts.update(words)
        lines = [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)]
        with open(os.path.join(dir_, f"f{f:05d}.txt"), "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
    return counts


def read_counts(out):
    got = collections.Counter()
    for name in sorted(os.listdir(out)):
        if name.startswith("part-"):
            with open(os.path.join(out, name), encoding="utf-8") as f:
                for line in f:
                    w, n = line.rstrip("\n").split("\t")
                    assert w not in got, f"{w!r} twice in {out}"
                    got[w] = int(n)
    return got


def dir_bytes(path):
    total = 0
    for dirpath, _, names in os.walk(path):
        for n in names:
            total += os.path.getsize(os.path.join(dirpath, n))
    return total


def run_job(wordcount, url, data, out):
    env = dict(os.environ, EMBER_LOG="warn", NO_COLOR="1")
    t0 = time.monotonic()
    r = subprocess.run([wordcount, "--master", url, data, out], env=env,
                       capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"wordcount failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--files", type=int, default=1758)
    ap.add_argument("--data", help="an input dir instead of generated files (not checked)")
    args = ap.parse_args()
    bins = {n: os.path.join(args.bin_dir, n) for n in ("ember-driver", "ember-executor")}
    wordcount = os.path.join(args.bin_dir, "examples", "wordcount")
    scratch = tempfile.mkdtemp(prefix="ember-first-job-")
    try:
        if args.data:
            data, want = args.data, None
        else:
            data = os.path.join(scratch, "data")
            os.makedirs(data)
            want = generate(data, args.files)
        n_files = len(os.listdir(data))
        print(f"job binary: {wordcount}: {os.path.getsize(wordcount)} bytes")
        print(f"input: {n_files} files, {dir_bytes(data)} bytes")
        rows = []
        for r in range(args.rounds):
            logs = os.path.join(scratch, f"logs-{r}")
            os.makedirs(logs)
            with Cluster(bins, executors=2, cores=1, memory="1g", log_dir=logs) as cluster:
                walls = []
                for kind in ("cold", "warm"):
                    out = os.path.join(scratch, f"out-{r}-{kind}")
                    walls.append(run_job(wordcount, cluster.url, data, out))
                    if want is not None and read_counts(out) != want:
                        raise RuntimeError(f"round {r} {kind}: wrong counts in {out}")
                    shutil.rmtree(out)
                driver = dir_bytes(os.path.join(cluster.dir, "driver-binaries"))
                execs = [dir_bytes(os.path.join(cluster.dir, f"executor-{i}", "binaries"))
                         for i in (1, 2)]
            rows.append((walls[0], walls[1], driver, execs))
            print(f"round {r + 1}: cold {walls[0]:.3f} s, warm {walls[1]:.3f} s, "
                  f"cold - warm {walls[0] - walls[1]:.3f} s; stored: driver {driver} bytes, "
                  f"executors {execs[0]} and {execs[1]} bytes", flush=True)
        cold = statistics.median(r[0] for r in rows)
        warm = statistics.median(r[1] for r in rows)
        diff = statistics.median(r[0] - r[1] for r in rows)
        print(f"median of {len(rows)}: cold {cold:.3f} s, warm {warm:.3f} s, "
              f"cold - warm {diff:.3f} s (median of the per-round differences)")
        print(f"load average at the end: {os.getloadavg()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
