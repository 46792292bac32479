#!/usr/bin/env python3
"""ember benchmark suite: ember vs. Spark / DuckDB / Polars on the same inputs, same machine.

    python3 bench/run.py [--data DIR] [--out DIR] [--runs N]
                         [--engines ember,duckdb,polars,spark]
                         [--jobs wordcount,kvsum,sort,latency,tiny,scaling] [--small]

Stdlib only (Python 3.11); matplotlib is used for the plot if this interpreter or the
reference venv has it. See bench/README.md for what each job measures and how answers are
checked. The shared data generator, reference jobs and output checker are called where they
are (--shared, default: the sibling `shared/bench` of the repository root); nothing of them
is copied here.

Exit status: 0 if every run that was made passed its check, 1 if any run FAILED (wrong answer,
crash or timeout), 2 on a usage / setup error (e.g. the data could not be generated).
"""
import argparse
import glob
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SHARED = os.path.join(os.path.dirname(REPO), "shared", "bench")

ALL_ENGINES = ["ember", "duckdb", "polars", "spark"]
ALL_JOBS = ["wordcount", "kvsum", "sort", "latency", "tiny", "scaling"]

# Which engines can run which job (ember is always first: it is what the ratios are about).
JOB_ENGINES = {
    "wordcount": ["ember", "duckdb", "polars", "spark"],
    "kvsum": ["ember", "duckdb", "polars", "spark"],
    "sort": ["ember", "spark"],
    "latency": ["ember", "spark"],
    "tiny": ["ember", "spark"],
    "scaling": ["ember"],
}
# ember example each job needs.
JOB_EXAMPLE = {"wordcount": "wordcount", "kvsum": "kvsum", "sort": "sort", "latency": "latency",
               "tiny": "wordcount", "scaling": "wordcount"}
SPARK_CLASS = {"wordcount": "WordCount", "kvsum": "KvSum", "sort": "SortByKey", "latency": "Latency",
               "tiny": "WordCount"}

# Data sets: name -> (generator args). `--jobs 2` is added when generating.
DATASETS_FULL = {
    "text": ("text1g", ["text", "--bytes", "1073741824", "--files", "8", "--seed", "1"]),
    "kv": ("kv", ["kv", "--records", "50000000", "--keys", "5000000", "--files", "8", "--seed", "3"]),
}
DATASETS_SMALL = {
    "text": ("text100m", ["text", "--bytes", "104857600", "--files", "4", "--seed", "2"]),
    "kv": ("kv5m", ["kv", "--records", "5000000", "--keys", "500000", "--files", "8", "--seed", "3"]),
}
DATASET_TINY = ("tiny1k", ["text", "--bytes", "1024", "--files", "1", "--seed", "4"])

# Known results from the shared README, keyed by the generator parameters that produce them.
KNOWN_TEXT = {
    # (bytes, files, seed): (distinct words, total words, digest of word<TAB>count output)
    (1073741824, 8, 1): (995357, 116208746, "6971086b45523b8e"),
    (104857600, 4, 2): (633751, 13039148, "8101d160ddd3da1a"),
}
KNOWN_KV = {
    # (records, keys, files, seed): (distinct keys, exact value sum in thousandths)
    (50000000, 5000000, 8, 3): (4999752, 24998224826264),
}

INSTALL_HINT = ("python3 -m venv {venv} && {venv}/bin/pip install -r {req}\n"
                "    VENV={venv} {shared}/spark/build.sh")


def log(msg=""):
    print(msg, flush=True)


def die(msg):
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


# --------------------------------------------------------------------------- machine

def machine_info():
    info = {"host": platform.node(), "kernel": platform.release(), "nproc": os.cpu_count(),
            "nproc_available": len(os.sched_getaffinity(0)), "python": sys.version.split()[0]}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem = {}
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                mem[k] = int(v.split()[0])  # kB
        info["mem_total_mib"] = mem.get("MemTotal", 0) // 1024
        info["mem_free_mib"] = mem.get("MemFree", 0) // 1024
        info["mem_available_mib"] = mem.get("MemAvailable", 0) // 1024
    except OSError:
        pass
    info["loadavg_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for key, cmd in (("rustc", ["rustc", "--version"]), ("java", ["java", "-version"])):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            out = (r.stdout + r.stderr).strip().splitlines()
            info[key] = out[0] if out else "?"
        except (OSError, subprocess.SubprocessError):
            info[key] = None
    try:
        r = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, timeout=30)
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        info["ember_commit"] = r.stdout.strip() + (" (+ uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return info


# --------------------------------------------------------------------------- running a child

class RunResult:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def run_measured(cmd, env_extra, stdout_path, stderr_path, timeout, cwd=None):
    """Run cmd; wall time, CPU time (user+sys of the child and the descendants it reaped, from
    os.wait4, cross-checked with the RUSAGE_CHILDREN delta) and the child's peak RSS (KiB)."""
    env = dict(os.environ)
    env.update(env_extra)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    timed_out = []
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=cwd,
                             start_new_session=True)

        def kill():
            timed_out.append(True)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            while True:
                try:
                    _, status, ru = os.wait4(p.pid, 0)
                    break
                except InterruptedError:
                    continue
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from waiting again
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru.ru_utime + ru.ru_stime
    cpu_delta = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(stdout_path, "rb") as f:
        stdout = f.read().decode("utf-8", "replace")
    anchors = {}
    for line in stdout.splitlines():
        m = re.match(r"^ANCHOR ([A-Za-z0-9_]+)=(.*)$", line.strip())
        if m:
            anchors[m.group(1)] = m.group(2)
    return RunResult(cmd=cmd, env=env_extra, rc=p.returncode, timed_out=bool(timed_out), wall_s=wall,
                     cpu_s=cpu, cpu_children_delta_s=cpu_delta, maxrss_kib=ru.ru_maxrss,
                     anchors=anchors, stdout_path=stdout_path, stderr_path=stderr_path)


