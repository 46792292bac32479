"""Reporting: medians per job and engine, the markdown table (results.md) and the log-scale
bar plot (results.png, with matplotlib from this interpreter or the reference venv)."""
import json
import os
import statistics
import subprocess

from .config import RUN_PY


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
        r = subprocess.run([py, RUN_PY, "--plot-from", results_json, png],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return True
        notes.append(f"plot: failed with {py}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
        return False
    notes.append(f"plot: skipped, matplotlib is not installed (pip install matplotlib, "
                 f"or into {ctx.args.venv})")
    return False
