#!/usr/bin/env python3
"""ember benchmark suite: ember vs. Spark / DuckDB / Polars on the same inputs, same machine.

    python3 bench/run.py [--data DIR] [--out DIR] [--runs N]
                         [--engines ember,duckdb,polars,spark]
                         [--jobs wordcount,kvsum,sort,latency,tiny,scaling,cluster,faults] [--small]
                         [--jobs scheduling,memory,tenx,smallfiles,wideshuffle,pagerank]
                         [--jobs join,skewjoin]
                         [--profile release|debug]

Stdlib only (Python 3.11); matplotlib is used for the plot if this interpreter or the
reference venv has it. See bench/README.md for what each job measures and how answers are
checked. The data generator, the reference jobs and the output checker are this repository's
own, in bench/reference/ (--reference DIR runs another copy of them).

Exit status: 0 if every run that was made passed its check, 1 if any run FAILED (wrong answer,
crash or timeout), 2 on a usage / setup error (e.g. the data could not be generated).
"""
import argparse
import json
import os
import shlex
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from emberbench.build import build_daemons, build_examples, snapshot_profile  # noqa: E402
from emberbench.checks import input_line_digest, join_expected, join_gen_key, kv_expected_digest  # noqa: E402
from emberbench.cluster import Cluster, ClusterError, sha256_of  # noqa: E402
from emberbench.config import (ALL_ENGINES, ALL_JOBS, DEFAULT_JOBS, CLUSTER_CORES, CLUSTER_EXAMPLES,  # noqa: E402
                               CLUSTER_EXECUTORS, CLUSTER_FIRST, CLUSTER_JOBS, CLUSTER_LATENCY, CLUSTER_LOCAL,
                               CLUSTER_WC, DAEMONS, DATASET_TINY, DATASETS_FULL, DATASETS_SMALL,
                               DEFAULT_REFERENCE, INSTALL_HINT, JOB_ENGINES, JOB_EXAMPLE, JOIN_FACT,
                               JOIN_JOBS, KNOWN_JOIN, KNOWN_KV, KNOWN_TEXT, PROFILES, REPO, die, log)
from emberbench.data import data_files, ensure_dataset, warm_up  # noqa: E402
from emberbench.engines import Ctx, detect_references  # noqa: E402
from emberbench.faults import run_faults_job  # noqa: E402
from emberbench.machine import machine_info  # noqa: E402
from emberbench.report import cluster_verdict, faults_verdict, make_plot, plot, render, summarize  # noqa: E402
from emberbench.runs import as_record, do_run, failed_record, shown_cmd  # noqa: E402
from emberbench.scale import SCALE_CLUSTER_JOBS, SCALE_EXAMPLES, SCALE_JOBS, run_scale_job  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/data", help="where the data sets live / are generated")
    ap.add_argument("--out", default="/tmp/ember-bench", help="results, logs and scratch outputs")
    ap.add_argument("--runs", type=int, default=3, help="runs per engine per job (default 3)")
    ap.add_argument("--tiny-runs", type=int, default=10,
                    help="ember runs for the tiny job (Spark does --runs of them); default 10")
    ap.add_argument("--engines", default=",".join(ALL_ENGINES))
    ap.add_argument("--jobs", default=",".join(DEFAULT_JOBS),
                    help=f"default {','.join(DEFAULT_JOBS)}; also {','.join(SCALE_JOBS + JOIN_JOBS)}")
    ap.add_argument("--small", action="store_true",
                    help="100 MiB text, 5M-record kv and 500k-key dim instead of 1 GiB / 50M / 5M")
    ap.add_argument("--reference", "--shared", dest="reference", default=DEFAULT_REFERENCE,
                    help=f"the data generator, reference jobs and output checker (default {DEFAULT_REFERENCE})")
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
    ap.add_argument("--profile", choices=sorted(PROFILES), default="release",
                    help="cargo profile to build ember in (default release; debug for a quick smoke test)")
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
    a.reference = os.path.abspath(a.reference)
    a.data = os.path.abspath(a.data)
    a.out = os.path.abspath(a.out)
    return a


