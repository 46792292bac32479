"""Reporting: medians per job and engine, the markdown table (results.md) and the log-scale
bar plot (results.png, with matplotlib from this interpreter or the reference venv)."""
import json
import os
import statistics
import subprocess

from .config import (CLUSTER_FIRST, CLUSTER_LABELS, CLUSTER_LATENCY, CLUSTER_LOCAL, CLUSTER_MAX_RATIO,
                     CLUSTER_MAX_TRIVIAL_MS, CLUSTER_WC, FAULTS_FIRST, FAULTS_FREE, FAULTS_KILL,
                     FAULTS_LABELS, RUN_PY)


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
        walls = [r["wall_s"] for r in rs if r["wall_s"] is not None]
        row["wall_range_s"] = [min(walls), max(walls)] if len(walls) > 1 else None
        is_latency = job == "latency" or engine == CLUSTER_LATENCY
        lat = [r["anchors"].get("trivial_job_median_ms", r["anchors"].get("median_ms")) for r in rs]
        lat = [float(x) for x in lat if x is not None]
        row["latency_ms"] = med(lat) if is_latency else None
        p90 = [float(r["anchors"]["trivial_job_p90_ms"]) for r in rs if "trivial_job_p90_ms" in r["anchors"]]
        row["latency_p90_ms"] = med(p90) if is_latency else None
        rows.append(row)
    return rows


def engine_label(job, engine):
    """How a row's engine is shown: the cluster and faults jobs' rows say what they run."""
    if job == "faults":
        return FAULTS_LABELS.get(engine, engine)
    return CLUSTER_LABELS.get(engine, engine) if job == "cluster" else engine


def row_ratio(job, r, rs):
    """The ember/ref column of row r among its job's rows rs."""
    if job == "cluster":
        local = next((x for x in rs if x["engine"] == CLUSTER_LOCAL), None)
        if r["engine"] == CLUSTER_WC and local and local["wall_s"] and r["wall_s"]:
            return f"{fmt_ratio(r['wall_s'] / local['wall_s'])} (cluster / local[2])"
        return ""
    if job == "faults":
        free = next((x for x in rs if x["engine"] == FAULTS_FREE), None)
        if r["engine"] == FAULTS_KILL and free and free["wall_s"] and r["wall_s"]:
            return f"{fmt_ratio(r['wall_s'] / free['wall_s'])} (with fault / fault-free)"
        return ""
    ember = next((x for x in rs if x["engine"] == "ember"), None)
    if not ember or r["engine"] == "ember":
        return ""
    if job == "latency":
        if ember["latency_ms"] and r["latency_ms"]:
            return f"{fmt_ratio(ember['latency_ms'] / r['latency_ms'])} (trivial job)"
        return ""
    if job == "scaling" or not (ember["wall_s"] and r["wall_s"]):
        return ""
    ratio = fmt_ratio(ember['wall_s'] / r['wall_s'])
    if r["in_job_s"]:
        ratio += f" ({fmt_ratio(ember['wall_s'] / r['in_job_s'])})"
    return ratio


def cluster_verdict(rows):
    """The cluster job's figures against the issue's targets, from its summary rows:
    cluster/local[2] wall ratio (<= CLUSTER_MAX_RATIO) and the trivial job's median on the
    cluster (< CLUSTER_MAX_TRIVIAL_MS). Values are None when the row did not run or failed."""
    by = {r["engine"]: r for r in rows if r["job"] == "cluster"}

    def ok_val(engine, key):
        r = by.get(engine)
        return r[key] if r and r["ok"] else None
    local_s, cluster_s = ok_val(CLUSTER_LOCAL, "wall_s"), ok_val(CLUSTER_WC, "wall_s")
    ratio = cluster_s / local_s if local_s and cluster_s else None
    lat = ok_val(CLUSTER_LATENCY, "latency_ms")
    return {"local_wall_s": local_s, "cluster_wall_s": cluster_s, "ratio": ratio,
            "ratio_target": CLUSTER_MAX_RATIO,
            "ratio_ok": None if ratio is None else ratio <= CLUSTER_MAX_RATIO,
            "first_run_wall_s": ok_val(CLUSTER_FIRST, "wall_s"),
            "trivial_job_median_ms": lat, "trivial_job_p90_ms": ok_val(CLUSTER_LATENCY, "latency_p90_ms"),
            "trivial_job_target_ms": CLUSTER_MAX_TRIVIAL_MS,
            "trivial_job_ok": None if lat is None else lat < CLUSTER_MAX_TRIVIAL_MS}


