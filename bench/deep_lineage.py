#!/usr/bin/env python3
"""Deep lineage: how ember's cost grows with the iterations of an iterative job.

Runs `examples/pagerank` (release build) in local mode on a deterministic 20,000-edge graph
for each iteration count given and prints wall-clock seconds and seconds per iteration. A
flat per-iteration cost is the goal: planning must not grow with the whole lineage at every
step.

    cargo build --release --example pagerank
    python3 bench/deep_lineage.py --out /work/bench-out/deep [--iterations 100,300,1000]

Options: --master (default local[2]), --partitions (default 2), --edges (default 20000),
--checkpoint-every K (checkpoint the ranks every K iterations; default never),
--nodes (default 2000), --runs (default 1, the median is printed), --binary (default
target/release/examples/pagerank next to this script's repository).
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path


def make_graph(path: Path, edges: int, nodes: int) -> None:
    rng = random.Random(20)
    with path.open("w") as f:
        for _ in range(edges):
            f.write(f"n{rng.randrange(nodes)} n{rng.randrange(nodes)}\n")


def main() -> int:
    repo = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--iterations", default="100,300,1000")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--edges", type=int, default=20000)
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--checkpoint-every", type=int, default=0,
                    help="pass --checkpoint-every K to pagerank (0: never)")
    ap.add_argument("--binary", type=Path, default=repo / "target/release/examples/pagerank")
    a = ap.parse_args()
    if not a.binary.exists():
        print(f"{a.binary} is missing: cargo build --release --example pagerank", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    graph = a.out / "graph.txt"
    make_graph(graph, a.edges, a.nodes)
    print(f"| iterations | seconds (median of {a.runs}) | ms per iteration |")
    print("|---|---|---|")
    checkpoint = ["--checkpoint-every", str(a.checkpoint_every)] if a.checkpoint_every else []
    for n in [int(x) for x in a.iterations.split(",")]:
        times = []
        for r in range(a.runs):
            out = a.out / f"ranks-{n}-{r}"
            subprocess.run(["rm", "-rf", str(out)], check=True)
            env = dict(os.environ, EMBER_LOG=os.environ.get("EMBER_LOG", "warn"))
            t0 = time.monotonic()
            p = subprocess.run(
                [str(a.binary), "--master", a.master, "--partitions", str(a.partitions),
                 "--iterations", str(n), *checkpoint, str(graph), str(out)],
                env=env, capture_output=True, text=True,
            )
            dt = time.monotonic() - t0
            if p.returncode != 0:
                print(f"pagerank --iterations {n} failed:\n{p.stderr[-2000:]}", file=sys.stderr)
                return 1
            times.append(dt)
            subprocess.run(["rm", "-rf", str(out)], check=True)
        med = statistics.median(times)
        print(f"| {n} | {med:.2f} | {1000 * med / n:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