def tail(path, n=15):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-n:])
    except OSError:
        return ""


# --------------------------------------------------------------------------- data

def data_files(d):
    return sorted(glob.glob(os.path.join(d, "part-*")))


def manifest_matches(d, gen_args):
    """The manifest in d exists, was made with gen_args, and the files it lists are intact."""
    mpath = os.path.join(d, "_manifest.json")
    try:
        with open(mpath) as f:
            man = json.load(f)
    except (OSError, ValueError):
        return None, "no readable _manifest.json"
    a = dict(zip(gen_args[1::2], gen_args[2::2]))
    kind = gen_args[0]
    files, seed = int(a["--files"]), int(a["--seed"])
    if man.get("kind") != kind or man.get("files") != files or man.get("seed") != seed:
        return None, f"manifest is for {man.get('kind')} files={man.get('files')} seed={man.get('seed')}"
    if kind == "text":
        want = int(a["--bytes"])
        per = want // files
        # each file is closed after the first line reaching per bytes (lines are <= 121 bytes)
        if not (per * files <= man.get("bytes", -1) < per * files + files * 128):
            return None, f"manifest bytes {man.get('bytes')} do not match --bytes {want}"
    else:
        if man.get("records") != int(a["--records"]) or man.get("keys") != int(a["--keys"]):
            return None, f"manifest is for records={man.get('records')} keys={man.get('keys')}"
    listed = {pf["file"]: pf["bytes"] for pf in man.get("per_file", [])}
    present = {os.path.basename(p): os.path.getsize(p) for p in data_files(d)}
    if listed != present:
        return None, "data files do not match the manifest's per_file list (sizes or names)"
    return man, "ok"


def ensure_dataset(shared, data_root, name, gen_args, python):
    d = os.path.join(data_root, name)
    man, why = manifest_matches(d, gen_args)
    if man is not None:
        log(f"data: {d} present ({man['bytes'] / 2**20:.1f} MiB, manifest matches)")
        return d, man
    if os.path.exists(d):
        # only ever delete something that looks like one of our data sets
        stray = [x for x in os.listdir(d) if not (x.startswith("part-") or x.startswith("_"))]
        if stray:
            die(f"{d} exists, does not match ({why}) and holds non-data files {stray[:5]}; "
                f"move it away or pick another --data")
        log(f"data: {d} does not match ({why}); regenerating")
        shutil.rmtree(d)
    cmd = [python, os.path.join(shared, "gen_data.py")] + gen_args + ["--out", d, "--jobs", "2"]
    log(f"data: generating {d}: {' '.join(cmd)}")
    t0 = time.time()
    r = subprocess.run(cmd)
    if r.returncode != 0:
        die(f"gen_data.py failed with exit status {r.returncode}")
    man, why = manifest_matches(d, gen_args)
    if man is None:
        die(f"generated {d} but its manifest does not check out: {why}")
    log(f"data: generated {d} in {time.time() - t0:.0f} s")
    return d, man


def warm_up(d, done):
    """One untimed read of the input so every engine starts with it in the page cache."""
    if d in done:
        return
    files = data_files(d)
    t0 = time.time()
    subprocess.run(["cat"] + files, stdout=subprocess.DEVNULL, check=False)
    done.add(d)
    log(f"warm-up: read {d} ({len(files)} files) in {time.time() - t0:.1f} s")


# --------------------------------------------------------------------------- build

