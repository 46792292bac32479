#!/usr/bin/env python3
"""parquet_etl against DuckDB and Polars on the same Parquet file, side by side.

The query: keep rows with value >= 0, sum value per key, write Parquet (key, sum).
Runs are alternated (ember, duckdb, polars, ember, ...) and the median of --runs is
reported; every engine gets 2 threads. Outputs are checked against each other (same
keys, sums equal to 1e-9 relative).

    cargo build --release --example parquet_etl
    python3 bench/parquet_etl.py --input /work/data/kv.parquet --out /work/bench-out/petl \
        [--ember-partitions 64] [--make-from KV_DIR]

`--make-from KV_DIR` first writes --input with DuckDB from the kv set in KV_DIR (`key,value`
text, bench/reference/gen_data.py kv): every record, its value negated when a hash of its
position is odd, so about half the rows are filtered out and, the signs being random, no row
group's statistics rule any out.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


EMBER_PARTITIONS = None  # None: the example's default (64)


def ember(inp, out):
    parts = ["--partitions", EMBER_PARTITIONS] if EMBER_PARTITIONS else []
    subprocess.run([str(REPO / "target/release/examples/parquet_etl"), "--master", "local[2]",
                    *parts, str(inp), str(out)], check=True,
                   env={**os.environ, "EMBER_LOG": "warn", "EMBER_PROGRESS": "0"})


# The query in DuckDB and in Polars: `python -c CODE INPUT OUTPUT_FILE` (2 threads each;
# Polars takes POLARS_MAX_THREADS=2 from the environment). bench/run.py's `parquet` job runs
# the same code.
DUCKDB_CODE = ("import duckdb,sys; c=duckdb.connect(); c.execute('SET threads=2'); "
               "c.execute(f\"COPY (SELECT key, sum(value) AS sum FROM read_parquet('{sys.argv[1]}') "
               "WHERE value >= 0 GROUP BY key) TO '{sys.argv[2]}' (FORMAT parquet)\")")
POLARS_CODE = ("import polars as pl,sys; "
               "pl.scan_parquet(sys.argv[1]).filter(pl.col('value') >= 0).group_by('key')"
               ".agg(pl.col('value').sum().alias('sum')).sink_parquet(sys.argv[2])")


def duckdb_run(inp, out):
    out.mkdir()
    subprocess.run([sys.executable, "-c", DUCKDB_CODE, str(inp), str(out / "part.parquet")], check=True)


def polars_run(inp, out):
    out.mkdir()
    subprocess.run([sys.executable, "-c", POLARS_CODE, str(inp), str(out / "part.parquet")], check=True,
                   env={**os.environ, "POLARS_MAX_THREADS": "2"})


def make_input(kv_dir, dest):
    import duckdb
    c = duckdb.connect()
    c.execute("SET threads=2")
    c.execute("SET enable_progress_bar=false")
    c.execute(f"""COPY (
        SELECT key, CASE WHEN hash(n) % 2 = 1 THEN -value ELSE value END AS value FROM (
            SELECT key, value, row_number() OVER () AS n
            FROM read_csv('{kv_dir}/part-*.txt', header=false,
                          columns={{'key': 'BIGINT', 'value': 'DOUBLE'}})))
        TO '{dest}' (FORMAT parquet)""")
    t = c.execute(f"SELECT count(*), count_if(value < 0) FROM read_parquet('{dest}')").fetchone()
    print(f"made {dest}: {t[0]} rows, {t[1]} negative", flush=True)


def sums(out):
    import pyarrow.parquet as pq
    t = pq.read_table(out)
    return dict(zip(t.column("key").to_pylist(), t.column("sum").to_pylist()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ember-partitions", default=None,
                    help="parquet_etl --partitions (its output files and reduce tasks; "
                         "default: the example's own, 64)")
    ap.add_argument("--make-from", default=None, help="write --input first from this kv set")
    a = ap.parse_args()
    if a.make_from:
        make_input(a.make_from, a.input)
    global EMBER_PARTITIONS
    EMBER_PARTITIONS = a.ember_partitions
    out = Path(a.out)
    engines = {"ember": ember, "duckdb": duckdb_run, "polars": polars_run}
    times = {k: [] for k in engines}
    for r in range(a.runs):
        for name, run in engines.items():
            dest = out / f"{name}-{r}"
            shutil.rmtree(dest, ignore_errors=True)
            t0 = time.perf_counter()
            run(a.input, dest)
            times[name].append(time.perf_counter() - t0)
            print(f"run {r} {name}: {times[name][-1]:.2f} s", flush=True)
    ref = sums(out / "duckdb-0")
    for name in ("ember", "polars"):
        got = sums(out / f"{name}-0")
        assert got.keys() == ref.keys(), (name, len(got), len(ref))
        bad = sum(1 for k in ref if not math.isclose(got[k], ref[k], rel_tol=1e-9, abs_tol=1e-6))
        assert bad == 0, (name, bad)
    result = {k: {"median_s": round(statistics.median(v), 3), "runs_s": [round(x, 3) for x in v]}
              for k, v in times.items()}
    result["keys"] = len(ref)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
