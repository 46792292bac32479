#!/usr/bin/env python3
"""ember's Parquet (and CSV) output read by other engines: runs examples/parquet_etl on
a DuckDB-written fixture in local mode, then reads ember's output directory with pyarrow
and with DuckDB and compares it with DuckDB's own answer to the same query over the same
input. Run by .ci/run; the temporary directory is removed at the end, also on failure.

    cargo build -p ember --example parquet_etl
    python3 tests/interop/check_output.py target/debug/examples
"""

import math
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[2]
INPUT = REPO / "tests/fixtures/parquet/duckdb_kv.parquet"


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)


def main():
    bin_dir = Path(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="ember-interop-") as tmp:
        out = Path(tmp) / "sums"
        subprocess.run([str(bin_dir / "parquet_etl"), "--partitions", "3", str(INPUT), str(out)],
                       check=True, timeout=300, env={"EMBER_LOG": "warn", "PATH": "/usr/bin:/bin"})
        names = sorted(p.name for p in out.iterdir())
        assert names == ["_SUCCESS", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"], names

        want = dict(duckdb.sql(
            f"SELECT key, sum(value) FROM read_parquet('{INPUT}') WHERE value >= 0 GROUP BY key").fetchall())
        assert len(want) > 1000, len(want)

        # pyarrow: the directory as a dataset (it skips _SUCCESS), with ember's schema.
        table = pq.read_table(out)
        assert table.schema.names == ["key", "sum"], table.schema
        assert str(table.schema.field("key").type) == "int64", table.schema
        assert str(table.schema.field("sum").type) == "double", table.schema
        got = dict(zip(table.column("key").to_pylist(), table.column("sum").to_pylist()))
        assert got.keys() == want.keys(), (len(got), len(want))
        bad = [k for k in want if not close(got[k], want[k])]
        assert not bad, [(k, got[k], want[k]) for k in bad[:5]]
        codec = pq.ParquetFile(out / "part-00000.parquet").metadata.row_group(0).column(0).compression
        assert codec == "SNAPPY", codec  # ember's default, as Spark's

        # DuckDB over ember's files.
        rows = duckdb.sql(f"SELECT key, sum FROM read_parquet('{out}/part-*.parquet')").fetchall()
        assert len(rows) == len(want), (len(rows), len(want))
        assert all(close(s, want[k]) for k, s in rows)
        print(f"interop: pyarrow and DuckDB read ember's {len(rows)} sums, equal to DuckDB's own")


if __name__ == "__main__":
    main()
