#!/usr/bin/env python3
"""The sort job's references: the kv set's "k,v" lines sorted by key (an integer) into text
files, by DuckDB (`ORDER BY k`, COPY to CSV) and Polars (`sort("k").sink_csv`).

    sort_ref.py duckdb|polars INPUT_DIR OUTPUT_DIR

The value is read as text and written back untouched, so the output lines are the input's
lines (bench/run.py checks that with the same order-independent digest as ember's output,
and that keys never decrease across OUTPUT_DIR/part-*). Writes OUTPUT_DIR/part-00000.csv
and then OUTPUT_DIR/_SUCCESS. Both engines use all cores (2 here). The timed section
(`in_job_s`) is the query with its read and write; interpreter start-up and import are
outside it, as in bench/reference/single_node.py.
"""
import os
import sys
import time


def duckdb_sort(inp, out):
    import duckdb
    con = duckdb.connect()
    t0 = time.perf_counter()
    con.execute(f"""
        COPY (SELECT k, v
              FROM read_csv('{inp}/part-*.txt', columns={{'k': 'BIGINT', 'v': 'VARCHAR'}},
                            header=false, delim=',', quote='', escape='', auto_detect=false)
              ORDER BY k)
        TO '{out}/part-00000.csv' (FORMAT csv, HEADER false, DELIMITER ',', QUOTE '')""")
    return time.perf_counter() - t0


def polars_sort(inp, out):
    import polars as pl
    t0 = time.perf_counter()
    (pl.scan_csv(f"{inp}/part-*.txt", has_header=False, separator=",", quote_char=None,
                 schema={"k": pl.Int64, "v": pl.String})
     .sort("k")
     .sink_csv(f"{out}/part-00000.csv", include_header=False, separator=",", quote_style="never"))
    return time.perf_counter() - t0


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("duckdb", "polars"):
        sys.exit(__doc__)
    engine, inp, out = sys.argv[1:]
    os.makedirs(out)
    dt = {"duckdb": duckdb_sort, "polars": polars_sort}[engine](inp, out)
    open(os.path.join(out, "_SUCCESS"), "w").close()
    mod = __import__(engine)
    print(f"ANCHOR job=sort-{engine}")
    print(f"ANCHOR version={mod.__version__}")
    print(f"ANCHOR input={inp}")
    print(f"ANCHOR in_job_s={dt:.3f}")


if __name__ == "__main__":
    main()
