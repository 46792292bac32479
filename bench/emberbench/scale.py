"""The scale jobs of bench/run.py: the layouts and sizes a few big files do not show.

- `scheduling`: `manytasks --source range` (50,000 one-record tasks, three jobs in one process) in local[2]
  and on a cluster of 2 executors x 1 core; and the scheduler alone against 1,000 simulated
  executors (`decisions`, ember-scheduler's example): one stage of 100,000 tasks, and 50,000
  maps -> 1,000 reduces.
- `memory`: sort of the kv set under EMBER_EXECUTOR_MEMORY 64m, 128m and 512m: wall, peak
  RSS against the limit + 64 MiB target.
- `tenx`: kvsum and sort over ten times the kv set (DATA/kv10: the kv files hard-linked ten
  times) under 512m, against DuckDB with memory_limit 512MB (`scale_ref.py`).
- `smallfiles`: wordcount over a directory of many small files (bench/small_files.py's
  set), ember local[2] against DuckDB.
- `wideshuffle`: 1,000 maps x 1,000 reduces of 1 M records from `range` (issue 36's job:
  `range(0, 1_000_000, 1000).map(|x| (x % 1000, 1)).reduce_by_key_into(+, 1000).count()`),
  local[2] and on the cluster.
- `pagerank`: 10 iterations over a 200,000-edge graph, local[2].
- `parquet`: Parquet ETL (filter, sum per key, Parquet out) on a 50 M-row file DuckDB wrote
  from the kv set, ember against DuckDB and Polars (`parquet_job.py`).

Every answer is checked: manytasks, decisions and wideshuffle check themselves (a count, every
partition's result, every key's count); sorts by bench/reference/verify_output.py (records, order,
key sum); tenx kvsum by the exact per-key sums' total and key count, and key by key against
DuckDB's; smallfiles against its manifest's word totals; pagerank against the same
iteration computed here in Python (every rank within 1e-6); parquet against pyarrow's
group-by of its input (every key, every sum within 1e-9 relative).
"""
import json
import os
import re
import subprocess
import sys

from .checks import check_kv_lines, check_sorted_output
from .cluster import Cluster, ClusterError
from .config import REPO, log
from .data import data_files
from .runs import rm, run_measured, tail

SCALE_JOBS = ["scheduling", "memory", "tenx", "smallfiles", "wideshuffle", "pagerank", "parquet"]
# The ember examples each job runs (the scheduler's `decisions` is built separately).
SCALE_EXAMPLES = {"scheduling": ["manytasks"], "memory": ["sort"], "tenx": ["kvsum", "sort"],
                  "smallfiles": ["wordcount"], "wideshuffle": ["wideshuffle"], "pagerank": ["pagerank"],
                  "parquet": ["parquet_etl"]}
SCALE_CLUSTER_JOBS = ("scheduling", "wideshuffle")
MEMORY_LIMITS = ["64m", "128m", "512m"]
MEMORY_OVERHEAD_MIB = 64
TENX_LIMIT = "512m"
TASKS = 50000
PAGERANK_EDGES, PAGERANK_NODES, PAGERANK_ITERATIONS = 200000, 20000, 10


def ember_env(master, memory):
    return {"EMBER_LOG": "warn", "EMBER_PROGRESS": "0", "EMBER_MASTER": master,
            "EMBER_EXECUTOR_MEMORY": memory}


def record(ctx, job, engine, rnd, cmd, env, check, cwd=None):
    """Runs cmd measured; `check(res)` -> (ok, [messages]) when it exited 0."""
    tag = f"{job}-{re.sub(r'[^A-Za-z0-9_.-]', '', engine)}-r{rnd}"
    logs = os.path.join(ctx.out, "logs")
    res = run_measured(cmd, env, os.path.join(logs, tag + ".out"), os.path.join(logs, tag + ".err"),
                       ctx.args.timeout, cwd=cwd or ctx.out)
    if res.timed_out:
        ok, msgs = False, [f"timed out after {ctx.args.timeout} s"]
    elif res.rc != 0:
        ok, msgs = False, [f"exit status {res.rc}; stderr tail:\n{tail(res.stderr_path)}"]
    else:
        ok, msgs = check(res)
    res.job, res.engine, res.round, res.ok, res.check = job, engine, rnd, ok, msgs
    status = "ok" if ok else "FAILED: " + "; ".join(msgs)
    log(f"  {job:11s} {engine:30s} run {rnd + 1}: wall {res.wall_s:8.3f} s  cpu {res.cpu_s:8.3f} s  "
        f"rss {res.maxrss_kib / 1024:8.1f} MiB  [{status}]")
    return dict(vars(res))


