#!/usr/bin/env python3
"""Sharing one driver (issue 38's benchmark): on a cluster of 2 executors x 2 cores, client A
runs one job of 20,000 tasks that each sleep 50 ms (250 s of work over 4 slots); 5 s later
client B (the same job binary: nothing is uploaded) submits 20 one-task jobs, 200 ms apart,
each timed from its submission (the first included, no warm-up). Run under the driver's
`--scheduling-mode fair` and `fifo`, alternated mode by mode; then, per mode, the time from
cancelling an `interrupt_on_cancel` job group whose 4 tasks are stuck in user code (a 10
minute sleep) to the action's return and to a 4-task job finishing on the freed slots, and
the same for a group of 2,000 50-ms tasks.

    python3 bench/sharing.py [--bin-dir target/release] [--rounds 1] [--tasks 20000]

Needs release builds of `ember-driver`, `ember-executor` and the `sharing` example
(`cargo build --release -p ember-driver -p ember-executor` and
`cargo build --release -p ember --example sharing`). Clusters come from
`emberbench/cluster.py` (127.0.0.1, ephemeral ports, everything removed at the end).
Prints each run and a markdown table.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emberbench.cluster import Cluster  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def client(exe, url, args, **kw):
    env = dict(os.environ, EMBER_LOG="warn", EMBER_PROGRESS="0")
    env.pop("EMBER_MASTER", None)
    return subprocess.Popen([exe, "--master", url] + args, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def finish(p, what, timeout_s):
    out, err = p.communicate(timeout=timeout_s)
    if p.returncode != 0:
        raise RuntimeError(f"{what} failed ({p.returncode}): {err[-2000:]}")
    return out


def anchors(out):
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"ANCHOR (\w+)=([\d.]+)", out)}


def one_mode(exe, bins, mode, args, logs):
    with Cluster(bins, executors=2, cores=2, memory="1g", log_dir=logs, prefix=f"sharing-{mode}",
                 driver_args=["--scheduling-mode", mode]) as cluster:
        url = cluster.url
        t0 = time.monotonic()
        hog = client(exe, url, ["hog", "--tasks", str(args.tasks), "--sleep-ms", str(args.sleep_ms)])
        time.sleep(args.delay_s)
        probe = client(exe, url, ["probe", "--jobs", str(args.probe_jobs), "--gap-ms", str(args.gap_ms)])
        probe_out = finish(probe, "probe", 3600)
        hog_out = finish(hog, "hog", 3600)
        total = time.monotonic() - t0
        times = [float(x) for x in re.findall(r"probe job \d+: ([\d.]+) ms", probe_out)]
        row = {"mode": mode, "probe_ms": times, "median": statistics.median(times), "max": max(times),
               "hog_s": anchors(hog_out)["hog_seconds"], "total_s": total}
        for label, tasks, sleep in (("stuck", 4, 600000), ("busy", 2000, 50)):
            out = finish(client(exe, url, ["cancel", "--tasks", str(tasks), "--sleep-ms", str(sleep),
                                           "--wait-ms", "3000", "--interrupt", "--probe-tasks", "4"]),
                         f"cancel {label}", 900)
            a = anchors(out)
            row[f"cancel_{label}"] = (a["cancel_to_return_ms"], a["cancel_to_probe_done_ms"])
        return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--tasks", type=int, default=20000)
    ap.add_argument("--sleep-ms", type=int, default=50)
    ap.add_argument("--delay-s", type=float, default=5.0)
    ap.add_argument("--probe-jobs", type=int, default=20)
    ap.add_argument("--gap-ms", type=int, default=200)
    args = ap.parse_args()
    bins = {n: os.path.join(args.bin_dir, n) for n in ("ember-driver", "ember-executor")}
    exe = os.path.join(args.bin_dir, "examples", "sharing")
    logs = tempfile.mkdtemp(prefix="ember-sharing-logs-")
    rows = []
    try:
        for r in range(args.rounds):
            for mode in ("fair", "fifo"):
                row = one_mode(exe, bins, mode, args, logs)
                print(f"round {r} {mode}: B median {row['median']:.1f} ms, worst {row['max']:.1f} ms; "
                      f"A {row['hog_s']:.1f} s; cancel stuck {row['cancel_stuck']}, busy {row['cancel_busy']}; "
                      f"B each: {' '.join(f'{t:.0f}' for t in row['probe_ms'])}", flush=True)
                rows.append(row)
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    print()
    print("| mode | B median (ms) | B worst (ms) | A's job (s) | cancel -> action returns, stuck tasks (ms) "
          "| cancel -> 4-task job done, stuck (ms) | cancel -> returns, 50 ms tasks (ms) "
          "| cancel -> 4-task job done, 50 ms tasks (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        s, b = row["cancel_stuck"], row["cancel_busy"]
        print(f"| {row['mode']} | {row['median']:.1f} | {row['max']:.1f} | {row['hog_s']:.1f} "
              f"| {s[0]:.1f} | {s[1]:.1f} | {b[0]:.1f} | {b[1]:.1f} |")


if __name__ == "__main__":
    main()
