"""The `faults` job: faultjob on a local cluster (1 driver + FAULTS_EXECUTORS executors x
FAULTS_CORES core) without and with a fault, the fault being an executor SIGKILLed while the
job's second shuffle is read: the one holding the most map outputs of the first shuffle,
killed as soon as the driver submits the second map stage. It answers the fault-tolerance
issue's question for the kill-during-shuffle case: job time with and without the fault, and
how many tasks were rerun against how many were lost.

Order of events: start the cluster (driver at EMBER_LOG=FAULTS_DRIVER_LOG into
OUT/logs/faults-driver.err); one uncounted fault-free run (binary upload + fetch), whose
output is verified on its own and becomes the reference; then --runs rounds of a fault-free
run and a run with the fault, after which a replacement executor is started, the harness
waits until FAULTS_EXECUTORS executors (the live ones) are registered, and, if another run
follows, a small uncounted faultjob run makes the replacement fetch the binary and start its
worker, so no counted run pays for that. Every counted output must be byte-identical to the
reference (SHA-256 of the part files in order).

What is counted per run, from the run's part of the driver log (the lines after the log's
size at the run's start): the stage submissions (`submitting stage NAME (shuffle S): all N
partitions` / `...: K of N partitions [..]`; a stage's first submission is its run, each
later one a rerun of the tasks it lists), `executor lost`, `map outputs lost with executor`,
`fetch failure` and the scheduler's debug line `task lost with its executor` (one per task
running on the executor when it died).

Invariants: the injector thread only reads the log and the executors' shuffle dirs until it
kills; it is stopped and joined before the cluster is stopped; the cluster (and so every
daemon, worker and the temp dir with the replacement input) is stopped on return, exception,
Ctrl-C or SIGTERM (try/finally, plus the cluster's atexit and PR_SET_PDEATHSIG).
"""
import datetime
import os
import re
import threading
import time

from .cluster import Cluster, ClusterError, child_pids
from .config import (FAULTS_CORES, FAULTS_DRIVER_LOG, FAULTS_EXECUTORS, FAULTS_FIRST, FAULTS_FREE,
                     FAULTS_KILL, FAULTS_PARTITIONS, log)
from .data import data_files
from .engines import make_command
from .runs import as_record, do_run, failed_record, run_measured, shown_cmd

JOB = "faults"
POLL_S = 0.002  # how often the injector reads the driver log
REWARM_LINES = 2000  # lines per file of the replacement's warm-up input (6 files)
REWARM_TRIES = 3

SUBMIT_RE = re.compile(
    r"submitting stage (?P<name>.*?)(?: \(shuffle (?P<shuffle>\d+)\))?: "
    r"(?:all (?P<all>\d+) partitions|(?P<k>\d+) of (?P<n>\d+) partitions \[(?P<parts>[\d, ]*)\])"
    r"(?:.*?\bstage=(?P<stage>\d+))?")
TS_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)")
FIELD_RE = r"\b{}=(\S+)"


def parse_submission(line):
    """A driver log line's stage submission as a dict (name, shuffle or None for a result
    stage, stage id or None, tasks, of, partitions or None for all), or None."""
    m = SUBMIT_RE.search(line)
    if not m:
        return None
    shuffle = int(m.group("shuffle")) if m.group("shuffle") else None
    stage = int(m.group("stage")) if m.group("stage") else None
    if m.group("all"):
        n = int(m.group("all"))
        return {"name": m.group("name"), "shuffle": shuffle, "stage": stage, "tasks": n, "of": n,
                "partitions": None}
    parts = [int(x) for x in m.group("parts").replace(",", " ").split()]
    return {"name": m.group("name"), "shuffle": shuffle, "stage": stage, "tasks": int(m.group("k")),
            "of": int(m.group("n")), "partitions": parts}


def field(line, name):
    m = re.search(FIELD_RE.format(re.escape(name)), line)
    return m.group(1) if m else None


def log_time(line):
    """The epoch time of a log line's timestamp (tracing's UTC RFC 3339), or None."""
    m = TS_RE.match(line)
    if not m:
        return None
    try:
        return datetime.datetime.fromisoformat(m.group(1)).timestamp()
    except ValueError:
        return None