def faults_verdict(rows):
    """The faults job's medians from its summary rows: fault-free and with-fault wall time
    and their ratio (None when a row did not run or failed)."""
    by = {r["engine"]: r for r in rows if r["job"] == "faults"}

    def ok_wall(engine):
        r = by.get(engine)
        return r["wall_s"] if r and r["ok"] else None
    free, kill = ok_wall(FAULTS_FREE), ok_wall(FAULTS_KILL)
    return {"free_wall_s": free, "kill_wall_s": kill, "ratio": kill / free if free and kill else None,
            "first_run_wall_s": ok_wall(FAULTS_FIRST)}


def render_faults(c):
    """The faults job's section of results.md, from meta["faults"]."""
    v = c.get("verdict") or {}
    out = ["", f"## Fault tolerance: executor killed during the shuffle (faultjob, 1 driver + {c['executors']} "
               f"executors x {c['cores']} core, executor memory {c['memory']}, {c['profile']} build)", ""]
    out.append(f"- faultjob `--partitions {c['partitions']}` on {c['input']}: stage 1 parses and "
               f"hash-partitions the records (shuffle 1, no map-side combine), stage 2 sums per key and "
               f"buckets the sums (shuffle 2), stage 3 writes `bucket<TAB>key<TAB>sum`")
    ratio = v.get("ratio")
    out.append(f"- median of {c['runs']} alternated runs each: fault-free {fmt_s(v.get('free_wall_s'))}, "
               f"with the fault {fmt_s(v.get('kill_wall_s'))}; with fault / fault-free = "
               f"{fmt_ratio(ratio) + 'x' if ratio else '—'}")
    out.append(f"- the fault: the harness follows the driver's log (EMBER_LOG=`{c['driver_log']}`) and, as "
               f"soon as the driver submits the run's second map stage (the first submission naming the "
               f"run's second shuffle, which reads shuffle 1), sends SIGKILL to the executor holding the "
               f"most map outputs of shuffle 1 (its `shuffle_S1_*.index` files; ties: the first started) "
               f"and to its workers (the watching thread runs at nice -10 when allowed, so a loaded CPU "
               f"delays the kill less). The job finishes on the other {c['executors'] - 1}; then a replacement "
               f"executor is started and the harness waits until {c['executors']} are registered, and a "
               f"small uncounted faultjob run has the replacement fetch the binary, so no counted run "
               f"pays for it")
    out.append(f"- first run (binary upload + fetch; its output, verified against the input's exact "
               f"per-key sums, is the reference every counted run must match byte for byte): "
               f"{fmt_s(v.get('first_run_wall_s'))}; cluster start {fmt_s(c.get('start_s'))}")
    fr = c.get("fault_runs") or []
    if fr:
        out.append("")
        out.append("  Per run with the fault (counted from the run's part of the driver log: a stage's "
                   "first submission is its run, every later one reruns the partitions it lists; "
                   "\"map\" = the stage writing shuffle 1, \"reducer\" = the later stages):")
        out.append("")
        out.append("  | run | wall | killed | at | after the submission | lost map outputs | map tasks rerun "
                   "| reducer tasks rerun | running tasks lost | fetch failures | output |")
        out.append("  |---|---|---|---|---|---|---|---|---|---|---|")
        for f in fr:
            k = f.get("kill") or {}
            if not k:
                out.append(f"  | {f['round'] + 1} | {fmt_s(f['wall_s'])} | no kill | | | | | | | | "
                           f"{'ok' if f['ok'] else '**FAILED**'} |")
                continue
            rt = f.get("running_tasks_lost")
            held = ", ".join(f"{n} {h}" for n, h in k["held"].items())
            out.append(
                f"  | {f['round'] + 1} | {fmt_s(f['wall_s'])} | {k['victim']} ({k.get('victim_id') or '?'}) "
                f"| {k['kill_at_s']:.2f} s | {fmt_ms(k.get('kill_after_submission_ms'))} "
                f"| {k['lost_map_outputs']} (held: {held}) "
                f"| {f['map_tasks_rerun']} ({'; '.join(f['map_resubmissions']) or 'none'}) "
                f"| {f['reducer_tasks_rerun']} ({'; '.join(f['reducer_resubmissions']) or 'none'}) "
                f"| {'not in the log' if rt is None else rt} | {f['fetch_failures']} "
                f"| {'identical' if f['ok'] else '**FAILED**'} |")
        out.append("")
        out.append("  Running tasks lost: the tasks running on the executor when it died (the driver's "
                   "`task lost with its executor` lines, logged at debug by the scheduler's completion "
                   "module, hence that module's debug level); they are queued again within their stage "
                   "attempt, or rerun by a resubmission of their stage, so they may already be among the "
                   "reducer tasks rerun.")
    for u in c.get("unexpected") or []:
        out.append(f"- unexpected: {u}")
    reps = c.get("replacements") or []
    if reps:
        out.append(f"- replacement executors registered in " +
                   ", ".join(fmt_s(r["registered_s"]) for r in reps) + " (start to registered)")
    if c.get("nproc") and c["nproc"] < c["executors"] * c["cores"]:
        out.append(f"- caveat: {c['executors']} executors x {c['cores']} core on a {c['nproc']}-CPU machine: "
                   f"the executors' cores are oversubscribed (so losing one of them loses no CPU, only "
                   f"its map outputs and running tasks); the driver, the client and the harness share the "
                   f"same CPUs")
    cmds = c.get("commands") or {}
    if cmds:
        out.append("- commands:")
        for k in ("harness", "driver", "executor", "client"):
            if k in cmds:
                out.append(f"  - {k}: `{cmds[k]}`")
    return out