def anchor_check(*keys):
    def check(res):
        missing = [k for k in keys if k not in res.anchors]
        if missing:
            return False, [f"no ANCHOR {', '.join(missing)} in the output"]
        return True, [", ".join(f"{k}={res.anchors[k]}" for k in keys)]
    return check


def build_decisions(profile):
    """ember-scheduler's `decisions` example (not among the root package's examples)."""
    flags = ["--release"] if profile == "release" else []
    cmd = ["cargo", "build", "-q", *flags, "-p", "ember-scheduler", "--example", "decisions"]
    log(f"build: {' '.join(cmd)}")
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    path = os.path.join(REPO, "target", "release" if profile == "release" else "debug", "examples", "decisions")
    return path if r.returncode == 0 and os.access(path, os.X_OK) else None


def decisions_check(res):
    with open(res.stdout_path) as f:
        text = f.read()
    rates = re.findall(r"^(.*): (\d+) tasks in [\d.]+ s = (\d+) decisions/s$", text, re.M)
    if len(rates) != 2 or "FAILED" in text:
        return False, [f"expected two 'decisions/s' lines, got: {text.strip()[-300:]}"]
    for name, _, rate in rates:
        key = "one_stage" if name.startswith("one stage") else "wide"
        res.anchors[f"{key}_decisions_per_s"] = rate
    return True, [f"{name}: {int(rate):,} decisions/s" for name, _, rate in rates]


def local_and_cluster(ctx, job, exe, args, warm_args, check, rounds):
    """`rounds` runs of `exe args` in local[2], then on a cluster of 2 executors x 1 core
    after one uncounted `exe warm_args` there (it uploads the binary and starts the
    workers). Returns (runs, row order)."""
    runs, order = [], []
    name = os.path.basename(exe)
    label = f"ember-local[2] {name}"
    order.append((job, label))
    for rnd in range(rounds):
        runs.append(record(ctx, job, label, rnd, [exe, *args],
                           ember_env("local[2]", ctx.args.executor_memory), check))
    with Cluster(ctx.bins, 2, 1, ctx.args.executor_memory, os.path.join(ctx.out, "logs"), prefix=job) as c:
        label = f"ember-cluster-2x1 {name}"
        order.append((job, label))
        record(ctx, job, f"{label} warm-up", 0, [exe, *warm_args], ember_env(c.url, ctx.args.executor_memory),
               check)
        for rnd in range(rounds):
            runs.append(record(ctx, job, label, rnd, [exe, *args], ember_env(c.url, ctx.args.executor_memory),
                               check))
    return runs, order


def run_scheduling(ctx, rounds):
    runs, order = local_and_cluster(ctx, "scheduling", ctx.bins["manytasks"],
                                    ["--tasks", str(TASKS), "--runs", "3", "--source", "range"],
                                    ["--tasks", "1000", "--runs", "1"], anchor_check("tasks_per_s", "median_s"),
                                    rounds)
    decisions = build_decisions(ctx.profile)
    if decisions:
        order.append(("scheduling", "scheduler alone, 1,000 executors"))
        for rnd in range(rounds):
            runs.append(record(ctx, "scheduling", "scheduler alone, 1,000 executors", rnd, [decisions], {},
                               decisions_check))
    return runs, order


def run_memory(ctx, kv, man, rounds):
    runs, order = [], []
    for limit in MEMORY_LIMITS:
        engine = f"ember sort {limit}"
        order.append(("memory", engine))
        target = int(limit[:-1]) + MEMORY_OVERHEAD_MIB
        for rnd in range(rounds):
            out = os.path.join(ctx.out, "work", f"memory-{limit}-r{rnd}")
            rm(out)

            def check(res, out=out, target=target):
                ok, msgs = check_sorted_output(ctx, out, man, None)
                rss = res.maxrss_kib / 1024
                within = "within" if rss <= target else "OVER"
                return ok, msgs + [f"peak RSS {rss:.0f} MiB {within} limit + {MEMORY_OVERHEAD_MIB} = {target} MiB"]
            runs.append(record(ctx, "memory", engine, rnd, [ctx.bins["sort"], kv, out],
                               ember_env("local[2]", limit), check))
            rm(out)
    return runs, order