class LogTail:
    """Complete lines appended to a file after `offset`."""

    def __init__(self, path, offset):
        self.f = open(path, "rb")
        self.f.seek(offset)
        self.buf = b""

    def poll(self):
        self.buf += self.f.read()
        *lines, self.buf = self.buf.split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines]

    def close(self):
        self.f.close()


def log_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def read_from(path, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", "replace").splitlines()


def index_files(ex, shuffle):
    """Executor ex's map outputs of `shuffle`: its shuffle_S_M.index files."""
    prefix = f"shuffle_{shuffle}_"
    try:
        names = os.listdir(os.path.join(ex.work_dir, "shuffle"))
    except OSError:
        return []
    return sorted(n for n in names if n.startswith(prefix) and n.endswith(".index"))


class Injector(threading.Thread):
    """Watches the driver log from `offset` for the run's second map stage (a submission
    naming a shuffle other than the run's first one), then at once SIGKILLs the executor
    holding the most map outputs of the first shuffle. `result` describes the kill (None if
    it did not happen); `error` any exception. Stop with stop() and join()."""

    def __init__(self, cluster, offset, ids_by_pid):
        super().__init__(name="faults-injector", daemon=True)
        self.cluster, self.offset, self.ids_by_pid = cluster, offset, ids_by_pid
        # The executors' workers (one per job binary, started by an earlier run), read now
        # so that the kill does not wait for a /proc scan.
        self.workers = {ex.pid: child_pids(ex.pid) for ex in cluster.executors}
        self.stopping = threading.Event()
        self.result = self.error = None
        self.niced = False
        self.t0_epoch = time.time()

    def stop(self):
        self.stopping.set()

    def run(self):
        try:
            # A higher priority for this thread alone (it sleeps between polls), so that a
            # loaded CPU delays the kill less; needs root or CAP_SYS_NICE, skipped otherwise.
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)
                self.niced = True
            except OSError:
                self.niced = False
            tail = LogTail(self.cluster.driver.err, self.offset)
            try:
                self.watch(tail)
            finally:
                tail.close()
        except Exception as e:  # reported with the run
            self.error = f"{type(e).__name__}: {e}"

    def watch(self, tail):
        first = None
        while not self.stopping.is_set():
            for line in tail.poll():
                sub = parse_submission(line)
                if not sub or sub["shuffle"] is None:
                    continue
                if first is None:
                    first = sub["shuffle"]
                elif sub["shuffle"] != first:
                    self.kill(first, sub["shuffle"], line)
                    return
            self.stopping.wait(POLL_S)

    def kill(self, s1, s2, line):
        detected = time.time()
        executors = list(self.cluster.executors)
        held = {ex.name: index_files(ex, s1) for ex in executors}
        victim = max(executors, key=lambda ex: len(held[ex.name]))  # ties: the first started
        killed = self.cluster.kill_executor(victim, self.workers.get(victim.pid))
        t_kill = killed["killed_at"]
        submitted = log_time(line)
        self.result = {
            "shuffles": [s1, s2], "victim": victim.name, "victim_pid": killed["pid"],
            "victim_id": self.ids_by_pid.get(killed["pid"]), "workers_killed": len(killed["workers"]),
            "held": {name: len(files) for name, files in held.items()},
            "lost_map_outputs": len(held[victim.name]), "lost_files": held[victim.name],
            "kill_at_s": t_kill - self.t0_epoch,
            "kill_after_submission_ms": (t_kill - submitted) * 1000 if submitted else None,
            "detect_after_submission_ms": (detected - submitted) * 1000 if submitted else None,
            "injector_niced": self.niced,
            "trigger_line": line.strip(),
        }


