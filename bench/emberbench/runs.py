"""One benchmark run: launching a child process and measuring its wall time, CPU time and
peak RSS, then checking its answer and logging the result line."""
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import threading
import time

from .checks import (check_faultjob_output, check_join_output, check_kvsum_output, check_latency_anchors,
                     check_ref_anchors, check_sorted_output, check_tiny_output, check_wordcount_output)
from .config import CLUSTER_LATENCY, JOIN_JOBS, log
from .engines import make_command


class RunResult:
    def __init__(self, **kw):
        self.__dict__.update(kw)


GNU_TIME = "/usr/bin/time"


def run_measured(cmd, env_extra, stdout_path, stderr_path, timeout, cwd=None):
    """Run cmd; wall time, CPU time (user+sys of the child and the descendants it reaped, from
    os.wait4, cross-checked with the RUSAGE_CHILDREN delta) and the child's peak RSS (KiB)."""
    env = dict(os.environ)
    env.update(env_extra)
    # A child forked from this (large) Python process inherits its resident pages, and
    # Linux keeps that high-water mark across exec, so wait4's ru_maxrss overstates small
    # children. GNU time forks the command from its own small process and reports that
    # child's true peak; use it when installed (Debian package `time`).
    rss_file = None
    if os.path.exists(GNU_TIME):
        rss_file = stdout_path + ".maxrss"
        cmd = [GNU_TIME, "-f", "%M", "-o", rss_file] + list(cmd)
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
        except BaseException:
            # Ctrl-C or SIGTERM: the child runs in its own session, so it would outlive us
            kill()
            os.waitpid(p.pid, 0)
            raise
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from waiting again
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru.ru_utime + ru.ru_stime
    cpu_delta = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    maxrss = ru.ru_maxrss
    if rss_file is not None:
        try:
            with open(rss_file) as f:
                maxrss = int(f.read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            pass  # killed before GNU time wrote it: keep wait4's figure
    with open(stdout_path, "rb") as f:
        stdout = f.read().decode("utf-8", "replace")
    anchors = {}
    for line in stdout.splitlines():
        m = re.match(r"^ANCHOR ([A-Za-z0-9_]+)=(.*)$", line.strip())
        if m:
            anchors[m.group(1)] = m.group(2)
    return RunResult(cmd=cmd, env=env_extra, rc=p.returncode, timed_out=bool(timed_out), wall_s=wall,
                     cpu_s=cpu, cpu_children_delta_s=cpu_delta, maxrss_kib=maxrss,
                     anchors=anchors, stdout_path=stdout_path, stderr_path=stderr_path)


def tail(path, n=15):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-n:])
    except OSError:
        return ""


def rm(path):
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def shown_cmd(cmd, env):
    """A run's command as a shell line: its EMBER_MASTER, without the GNU time wrapper."""
    if cmd and cmd[0] == GNU_TIME:
        cmd = cmd[5:]  # /usr/bin/time -f %M -o FILE
    master = env.get("EMBER_MASTER")
    return (f"EMBER_MASTER={master} " if master else "") + shlex.join(cmd or [])


def as_record(res):
    return {k: v for k, v in vars(res).items()}


def failed_record(job, engine, msg):
    """A run record for a run that could not be made (e.g. the cluster did not start)."""
    return {"job": job, "engine": engine, "round": 0, "ok": False, "check": [msg], "wall_s": None,
            "cpu_s": None, "maxrss_kib": 0, "anchors": {}, "cmd": None, "rc": None}


def do_run(ctx, job, engine, rnd, inp, man, master="local[2]"):
    work = os.path.join(ctx.out, "work")
    logs = os.path.join(ctx.out, "logs")
    tag = f"{job}-{engine.replace('[', '').replace(']', '')}-r{rnd}"
    out = os.path.join(work, tag + (".tsv" if engine in ("duckdb", "polars") and job != "sort" else ""))
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
        if job in JOIN_JOBS:
            # every engine writes attr<TAB>sum lines: DuckDB and Polars one file, ember and Spark a directory
            ok, msgs = check_join_output(out, ctx.join_expected[job], ctx.join_known.get(job),
                                         is_dir=engine not in ("duckdb", "polars"))
        elif engine.startswith("ember"):
            if job == "latency" or engine == CLUSTER_LATENCY:
                ok, msgs = check_latency_anchors(res.anchors)
            elif job in ("wordcount", "scaling", "cluster"):
                ok, msgs, _ = check_wordcount_output(ctx, out, man)
            elif job == "tiny":
                ok, msgs = check_tiny_output(out, ctx.tiny_expected)
            elif job == "kvsum":
                ok, msgs = check_kvsum_output(out, man, ctx.kvsum_digest)
            elif job == "sort":
                ok, msgs = check_sorted_output(ctx, out, man, ctx.kv_digest)
            elif job == "faults":
                ok, msgs = check_faultjob_output(out, man, ctx.faults_ref, ctx.kvsum_digest)
        elif job == "sort" and engine in ("duckdb", "polars"):
            # sort_ref.py prints no figures to check: its output is checked as ember's is.
            ok, msgs = check_sorted_output(ctx, out, man, ctx.kv_digest)
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
        if k in res.anchors and (job == "latency" or engine == CLUSTER_LATENCY):
            extra = f" {k}={res.anchors[k]}"
    if "trivial_job_p90_ms" in res.anchors:
        extra += f" p90={res.anchors['trivial_job_p90_ms']}"
    status = "ok" if ok else "FAILED: " + "; ".join(msgs)
    log(f"  {job:9s} {engine:21s} run {rnd + 1}: wall {res.wall_s:8.3f} s  cpu {res.cpu_s:8.3f} s  "
        f"rss {res.maxrss_kib / 1024:8.1f} MiB{extra}  [{status}]")
    return res