def tenx_dataset(data, kv):
    """DATA/kv10: the kv set's files hard-linked ten times (made once)."""
    d = os.path.join(data, "kv10")
    files = data_files(kv)
    want = [os.path.join(d, f"part-{i * len(files) + j:05d}.txt") for i in range(10) for j in range(len(files))]
    if not all(os.path.exists(p) for p in want):
        os.makedirs(d, exist_ok=True)
        for i in range(10):
            for j, f in enumerate(files):
                p = want[i * len(files) + j]
                if not os.path.exists(p):
                    os.link(f, p)
    return d


def read_sums(out):
    sums = {}
    for f in data_files(out):
        with open(f, "rb") as fh:
            for line in fh:
                k, v = line.rstrip(b"\n").split(b"\t")
                sums[int(k)] = v
    return sums


def run_tenx(ctx, kv, man):
    d = tenx_dataset(ctx.args.data, kv)
    man10 = dict(man, records=10 * man["records"], key_sum=10 * man["key_sum"],
                 value_sum_thousandths=10 * man["value_sum_thousandths"])
    runs, order = [], []
    py = ctx.refs.get("python")
    duck_ok = ctx.refs.get("duckdb", {}).get("ok")
    ref = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scale_ref.py")
    outs, kvsum_runs = {}, {}
    for job in ("kvsum", "sort"):
        for engine in ["ember"] + (["duckdb"] if duck_ok else []):
            label = f"{job} 10x {engine} ({TENX_LIMIT})"
            order.append(("tenx", label))
            out = os.path.join(ctx.out, "work", f"tenx-{job}-{engine}")
            rm(out)
            outs[(job, engine)] = out
            if engine == "ember":
                cmd, env = [ctx.bins[job], d, out], ember_env("local[2]", TENX_LIMIT)
            else:
                cmd, env = [py, ref, job, d, out, "--memory-limit", "512MB"], {}

            def check(res, job=job, out=out):
                if job == "sort":
                    return check_sorted_output(ctx, out, man10, None)
                return check_kv_lines(((os.path.basename(f), line) for f in data_files(out)
                                       for line in open(f, "rb")), man10)
            runs.append(record(ctx, "tenx", label, 0, cmd, env, check))
            if job == "sort":
                rm(out)
            else:
                kvsum_runs[engine] = runs[-1]
    # Key by key only when both runs succeeded (DuckDB's ran at all, and did not run out
    # of memory): a failed run leaves a partial or empty output, which says nothing
    # about ember's sums.
    both_ok = all(kvsum_runs.get(e, {}).get("ok") for e in ("ember", "duckdb"))
    if both_ok and all(os.path.isdir(outs[("kvsum", e)]) for e in ("ember", "duckdb")):
        a, b = read_sums(outs[("kvsum", "ember")]), read_sums(outs[("kvsum", "duckdb")])
        diff = [k for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
        r = kvsum_runs["ember"]
        if diff:
            r["ok"] = False
            r["check"].append(f"{len(diff)} keys differ from DuckDB's sums, e.g. key {diff[0]}: "
                              f"{a.get(diff[0])!r} vs {b.get(diff[0])!r}")
        else:
            r["check"].append(f"every one of {len(a):,} per-key sums equal to DuckDB's")
        log(f"  tenx: ember vs DuckDB per-key sums: {r['check'][-1]}")
    for out in outs.values():
        rm(out)
    return runs, order


def run_smallfiles(ctx, rounds):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import small_files
    inp = small_files.build(ctx.args.data, 1758)
    with open(os.path.join(inp, "_manifest.json")) as f:
        manifest = json.load(f)
    runs, order = [], []
    # DuckDB runs just before each ember run (issue 36: every ember run paired with the
    # DuckDB run before it, --runs 5 for its five pairs).
    engines = (["duckdb"] if ctx.refs.get("duckdb", {}).get("ok") else []) + ["ember local[2]"]
    order.extend(("smallfiles", e) for e in engines)
    for rnd in range(rounds):
        for e in engines:
            out = os.path.join(ctx.out, "work", f"smallfiles-{e.split()[0]}-r{rnd}")
            rm(out)
            if e == "duckdb":
                os.makedirs(out)
                cmd, env = [ctx.refs["python"], "-c", small_files.DUCKDB, inp, out], {}
            else:
                cmd, env = [ctx.bins["wordcount"], inp, out], ember_env("local[2]", ctx.args.executor_memory)

            def check(res, out=out):
                try:
                    small_files.check_wc(out, manifest)
                except Exception as err:  # its checks raise with what differs
                    return False, [str(err)]
                return True, [f"{manifest['files']} files: word totals as in the manifest"]
            runs.append(record(ctx, "smallfiles", e, rnd, cmd, env, check))
            rm(out)
    return runs, order


def run_wideshuffle(ctx, rounds):
    return local_and_cluster(ctx, "wideshuffle", ctx.bins["wideshuffle"],
                             ["--runs", "3", "--records", "1000000", "--range", "1"],
                             ["--runs", "1", "--maps", "10"], anchor_check("median_s"), rounds)


def pagerank_reference(graph, iterations):
    """Spark's SparkPageRank iteration over the distinct edges, in Python."""
    links = {}
    with open(graph) as f:
        for line in f:
            s, d = line.split()
            links.setdefault(s, set()).add(d)
    ranks = {n: 1.0 for n in links}
    for _ in range(iterations):
        contrib = {}
        for n, outs in links.items():
            r = ranks.get(n)
            if r is None:
                continue
            share = r / len(outs)
            for d in outs:
                contrib[d] = contrib.get(d, 0.0) + share
        ranks = {n: 0.15 + 0.85 * c for n, c in contrib.items()}
    return ranks


def run_pagerank(ctx, rounds):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from pathlib import Path
    import deep_lineage
    graph = os.path.join(ctx.args.data, f"pagerank-{PAGERANK_EDGES}.txt")
    if not os.path.exists(graph):
        deep_lineage.make_graph(Path(graph), PAGERANK_EDGES, PAGERANK_NODES)
    expected = pagerank_reference(graph, PAGERANK_ITERATIONS)
    runs, order = [], [("pagerank", "ember-local[2]")]
    for rnd in range(rounds):
        out = os.path.join(ctx.out, "work", f"pagerank-r{rnd}")
        rm(out)

        def check(res, out=out):
            got = {}
            for f in data_files(out):
                with open(f) as fh:
                    for line in fh:
                        n, r = line.rstrip("\n").split("\t")
                        got[n] = float(r)
            if got.keys() != expected.keys():
                return False, [f"{len(got)} nodes, expected {len(expected)}"]
            worst = max(abs(got[n] - expected[n]) for n in got)
            if worst > 1e-6:
                return False, [f"a rank differs from the Python iteration by {worst:.2e}"]
            return True, [f"{len(got):,} ranks within {worst:.1e} of the Python iteration"]
        runs.append(record(ctx, "pagerank", "ember-local[2]", rnd,
                           [ctx.bins["pagerank"], "--iterations", str(PAGERANK_ITERATIONS), graph, out],
                           ember_env("local[2]", ctx.args.executor_memory), check))
        rm(out)
    return runs, order


def run_scale_job(ctx, job, datasets, manifests):
    """One scale job's (runs, row order); a cluster that does not start fails its rows."""
    rounds = ctx.args.runs
    try:
        if job == "scheduling":
            return run_scheduling(ctx, rounds)
        if job == "memory":
            return run_memory(ctx, datasets["kv"], manifests["kv"], rounds)
        if job == "tenx":
            return run_tenx(ctx, datasets["kv"], manifests["kv"])
        if job == "smallfiles":
            return run_smallfiles(ctx, rounds)
        if job == "wideshuffle":
            return run_wideshuffle(ctx, rounds)
        if job == "pagerank":
            return run_pagerank(ctx, rounds)
        if job == "parquet":
            from .parquet_job import run_parquet
            return run_parquet(ctx, datasets["kv"], rounds, record, ember_env)
    except ClusterError as e:
        log(f"{job}: FAILED: the cluster did not start: {e}")
        return [{"job": job, "engine": "cluster", "round": 0, "ok": False, "check": [str(e)],
                 "wall_s": None, "cpu_s": None, "maxrss_kib": 0, "anchors": {}, "cmd": None,
                 "rc": None}], [(job, "cluster")]
    raise ValueError(job)