def analyze(lines, shuffles=None):
    """Counts from a run's part of the driver log. `shuffles` = [S1, S2] of a fault run (else
    taken from the log: the first two shuffle ids submitted). A stage's first submission is
    its run; every later one reruns the tasks it lists: those of the S1 stage are "map tasks
    rerun", those of the later stages (the S2 stage, the result stage) "reducer tasks rerun"."""
    subs = [s for s in (parse_submission(line) for line in lines) if s]
    if not shuffles:
        seen = list(dict.fromkeys(s["shuffle"] for s in subs if s["shuffle"] is not None))
        shuffles = seen[:2]
    s1 = shuffles[0] if shuffles else None
    by_stage, order = {}, []
    stage_of = {}  # stage id -> "map" (S1's stage) or "reduce"
    for s in subs:
        key = s["stage"] if s["stage"] is not None else (s["name"], s["shuffle"])
        if key not in by_stage:
            by_stage[key] = []
            order.append(key)
        by_stage[key].append(s)
        stage_of[s["stage"]] = "map" if s["shuffle"] == s1 else "reduce"
    map_reruns, reduce_reruns = [], []
    for key in order:
        for s in by_stage[key][1:]:
            (map_reruns if s["shuffle"] == s1 else reduce_reruns).append(s)

    def shown(s):
        what = f"all {s['of']}" if s["partitions"] is None else f"{s['tasks']} of {s['of']} {s['partitions']}"
        return f"{'shuffle ' + str(s['shuffle']) if s['shuffle'] is not None else 'result'}: {what}"
    lost_lines = [line for line in lines if "task lost with its executor" in line]
    # The completion module's debug lines are on iff "shuffle-map stage finished" shows up.
    debug_on = any("shuffle-map stage finished" in line for line in lines)
    lost_by = {"map": 0, "reduce": 0}
    for line in lost_lines:
        st = field(line, "task_stage")
        kind = stage_of.get(int(st) if st and st.isdigit() else None, "unknown stage")
        lost_by[kind] = lost_by.get(kind, 0) + 1
    lost_ids = sorted({field(line, "executor") for line in lines if "executor lost:" in line} - {None})
    return {
        "shuffles": shuffles,
        "submissions": [shown(s) for s in subs],
        "map_tasks_rerun": sum(s["tasks"] for s in map_reruns),
        "map_resubmissions": [shown(s) for s in map_reruns],
        "reducer_tasks_rerun": sum(s["tasks"] for s in reduce_reruns),
        "reducer_resubmissions": [shown(s) for s in reduce_reruns],
        "running_tasks_lost": len(lost_lines) if debug_on else None,
        "running_tasks_lost_by_stage": lost_by if debug_on else None,
        "executors_lost": lost_ids,
        "map_outputs_lost_lines": sum("map outputs lost with executor" in line for line in lines),
        "fetch_failures": sum("fetch failure:" in line for line in lines),
        "task_retries": sum("task failed, retrying" in line for line in lines),
    }


def run_faults_job(ctx, inp, man, notes):
    """The faults job (see the module doc). The cluster is stopped and its temp dir removed
    when this returns or raises. Returns (run records, [(job, engine)] row order, meta["faults"])."""
    args = ctx.args
    order = [(JOB, e) for e in (FAULTS_FIRST, FAULTS_FREE, FAULTS_KILL)]
    info = {"executors": FAULTS_EXECUTORS, "cores": FAULTS_CORES, "memory": args.executor_memory,
            "partitions": FAULTS_PARTITIONS, "driver_log": FAULTS_DRIVER_LOG, "profile": ctx.profile,
            "input": f"{inp} ({man['bytes'] / 2**20:.0f} MiB, {man['records']} records)",
            "runs": args.runs, "nproc": os.cpu_count(), "commands": {"harness": ctx.command},
            "fault_runs": [], "free_runs": [], "replacements": [], "rewarm": []}
    cluster = Cluster(ctx.bins, FAULTS_EXECUTORS, FAULTS_CORES, args.executor_memory,
                      os.path.join(ctx.out, "logs"), prefix="faults", driver_log=FAULTS_DRIVER_LOG)
    log(f"faults: starting 1 driver (EMBER_LOG={FAULTS_DRIVER_LOG}) + {FAULTS_EXECUTORS} executors x "
        f"{FAULTS_CORES} core ({args.executor_memory}) from {os.path.dirname(ctx.bins['ember-driver'])}")
    try:
        cluster.start()
    except ClusterError as e:
        msg = f"the cluster did not start: {e}"
        log(f"faults: FAILED: {msg}")
        return [failed_record(JOB, FAULTS_FIRST, msg)], order, info
    ctx.faults_ref = {"sha256": None}
    try:
        info["start_s"], info["url"] = cluster.start_s, cluster.url
        info["commands"].update(cluster.commands())
        info["driver_log_file"] = cluster.driver.err
        log(f"faults: up in {cluster.start_s:.2f} s; driver {cluster.url}, status page {cluster.ui_url}, "
            f"driver log {cluster.driver.err}")
        runs = faults_runs(ctx, cluster, inp, man, info)
        notes.extend(f"faults: {msg}" for msg in cluster.dead())
    finally:
        cluster.stop()
    log(f"faults: stopped; daemon logs in {os.path.join(ctx.out, 'logs')}/faults-*")
    info["reference_sha256"] = ctx.faults_ref["sha256"]
    for r in runs:
        if r["cmd"] and r["engine"] == FAULTS_FREE:
            info["commands"].setdefault("client", shown_cmd(r["cmd"], r["env"]))
    return runs, order, info


