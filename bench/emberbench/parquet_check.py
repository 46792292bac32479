"""The parquet job's independent answer and check, run with the reference venv's Python
(pyarrow and numpy; no engine that is measured):

    python parquet_check.py INPUT.parquet OUTPUT_DIR CACHE.npz

The expected sums are pyarrow's group-by of INPUT's rows with value >= 0 (NaN and nulls
never pass), computed once and cached in CACHE.npz (keyed by INPUT's size and mtime).
OUTPUT_DIR's Parquet files (columns key, sum) must hold every expected key exactly once and
no other, each sum within 1e-9 relative (1e-6 absolute) of the expected one: sums of doubles
added in another order differ in the last bits. Prints `ok KEYS TOTAL` or `FAILED: what`.
"""
import glob
import os
import sys

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq


def expected(inp, cache):
    st = os.stat(inp)
    stamp = np.array([st.st_size, st.st_mtime_ns], dtype=np.int64)
    if os.path.exists(cache):
        z = np.load(cache)
        if np.array_equal(z["stamp"], stamp):
            return z["keys"], z["sums"]
    t = pq.read_table(inp, columns=["key", "value"])
    t = t.filter(pc.greater_equal(t["value"], 0.0))
    g = t.group_by("key").aggregate([("value", "sum")])
    keys = g["key"].to_numpy()
    sums = g["value_sum"].to_numpy()
    order = np.argsort(keys)
    keys, sums = keys[order], sums[order]
    np.savez(cache, stamp=stamp, keys=keys, sums=sums)
    return keys, sums


def check(inp, out_dir, cache):
    keys, sums = expected(inp, cache)
    files = sorted(glob.glob(os.path.join(out_dir, "*.parquet")))
    if not files:
        return f"FAILED: no Parquet files in {out_dir}"
    parts = [pq.read_table(f, columns=["key", "sum"]) for f in files]
    got_k = np.concatenate([p["key"].to_numpy() for p in parts])
    got_s = np.concatenate([p["sum"].to_numpy() for p in parts])
    order = np.argsort(got_k, kind="stable")
    got_k, got_s = got_k[order], got_s[order]
    if len(got_k) != len(np.unique(got_k)):
        return f"FAILED: {len(got_k) - len(np.unique(got_k))} keys appear more than once"
    if len(got_k) != len(keys) or not np.array_equal(got_k, keys):
        missing = np.setdiff1d(keys, got_k)[:3].tolist()
        extra = np.setdiff1d(got_k, keys)[:3].tolist()
        return f"FAILED: {len(got_k)} keys, expected {len(keys)}; missing e.g. {missing}, extra e.g. {extra}"
    bad = ~np.isclose(got_s, sums, rtol=1e-9, atol=1e-6)
    if bad.any():
        i = int(np.argmax(bad))
        return f"FAILED: {int(bad.sum())} sums differ, e.g. key {int(keys[i])}: {got_s[i]!r} != {sums[i]!r}"
    return f"ok {len(keys)} {float(sums.sum()):.3f}"


if __name__ == "__main__":
    print(check(*sys.argv[1:4]))