def run_cluster_job(ctx, inp, man, notes):
    """The cluster job: starts a driver and CLUSTER_EXECUTORS executors (CLUSTER_CORES cores
    each), makes one uncounted warm-up wordcount on it (binary upload + fetch), then
    alternates wordcount local[2] / wordcount on the cluster --runs times, then runs the
    `latency` example on the cluster --runs times; reads the daemons' and workers' peak RSS
    at the end. The cluster is stopped and its temp dir removed when this returns or raises.
    Returns (run records, [(job, engine)] row order, meta["cluster"])."""
    args, job = ctx.args, "cluster"
    has_latency = "latency" in ctx.bins
    engines = [CLUSTER_LOCAL, CLUSTER_FIRST, CLUSTER_WC] + ([CLUSTER_LATENCY] if has_latency else [])
    order = [(job, e) for e in engines]
    info = {"executors": CLUSTER_EXECUTORS, "cores": CLUSTER_CORES, "memory": args.executor_memory,
            "profile": ctx.profile, "input": f"{inp} ({man['bytes'] / 2**20:.0f} MiB)", "runs": args.runs,
            "commands": {"harness": ctx.command}}
    cluster = Cluster(ctx.bins, CLUSTER_EXECUTORS, CLUSTER_CORES, args.executor_memory,
                      os.path.join(ctx.out, "logs"))
    log(f"cluster: starting 1 driver + {CLUSTER_EXECUTORS} executors x {CLUSTER_CORES} core "
        f"({args.executor_memory}) from {os.path.dirname(ctx.bins['ember-driver'])}")
    try:
        cluster.start()
    except ClusterError as e:
        msg = f"the cluster did not start: {e}"
        log(f"cluster: FAILED: {msg}")
        return [failed_record(job, CLUSTER_FIRST, msg)], order, info
    try:
        info["start_s"], info["url"] = cluster.start_s, cluster.url
        info["commands"].update(cluster.commands())
        log(f"cluster: up in {cluster.start_s:.2f} s; driver {cluster.url}, status page {cluster.ui_url}")
        runs = cluster_runs(ctx, cluster, inp, man, has_latency)
        names = {sha256_of(ctx.bins[n]): n for n in CLUSTER_EXAMPLES if n in ctx.bins}
        info["memory_report"] = cluster.memory_report(names)
        notes.extend(f"cluster: {msg}" for msg in cluster.dead())
    finally:
        cluster.stop()
    log(f"cluster: stopped; daemon logs in {os.path.join(ctx.out, 'logs')}/cluster-*")
    keys = {CLUSTER_LOCAL: "local", CLUSTER_WC: "client", CLUSTER_LATENCY: "latency"}
    for r in runs:
        if r["cmd"] and r["engine"] in keys:
            info["commands"].setdefault(keys[r["engine"]], shown_cmd(r["cmd"], r["env"]))
    return runs, order, info


def cluster_runs(ctx, cluster, inp, man, has_latency):
    """The cluster job's runs: the uncounted first wordcount on the cluster (binary upload +
    fetch), --runs rounds of local[2] / cluster wordcount, then --runs `latency` processes
    on the cluster. Returns their run records."""
    rounds = ctx.args.runs
    runs = [on_cluster(ctx, cluster, CLUSTER_FIRST, 0, inp, man)]
    for rnd in range(rounds):
        runs.append(as_record(do_run(ctx, "cluster", CLUSTER_LOCAL, rnd, inp, man, master="local[2]")))
        runs.append(on_cluster(ctx, cluster, CLUSTER_WC, rnd, inp, man))
    for rnd in range(rounds if has_latency else 0):
        runs.append(on_cluster(ctx, cluster, CLUSTER_LATENCY, rnd, None, man))
    return runs


def on_cluster(ctx, cluster, engine, rnd, inp, man):
    """One run of the client on the cluster. Its CPU time becomes the client's plus the
    cluster's (daemons and workers, from /proc) during the run; both parts are kept."""
    before = cluster.cpu_seconds()
    res = do_run(ctx, "cluster", engine, rnd, inp, man, master=cluster.url)
    res.cluster_cpu_s = cluster.cpu_seconds() - before
    res.client_cpu_s = res.cpu_s
    res.cpu_s = res.client_cpu_s + res.cluster_cpu_s
    log(f"  {'':9s} {'':21s}        cpu of the driver, executors and workers during the run "
        f"{res.cluster_cpu_s:.3f} s (total {res.cpu_s:.3f} s)")
    return as_record(res)


