#!/usr/bin/env python3
"""ember's collectives next to Open MPI's on this machine, in one run.

Builds `mpi_coll.c` with `mpicc` (Debian's openmpi-bin, libopenmpi-dev), ember's transport
benchmark `coll_bench` and the job-level `examples/collectives` with the two daemons
(release), then for each world size runs, alternately and `--rounds` times:

  mpi       Open MPI (`mpirun -np R mpi_coll OP BYTES ITERS`)
  crate     ember-collective alone (`coll_bench --ranks R`: ranks as processes, no job)
  local     a barrier stage in local mode (`collectives --master local[R] --ranks R`)
  cluster   the same barrier stage on a cluster of 2 executors with R/2 cores each
            (ranks on both executors; on one host they connect by Unix sockets)

and prints per (op, bytes, ranks) the median over rounds of each one's `median_us` (itself
the median over K calls of the slowest rank) and each ember form's share of Open MPI's
bandwidth (Open MPI's time / its time).

    python3 bench/collectives/compare.py [--ranks 2,4] [--rounds 3] [--engines mpi,crate,local,cluster]

Everything it builds or writes goes under a temporary directory it removes; the cluster's
daemons are stopped whatever happens.
"""
import argparse, os, re, shutil, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from emberbench import release  # noqa: E402
from emberbench.cluster import Cluster  # noqa: E402

CASES = [("barrier", 0, 20000), ("all_reduce", 8, 20000), ("all_reduce", 65536, 2000),
         ("all_reduce", 1048576, 200), ("all_reduce", 67108864, 10), ("all_gather", 65536, 2000)]
LINE = re.compile(r"op=(\S+) ranks=(\d+) bytes=(\d+) median_us=([\d.]+)")


def parse(text):
    return {(m[1], int(m[2]), int(m[3])): float(m[4]) for m in LINE.finditer(text)}


def run(cmd, env=None, timeout=900):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        sys.exit(f"compare.py: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engines", default="mpi,crate,local,cluster")
    a = ap.parse_args()
    engines = a.engines.split(",")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if "mpi" in engines and (not shutil.which("mpicc") or not shutil.which("mpirun")):
        sys.exit("compare.py: mpicc/mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
    rel = release.build(repo, ["-p", "ember-collective", "--example", "coll_bench"],
                        ["-p", "ember", "--example", "collectives"],
                        ["-p", "ember-driver", "-p", "ember-executor"])
    crate_bin = os.path.join(rel, "examples", "coll_bench")
    job_bin = os.path.join(rel, "examples", "collectives")
    bins = release.daemons(rel)
    tmp = tempfile.mkdtemp(prefix="ember-coll-")
    env = release.run_env(tmp)
    results = {e: {} for e in engines}
    try:
        mpi_bin = os.path.join(tmp, "mpi_coll")
        if "mpi" in engines:
            subprocess.run(["mpicc", "-O2", "-o", mpi_bin,
                            os.path.join(repo, "bench", "collectives", "mpi_coll.c")], check=True)
        for ranks in [int(r) for r in a.ranks.split(",")]:
            cluster = None
            if "cluster" in engines:
                cluster = Cluster(bins, 2, max(1, ranks // 2), "2g", tmp, prefix=f"coll{ranks}").start()
            try:
                for _ in range(a.rounds):
                    for engine in engines:
                        if engine == "crate":
                            out = run([crate_bin, "--ranks", str(ranks), "--transport", "unix"], env)
                            found = parse(out)
                            for k, v in found.items():
                                results[engine].setdefault(k, []).append(v)
                            continue
                        for op, size, iters in CASES:
                            if engine == "mpi":
                                cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                                       str(ranks), mpi_bin, op, str(size), str(iters)]
                            else:
                                master = f"local[{ranks}]" if engine == "local" else cluster.url
                                cmd = [job_bin, "--master", master, "--ranks", str(ranks),
                                       "--op", op, "--bytes", str(size), "--iters", str(iters)]
                            for k, v in parse(run(cmd, env)).items():
                                results[engine].setdefault(k, []).append(v)
            finally:
                if cluster:
                    cluster.stop()
        forms = [e for e in engines if e != "mpi"]
        head = "| op | bytes | ranks | " + " | ".join(f"{e} median us" for e in engines)
        if "mpi" in engines:
            head += " | " + " | ".join(f"{e} share of MPI bandwidth" for e in forms)
        print(head + " |")
        print("|---" * (3 + len(engines) + (len(forms) if "mpi" in engines else 0)) + "|")
        keys = sorted({k for r in results.values() for k in r if (k[0], k[2]) in
                       {(op, size) for op, size, _ in CASES}}, key=lambda k: (k[0] != "barrier", k[0], k[2], k[1]))
        for k in keys:
            med = {e: statistics.median(results[e][k]) if k in results[e] else None for e in engines}
            row = f"| {k[0]} | {k[2]} | {k[1]} | " + " | ".join(
                f"{med[e]:.2f}" if med[e] is not None else "-" for e in engines)
            if "mpi" in engines:
                m = med["mpi"]
                row += " | " + " | ".join(
                    f"{m / med[e]:.0%}" if m and med[e] and k[2] else "-" for e in forms)
            print(row + " |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