def yes_no(v):
    return "—" if v is None else ("yes" if v else "**NO**")


def render_cluster(c):
    """The cluster job's section of results.md, from meta["cluster"]."""
    v = c["verdict"]
    out = ["", f"## Cluster mode (1 driver + {c['executors']} executors x {c['cores']} core, "
               f"executor memory {c['memory']}, {c['profile']} build)", ""]
    out.append(f"- wordcount on {c['input']}, median of {c['runs']} alternated runs each: "
               f"local[2] {fmt_s(v['local_wall_s'])}, cluster {fmt_s(v['cluster_wall_s'])}; "
               f"cluster / local[2] = {fmt_ratio(v['ratio']) + 'x' if v['ratio'] else '—'} "
               f"(target <= {v['ratio_target']}x: {yes_no(v['ratio_ok'])})")
    out.append(f"- first cluster run (binary upload + fetch), not counted above: "
               f"{fmt_s(v['first_run_wall_s'])}; cluster start (daemons up, executors registered): "
               f"{fmt_s(c.get('start_s'))}")
    if v["trivial_job_median_ms"] is not None:
        out.append(f"- trivial 8-task job on the cluster (`latency`, median over {c['runs']} processes of "
                   f"each one's median of 100 jobs after 5 warm-up jobs): median "
                   f"{v['trivial_job_median_ms']:.2f} ms, p90 {fmt_ms(v['trivial_job_p90_ms'])} "
                   f"(target < {v['trivial_job_target_ms']:.0f} ms: {yes_no(v['trivial_job_ok'])})")
    else:
        out.append("- trivial 8-task job on the cluster: not measured (see notes)")
    mem = c.get("memory_report") or []
    if mem:
        out.append("- peak RSS of the cluster's processes: VmHWM from /proc/PID/status, read once at the "
                   "end of the cluster job; VmHWM is per process and never goes down, so each figure is "
                   "that process's peak over all the job's runs (a worker serves one binary and lives "
                   "across runs). In the table, the cluster rows' peak RSS is the client's alone (GNU "
                   "time) and their CPU is the client's plus that of the driver, executors and workers "
                   "during the run (/proc/PID/stat, reaped workers included).")
        out.append("")
        out.append("  | process | pid | peak RSS (VmHWM) | RSS at the end |")
        out.append("  |---|---|---|---|")
        for p in mem:
            out.append(f"  | {p['process']} | {p['pid']} | {fmt_mib(p['vmhwm_mib'])} | {fmt_mib(p['vmrss_mib'])} |")
        out.append("")
    cmds = c.get("commands") or {}
    if cmds:
        out.append("- commands:")
        for k in ("harness", "driver", "executor", "local", "client", "latency"):
            if k in cmds:
                out.append(f"  - {k}: `{cmds[k]}`")
    return out


