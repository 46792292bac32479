#!/usr/bin/env python3
"""Logistic regression per iteration: ember's barrier mode, its tree_aggregate form, the
compute floor and PySpark ML, side by side in one run.

For each shape (rows x features, iterations) it runs, alternately and `--rounds` times:

  barrier   `logreg --mode barrier` on a cluster of 2 executors (1 core each here): one
            barrier stage, the gradient summed by all_reduce_slice each iteration
  tree      `logreg --mode tree` on the same cluster: one job per iteration
  floor     `logreg --mode floor --master local[2]`: the same loop in one process on as
            many threads, no communication (the compute floor)
  pyspark   PySpark ML's LogisticRegression (L-BFGS) on the same shape, local[2], the
            data cached before timing: fit time / iterations run

and prints the median of each one's `per_iteration_ms` and the ratios the issue asks
about. Shapes: 1,000,000 x 32 for 100 iterations (compute dominates) and 10,000 x 32 for
200 (communication dominates; PySpark is left out there).

    python3 bench/logreg/compare.py [--rounds 3] [--python /work/bench/venv/bin/python]

The daemons are stopped and the temp dir removed whatever happens.
"""
import argparse, os, re, shutil, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from emberbench import release  # noqa: E402
from emberbench.cluster import Cluster  # noqa: E402

SHAPES = [(1_000_000, 32, 100, True), (10_000, 32, 200, False)]
PER_ITER = re.compile(r"per_iteration_ms=([\d.]+)")

PYSPARK = r"""
import sys, time
from pyspark.sql import SparkSession, functions as F
from pyspark.ml.feature import VectorAssembler
from pyspark.ml.classification import LogisticRegression
rows, d, iters = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
spark = (SparkSession.builder.master("local[2]").config("spark.driver.memory", "6g")
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
df = spark.range(rows, numPartitions=2)
cols = [(F.rand(seed=j) * 2 - 1).alias(f"x{j}") for j in range(d)]
df = df.select(*cols)
z = sum(df[f"x{j}"] * (((j % 7) - 3) / 3.0) for j in range(d))
df = df.withColumn("label", (1 / (1 + F.exp(-z)) > F.rand(seed=99)).cast("double"))
data = VectorAssembler(inputCols=[f"x{j}" for j in range(d)], outputCol="features") \
    .transform(df).select("features", "label").cache()
data.count()
lr = LogisticRegression(maxIter=iters, regParam=0.0, tol=0.0, standardization=False)
t = time.time()
model = lr.fit(data)
secs = time.time() - t
n = max(1, model.summary.totalIterations)
print(f"iterations={n}")
print(f"per_iteration_ms={secs * 1e3 / n:.3f}")
spark.stop()
"""


def run(cmd, env, timeout=3600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        sys.exit(f"compare.py: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    m = PER_ITER.search(p.stdout)
    if not m:
        sys.exit(f"compare.py: no per_iteration_ms from {' '.join(cmd)}:\n{p.stdout[-2000:]}")
    return float(m[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", default=sys.executable, help="a python with pyspark")
    a = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rel = release.build(repo, ["-p", "ember", "--example", "logreg"],
                        ["-p", "ember-driver", "-p", "ember-executor"])
    logreg = os.path.join(rel, "examples", "logreg")
    bins = release.daemons(rel)
    tmp = tempfile.mkdtemp(prefix="ember-logreg-")
    env = release.run_env(tmp)
    script = os.path.join(tmp, "pyspark_lr.py")
    with open(script, "w") as f:
        f.write(PYSPARK)
    times = {}
    cluster = Cluster(bins, 2, 1, "4g", tmp, prefix="logreg").start()
    try:
        for _ in range(a.rounds):
            for rows, d, iters, with_spark in SHAPES:
                shape = ["--rows", str(rows), "--features", str(d), "--iterations", str(iters)]
                runs = {
                    "barrier": [logreg, "--master", cluster.url, "--mode", "barrier", *shape],
                    "tree": [logreg, "--master", cluster.url, "--mode", "tree", *shape],
                    "floor": [logreg, "--master", "local[2]", "--mode", "floor", *shape],
                }
                if with_spark:
                    runs["pyspark"] = [a.python, script, str(rows), str(d), str(iters)]
                for name, cmd in runs.items():
                    times.setdefault((rows, d, iters), {}).setdefault(name, []).append(run(cmd, env))
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("| rows x features, iterations | barrier ms/iter | tree_aggregate ms/iter | floor ms/iter | PySpark ML ms/iter | tree / barrier | barrier / floor | PySpark / barrier |")
    print("|---|---|---|---|---|---|---|---|")
    for (rows, d, iters), t in times.items():
        med = {k: statistics.median(v) for k, v in t.items()}
        sp = med.get("pyspark")
        spark_ms = f"{sp:.1f}" if sp else "-"
        spark_ratio = f"{sp / med['barrier']:.1f}x" if sp else "-"
        print(f"| {rows:,} x {d}, {iters} | {med['barrier']:.3f} | {med['tree']:.3f} | {med['floor']:.3f} | "
              f"{spark_ms} | {med['tree'] / med['barrier']:.1f}x | "
              f"{med['barrier'] / med['floor']:.2f}x | {spark_ratio} |")


if __name__ == "__main__":
    main()