def join_answer(ctx, job, fact_dir, fact_man, dim_dir, dim_man, notes):
    """Computes (or reads from its cache) the join job's exact answer from the input files,
    which every engine's output is checked against, and finds its pinned figures."""
    try:
        exp = join_expected(fact_dir, fact_man, dim_dir, dim_man)
    except ValueError as e:
        die(f"{job}: the dimension set {dim_dir} is not what the join jobs need: {e}")
    ctx.join_expected[job] = exp
    known = KNOWN_JOIN.get(join_gen_key(fact_man, dim_man))
    ctx.join_known[job] = known
    figures = (len(exp["sums"]), exp["total"], exp["digest"])
    if known and figures != known:
        notes.append(f"{job}: the answer computed from the input {figures} differs from the pinned "
                     f"{known} (emberbench/config.py KNOWN_JOIN): generator or check changed? "
                     f"(every run of the job FAILs)")
    elif not known:
        log(f"check: {job}: no pinned answer for these data sets; computed {figures} (attrs, total in "
            f"thousandths, digest) for KNOWN_JOIN")
    if exp["unmatched"]:
        notes.append(f"{job}: {exp['unmatched']} of {fact_man['records']} fact records have no key in {dim_dir}")


def main():
    # SIGTERM unwinds like Ctrl-C, so the cluster's try/finally and atexit clean up
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    args = parse_args()
    ctx = Ctx()
    ctx.args, ctx.reference, ctx.out = args, args.reference, args.out
    ctx.duckdb_digest = {}
    ctx.kv_digest = None
    ctx.kvsum_digest = None
    ctx.tiny_expected = None
    ctx.join_dim = None      # the join jobs' dimension set
    ctx.join_expected = {}   # job -> checks.join_expected(...) of its fact set
    ctx.join_known = {}      # job -> KNOWN_JOIN's pinned answer, when there is one
    ctx.text_gen_key = lambda man: (man.get("_gen_bytes"), man.get("files"), man.get("seed"))
    notes = []
    for f in ("gen_data.py", "verify_output.py", "single_node.py"):
        if not os.path.exists(os.path.join(args.reference, f)):
            die(f"{args.reference}/{f} not found; pass --reference DIR (a copy of bench/reference)")
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "work"), exist_ok=True)
    # Local-mode jobs keep their scratch under OUT, not /tmp: a job the harness SIGKILLs
    # (timeout, Ctrl-C, SIGTERM) cannot remove its own directory.
    os.environ.setdefault("EMBER_LOCAL_DIR", os.path.join(os.path.abspath(args.out), "work", "local"))

    ctx.command = shlex.join(["python3", os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:])
    meta = {"args": vars(args), "machine": machine_info(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": ctx.command}
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
                                   reference=args.reference)
        log("  to install the references:\n    " + hint)
        notes.append("install the references with: `" + hint.replace("\n    ", "` then (for Spark; needs "
                                                                   "javac 17+) `") + "`")
    engines = [e for e in args.engines if e == "ember" or refs[e]["ok"]]

    # ---- data
    sets = DATASETS_SMALL if args.small else DATASETS_FULL
    need_text = any(j in args.jobs for j in ("wordcount", "scaling", "cluster"))
    need_kv = any(j in args.jobs for j in ("kvsum", "sort", "faults", "memory", "tenx", "join", "parquet"))
    need_kvskew = "skewjoin" in args.jobs
    need_dim = any(j in args.jobs for j in JOIN_JOBS)
    need_tiny = "tiny" in args.jobs
    gen_py = sys.executable
    datasets, manifests = {}, {}

    def load(key, name, gen_args):
        d, man = ensure_dataset(args.reference, args.data, name, gen_args, gen_py)
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
            notes.append(f"text manifest words {mt['words']} != bench/reference/README.md's {known[1]}: generator changed?")
    if need_kv:
        load("kv", *sets["kv"])
        mk = manifests["kv"]
        known = KNOWN_KV.get((mk["records"], mk["keys"], mk["files"], mk["seed"]))
        if known and (mk["distinct_keys"], mk["value_sum_thousandths"]) != known:
            notes.append(f"kv manifest differs from bench/reference/README.md's figures {known}: generator changed?")
    if need_kvskew:
        load("kvskew", *sets["kvskew"])
    if need_dim:
        load("dim", *sets["dim"])
        ctx.join_dim = datasets["dim"]
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
    needed = set()
    if "ember" in engines:
        for j in args.jobs:
            needed |= set(SCALE_EXAMPLES[j]) if j in SCALE_JOBS else {JOB_EXAMPLE[j]}
    if needed and "cluster" in args.jobs:
        needed |= set(CLUSTER_EXAMPLES)
    cluster_jobs = CLUSTER_JOBS + SCALE_CLUSTER_JOBS
    daemons = set(DAEMONS) if needed and any(j in args.jobs for j in cluster_jobs) else set()
    if needed and args.skip_build:
        bindir = os.path.join(args.out, "bin")
        ctx.bins = {n: os.path.join(bindir, n) for n in needed | daemons
                    if os.access(os.path.join(bindir, n), os.X_OK)}
        missing_ex = {n: f"not in {bindir} (--skip-build)" for n in needed | daemons if n not in ctx.bins}
        ctx.profile = snapshot_profile(args.out, ctx.bins)
    elif needed:
        ctx.bins, missing_ex = build_examples(args.out, needed, args.profile)
        if daemons:
            bins_d, missing_d = build_daemons(args.out, args.profile)
            ctx.bins.update(bins_d)
            missing_ex.update(missing_d)
        ctx.profile = args.profile
    else:
        ctx.bins, missing_ex, ctx.profile = {}, {}, args.profile
    meta["profile"] = ctx.profile
    meta["ember_examples"] = {"built": sorted(ctx.bins), "missing": missing_ex}
    for n, why in sorted(missing_ex.items()):
        if n in daemons:
            notes.append(f"cluster daemon `{n}` missing ({why}): no "
                         f"{' or '.join(j for j in CLUSTER_JOBS if j in args.jobs)} rows")
        elif n in needed:
            rows_hit = [j for j in args.jobs
                        if n in (SCALE_EXAMPLES[j] if j in SCALE_JOBS else [JOB_EXAMPLE[j]])]
            if "cluster" in args.jobs and n in CLUSTER_EXAMPLES and "cluster" not in rows_hit:
                rows_hit.append(f"cluster ({n} on the cluster)")
            notes.append(f"ember example `{n}` missing ({why}): no ember row for {', '.join(rows_hit)}")

    # ---- runs
    all_runs = []
    rows_order = []
    warmed = set()
    t_start = time.time()
    partial_json = os.path.join(args.out, "results.partial.json")
    partial_md = os.path.join(args.out, "results.partial.md")

    def checkpoint():
        # What has run so far, rewritten before each job, so a run cut off midway keeps it;
        # removed once the full results are written.
        rows = summarize(all_runs, rows_order)
        partial_meta = {**meta, "partial": True, "elapsed_s": time.time() - t_start}
        # The cluster and faults sections render from their verdicts, as at the end.
        if meta.get("cluster"):
            partial_meta["cluster"] = {**meta["cluster"], "verdict": cluster_verdict(rows)}
        if meta.get("faults"):
            partial_meta["faults"] = {**meta["faults"], "verdict": faults_verdict(rows)}
        with open(partial_json, "w") as f:
            json.dump({**partial_meta, "notes": notes, "summary": rows, "runs": all_runs}, f,
                      indent=1, default=str)
        with open(partial_md, "w") as f:
            f.write("(partial: the run had not finished when this was written)\n\n"
                    + render(partial_meta, rows, notes))

    for i, job in enumerate(args.jobs):
        if i:
            checkpoint()
        if job in SCALE_JOBS:
            wanted = SCALE_EXAMPLES[job] + (DAEMONS if job in SCALE_CLUSTER_JOBS else [])
            if "ember" in engines and all(n in ctx.bins for n in wanted):
                log(f"\n== {job} (scale job, emberbench/scale.py)")
                if job in ("memory", "tenx"):
                    warm_up(datasets["kv"], warmed)
                runs, order = run_scale_job(ctx, job, datasets, manifests)
                all_runs.extend(runs)
                rows_order.extend(order)
            else:
                log(f"\n== {job}: nothing to run (needs ember and {', '.join(wanted)})")
                notes.append(f"{job}: nothing ran (needs the ember engine and {', '.join(wanted)})")
            continue
        if job == "cluster":
            if "ember" in engines and all(n in ctx.bins for n in ["wordcount"] + DAEMONS):
                log(f"\n== cluster on {datasets['text']}: wordcount local[2] vs on the cluster, "
                    f"{args.runs} rounds after a warm-up run, then latency on the cluster")
                warm_up(datasets["text"], warmed)
                runs, order, meta["cluster"] = run_cluster_job(ctx, datasets["text"], manifests["text"], notes)
                all_runs.extend(runs)
                rows_order.extend(order)
            else:
                log("\n== cluster: nothing to run (needs ember, its wordcount example and the daemons)")
                notes.append("cluster: nothing ran (needs the ember engine, `wordcount` and the daemons)")
            continue
        if job == "faults":
            if "ember" in engines and all(n in ctx.bins for n in ["faultjob"] + DAEMONS):
                log(f"\n== faults on {datasets['kv']}: faultjob on the cluster without and with an executor "
                    f"SIGKILLed at the second map stage, {args.runs} rounds after a warm-up run")
                if ctx.kvsum_digest is None:
                    ctx.kvsum_digest = kv_expected_digest(datasets["kv"], manifests["kv"])
                warm_up(datasets["kv"], warmed)
                runs, order, meta["faults"] = run_faults_job(ctx, datasets["kv"], manifests["kv"], notes)
                all_runs.extend(runs)
                rows_order.extend(order)
            else:
                log("\n== faults: nothing to run (needs ember, its faultjob example and the daemons)")
                notes.append("faults: nothing ran (needs the ember engine, `faultjob` and the daemons)")
            continue
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
        elif job in JOIN_JOBS:
            inp, man = datasets[JOIN_FACT[job]], manifests[JOIN_FACT[job]]
            join_answer(ctx, job, inp, man, datasets["dim"], manifests["dim"], notes)
        if job == "kvsum" and "ember" in job_engines and ctx.kvsum_digest is None:
            ctx.kvsum_digest = kv_expected_digest(inp, man)
        if job == "sort" and ctx.kv_digest is None and args.sort_digest:
            ctx.kv_digest = input_line_digest(ctx, inp, man)
        if job == "wordcount" and "duckdb" in job_engines and "ember" in job_engines:
            # run DuckDB first within each round so ember's digest can be compared in round 1
            job_engines.remove("duckdb")
            job_engines.insert(0, "duckdb")
        rounds = args.tiny_runs if job == "tiny" else args.runs
        shown = f"{inp} joined with {ctx.join_dim}" if job in JOIN_JOBS else inp or "(no input)"
        log(f"\n== {job} on {shown}: {', '.join(job_engines)}; {rounds} rounds")
        if inp:
            warm_up(inp, warmed)
        if job in JOIN_JOBS:
            warm_up(ctx.join_dim, warmed)
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
    if meta.get("cluster"):
        meta["cluster"]["verdict"] = cluster_verdict(rows)
    if meta.get("faults"):
        meta["faults"]["verdict"] = faults_verdict(rows)
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
    for f in (partial_json, partial_md):
        if os.path.exists(f):
            os.remove(f)
    log("\n" + report)
    log(f"written: {os.path.join(args.out, 'results.md')}, {results_json}"
        + (f", {png}" if plotted else ""))
    failed = [r for r in rows if not r["ok"]]
    if failed:
        log(f"FAILED: {', '.join(r['job'] + '/' + r['engine'] for r in failed)}")
        sys.exit(1)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the cluster (if any) was stopped on the way out
        log("\ninterrupted")
        sys.exit(130)