def fmt_ms(x):
    return "—" if x is None else f"{x:.2f} ms"


def fmt_mib(x):
    return "—" if x is None else f"{x:.0f} MiB"


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
    out.append(f"- command: `{meta.get('command', '?')}`; ember binaries: {meta.get('profile', '?')} "
               f"profile, snapshot in {meta['args']['out']}/bin")
    out.append(f"- runs per engine: {meta['args']['runs']} (tiny: {meta['args']['tiny_runs']}), engines "
               f"alternated run by run; inputs read once before the first run (page cache warm)")
    out.append("")
    out.append("Medians. wall = whole process; in-job = the engine's own timer (Spark: after the "
               "context is up; DuckDB/Polars: the query, without interpreter start and import); "
               "wall range = the fastest and the slowest run (how much the machine moved them); "
               "CPU = user+sys of the process and its children; RSS = peak resident set. "
               "ember/ref = ember's median wall / the reference's (below 1: ember faster); for "
               "references with an in-job time the ratio to that is in brackets.")
    out.append("")
    out.append("| job | engine | runs | wall | wall range | in-job | CPU | CPU/wall | peak RSS | ember/ref | check |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    by_job = {}
    for r in rows:
        by_job.setdefault(r["job"], []).append(r)
    for job, rs in by_job.items():
        for r in rs:
            ratio = row_ratio(job, r, rs)
            wall = fmt_s(r["wall_s"])
            if r["latency_ms"] is not None:
                wall += f"; trivial job {r['latency_ms']:.2f} ms"
                if r["latency_p90_ms"] is not None and job == "cluster":
                    wall += f" (p90 {r['latency_p90_ms']:.2f} ms)"
            cpuw = f"{r['cpu_s'] / r['wall_s']:.2f}" if r["wall_s"] else ""
            spread = r.get("wall_range_s")
            spread = f"{fmt_s(spread[0])} – {fmt_s(spread[1])}" if spread else "—"
            chk = "ok" if r["ok"] else "**FAILED**"
            out.append(f"| {job} | {engine_label(job, r['engine'])} | {r['runs']} | {wall} | {spread} | "
                       f"{fmt_s(r['in_job_s'])} | {fmt_s(r['cpu_s'])} | {cpuw} | {r['maxrss_mib']:.0f} MiB | "
                       f"{ratio} | {chk} |")
    sc = {r["engine"]: r for r in by_job.get("scaling", [])}
    if "ember-local[1]" in sc and "ember-local[2]" in sc and sc["ember-local[2]"]["wall_s"]:
        out.append("")
        out.append(f"Scaling (ember wordcount): local[1] {fmt_s(sc['ember-local[1]']['wall_s'])}, "
                   f"local[2] {fmt_s(sc['ember-local[2]']['wall_s'])}: speed-up "
                   f"{sc['ember-local[1]']['wall_s'] / sc['ember-local[2]']['wall_s']:.2f}x")
    if meta.get("cluster"):
        out.extend(render_cluster(meta["cluster"]))
    if meta.get("faults"):
        out.extend(render_faults(meta["faults"]))
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
              CLUSTER_FIRST: "#c5b0d5", CLUSTER_WC: "#9467bd", CLUSTER_LATENCY: "#8c564b",
              FAULTS_FIRST: "#c7c7c7", FAULTS_FREE: "#17becf", FAULTS_KILL: "#bcbd22",
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
            text = ("FAILED " if not r["ok"] else "") + fmt_s(r["wall_s"])
            if r.get("latency_ms") is not None:
                text += f" (job {r['latency_ms']:.2f} ms)"
            ax.annotate(text,
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
        r = subprocess.run([py, RUN_PY, "--plot-from", results_json, png],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return True
        notes.append(f"plot: failed with {py}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
        return False
    notes.append(f"plot: skipped, matplotlib is not installed (pip install matplotlib, "
                 f"or into {ctx.args.venv})")
    return False