def faults_runs(ctx, cluster, inp, man, info):
    rounds = ctx.args.runs
    first, _ = measured(ctx, cluster, FAULTS_FIRST, 0, inp, man, info)
    runs = [first]
    if not first["ok"]:
        # Without a verified reference output no other run can be checked.
        log("faults: the first fault-free run FAILED; no further runs")
        return runs
    for rnd in range(rounds):
        runs.append(measured(ctx, cluster, FAULTS_FREE, rnd, inp, man, info)[0])
        rec, injected = measured(ctx, cluster, FAULTS_KILL, rnd, inp, man, info, fault=True)
        runs.append(rec)
        if injected:
            try:
                replace(ctx, cluster, info, inp, rewarm=rnd + 1 < rounds)
            except ClusterError as e:
                msg = f"after run {rnd + 1} with the fault: {e}; no further runs"
                log(f"faults: FAILED: {msg}")
                runs.append(failed_record(JOB, FAULTS_KILL, msg))
                break
    return runs


def measured(ctx, cluster, engine, rnd, inp, man, info, fault=False):
    """One counted (or the first) run on the cluster, with the fault if `fault`: its record,
    extended with the cluster's CPU and the counts from the driver log; and whether an
    executor was killed."""
    offset = log_size(cluster.driver.err)
    injector = None
    if fault:
        injector = Injector(cluster, offset, cluster.executor_ids())
        injector.start()
    before = cluster.cpu_seconds()
    try:
        res = do_run(ctx, JOB, engine, rnd, inp, man, master=cluster.url)
    finally:
        if injector:
            injector.stop()
            injector.join()
    res.cluster_cpu_s = cluster.cpu_seconds() - before
    res.client_cpu_s = res.cpu_s
    res.cpu_s = res.client_cpu_s + res.cluster_cpu_s
    lines = read_from(cluster.driver.err, offset)
    tag = f"{JOB}-{engine}-r{rnd}"
    with open(os.path.join(ctx.out, "logs", tag + ".driver.log"), "w") as f:
        f.write("\n".join(lines) + "\n")
    kill = injector.result if injector else None
    counts = analyze(lines, kill["shuffles"] if kill else None)
    res.fault = {"kill": kill, **counts} if fault else None
    res.log_counts = counts
    entry = {"round": rnd, "wall_s": res.wall_s, "ok": res.ok, **counts}
    if fault:
        if injector.error:
            fail(res, f"fault injector: {injector.error}")
        elif kill is None:
            fail(res, "no fault injected: the driver log showed no second map stage submission "
                      "while the job ran")
        elif not counts["executors_lost"]:
            fail(res, f"killed {kill['victim']} (pid {kill['victim_pid']}) but the driver never logged "
                      f"`executor lost`")
        entry["kill"] = kill
        info["fault_runs"].append(entry)
        if kill:
            rt = counts["running_tasks_lost"]
            log(f"  {'':9s} {'':21s}        killed {kill['victim']} ({kill['victim_id'] or '?'}, pid "
                f"{kill['victim_pid']}) {kill['kill_at_s']:.2f} s into the run, "
                f"{fmt_ms(kill['kill_after_submission_ms'])} after the 2nd map stage's submission: "
                f"lost map outputs {kill['lost_map_outputs']} (held {kill['held']}), map tasks rerun "
                f"{counts['map_tasks_rerun']} {counts['map_resubmissions']}, reducer tasks rerun "
                f"{counts['reducer_tasks_rerun']} {counts['reducer_resubmissions']}, running tasks lost "
                f"{'?' if rt is None else rt}, fetch failures {counts['fetch_failures']}")
    else:
        if counts["map_tasks_rerun"] or counts["reducer_tasks_rerun"] or counts["executors_lost"]:
            info.setdefault("unexpected", []).append(
                f"{engine} run {rnd + 1}: resubmissions or lost executors without a fault: "
                f"{counts['map_resubmissions'] + counts['reducer_resubmissions']} {counts['executors_lost']}")
        if engine == FAULTS_FREE:
            info["free_runs"].append(entry)
        else:
            info["first_run"] = entry
    log(f"  {'':9s} {'':21s}        cpu of the driver, executors and workers during the run "
        f"{res.cluster_cpu_s:.3f} s (total {res.cpu_s:.3f} s)")
    return as_record(res), kill is not None


