#!/usr/bin/env python3
"""ember's collectives next to Open MPI's on this machine, in one run.

Builds `mpi_coll.c` with `mpicc` (Debian's openmpi-bin, libopenmpi-dev) and ember's
`coll_bench` (release), then for each world size runs the two alternately, `--rounds`
times, and prints per (op, bytes, ranks) the median over rounds of each one's
`median_us` (itself the median over K calls of the slowest rank) and ember's share of
Open MPI's bandwidth (Open MPI's time / ember's).

    python3 bench/collectives/compare.py [--ranks 2,4] [--rounds 3] [--transport unix|tcp]

Everything it builds or writes goes under a temporary directory it removes.
"""
import argparse, os, re, shutil, statistics, subprocess, sys, tempfile

CASES = [("barrier", 0, 20000), ("all_reduce", 8, 20000), ("all_reduce", 65536, 2000),
         ("all_reduce", 1048576, 200), ("all_reduce", 67108864, 10), ("all_gather", 65536, 2000)]
LINE = re.compile(r"op=(\S+) ranks=(\d+) bytes=(\d+) median_us=([\d.]+)")


def parse(text):
    return {(m[1], int(m[2]), int(m[3])): float(m[4]) for m in LINE.finditer(text)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transport", default="unix", choices=["unix", "tcp"])
    a = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not shutil.which("mpicc") or not shutil.which("mpirun"):
        sys.exit("compare.py: mpicc/mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "ember-collective",
                    "--example", "coll_bench"], cwd=repo, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(repo, "target"))
    ember_bin = os.path.join(target, "release", "examples", "coll_bench")
    tmp = tempfile.mkdtemp(prefix="ember-coll-")
    try:
        mpi_bin = os.path.join(tmp, "mpi_coll")
        subprocess.run(["mpicc", "-O2", "-o", mpi_bin,
                        os.path.join(repo, "bench", "collectives", "mpi_coll.c")], check=True)
        mpi, ember = {}, {}
        for ranks in [int(r) for r in a.ranks.split(",")]:
            for _ in range(a.rounds):
                for op, size, iters in CASES:
                    out = subprocess.run(
                        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                         mpi_bin, op, str(size), str(iters)],
                        capture_output=True, text=True, check=True, timeout=600).stdout
                    for k, v in parse(out).items():
                        mpi.setdefault(k, []).append(v)
                out = subprocess.run([ember_bin, "--ranks", str(ranks), "--transport", a.transport],
                                     capture_output=True, text=True, check=True, timeout=900,
                                     env=dict(os.environ, TMPDIR=tmp)).stdout
                for k, v in parse(out).items():
                    ember.setdefault(k, []).append(v)
        print(f"| op | bytes | ranks | Open MPI median us | ember ({a.transport}) median us | ember's share of MPI's bandwidth |")
        print("|---|---|---|---|---|---|")
        for k in sorted(mpi, key=lambda k: (k[1], k[0], k[2])):
            if k not in ember:
                continue
            m, e = statistics.median(mpi[k]), statistics.median(ember[k])
            share = f"{m / e:.0%}" if k[2] else "-"
            print(f"| {k[0]} | {k[2]} | {k[1]} | {m:.2f} | {e:.2f} | {share} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
