#!/usr/bin/env python3
"""DuckDB references of the `tenx` job, under a memory limit: the kv set's per-key sums and
its sort by key.

    scale_ref.py kvsum|sort INPUT_DIR OUTPUT_DIR --memory-limit 512MB

kvsum writes `key<TAB>sum` lines, the sum exact (DECIMAL, three decimals, as ember's kvsum
prints it), to OUTPUT_DIR/part-00000; sort writes the input's `k,v` lines ordered by k (v read
as text, written back untouched) to OUTPUT_DIR/part-00000.csv. Then OUTPUT_DIR/_SUCCESS.
DuckDB runs with `memory_limit` set and 2 threads, spilling to OUTPUT_DIR/../duckdb-tmp-PID
(removed afterwards). The timed section (`in_job_s`) is the query with its read and write.
"""
import os
import shutil
import sys
import time

READ = ("read_csv('{inp}/part-*.txt', columns={{'k': 'BIGINT', 'v': '{vtype}'}}, header=false, "
        "delim=',', quote='', escape='', auto_detect=false)")


def main():
    args = sys.argv[1:]
    if len(args) != 5 or args[0] not in ("kvsum", "sort") or args[3] != "--memory-limit":
        sys.exit(__doc__)
    job, inp, out, _, limit = args
    import duckdb
    os.makedirs(out)
    tmp = os.path.join(os.path.dirname(os.path.abspath(out)), f"duckdb-tmp-{os.getpid()}")
    con = duckdb.connect()
    con.execute(f"SET memory_limit='{limit}'")
    con.execute("SET threads=2")
    con.execute(f"SET temp_directory='{tmp}'")
    t0 = time.perf_counter()
    try:
        if job == "kvsum":
            src = READ.format(inp=inp, vtype="DECIMAL(18,3)")
            con.execute(f"""
                COPY (SELECT k, sum(v)::DECIMAL(38,3) FROM {src} GROUP BY k)
                TO '{out}/part-00000' (FORMAT csv, HEADER false, DELIMITER '\t', QUOTE '')""")
        else:
            src = READ.format(inp=inp, vtype="VARCHAR")
            con.execute(f"""
                COPY (SELECT k, v FROM {src} ORDER BY k)
                TO '{out}/part-00000.csv' (FORMAT csv, HEADER false, DELIMITER ',', QUOTE '')""")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    dt = time.perf_counter() - t0
    open(os.path.join(out, "_SUCCESS"), "w").close()
    print(f"ANCHOR job={job}-duckdb memory_limit={limit}")
    print(f"ANCHOR version={duckdb.__version__}")
    print(f"ANCHOR in_job_s={dt:.3f}")


if __name__ == "__main__":
    main()
