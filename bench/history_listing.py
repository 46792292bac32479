#!/usr/bin/env python3
"""The history server's application list over many small event logs: how long
`GET /api/v1/applications` takes, first (every log new) and then with nothing changed,
and after one log grew.

    python3 bench/history_listing.py [--binary target/debug/ember-driver] [--logs 1000 5000]
                                     [--requests 3]

For each count N: writes N small logs (an application of two jobs each) into a fresh
temporary directory, starts `ember-driver history DIR --ui-port 0`, times the requests
(each checks that N applications are listed), appends a job to one log and times one
more request (checking that log's job count), then stops the server and removes the
directory. Needs only Python's standard library.
"""
import argparse
import json
import os
import shutil
import signal
import sys
import subprocess
import tempfile
import time
import urllib.request


def event(**kw):
    return json.dumps(kw, separators=(",", ":")) + "\n"


def job(job_id, t):
    return event(event="job_submitted", job_id=job_id, application="bench", number=job_id,
                 description=f"count at src/main.rs:{job_id}", stages=[
                     dict(stage_id=job_id, number=0, name="map at src/main.rs:3", num_tasks=1,
                          parents=[], shuffle_id=None)], time_ms=t) + \
        event(event="job_ended", job_id=job_id, succeeded=True, failure=None, time_ms=t + 1)


def write_logs(d, n):
    for i in range(n):
        with open(os.path.join(d, f"app{i:06d}-{i}-1.jsonl"), "w") as f:
            f.write(event(event="app_started", name=f"app {i}", time_ms=i))
            f.write(job(0, i))
            f.write(job(1, i))


def get(addr, path):
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=600) as r:
        return json.loads(r.read())


def measure(binary, n, requests):
    d = tempfile.mkdtemp(prefix="ember-history-bench-")
    proc = None
    try:
        write_logs(d, n)
        proc = subprocess.Popen([binary, "history", d, "--ui-port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env={k: v for k, v in os.environ.items()
                                     if k not in ("EMBER_SECRET", "EMBER_SECRET_FILE")})
        addr = proc.stdout.readline().strip().removeprefix("ember-driver history on http://")
        times = []
        for _ in range(requests):
            t0 = time.monotonic()
            apps = get(addr, "/api/v1/applications")
            times.append(time.monotonic() - t0)
            assert len(apps) == n, (len(apps), n)
        with open(os.path.join(d, f"app{n // 2:06d}-{n // 2}-1.jsonl"), "a") as f:
            f.write(job(2, 0))
        t0 = time.monotonic()
        apps = get(addr, "/api/v1/applications")
        grown = time.monotonic() - t0
        assert [a["jobs"] for a in apps if a["id"] == f"app{n // 2:06d}-{n // 2}-1"] == [3]
        return times, grown
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    # A timeout's SIGTERM still stops the server and removes the directory.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default="target/debug/ember-driver")
    p.add_argument("--logs", type=int, nargs="+", default=[1000, 5000])
    p.add_argument("--requests", type=int, default=3)
    a = p.parse_args()
    for n in a.logs:
        times, grown = measure(a.binary, n, a.requests)
        print(f"{n} logs: " + ", ".join(f"{t:.3f} s" for t in times)
              + f"; after one log grew: {grown:.3f} s", flush=True)


if __name__ == "__main__":
    main()
