"""The `parquet` job of bench/run.py (issue 36): Parquet in, a filter, a sum per key, Parquet
out, on a 50 M-row file DuckDB wrote from the kv set with the sign of every value chosen by a
hash of its row (about half negative and filtered out; no row group ruled out by statistics).

ember runs `examples/parquet_etl` (the filter pushed into the read: `read_parquet_where`),
DuckDB and Polars the same query (`bench/parquet_etl.py`'s code), 2 threads each, alternated
run by run. Every output is checked by `parquet_check.py` against pyarrow's group-by of the
input, computed once and cached beside it.
"""
import os
import sys

from .config import log
from .runs import rm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import parquet_etl  # noqa: E402  (bench/parquet_etl.py: the make step and the peers' code)

def ensure_input(ctx, kv_dir):
    """DATA/<kv set>-signed.parquet, written by DuckDB from the kv set if missing."""
    path = os.path.join(ctx.args.data, f"{os.path.basename(kv_dir.rstrip('/'))}-signed.parquet")
    if not os.path.exists(path):
        import subprocess
        log(f"data: writing {path} with DuckDB from {kv_dir}")
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import parquet_etl; "
                "parquet_etl.make_input(sys.argv[2], sys.argv[3])")
        bench_dir = os.path.dirname(os.path.abspath(parquet_etl.__file__))
        subprocess.run([ctx.refs["python"], "-c", code, bench_dir, kv_dir, path + ".tmp"], check=True)
        os.replace(path + ".tmp", path)
    return path


def run_parquet(ctx, kv_dir, rounds, record, ember_env):
    """`rounds` alternated runs of ember, DuckDB and Polars; returns (runs, row order)."""
    inp = ensure_input(ctx, kv_dir)
    cache = inp + ".expected.npz"
    checker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "parquet_check.py")
    engines = ["ember"] + [e for e in ("duckdb", "polars") if ctx.refs.get(e, {}).get("ok")]
    runs, order = [], [("parquet", e) for e in engines]
    for rnd in range(rounds):
        for e in engines:
            out = os.path.join(ctx.out, "work", f"parquet-{e}-r{rnd}")
            rm(out)
            if e == "ember":
                cmd = [ctx.bins["parquet_etl"], "--master", "local[2]", inp, out]
                env = ember_env("local[2]", ctx.args.executor_memory)
            else:
                os.makedirs(out)
                code = parquet_etl.DUCKDB_CODE if e == "duckdb" else parquet_etl.POLARS_CODE
                cmd = [ctx.refs["python"], "-c", code, inp, os.path.join(out, "part.parquet")]
                env = {"POLARS_MAX_THREADS": "2"}

            def check(res, out=out):
                import subprocess
                r = subprocess.run([ctx.refs["python"], checker, inp, out, cache],
                                   capture_output=True, text=True)
                verdict = (r.stdout.strip() or r.stderr.strip()[-300:]).splitlines()[-1:] or ["no verdict"]
                ok = r.returncode == 0 and verdict[0].startswith("ok ")
                if ok:
                    _, keys, total = verdict[0].split()
                    return True, [f"{int(keys):,} keys, every sum as pyarrow's (total {total})"]
                return False, verdict
            runs.append(record(ctx, "parquet", e, rnd, cmd, env, check))
            rm(out)
    return runs, order
