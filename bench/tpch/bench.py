#!/usr/bin/env python3
"""TPC-H time per query: ember-sql against DuckDB, Polars and Spark SQL, one run with the
engines alternated query by query (each query: ember, DuckDB, Polars, Spark, then the
next round), every ember answer checked against DuckDB's (bench/tpch/check.py's rules).

    python3 bench/tpch/bench.py --data DIR --sql target/release/examples/sql
        [--rounds 3] [--threads 2] [--queries 1,2,...] [--out FILE.md]

ember runs each query as its own process in local mode (`local[THREADS]`, startup and
planning included); DuckDB (`threads=THREADS`) and Polars (its SQL context over lazy
Parquet scans, `POLARS_MAX_THREADS=THREADS`) run in this process; Spark SQL runs in
`local[THREADS]` (pyspark, one session for every query, `collect()` of the result, 4 GiB
of driver memory); ember's tasks get `--memory` (8g: a hash join's build side does not
spill in DataFusion). A
query an engine cannot run is reported as such (its error's first line). Prints a
Markdown table of medians; with --out also writes it there.
"""
import argparse
import os
import statistics
import sys
import tempfile
import shutil
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--sql", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--queries", default=",".join(str(i) for i in range(1, 23)))
    ap.add_argument("--out")
    ap.add_argument("--engines", default="ember,duckdb,polars,spark")
    ap.add_argument("--memory", default="8g", help="ember's EMBER_EXECUTOR_MEMORY (DuckDB's default limit is 80%% of RAM)")
    args = ap.parse_args()
    os.environ["POLARS_MAX_THREADS"] = str(args.threads)
    engines = args.engines.split(",")
    import duckdb
    con = duckdb.connect(config={"threads": args.threads})
    for t in check.TABLES:
        con.execute(f"create view {t} as select * from read_parquet('{os.path.join(args.data, t + '.parquet')}')")
    pl_ctx = spark = None
    if "polars" in engines:
        import polars as pl
        pl_ctx = pl.SQLContext({t: pl.scan_parquet(os.path.join(args.data, t + ".parquet")) for t in check.TABLES})
    if "spark" in engines:
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master(f"local[{args.threads}]").appName("tpch")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", "4g")
                 .config("spark.sql.shuffle.partitions", str(args.threads * 2)).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        for t in check.TABLES:
            spark.read.parquet(os.path.join(args.data, t + ".parquet")).createOrReplaceTempView(t)
    env = dict(os.environ, EMBER_LOG="warn", EMBER_PROGRESS="0", EMBER_EXECUTOR_MEMORY=args.memory)
    master = f"local[{args.threads}]"
    scratch = tempfile.mkdtemp(prefix="ember-tpch-bench-")
    times = {}
    notes = {}
    wrong = []
    try:
        queries = [int(x) for x in args.queries.split(",")]
        for r in range(args.rounds):
            for q in queries:
                with open(os.path.join(HERE, "queries", f"q{q}.sql")) as f:
                    sql = f.read()
                for e in engines:
                    if notes.get((q, e)):
                        continue
                    t = time.time()
                    try:
                        if e == "ember":
                            got = check.ember_rows(args.sql, master, args.data, sql, scratch, env)
                        elif e == "duckdb":
                            want = check.duckdb_rows(con, sql)
                        elif e == "polars":
                            pl_ctx.execute(sql.rstrip().rstrip(";")).collect()
                        elif e == "spark":
                            spark.sql(sql.rstrip().rstrip(";")).collect()
                    except Exception as ex:  # an engine that cannot run a query
                        notes[(q, e)] = str(ex).strip().splitlines()[0][:80] if str(ex).strip() else type(ex).__name__
                        print(f"round {r + 1} q{q} {e}: cannot run: {notes[(q, e)]}", flush=True)
                        continue
                    dt = time.time() - t
                    times.setdefault((q, e), []).append(dt)
                    print(f"round {r + 1} q{q} {e}: {dt:.3f} s", flush=True)
                if "ember" in engines and "duckdb" in engines and not notes.get((q, "ember")):
                    why = check.same(want, got)
                    if why:
                        wrong.append((q, why))
                        print(f"q{q}: ember DIFFERS from DuckDB: {why}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if spark is not None:
            spark.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    lines = ["| query | " + " | ".join(engines) + " | ember / DuckDB | ember / Spark |",
             "|---|" + "---|" * (len(engines) + 2)]
    totals = {e: 0.0 for e in engines}
    for q in queries:
        row = []
        for e in engines:
            if (q, e) in med:
                row.append(f"{med[(q, e)]:.2f}")
                totals[e] += med[(q, e)]
            else:
                row.append(f"n/a ({notes.get((q, e), 'not run')})")
        ratio = lambda o: f"{med[(q, 'ember')] / med[(q, o)]:.2f}" if (q, "ember") in med and (q, o) in med else "-"
        lines.append(f"| q{q} | " + " | ".join(row) + f" | {ratio('duckdb')} | {ratio('spark')} |")
    lines.append("| total | " + " | ".join(f"{totals[e]:.2f}" for e in engines) + " | "
                 + (f"{totals['ember'] / totals['duckdb']:.2f}" if "duckdb" in totals and totals.get("duckdb") else "-")
                 + " | " + (f"{totals['ember'] / totals['spark']:.2f}" if totals.get("spark") else "-") + " |")
    table = "\n".join(lines)
    print(table)
    if wrong:
        print(f"ember answers differing from DuckDB: {wrong}")
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
