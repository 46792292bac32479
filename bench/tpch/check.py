#!/usr/bin/env python3
"""TPC-H on ember-sql against DuckDB: each of the 22 queries (bench/tpch/queries) run by
ember's `sql` example over the Parquet tables and by DuckDB over the same files; the
answers must be the same rows (in any order), numbers to 1e-6 relative.

    python3 bench/tpch/check.py --data DIR --sql target/debug/examples/sql
        [--master local[2] | --cluster N [--bin-dir target/debug]] [--queries 1,3,22] [--timings]

DIR holds the eight tables as `<table>.parquet` (`tpchgen-cli parquet -s SF
--output-dir DIR`). With `--master URL` the queries run on that cluster; with `--cluster N`
on a cluster of N one-core executors started here (`bench/emberbench/cluster.py`: the
daemons of BIN_DIR on 127.0.0.1, stopped and removed at the end). Prints one line per
query (its times with `--timings`) and exits 1 if any answer differs or any run fails.
"""
import argparse
import csv
import glob
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TABLES = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]


def duckdb_rows(con, sql):
    cur = con.execute(sql)
    return [tuple(r) for r in cur.fetchall()]


def ember_rows(exe, master, data, sql, scratch, env):
    out = os.path.join(scratch, "out")
    shutil.rmtree(out, ignore_errors=True)
    args = [exe, "--master", master]
    for t in TABLES:
        args += ["--table", f"{t}={os.path.join(data, t + '.parquet')}"]
    args += [sql, out]
    p = subprocess.run(args, capture_output=True, text=True, timeout=1800, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr[-2000:]}")
    rows = []
    for part in sorted(glob.glob(os.path.join(out, "part-*"))):
        with open(part, newline="") as f:
            r = csv.reader(f)
            next(r, None)  # every part file starts with the header
            rows.extend(tuple(x) for x in r)
    if not os.path.exists(os.path.join(out, "_SUCCESS")):
        raise RuntimeError("no _SUCCESS")
    return rows


def as_number(v):
    if v is None or v == "":
        return None
    if isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def norm(v):
    """A value as text, the way ember's CSV writes it (dates YYYY-MM-DD, NULL empty)."""
    if v is None:
        return ""
    return str(v)


def key(row):
    return tuple((0, as_number(v), "") if as_number(v) is not None else (1, 0.0, norm(v)) for v in row)


def same(a, b):
    if len(a) != len(b):
        return f"{len(b)} rows, DuckDB has {len(a)}"
    a, b = sorted(a, key=key), sorted(b, key=key)
    for i, (x, y) in enumerate(zip(a, b)):
        if len(x) != len(y):
            return f"row {i}: {len(y)} columns, DuckDB has {len(x)}"
        for j, (u, v) in enumerate(zip(x, y)):
            nu, nv = as_number(u), as_number(v)
            if nu is not None and nv is not None:
                # A decimal result is exact to a unit of its scale: DataFusion's avg of a
                # decimal(15,2) is a decimal(19,6) (truncated), DuckDB's a double.
                scale = len(v.split(".")[1]) if isinstance(v, str) and "." in v and "e" not in v.lower() else None
                rounding = 10 ** -scale if scale is not None else 0.0
                if not math.isclose(nu, nv, rel_tol=1e-6, abs_tol=max(1e-9, rounding * 1.000001)):
                    return f"row {i} column {j}: {v!r}, DuckDB {u!r}"
            elif norm(u) != norm(v):
                return f"row {i} column {j}: {v!r}, DuckDB {u!r}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--sql", required=True)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--queries", default=",".join(str(i) for i in range(1, 23)))
    ap.add_argument("--timings", action="store_true")
    ap.add_argument("--cluster", type=int, default=0)
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "..", "target", "debug"))
    args = ap.parse_args()
    if args.cluster:
        sys.path.insert(0, os.path.dirname(HERE))
        from emberbench.cluster import Cluster
        bins = {n: os.path.join(args.bin_dir, n) for n in ("ember-driver", "ember-executor")}
        logs = tempfile.mkdtemp(prefix="ember-tpch-logs-")
        try:
            with Cluster(bins, args.cluster, 1, "2g", logs) as c:
                args.master = c.url
                check(args)
        finally:
            shutil.rmtree(logs, ignore_errors=True)
    else:
        check(args)


def check(args):
    import duckdb
    con = duckdb.connect()
    for t in TABLES:
        con.execute(f"create view {t} as select * from read_parquet('{os.path.join(args.data, t + '.parquet')}')")
    env = dict(os.environ, EMBER_LOG=os.environ.get("EMBER_LOG", "warn"), EMBER_PROGRESS="0")
    failed = []
    scratch = tempfile.mkdtemp(prefix="ember-tpch-")
    try:
        for q in [int(x) for x in args.queries.split(",")]:
            with open(os.path.join(HERE, "queries", f"q{q}.sql")) as f:
                sql = f.read()
            t = time.time()
            want = duckdb_rows(con, sql)
            t_duck = time.time() - t
            t = time.time()
            try:
                got = ember_rows(args.sql, args.master, args.data, sql, scratch, env)
                why = same(want, got)
            except Exception as e:  # a failed run is a failed query, reported with the rest
                got, why = None, f"failed: {e}"
            t_ember = time.time() - t
            timing = f" (ember {t_ember:.2f} s, duckdb {t_duck:.2f} s)" if args.timings else ""
            if why:
                failed.append(q)
                print(f"q{q}: DIFFERS: {why}{timing}", flush=True)
            else:
                print(f"q{q}: ok, {len(want)} rows{timing}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if failed:
        print(f"differing or failed: {failed}")
        sys.exit(1)
    print("all queries match DuckDB")


if __name__ == "__main__":
    main()