def build_examples(out_dir, needed):
    """cargo build --release --examples; snapshot the binaries into out_dir/bin so that a
    concurrent rebuild cannot swap them mid-benchmark. Returns ({name: path}, {name: why})."""
    bindir = os.path.join(out_dir, "bin")
    os.makedirs(bindir, exist_ok=True)
    log("build: cargo build --release --examples")

    def cargo(extra):
        cmd = ["cargo", "build", "--release", "--message-format=json-render-diagnostics"] + extra
        r = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        built = {}
        for line in r.stdout.splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if (msg.get("reason") == "compiler-artifact" and msg.get("executable")
                    and "example" in msg.get("target", {}).get("kind", [])):
                built[msg["target"]["name"]] = msg["executable"]
        return r.returncode, built, r.stderr

    rc, built, err = cargo(["--examples"])
    missing = {}
    if rc != 0:
        log("build: building all examples failed (some are being written?); building the needed ones "
            "one by one. Last lines of cargo's output:")
        log("    " + "\n    ".join(err.strip().splitlines()[-8:]))
    for name in sorted(needed):
        if name in built:
            continue
        if not (os.path.exists(os.path.join(REPO, "examples", name + ".rs"))
                or os.path.exists(os.path.join(REPO, "examples", name, "main.rs"))):
            missing[name] = f"examples/{name}.rs does not exist yet"
            continue
        if rc == 0:
            missing[name] = "cargo did not report a binary for it"
            continue
        rc1, b1, err1 = cargo(["--example", name])
        if rc1 == 0 and name in b1:
            built[name] = b1[name]
        else:
            lines = [l for l in err1.splitlines() if l.startswith("error")]
            missing[name] = "does not build: " + (lines[0] if lines else f"cargo exit {rc1}")
    bins = {}
    for name, path in built.items():
        dst = os.path.join(bindir, name)
        shutil.copy2(path, dst + ".tmp")
        os.replace(dst + ".tmp", dst)
        bins[name] = dst
    log(f"build: ember examples available: {', '.join(sorted(bins)) or 'none'}")
    for name, why in sorted(missing.items()):
        if name in needed:
            log(f"build: MISSING ember example {name}: {why}")
    return bins, missing


# --------------------------------------------------------------------------- references