def fail(res, msg):
    res.ok = False
    res.check = [msg] + list(res.check or [])
    log(f"  {'':9s} {'':21s}        FAILED: {msg}")


def fmt_ms(x):
    return "?" if x is None else f"{x:.1f} ms"


def replace(ctx, cluster, info, data, rewarm):
    """Starts a replacement executor and waits until the live executors are the registered
    ones; with `rewarm`, a small uncounted faultjob run follows so the replacement fetches the
    binary and starts its worker before the next counted run (repeated until it has a worker,
    at most REWARM_TRIES times). Failures here raise ClusterError (the job cannot go on)."""
    t0 = time.monotonic()
    ex = cluster.add_executor()
    cluster.wait_for_registration()
    took = time.monotonic() - t0
    info["replacements"].append({"executor": ex.name, "pid": ex.pid, "registered_s": took})
    log(f"  {'':9s} {'':21s}        replacement {ex.name} (pid {ex.pid}) registered in {took:.2f} s; "
        f"{len(cluster.executors)} executors")
    if not rewarm:
        return
    inp = rewarm_input(cluster, data)
    for i in range(REWARM_TRIES):
        out = os.path.join(cluster.dir, f"rewarm-out-{len(info['rewarm'])}")
        cmd, env = make_command(ctx, JOB, FAULTS_FREE, inp, out, cluster.url)
        tag = f"{JOB}-rewarm-{len(info['rewarm'])}"
        logs = os.path.join(ctx.out, "logs")
        res = run_measured(cmd, env, os.path.join(logs, tag + ".out"), os.path.join(logs, tag + ".err"),
                           ctx.args.timeout, cwd=ctx.out)
        has_worker = bool(child_pids(ex.pid))
        info["rewarm"].append({"executor": ex.name, "wall_s": res.wall_s, "rc": res.rc,
                               "replacement_has_worker": has_worker})
        log(f"  {'':9s} {'':21s}        warm-up of {ex.name} on a {REWARM_LINES * FAULTS_PARTITIONS}-line "
            f"input (not counted): wall {res.wall_s:.3f} s, exit {res.rc}, worker started: "
            f"{'yes' if has_worker else 'no'}")
        if res.rc != 0:
            raise ClusterError(f"the replacement's warm-up run failed (exit {res.rc}; {tag}.err)")
        if has_worker:
            return
    info.setdefault("unexpected", []).append(
        f"{ex.name} got no task in {REWARM_TRIES} warm-up runs: the next counted run includes its binary fetch")


def rewarm_input(cluster, data):
    """FAULTS_PARTITIONS files of REWARM_LINES lines from the start of the kv set `data`, in
    the cluster's temp dir (made once; removed with the cluster)."""
    d = os.path.join(cluster.dir, "rewarm-input")
    if os.path.isdir(d):
        return d
    os.makedirs(d)
    with open(data_files(data)[0], "rb") as src:
        for i in range(FAULTS_PARTITIONS):
            with open(os.path.join(d, f"part-{i:05d}"), "wb") as f:
                for _ in range(REWARM_LINES):
                    f.write(src.readline())
    return d
