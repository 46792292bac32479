"""Answer verification: every engine's output (or ANCHOR figures) against the manifest, the
bench/reference/README.md's known results, DuckDB's digest and digests the harness computes from the input."""
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from array import array

from .config import KNOWN_JOIN, KNOWN_TEXT, log
from .data import data_files


def verify_output(reference, mode, path):
    r = subprocess.run([sys.executable, os.path.join(reference, "verify_output.py"), mode, path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["?"])[-1]
    vals = dict(kv.split("=", 1) for kv in r.stdout.split())
    return vals, None


def check_wordcount_output(ctx, out_path, man, is_dir=True):
    """verify_output.py wordcount; compare with the manifest, the README's known values and the
    DuckDB digest. Returns (ok, [messages], digest)."""
    msgs = []
    if is_dir and not os.path.exists(os.path.join(out_path, "_SUCCESS")):
        msgs.append("no _SUCCESS")
    vals, err = verify_output(ctx.reference, "wordcount", out_path)
    if vals is None:
        return False, msgs + [f"verify_output.py failed: {err}"], None
    lines, distinct, total, digest = (int(vals["lines"]), int(vals["distinct_words"]),
                                      int(vals["total_count"]), vals["digest"])
    if lines != distinct:
        msgs.append(f"{lines} lines but {distinct} distinct words (a word appears twice)")
    if total != man["words"]:
        msgs.append(f"total_count {total} != manifest words {man['words']}")
    known = KNOWN_TEXT.get((ctx.text_gen_key(man)))
    checked_digest = False
    if known:
        kd, kt, kdig = known
        if distinct != kd:
            msgs.append(f"distinct words {distinct} != known {kd}")
        if digest != kdig:
            msgs.append(f"digest {digest} != known {kdig}")
        checked_digest = True
    ref = ctx.duckdb_digest.get(man.get("_dir"))
    if ref is not None:
        if digest != ref:
            msgs.append(f"digest {digest} != DuckDB's {ref}")
        checked_digest = True
    if not checked_digest and not msgs:
        return True, ["total ok; digest not compared (no known digest, DuckDB did not run)"], digest
    return not msgs, msgs or [f"distinct={distinct} total={total} digest={digest}"], digest


def check_tiny_output(out_path, expected):
    if not os.path.exists(os.path.join(out_path, "_SUCCESS")):
        return False, ["no _SUCCESS"]
    got = {}
    for f in data_files(out_path):
        with open(f, "rb") as fh:
            for line in fh:
                w, c = line.rstrip(b"\n").split(b"\t")
                if w in got:
                    return False, [f"word {w!r} appears twice"]
                got[w] = int(c)
    if got != expected:
        diff = [w for w in set(got) | set(expected) if got.get(w) != expected.get(w)]
        return False, [f"{len(diff)} words with wrong counts, e.g. {diff[:3]}"]
    return True, [f"all {len(expected)} word counts exact"]


def line_hash(line):
    return int.from_bytes(hashlib.blake2b(line, digest_size=8).digest(), "big")


def kv_expected_digest(d, man):
    """Order-independent digest (sum mod 2^64 of an 8-byte blake2b per line) of the exact
    `key<TAB>sum` lines a correct kvsum must print, computed here from the input itself, cached
    next to the manifest. Catches answers with the right key count and total but a wrong split."""
    return cached_digest(d, "_bench_kvsum_digest.json", man, lambda: _kv_expected_digest(d, man))


def _kv_expected_digest(d, man):
    log(f"check: computing the expected per-key sums of {d} once (for the kvsum check)")
    t0 = time.time()
    sums = [0] * man["keys"]
    seen = bytearray(man["keys"])
    for f in data_files(d):
        with open(f, "rb") as fh:
            for line in fh:
                k, v = line.split(b",")
                k = int(k)
                ip, _, fp = v.strip().partition(b".")
                neg = ip.startswith(b"-")
                t = abs(int(ip)) * 1000 + int((fp + b"000")[:3] or b"0")
                sums[k] += -t if neg else t
                seen[k] = 1
    digest = 0
    for k, s in enumerate(sums):
        if seen[k]:
            a = abs(s)
            digest += line_hash(f"{k}\t{'-' if s < 0 else ''}{a // 1000}.{a % 1000:03d}".encode())
    digest = f"{digest & ((1 << 64) - 1):016x}"
    log(f"check: done in {time.time() - t0:.0f} s")
    return digest


def check_kvsum_output(out_path, man, expected_digest=None):
    msgs = []
    if not os.path.exists(os.path.join(out_path, "_SUCCESS")):
        msgs.append("no _SUCCESS")

    def lines():
        for f in data_files(out_path):
            with open(f, "rb") as fh:
                for line in fh:
                    yield os.path.basename(f), line
    ok, more = check_kv_lines(lines(), man, expected_digest)
    if msgs:
        return False, msgs + ([] if ok else more)
    return ok, more


KEY_THOUSANDTHS = re.compile(rb"^(\d+)\t(-?)(\d+)\.(\d{3})$")


def key_thousandths(line):
    """A `key<TAB>[-]digits.ddd` output line (no newline) as (key, sum in thousandths), or
    None if it is not one."""
    m = KEY_THOUSANDTHS.match(line)
    if not m:
        return None
    v = int(m.group(3)) * 1000 + int(m.group(4))
    return int(m.group(1)), -v if m.group(2) else v


def check_kv_lines(lines, man, expected_digest=None):
    """The kvsum check over `(file name, line)` pairs: `key<TAB>sum` lines, 3 decimals,
    every key once and in range, as many keys as the manifest's distinct_keys, the exact
    total and (with expected_digest) the per-key digest. Returns (ok, [messages])."""
    msgs = []
    digest = 0
    nkeys = man["keys"]
    seen = bytearray(nkeys)
    n = 0
    total = 0
    dup = bad = 0
    for name, line in lines:
        line = line.rstrip(b"\n")
        kv = key_thousandths(line)
        if kv is None:
            bad += 1
            if bad <= 3:
                msgs.append(f"malformed line {line[:60]!r} in {name}")
            continue
        k, v = kv
        total += v
        n += 1
        digest += line_hash(line)
        if k >= nkeys:
            bad += 1
            if bad <= 3:
                msgs.append(f"key {k} out of range [0,{nkeys})")
        elif seen[k]:
            dup += 1
        else:
            seen[k] = 1
    if dup:
        msgs.append(f"{dup} duplicate keys")
    if bad > 3:
        msgs.append(f"{bad} bad lines in all")
    if n != man["distinct_keys"]:
        msgs.append(f"{n} output lines != manifest distinct_keys {man['distinct_keys']}")
    if total != man["value_sum_thousandths"]:
        msgs.append(f"exact sum {total} != manifest value_sum_thousandths {man['value_sum_thousandths']}")
    digest = f"{digest & ((1 << 64) - 1):016x}"
    if expected_digest and digest != expected_digest:
        msgs.append(f"per-key sums digest {digest} != expected {expected_digest} (some key has a wrong sum)")
    ok = not msgs
    return ok, msgs or [f"keys={n} sum={total // 1000}.{total % 1000:03d} exact"
                        + (", every per-key sum exact" if expected_digest else "")]


def thousandths_text(t):
    """Integer thousandths as `[-]INT.DDD`, the form every engine prints a sum in."""
    a = abs(t)
    return f"{'-' if t < 0 else ''}{a // 1000}.{a % 1000:03d}"


def join_gen_key(fact_man, dim_man):
    """The generator parameters a join answer depends on: KNOWN_JOIN's key."""
    return (fact_man["kind"], fact_man["records"], fact_man["keys"], fact_man["files"], fact_man["seed"],
            fact_man.get("skew_percent", 0), fact_man.get("hot_key"),
            dim_man["keys"], dim_man["groups"], dim_man["files"], dim_man["seed"])


def join_expected(fact_dir, fact_man, dim_dir, dim_man):
    """The exact answer of the join jobs over the fact set fact_dir (`key,value` lines) and the
    dimension set dim_dir (`key,attr` lines), computed here from the input files themselves,
    not by any engine nor from the generator's formulas: a dict with "sums" ({attr: sum of the
    values of the fact records whose key dim maps to attr, in thousandths}; attrs no fact record
    joins are absent, as in an inner join), "joined" and "unmatched" (fact records with and
    without a dim key) and "digest" (order-independent, of the `attr<TAB>sum` lines). Cached
    as `_bench_join_<dim set name>.json` next to the fact set's manifest, keyed by both
    manifests. Raises ValueError if the dimension set is not `key,attr` lines with every key
    in [0, keys) at most once."""
    name = f"_bench_join_{os.path.basename(os.path.normpath(dim_dir))}.json"
    both = {"fact": fact_man, "dim": dim_man}
    r = cached_digest(fact_dir, name, both, lambda: _join_expected(fact_dir, dim_dir, dim_man))
    return {**r, "sums": {int(a): t for a, t in r["sums"]}}


def _join_expected(fact_dir, dim_dir, dim_man):
    log(f"check: computing the expected per-attr sums of {fact_dir} joined with {dim_dir} once "
        f"(for the join check)")
    t0 = time.time()
    nkeys = dim_man["keys"]
    attr_of = array("q", [-1]) * nkeys
    for f in data_files(dim_dir):
        with open(f, "rb") as fh:
            for no, line in enumerate(fh, 1):
                try:
                    k, a = map(int, line.split(b","))
                except ValueError:
                    raise ValueError(f"{f}:{no}: {line[:60]!r} is not key,attr") from None
                if not 0 <= k < nkeys or a < 0 or attr_of[k] != -1:
                    raise ValueError(f"{f}:{no}: key {k} outside [0,{nkeys}) or seen before, or attr {a} < 0")
                attr_of[k] = a
    sums = {}
    joined = unmatched = 0
    for f in data_files(fact_dir):
        with open(f, "rb") as fh:
            for line in fh:
                k, v = line.split(b",")
                k = int(k)
                a = attr_of[k] if 0 <= k < nkeys else -1
                if a < 0:
                    unmatched += 1
                    continue
                ip, _, fp = v.strip().partition(b".")
                t = abs(int(ip)) * 1000 + int((fp + b"000")[:3] or b"0")
                sums[a] = sums.get(a, 0) + (-t if ip.startswith(b"-") else t)
                joined += 1
    digest = 0
    for a, t in sums.items():
        digest += line_hash(f"{a}\t{thousandths_text(t)}".encode())
    log(f"check: done in {time.time() - t0:.0f} s ({joined} fact records joined, {unmatched} without a "
        f"dimension key, {len(sums)} attrs)")
    return {"sums": sorted(sums.items()), "joined": joined, "unmatched": unmatched,
            "total": sum(sums.values()), "digest": f"{digest & ((1 << 64) - 1):016x}"}


def check_join_output(out_path, expected, known=None, is_dir=True):
    """A join job's output (a directory of part-* files with _SUCCESS, or one file when
    is_dir is False): `attr<TAB>sum` lines, sum with exactly 3 decimals, every attr once;
    the set of attrs and every sum must equal `expected` (join_expected) exactly. `known`:
    KNOWN_JOIN's pinned (attrs, total in thousandths, digest) for these data sets, which the
    output must match as well (it fails if the generator or this check changed).
    Returns (ok, [messages])."""
    msgs = []
    if is_dir and not os.path.exists(os.path.join(out_path, "_SUCCESS")):
        msgs.append("no _SUCCESS")
    files = data_files(out_path) if is_dir else [out_path]
    if is_dir and not files:
        msgs.append("no part-* files")
    got = {}
    digest = bad = dup = 0
    for f in files:
        with open(f, "rb") as fh:
            for line in fh:
                line = line.rstrip(b"\n")
                kv = key_thousandths(line)
                if kv is None:
                    bad += 1
                    if bad <= 3:
                        msgs.append(f"malformed line {line[:60]!r} in {os.path.basename(f)}: expected attr<TAB>sum")
                    continue
                a, t = kv
                if a in got:
                    dup += 1
                    continue
                got[a] = t
                digest += line_hash(line)
    if bad > 3:
        msgs.append(f"{bad} malformed lines in all")
    if dup:
        msgs.append(f"{dup} attrs appear more than once")
    want = expected["sums"]
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    wrong = sorted(a for a in set(got) & set(want) if got[a] != want[a])
    if missing:
        msgs.append(f"{len(missing)} attrs missing, e.g. {missing[:3]}")
    if extra:
        msgs.append(f"{len(extra)} attrs that no joined fact record has, e.g. {extra[:3]}")
    for a in wrong[:3]:
        msgs.append(f"attr {a}: sum {thousandths_text(got[a])} != {thousandths_text(want[a])} computed from the input")
    if len(wrong) > 3:
        msgs.append(f"{len(wrong)} attrs with a wrong sum in all")
    digest = f"{digest & ((1 << 64) - 1):016x}"
    total = sum(got.values())
    if known:
        if (len(got), total, digest) != tuple(known):
            msgs.append(f"attrs={len(got)} total={total} digest={digest} != pinned {tuple(known)} "
                        f"(bench/reference/README.md; the generator or this check changed?)")
    return not msgs, msgs or [f"attrs={len(got)} sum={thousandths_text(total)}: every per-attr sum exact"
                              + (", digest = pinned" if known else "")]


def output_sha256(out_path):
    """SHA-256 of the concatenated part-* files of an output directory, in name order."""
    h = hashlib.sha256()
    for f in data_files(out_path):
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def check_faultjob_output(out_path, man, ref, expected_digest=None):
    """faultjob's `bucket<TAB>key<TAB>sum` output. `ref` is the job's state, a dict: while
    ref["sha256"] is None (the first fault-free run) the output is verified on its own (every
    bucket is key % 7, each bucket's keys ascending, no key twice; then the `key<TAB>sum` lines
    must pass the kvsum check: key count, exact total, per-key digest from the input) and its
    SHA-256 (concatenated part files in order) becomes ref["sha256"]; every later output must
    have exactly that SHA-256."""
    if not os.path.exists(os.path.join(out_path, "_SUCCESS")):
        return False, ["no _SUCCESS"]
    sha = output_sha256(out_path)
    if ref.get("sha256") is not None:
        if sha != ref["sha256"]:
            return False, [f"output sha256 {sha[:16]}... != the first fault-free output's "
                           f"{ref['sha256'][:16]}... (part files concatenated in order)"]
        return True, [f"output identical to the first fault-free one (sha256 {sha[:16]}...)"]
    # First output: verify it, its lines without the bucket through the kvsum check.
    msgs = []
    last = {}  # bucket -> last key seen
    bad = 0

    def kv_lines():
        nonlocal bad
        for f in data_files(out_path):
            with open(f, "rb") as fh:
                for line in fh:
                    parts = line.rstrip(b"\n").split(b"\t")
                    try:
                        b, k = int(parts[0]), int(parts[1])
                        ok = len(parts) == 3 and b == k % 7 and k > last.get(b, -1)
                    except (ValueError, IndexError):
                        ok = False
                    if not ok:
                        bad += 1
                        if bad <= 3:
                            msgs.append(f"line {line[:60]!r} in {os.path.basename(f)}: expected "
                                        f"bucket<TAB>key<TAB>sum, bucket = key % 7, keys ascending per bucket")
                        continue
                    last[b] = k
                    yield os.path.basename(f), parts[1] + b"\t" + parts[2]
    ok, kv_msgs = check_kv_lines(kv_lines(), man, expected_digest)
    if bad > 3:
        msgs.append(f"{bad} bad lines in all")
    if not ok:
        msgs.extend(kv_msgs)
    if msgs:
        return False, msgs
    ref["sha256"] = sha
    return True, [f"first fault-free output verified ({kv_msgs[0]}); sha256 {sha[:16]}... "
                  f"is the reference for the other runs"]


def check_sorted_output(ctx, out_path, man, input_digest):
    msgs = []
    if not os.path.exists(os.path.join(out_path, "_SUCCESS")):
        msgs.append("no _SUCCESS")
    vals, err = verify_output(ctx.reference, "sorted", out_path)
    if vals is None:
        return False, msgs + [f"verify_output.py failed: {err}"]
    if int(vals["records"]) != man["records"]:
        msgs.append(f"records {vals['records']} != manifest {man['records']}")
    if int(vals["descending_steps"]) != 0:
        msgs.append(f"descending_steps {vals['descending_steps']} != 0")
    if int(vals["sum_of_keys"]) != man["key_sum"]:
        msgs.append(f"sum_of_keys {vals['sum_of_keys']} != manifest key_sum {man['key_sum']}")
    if input_digest and vals["digest"] != input_digest:
        msgs.append(f"line digest {vals['digest']} != input's {input_digest} (lines altered)")
    return not msgs, msgs or [f"records={vals['records']} in order, key sum ok"
                              + (", same lines as input" if input_digest else "")]


def input_line_digest(ctx, d, man):
    """Order-independent digest of the input's k,v lines (verify_output.py sorted on the input
    itself), cached next to the manifest as _bench_digest.json."""
    return cached_digest(d, "_bench_digest.json", man, lambda: _input_line_digest(ctx, d))


def _input_line_digest(ctx, d):
    log(f"check: computing the line digest of {d} once (for the sort check)")
    # verify_output.py sorted reads part-* of a directory in order: the digest is order-independent
    vals, err = verify_output(ctx.reference, "sorted", d)
    if vals is None:
        log(f"check: could not digest {d}: {err}")
        return None
    return vals["digest"]


def cached_digest(d, name, man, compute):
    """`compute()`'s digest, cached in `d/name` and keyed by the manifest, so it is
    recomputed only when the data set changes. A `None` result is not cached."""
    cache = os.path.join(d, name)
    stamp = hashlib.sha256(json.dumps(man, sort_keys=True, default=str).encode()).hexdigest()
    try:
        with open(cache) as f:
            c = json.load(f)
        if c.get("manifest_sha256") == stamp:
            return c["digest"]
    except (OSError, ValueError, KeyError):
        pass
    digest = compute()
    if digest is not None:
        try:
            with open(cache, "w") as f:
                json.dump({"manifest_sha256": stamp, "digest": digest}, f)
        except OSError:
            pass
    return digest


def check_latency_anchors(anchors):
    """ember's `latency`: ANCHOR trivial_job_median_ms=<float> (and its p90, when printed)."""
    v = anchors.get("trivial_job_median_ms")
    try:
        float(v)
    except (TypeError, ValueError):
        return False, ["no ANCHOR trivial_job_median_ms=<float> in its output"]
    p90 = anchors.get("trivial_job_p90_ms")
    return True, [f"trivial_job_median_ms={v}" + (f" p90_ms={p90}" if p90 is not None else "")]


def check_ref_anchors(job, engine, res, man, ctx):
    """Check a reference engine's own ANCHOR figures against the manifest."""
    a = res.anchors
    msgs = []

    def eq(key, want):
        got = a.get(key)
        if got is None:
            msgs.append(f"no ANCHOR {key}")
        elif str(got).strip() != str(want):
            msgs.append(f"{key}={got} != {want}")
    if job in ("wordcount", "tiny"):
        eq("total_words", man["words"])
        known = KNOWN_TEXT.get(ctx.text_gen_key(man))
        if known:
            eq("distinct_words", known[0])
        if job == "tiny":
            eq("distinct_words", len(ctx.tiny_expected))
    elif job == "kvsum":
        eq("distinct_keys", man["distinct_keys"])
        eq("sum_of_sums_exact", man["value_sum"])
    elif job == "sort":
        eq("records", man["records"])
        eq("disorder_within_partitions", 0)
        eq("sum_of_keys", man["key_sum"])
    elif job == "latency":
        cc = a.get("count_check", "")
        m = re.match(r"(\d+) \(expected (\d+)\)", cc)
        if not m or m.group(1) != m.group(2):
            msgs.append(f"count_check {cc!r}")
        if "median_ms" not in a:
            msgs.append("no ANCHOR median_ms")
    return not msgs, msgs