def detect_references(args):
    refs = {}
    venv_py = os.path.join(args.venv, "bin", "python")
    has_py = os.access(venv_py, os.X_OK)

    def has_module(mod):
        if not has_py:
            return None
        r = subprocess.run([venv_py, "-c", f"import {mod}; print({mod}.__version__)"],
                           capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None

    for eng in ("duckdb", "polars"):
        v = has_module(eng)
        refs[eng] = {"ok": bool(v), "version": v,
                     "why": None if v else (f"no {venv_py}" if not has_py else f"{eng} not installed in {args.venv}")}
    spark = {"ok": False, "version": None, "why": None}
    submit = sorted(glob.glob(os.path.join(args.venv, "lib", "python3*", "site-packages", "pyspark", "bin",
                                           "spark-submit")))
    if not shutil.which("java"):
        spark["why"] = "java is not on PATH (Spark 4 needs Java 17+)"
    elif not submit:
        spark["why"] = f"pyspark not installed in {args.venv}"
    elif not os.path.exists(args.spark_jar):
        spark["why"] = (f"{args.spark_jar} not built: run VENV={args.venv} {args.shared}/spark/build.sh")
    else:
        spark.update(ok=True, submit=submit[0], version=has_module("pyspark"))
    refs["spark"] = spark
    refs["python"] = venv_py
    return refs


# --------------------------------------------------------------------------- checks

def verify_output(shared, mode, path):
    r = subprocess.run([sys.executable, os.path.join(shared, "verify_output.py"), mode, path],
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
    vals, err = verify_output(ctx.shared, "wordcount", out_path)
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
    cache = os.path.join(d, "_bench_kvsum_digest.json")
    stamp = hashlib.sha256(json.dumps(man, sort_keys=True, default=str).encode()).hexdigest()
    try:
        with open(cache) as f:
            c = json.load(f)
        if c.get("manifest_sha256") == stamp:
            return c["digest"]
    except (OSError, ValueError, KeyError):
        pass
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
    try:
        with open(cache, "w") as f:
            json.dump({"manifest_sha256": stamp, "digest": digest}, f)
    except OSError:
        pass
    log(f"check: done in {time.time() - t0:.0f} s")
    return digest


def check_kvsum_output(out_path, man, expected_digest=None):
    msgs = []
    digest = 0
    if not os.path.exists(os.path.join(out_path, "_SUCCESS")):
        msgs.append("no _SUCCESS")
    nkeys = man["keys"]
    seen = bytearray(nkeys)
    n = 0
    total = 0
    dup = bad = 0
    pat = re.compile(rb"^(\d+)\t(-?)(\d+)\.(\d{3})$")
    for f in data_files(out_path):
        with open(f, "rb") as fh:
            for line in fh:
                line = line.rstrip(b"\n")
                m = pat.match(line)
                if not m:
                    bad += 1
                    if bad <= 3:
                        msgs.append(f"malformed line {line[:60]!r} in {os.path.basename(f)}")
                    continue
                k = int(m.group(1))
                v = int(m.group(3)) * 1000 + int(m.group(4))
                total += -v if m.group(2) else v
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


def check_sorted_output(ctx, out_path, man, input_digest):
    msgs = []
    if not os.path.exists(os.path.join(out_path, "_SUCCESS")):
        msgs.append("no _SUCCESS")
    vals, err = verify_output(ctx.shared, "sorted", out_path)
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
    cache = os.path.join(d, "_bench_digest.json")
    stamp = hashlib.sha256(json.dumps(man, sort_keys=True, default=str).encode()).hexdigest()
    try:
        with open(cache) as f:
            c = json.load(f)
        if c.get("manifest_sha256") == stamp:
            return c["digest"]
    except (OSError, ValueError, KeyError):
        pass
    log(f"check: computing the line digest of {d} once (for the sort check)")
    # verify_output.py sorted reads part-* of a directory in order: the digest is order-independent
    vals, err = verify_output(ctx.shared, "sorted", d)
    if vals is None:
        log(f"check: could not digest {d}: {err}")
        return None
    try:
        with open(cache, "w") as f:
            json.dump({"manifest_sha256": stamp, "digest": vals["digest"]}, f)
    except OSError:
        pass
    return vals["digest"]


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


# --------------------------------------------------------------------------- jobs

class Ctx:
    pass


def engine_label(engine):
    return engine


def make_command(ctx, job, engine, inp, out, master="local[2]"):
    """(cmd, env, output kind) for one run; output kind tells the checker what to look at."""
    ember_env = {"EMBER_LOG": "warn", "EMBER_PROGRESS": "0", "EMBER_MASTER": master,
                 "EMBER_EXECUTOR_MEMORY": ctx.args.executor_memory}
    if engine.startswith("ember"):
        if job == "latency":
            return [ctx.bins["latency"]], ember_env
        exe = ctx.bins[JOB_EXAMPLE[job]]
        return [exe, "--master", master, inp, out], ember_env
    if engine in ("duckdb", "polars"):
        cmd = [ctx.refs["python"], os.path.join(ctx.shared, "single_node.py"), engine, job, inp]
        if job == "wordcount":
            cmd.append(out)
        return cmd, {}
    if engine == "spark":
        cmd = [ctx.refs["spark"]["submit"], "--master", "local[2]"]
        if job in ("wordcount", "kvsum", "sort"):
            cmd += ["--driver-memory", ctx.args.spark_driver_memory]
        cmd += ["--class", SPARK_CLASS[job], ctx.args.spark_jar]
        if job in ("wordcount", "tiny", "sort"):
            cmd += [inp, out, str(ctx.args.spark_partitions)]
        elif job == "kvsum":
            cmd += [inp, str(ctx.args.spark_partitions)]
        # Spark prints its INFO log on stderr; keep it quiet-ish and local
        return cmd, {"SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    raise ValueError(engine)


def rm(path):
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def do_run(ctx, job, engine, rnd, inp, man, master="local[2]"):
    work = os.path.join(ctx.out, "work")
    logs = os.path.join(ctx.out, "logs")
    tag = f"{job}-{engine.replace('[', '').replace(']', '')}-r{rnd}"
    out = os.path.join(work, tag + (".tsv" if engine in ("duckdb", "polars") else ""))
    rm(out)
    cmd, env = make_command(ctx, job, engine, inp, out, master)
    res = run_measured(cmd, env, os.path.join(logs, tag + ".out"), os.path.join(logs, tag + ".err"),
                       ctx.args.timeout, cwd=ctx.out)
    ok, msgs = True, []
    if res.timed_out:
        ok, msgs = False, [f"timed out after {ctx.args.timeout} s"]
    elif res.rc != 0:
        ok, msgs = False, [f"exit status {res.rc}; stderr tail:\n{tail(res.stderr_path)}"]
    else:
        t0 = time.time()
        if engine.startswith("ember"):
            if job in ("wordcount", "scaling"):
                ok, msgs, _ = check_wordcount_output(ctx, out, man)
            elif job == "tiny":
                ok, msgs = check_tiny_output(out, ctx.tiny_expected)
            elif job == "kvsum":
                ok, msgs = check_kvsum_output(out, man, ctx.kvsum_digest)
            elif job == "sort":
                ok, msgs = check_sorted_output(ctx, out, man, ctx.kv_digest)
            elif job == "latency":
                v = res.anchors.get("trivial_job_median_ms")
                try:
                    float(v)
                    msgs = [f"trivial_job_median_ms={v}"]
                except (TypeError, ValueError):
                    ok, msgs = False, ["no ANCHOR trivial_job_median_ms=<float> in its output"]
        else:
            ok, msgs = check_ref_anchors(job, engine, res, man, ctx)
            if ok and job == "wordcount":
                is_dir = engine == "spark"
                ok2, m2, digest = check_wordcount_output(ctx, out, man, is_dir=is_dir)
                if engine == "duckdb" and digest and ok2:
                    ctx.duckdb_digest.setdefault(man["_dir"], digest)
                ok, msgs = ok2, m2
            elif ok and job == "tiny":
                ok, msgs = check_tiny_output(out, ctx.tiny_expected)
            elif ok and job == "sort":
                ok, msgs = check_sorted_output(ctx, out, man, ctx.kv_digest)
            elif ok:
                msgs = ["ANCHOR check values match the manifest"]
        res.check_s = time.time() - t0
    if not ctx.args.keep_outputs:
        rm(out)
    res.job, res.engine, res.round, res.ok, res.check = job, engine, rnd, ok, msgs
    extra = ""
    if "in_job_s" in res.anchors:
        extra = f" in-job {float(res.anchors['in_job_s']):.3f} s"
    for k in ("trivial_job_median_ms", "median_ms"):
        if k in res.anchors and job == "latency":
            extra = f" {k}={res.anchors[k]}"
    status = "ok" if ok else "FAILED: " + "; ".join(msgs)
    log(f"  {job:9s} {engine:14s} run {rnd + 1}: wall {res.wall_s:8.3f} s  cpu {res.cpu_s:8.3f} s  "
        f"rss {res.maxrss_kib / 1024:8.1f} MiB{extra}  [{status}]")
    return res


# --------------------------------------------------------------------------- report

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt_ratio(x):
    return f"{x:.2f}" if x >= 0.1 else f"{x:.2g}"


def fmt_s(x):
    if x is None:
        return "—"
    if x < 1:
        return f"{x * 1000:.1f} ms"
    if x < 100:
        return f"{x:.2f} s"
    return f"{x:.0f} s"


def summarize(runs, rows_order):
    rows = []
    for job, engine in rows_order:
        rs = [r for r in runs if r["job"] == job and r["engine"] == engine]
        if not rs:
            continue
        row = {"job": job, "engine": engine, "runs": len(rs), "ok": all(r["ok"] for r in rs),
               "wall_s": med([r["wall_s"] for r in rs]), "cpu_s": med([r["cpu_s"] for r in rs]),
               "maxrss_mib": med([r["maxrss_kib"] / 1024 for r in rs]),
               "in_job_s": med([float(r["anchors"]["in_job_s"]) for r in rs if "in_job_s" in r["anchors"]]),
               "failures": [f"run {r['round'] + 1}: " + "; ".join(r["check"]) for r in rs if not r["ok"]],
               "note": next((r["check"][0] for r in rs if r["ok"] and r["check"]), "")}
        lat = [r["anchors"].get("trivial_job_median_ms", r["anchors"].get("median_ms")) for r in rs]
        lat = [float(x) for x in lat if x is not None]
        row["latency_ms"] = med(lat) if job == "latency" else None
        rows.append(row)
    return rows


def render(meta, rows, notes):
    m = meta["machine"]
    out = ["# ember benchmark results", ""]
    out.append(f"- machine: {m.get('host')}, {m.get('nproc')} CPUs ({m.get('nproc_available')} usable), "
               f"{m.get('cpu_model', '?')}")
    out.append(f"- memory: {m.get('mem_total_mib')} MiB total, {m.get('mem_free_mib')} MiB free, "
               f"{m.get('mem_available_mib')} MiB available at start")
    out.append(f"- load average: {m.get('loadavg_start')} at start, {meta.get('loadavg_end')} at end "
               f"(another process using the cores skews every engine)")
    out.append(f"- kernel {m.get('kernel')}; {m.get('rustc')}; java: {m.get('java')}; "
               f"ember {m.get('ember_commit')}")
    vers = ", ".join(f"{k} {v['version']}" for k, v in meta["references"].items()
                     if isinstance(v, dict) and v.get("version"))
    out.append(f"- references: {vers or 'none'}")
    out.append(f"- data: " + "; ".join(f"{k} = {v}" for k, v in meta["datasets"].items()))
    out.append(f"- runs per engine: {meta['args']['runs']} (tiny: {meta['args']['tiny_runs']}), engines "
               f"alternated run by run; inputs read once before the first run (page cache warm)")
    out.append("")
    out.append("Medians. wall = whole process; in-job = the engine's own timer (Spark: after the "
               "context is up; DuckDB/Polars: the query, without interpreter start and import); "
               "CPU = user+sys of the process and its children; RSS = peak resident set. "
               "ember/ref = ember's median wall / the reference's (below 1: ember faster); for "
               "references with an in-job time the ratio to that is in brackets.")
    out.append("")
    out.append("| job | engine | runs | wall | in-job | CPU | CPU/wall | peak RSS | ember/ref | check |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    by_job = {}
    for r in rows:
        by_job.setdefault(r["job"], []).append(r)
    for job, rs in by_job.items():
        ember = next((r for r in rs if r["engine"] == "ember"), None)
        for r in rs:
            ratio = ""
            if job == "latency":
                if ember and r["engine"] != "ember" and ember["latency_ms"] and r["latency_ms"]:
                    ratio = f"{fmt_ratio(ember['latency_ms'] / r['latency_ms'])} (trivial job)"
            elif ember and r["engine"] != "ember" and job != "scaling" and ember["wall_s"] and r["wall_s"]:
                ratio = fmt_ratio(ember['wall_s'] / r['wall_s'])
                if r["in_job_s"]:
                    ratio += f" ({fmt_ratio(ember['wall_s'] / r['in_job_s'])})"
            wall = fmt_s(r["wall_s"])
            if job == "latency" and r["latency_ms"] is not None:
                wall += f"; trivial job {r['latency_ms']:.2f} ms"
            cpuw = f"{r['cpu_s'] / r['wall_s']:.2f}" if r["wall_s"] else ""
            chk = "ok" if r["ok"] else "**FAILED**"
            out.append(f"| {job} | {r['engine']} | {r['runs']} | {wall} | {fmt_s(r['in_job_s'])} | "
                       f"{fmt_s(r['cpu_s'])} | {cpuw} | {r['maxrss_mib']:.0f} MiB | {ratio} | {chk} |")
    sc = {r["engine"]: r for r in by_job.get("scaling", [])}
    if "ember-local[1]" in sc and "ember-local[2]" in sc and sc["ember-local[2]"]["wall_s"]:
        out.append("")
        out.append(f"Scaling (ember wordcount): local[1] {fmt_s(sc['ember-local[1]']['wall_s'])}, "
                   f"local[2] {fmt_s(sc['ember-local[2]']['wall_s'])}: speed-up "
                   f"{sc['ember-local[1]']['wall_s'] / sc['ember-local[2]']['wall_s']:.2f}x")
    fails = [(r["job"], r["engine"], f) for r in rows for f in r["failures"]]
    if fails:
        out.append("")
        out.append("## FAILED checks")
        for job, eng, f in fails:
            out.append(f"- {job} / {eng}: " + f.replace("\n", " | ")[:600])
    if notes:
        out.append("")
        out.append("## Notes")
        for n in notes:
            out.append(f"- {n}")
    out.append("")
    return "\n".join(out)


def plot(results_json, png):
    """Grouped bars of median wall time per job per engine, log scale."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(results_json) as f:
        data = json.load(f)
    rows = [r for r in data["summary"] if r["wall_s"]]
    jobs = list(dict.fromkeys(r["job"] for r in rows))
    engines = list(dict.fromkeys(r["engine"] for r in rows))
    colors = {"ember": "#d62728", "ember-local[1]": "#ff9896", "ember-local[2]": "#d62728",
              "duckdb": "#1f77b4", "polars": "#2ca02c", "spark": "#ff7f0e"}
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(jobs) + 2), 4.8))
    width = 0.8 / max(1, max(sum(1 for r in rows if r["job"] == j) for j in jobs))
    seen = set()
    for j, job in enumerate(jobs):
        rs = [r for r in rows if r["job"] == job]
        for i, r in enumerate(rs):
            x = j + (i - (len(rs) - 1) / 2) * width
            eng = r["engine"]
            b = ax.bar([x], [r["wall_s"]], width, color=colors.get(eng, "#7f7f7f"),
                       hatch="//" if not r["ok"] else None, label=None if eng in seen else eng)
            seen.add(eng)
            ax.annotate(("FAILED " if not r["ok"] else "") + fmt_s(r["wall_s"]),
                        (x, r["wall_s"]), ha="center", va="bottom", fontsize=7, rotation=90)
    lo = min(r["wall_s"] for r in rows)
    hi = max(r["wall_s"] for r in rows)
    ax.set_ylim(lo / 3, hi * 8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(jobs)))
    ax.set_xticklabels(jobs)
    ax.set_ylabel("median wall time, whole process (s, log)")
    m = data["machine"]
    ax.set_title(f"ember vs references — {m.get('nproc')} CPUs, {m.get('cpu_model', '')[:40]}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def make_plot(ctx, results_json, png, notes):
    try:
        import matplotlib  # noqa: F401
        plot(results_json, png)
        return True
    except ImportError:
        pass
    py = ctx.refs["python"]
    if os.access(py, os.X_OK):
        r = subprocess.run([py, os.path.abspath(__file__), "--plot-from", results_json, png],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return True
        notes.append(f"plot: failed with {py}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
        return False
    notes.append(f"plot: skipped, matplotlib is not installed (pip install matplotlib, "
                 f"or into {ctx.args.venv})")
    return False


# --------------------------------------------------------------------------- main

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/data", help="where the data sets live / are generated")
    ap.add_argument("--out", default="/tmp/ember-bench", help="results, logs and scratch outputs")
    ap.add_argument("--runs", type=int, default=3, help="runs per engine per job (default 3)")
    ap.add_argument("--tiny-runs", type=int, default=10,
                    help="ember runs for the tiny job (Spark does --runs of them); default 10")
    ap.add_argument("--engines", default=",".join(ALL_ENGINES))
    ap.add_argument("--jobs", default=",".join(ALL_JOBS))
    ap.add_argument("--small", action="store_true", help="100 MiB text and 5M-record kv instead of 1 GiB / 50M")
    ap.add_argument("--shared", default=DEFAULT_SHARED, help=f"shared bench dir (default {DEFAULT_SHARED})")
    ap.add_argument("--venv", default="/tmp/spark-venv", help="venv with pyspark, duckdb, polars")
    ap.add_argument("--spark-jar", default="/tmp/spark-build/reference.jar")
    ap.add_argument("--spark-driver-memory", default="8g")
    ap.add_argument("--spark-partitions", type=int, default=8)
    ap.add_argument("--executor-memory", default="1g", help="EMBER_EXECUTOR_MEMORY for ember runs")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds before a run is killed")
    ap.add_argument("--keep-outputs", action="store_true", help="keep every run's output under OUT/work")
    ap.add_argument("--no-sort-digest", dest="sort_digest", action="store_false",
                    help="sort check: skip comparing the output's lines with the input's (one extra pass)")
    ap.add_argument("--skip-build", action="store_true", help="use the binaries already in OUT/bin")
    ap.add_argument("--plot-from", nargs=2, metavar=("JSON", "PNG"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.plot_from:
        plot(*a.plot_from)
        sys.exit(0)
    a.engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    a.jobs = [j.strip() for j in a.jobs.split(",") if j.strip()]
    for e in a.engines:
        if e not in ALL_ENGINES:
            ap.error(f"unknown engine {e!r} (know {', '.join(ALL_ENGINES)})")
    for j in a.jobs:
        if j not in ALL_JOBS:
            ap.error(f"unknown job {j!r} (know {', '.join(ALL_JOBS)})")
    if a.runs < 1 or a.tiny_runs < 1:
        ap.error("--runs and --tiny-runs must be >= 1")
    a.shared = os.path.abspath(a.shared)
    a.data = os.path.abspath(a.data)
    a.out = os.path.abspath(a.out)
    return a


def main():
    args = parse_args()
    ctx = Ctx()
    ctx.args, ctx.shared, ctx.out = args, args.shared, args.out
    ctx.duckdb_digest = {}
    ctx.kv_digest = None
    ctx.kvsum_digest = None
    ctx.tiny_expected = None
    ctx.text_gen_key = lambda man: (man.get("_gen_bytes"), man.get("files"), man.get("seed"))
    notes = []
    for f in ("gen_data.py", "verify_output.py", "single_node.py"):
        if not os.path.exists(os.path.join(args.shared, f)):
            die(f"{args.shared}/{f} not found; pass --shared DIR (the shared bench directory)")
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "work"), exist_ok=True)

    meta = {"args": vars(args), "machine": machine_info(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    m = meta["machine"]
    log(f"machine: {m['nproc']} CPUs, {m.get('cpu_model', '?')}, {m.get('mem_available_mib')} MiB available "
        f"({m.get('mem_free_mib')} MiB free), load {m['loadavg_start']}")

    # ---- references
    refs = detect_references(args)
    ctx.refs = refs
    meta["references"] = {k: v for k, v in refs.items() if k != "python"}
    missing_refs = [e for e in args.engines if e != "ember" and not refs[e]["ok"]]
    for e in missing_refs:
        msg = f"reference {e} not available ({refs[e]['why']}); skipping it"
        log(msg)
        notes.append(msg)
    if missing_refs:
        hint = INSTALL_HINT.format(venv=args.venv, req=os.path.join(REPO, "bench", "requirements.txt"),
                                   shared=args.shared)
        log("  to install the references:\n    " + hint)
        notes.append("install the references with: `" + hint.replace("\n    ", "` then (for Spark; needs "
                                                                   "javac 17+) `") + "`")
    engines = [e for e in args.engines if e == "ember" or refs[e]["ok"]]

    # ---- data
    sets = DATASETS_SMALL if args.small else DATASETS_FULL
    need_text = any(j in args.jobs for j in ("wordcount", "scaling"))
    need_kv = any(j in args.jobs for j in ("kvsum", "sort"))
    need_tiny = "tiny" in args.jobs
    gen_py = sys.executable
    datasets, manifests = {}, {}

    def load(key, name, gen_args):
        d, man = ensure_dataset(args.shared, args.data, name, gen_args, gen_py)
        man["_dir"] = d
        if gen_args[0] == "text":
            man["_gen_bytes"] = int(gen_args[gen_args.index("--bytes") + 1])
        datasets[key] = d
        manifests[key] = man
    if need_text:
        load("text", *sets["text"])
        mt = manifests["text"]
        known = KNOWN_TEXT.get(ctx.text_gen_key(mt))
        if known and mt["words"] != known[1]:
            notes.append(f"text manifest words {mt['words']} != the shared README's {known[1]}: generator changed?")
    if need_kv:
        load("kv", *sets["kv"])
        mk = manifests["kv"]
        known = KNOWN_KV.get((mk["records"], mk["keys"], mk["files"], mk["seed"]))
        if known and (mk["distinct_keys"], mk["value_sum_thousandths"]) != known:
            notes.append(f"kv manifest differs from the shared README's figures {known}: generator changed?")
    if need_tiny:
        load("tiny", *DATASET_TINY)
        exp = {}
        for f in data_files(datasets["tiny"]):
            with open(f, "rb") as fh:
                for line in fh:
                    for w in line.rstrip(b"\n").split(b" "):
                        if w:
                            exp[w] = exp.get(w, 0) + 1
        ctx.tiny_expected = exp
    meta["datasets"] = {k: f"{v} ({manifests[k]['bytes'] / 2**20:.1f} MiB)" for k, v in datasets.items()}
    meta["manifests"] = manifests

    # ---- build
    needed = {JOB_EXAMPLE[j] for j in args.jobs} if "ember" in engines else set()
    if needed and args.skip_build:
        bindir = os.path.join(args.out, "bin")
        ctx.bins = {n: os.path.join(bindir, n) for n in needed if os.access(os.path.join(bindir, n), os.X_OK)}
        missing_ex = {n: f"not in {bindir} (--skip-build)" for n in needed if n not in ctx.bins}
    elif needed:
        ctx.bins, missing_ex = build_examples(args.out, needed)
    else:
        ctx.bins, missing_ex = {}, {}
    meta["ember_examples"] = {"built": sorted(ctx.bins), "missing": missing_ex}
    for n, why in sorted(missing_ex.items()):
        if n in needed:
            jobs_hit = [j for j in args.jobs if JOB_EXAMPLE[j] == n]
            if n == "latency":
                notes.append(f"latency row skipped for ember: the `latency` example is missing ({why})")
            else:
                notes.append(f"ember example `{n}` missing ({why}): no ember row for {', '.join(jobs_hit)}")

    # ---- runs
    all_runs = []
    rows_order = []
    warmed = set()
    t_start = time.time()
    for job in args.jobs:
        if job == "scaling":
            job_engines = ["ember-local[1]", "ember-local[2]"] if ("ember" in engines and "wordcount" in ctx.bins) else []
        else:
            job_engines = [e for e in JOB_ENGINES[job] if e in engines
                           and (e != "ember" or JOB_EXAMPLE[job] in ctx.bins)]
        if not job_engines:
            log(f"\n== {job}: nothing to run (engines {','.join(engines)})")
            notes.append(f"{job}: nothing ran (no available engine for it among {','.join(args.engines)})")
            continue
        inp, man = None, None
        if job in ("wordcount", "scaling"):
            inp, man = datasets["text"], manifests["text"]
        elif job in ("kvsum", "sort"):
            inp, man = datasets["kv"], manifests["kv"]
        elif job == "tiny":
            inp, man = datasets["tiny"], manifests["tiny"]
        if job == "kvsum" and "ember" in job_engines and ctx.kvsum_digest is None:
            ctx.kvsum_digest = kv_expected_digest(inp, man)
        if job == "sort" and ctx.kv_digest is None and args.sort_digest:
            ctx.kv_digest = input_line_digest(ctx, inp, man)
        if job == "wordcount" and "duckdb" in job_engines and "ember" in job_engines:
            # run DuckDB first within each round so ember's digest can be compared in round 1
            job_engines.remove("duckdb")
            job_engines.insert(0, "duckdb")
        rounds = args.tiny_runs if job == "tiny" else args.runs
        log(f"\n== {job} on {inp or '(no input)'}: {', '.join(job_engines)}; {rounds} rounds")
        if inp:
            warm_up(inp, warmed)
        for e in job_engines:
            rows_order.append((job, e))
        for rnd in range(rounds):
            for e in job_engines:
                if job == "tiny" and e == "spark" and rnd >= args.runs:
                    continue
                if job == "scaling":
                    res = do_run(ctx, job, e, rnd, inp, man, master=e[len("ember-"):])
                else:
                    res = do_run(ctx, job, e, rnd, inp, man)
                all_runs.append({k: v for k, v in vars(res).items()})

    meta["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    meta["elapsed_s"] = time.time() - t_start
    rows = summarize(all_runs, rows_order)
    # move ember first within each job for the table
    rows.sort(key=lambda r: (args.jobs.index(r["job"]), 0 if r["engine"].startswith("ember") else 1))
    results_json = os.path.join(args.out, "results.json")
    png = os.path.join(args.out, "results.png")
    with open(results_json, "w") as f:
        json.dump({**meta, "notes": notes, "summary": rows, "runs": all_runs}, f, indent=1, default=str)
    plotted = False
    if rows:
        plotted = make_plot(ctx, results_json, png, notes)
        if plotted:
            notes.append(f"plot: {png}")
    else:
        notes.append("plot: nothing ran, no plot")
    report = render(meta, rows, notes)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(report)
    with open(results_json, "w") as f:
        json.dump({**meta, "notes": notes, "summary": rows, "runs": all_runs}, f, indent=1, default=str)
    log("\n" + report)
    log(f"written: {os.path.join(args.out, 'results.md')}, {results_json}"
        + (f", {png}" if plotted else ""))
    failed = [r for r in rows if not r["ok"]]
    if failed:
        log(f"FAILED: {', '.join(r['job'] + '/' + r['engine'] for r in failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
