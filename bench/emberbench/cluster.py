"""A local ember cluster for the `cluster` and `faults` jobs: one `ember-driver` and N
`ember-executor` daemons on 127.0.0.1 with ephemeral ports, started from the snapshot binaries
in OUT/bin. The `faults` job also kills executors (`kill_executor`) and starts replacements
(`add_executor`).

Invariants: every daemon (and every worker process an executor started) is stopped and
reaped, and the cluster's temp dir (executor work dirs, the driver's binary store) is
removed, when `stop()` runs: at the end of the `with` block, on an exception or Ctrl-C
(KeyboardInterrupt unwinds through it), and at interpreter exit (atexit) as a backstop.
The daemons also get SIGKILL from the kernel if the harness dies without cleaning up
(PR_SET_PDEATHSIG). Startup waits are bounded. Daemon logs go to OUT/logs/PREFIX-* (PREFIX
`cluster` unless told otherwise), which outlive the cluster. An executor killed on purpose
is reaped at once and its workers are SIGKILLed with it, so nothing of it outlives the kill.
"""
import atexit
import ctypes
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

STARTUP_S = 60.0
# The executors' EMBER_LOG: warnings, and the line naming the id the driver gave them.
EXECUTOR_LOG = "warn,ember_executor::registration=info"
STOP_GRACE_S = 5.0
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """preexec_fn: have the kernel SIGKILL this child when the harness dies, however it dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def daemon_env(log_level="warn"):
    """The daemons' environment: EMBER_LOG=log_level (quiet by default), no cluster secret
    (loopback only)."""
    env = dict(os.environ)
    for k in ("EMBER_SECRET", "EMBER_SECRET_FILE", "EMBER_MASTER", "RUST_LOG"):
        env.pop(k, None)
    env["EMBER_LOG"] = log_level
    env["NO_COLOR"] = "1"  # plain log files
    return env


def _read_lines(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def _tail(path, n=10):
    return "\n    ".join(_read_lines(path)[-n:])


class ClusterError(RuntimeError):
    pass


class Daemon:
    """One daemon process with its stdout/stderr in log files (LOG_DIR/PREFIX-NAME.out|.err)."""

    def __init__(self, name, cmd, log_dir, prefix="cluster", log_level="warn", work_dir=None):
        self.name, self.cmd, self.work_dir = name, cmd, work_dir
        self.out = os.path.join(log_dir, f"{prefix}-{name}.out")
        self.err = os.path.join(log_dir, f"{prefix}-{name}.err")
        with open(self.out, "wb") as o, open(self.err, "wb") as e:
            # own session: a Ctrl-C in the terminal reaches the harness, which stops the
            # daemons in order, not the daemons directly
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=o, stderr=e,
                                         env=daemon_env(log_level), start_new_session=True,
                                         preexec_fn=_die_with_parent)

    @property
    def pid(self):
        return self.proc.pid

    def exit_code(self):
        return self.proc.poll()

    def wait_for_addresses(self, n, deadline):
        """The addresses at the end of the first n stdout lines ("... on http://H:P")."""
        while True:
            lines = _read_lines(self.out)
            if len(lines) >= n:
                return [line.rsplit(" ", 1)[-1] for line in lines[:n]]
            if self.exit_code() is not None:
                raise ClusterError(f"{self.name} exited with status {self.exit_code()} before printing "
                                   f"its address; {self.err}:\n    {_tail(self.err)}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{self.name} printed no address within {STARTUP_S:.0f} s; "
                                   f"{self.err}:\n    {_tail(self.err)}")
            time.sleep(0.02)


class Cluster:
    """A driver (with its status page on an ephemeral port) and `executors` executors of
    `cores` cores and `memory` each. Use as a context manager, or call start()/stop().
    `prefix` names the daemons' log files; `driver_log` is the driver's EMBER_LOG (the
    executors log at warn). Executors are numbered from 1 in the order they are started; a
    replacement gets the next number (and a fresh work dir), never a dead one's."""

    def __init__(self, bins, executors, cores, memory, log_dir, prefix="cluster", driver_log="warn",
                 driver_args=()):
        self.bins, self.n_executors, self.cores, self.memory = bins, executors, cores, memory
        self.driver_args = list(driver_args)
        self.log_dir, self.prefix, self.driver_log = log_dir, prefix, driver_log
        self.dir = None
        self.driver = None
        self.executors = []
        self.next_executor = 1
        self.url = self.ui_url = None
        self.start_s = None
        self.lost_cpu_ticks = 0  # CPU of executors (and their workers) killed on purpose
        self.lock = threading.RLock()  # kill_executor may run on another thread than stop()

    # ---- lifecycle

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        """Starts the daemons and waits until every executor has registered."""
        atexit.register(self.stop)
        t0 = time.monotonic()
        deadline = t0 + STARTUP_S
        self.dir = tempfile.mkdtemp(prefix=f"ember-bench-{self.prefix}-")
        try:
            self.driver = Daemon("driver", self.driver_cmd(), self.log_dir, self.prefix, self.driver_log)
            self.url, self.ui_url = self.driver.wait_for_addresses(2, deadline)
            for _ in range(self.n_executors):
                self.add_executor(deadline)
            self.wait_for_registration(deadline)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - t0
        return self

    def stop(self):
        """SIGTERM to the executors (they kill their workers), then to the driver; SIGKILL to
        whatever is left after a grace period; then removes the temp dir. Idempotent."""
        with self.lock:
            workers = [p for d in self.executors for p in child_pids(d.pid)]
            _terminate(self.executors)
            _terminate([self.driver] if self.driver else [])
            for pid, started in workers:  # orphaned only if an executor had to be SIGKILLed
                if _start_time(pid) == started:
                    _signal(pid, signal.SIGKILL)
            self.executors, self.driver = [], None
            if self.dir:
                shutil.rmtree(self.dir, ignore_errors=True)
                self.dir = None
            atexit.unregister(self.stop)

    def add_executor(self, deadline=None):
        """Starts the next executor and waits (until `deadline`, default STARTUP_S from now)
        for it to print its address; it registers with the driver on its own (see
        wait_for_registration). Returns its Daemon."""
        deadline = deadline or time.monotonic() + STARTUP_S
        with self.lock:
            i = self.next_executor
            self.next_executor += 1
            ex = Daemon(f"executor-{i}", self.executor_cmd(i), self.log_dir, self.prefix,
                        log_level=EXECUTOR_LOG, work_dir=os.path.join(self.dir, f"executor-{i}"))
            self.executors.append(ex)
        ex.wait_for_addresses(1, deadline)
        return ex

    def kill_executor(self, ex, workers=None):
        """SIGKILL to executor `ex` (a crash, as `kill -9`), then to its worker processes
        (they would exit on their own once their socket closes; killing them makes the loss
        that of a whole machine and leaves nothing running), then reaps it. `workers`:
        its [(pid, start time)] from child_pids(), read beforehand to keep the /proc scan out
        of the kill's path (default: read now). Their CPU time up to the kill is kept in
        lost_cpu_ticks so cpu_seconds() stays monotonic. Returns {"pid", "workers",
        "killed_at"}: the executor's pid, its workers' pids and the time.time() of the
        SIGKILL."""
        with self.lock:
            if workers is None:
                workers = child_pids(ex.pid)
            ticks = _cpu_ticks(ex.pid) + sum(_cpu_ticks(pid) for pid, _ in workers)
            _signal(ex.pid, signal.SIGKILL)
            killed_at = time.time()
            for pid, started in workers:
                if _start_time(pid) == started:
                    _signal(pid, signal.SIGKILL)
            ex.proc.wait()
            self.lost_cpu_ticks += ticks
            self.executors.remove(ex)
        return {"pid": ex.pid, "workers": [pid for pid, _ in workers], "killed_at": killed_at}

    # ---- commands

    def driver_cmd(self):
        return [self.bins["ember-driver"], "--host", "127.0.0.1", "--port", "0", "--ui-port", "0",
                "--binary-dir", os.path.join(self.dir, "driver-binaries")] + self.driver_args

    def executor_cmd(self, i):
        """Executor i's command line (i from 1, in start order; the driver's executor ids
        are in registration order, see executor_ids())."""
        return [self.bins["ember-executor"], "--driver", self.url, "--cores", str(self.cores),
                "--memory", self.memory, "--work-dir", os.path.join(self.dir, f"executor-{i}"),
                "--host", "127.0.0.1", "--shuffle-port", "0"]

    def commands(self):
        """The daemons' command lines (executor 1's; the others differ in their work dir)."""
        return {"driver": f"EMBER_LOG={shlex.quote(self.driver_log)} " + shlex.join(self.driver_cmd()),
                "executor": f"EMBER_LOG={shlex.quote(EXECUTOR_LOG)} " + shlex.join(self.executor_cmd(1))
                            + f"  (x{self.n_executors}: executor-1 ... executor-{self.n_executors})"}

    # ---- state

    def live_executors(self):
        """{executor id: slots} of the executors the driver's web UI lists as live
        (`/api/v1/executors`)."""
        with urllib.request.urlopen(self.ui_url + "/api/v1/executors", timeout=5) as r:
            listed = json.loads(r.read().decode("utf-8", "replace"))
        return {e["executor_id"]: e["slots"] for e in listed if e.get("lost_ms") is None}

    def registered(self):
        """(executors, cores) the driver lists as live."""
        live = self.live_executors()
        return (len(live), sum(live.values()))

    def executor_ids(self):
        """{pid: the driver's executor id} of the running executors that the driver lists as
        live, each id from the executor's own log ("registered with the driver
        executor_id=..."; the executors log their registration at info, see EXECUTOR_LOG)."""
        live = self.live_executors()
        ids = {}
        for d in self.executors:
            found = re.findall(r"registered with the driver executor_id=(\S+)", "\n".join(_read_lines(d.err)))
            if found and found[-1] in live:
                ids[d.pid] = found[-1]
        return ids

    def wait_for_registration(self, deadline=None):
        """Waits until the status page lists n_executors executors with their cores, and
        they are exactly the live ones (a killed executor dropped, a replacement in)."""
        deadline = deadline or time.monotonic() + STARTUP_S
        want = (self.n_executors, self.n_executors * self.cores)
        got = None
        while True:
            dead = self.dead()
            if dead:
                raise ClusterError("cluster daemon exited during startup: " + "; ".join(dead))
            try:
                got = self.registered()
                if got == want and set(self.executor_ids()) != {d.pid for d in self.executors}:
                    got = f"{got}, but not the live executors' pids"
            except OSError as e:
                got = f"status page: {e}"
            if got == want:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"executors did not register within {STARTUP_S:.0f} s: want {want} "
                                   f"(executors, cores), status page says {got}")
            time.sleep(0.05)

    def dead(self):
        """Messages for the daemons that are no longer running."""
        return [f"{d.name} exited with status {d.exit_code()} ({d.err}: {_tail(d.err, 3)})"
                for d in [self.driver] + self.executors if d is not None and d.exit_code() is not None]

    def processes(self):
        """[(name, pid)] of the driver, the executors and the executors' live workers."""
        out = [("driver", self.driver.pid)]
        for d in self.executors:
            out.append((d.name, d.pid))
            out.extend((f"{d.name} worker", pid) for pid, _ in child_pids(d.pid))
        return out

    def cpu_seconds(self):
        """CPU time (user + sys, s) the cluster has used so far: the daemons', their live
        workers' and that of the workers they have already reaped (cutime, cstime), plus
        that of executors killed on purpose up to their kill. The difference of two readings
        is the cluster's CPU time in between."""
        with self.lock:
            ticks = self.lost_cpu_ticks + sum(_cpu_ticks(pid) for _, pid in self.processes())
        return ticks / os.sysconf("SC_CLK_TCK")

    def memory_report(self, names_by_sha):
        """VmHWM/VmRSS (MiB) of the driver, each executor and each executor's worker
        processes, read from /proc now. VmHWM is per process and never goes down, so read at
        the end of the job it is each process's peak over every run so far."""
        procs = []
        for name, pid in self.processes():
            if name.endswith(" worker"):
                sha = proc_environ(pid).get("EMBER_BINARY_SHA256", "")
                name += f" ({names_by_sha.get(sha, sha[:12] or '?')})"
            procs.append({"process": name, "pid": pid, **proc_memory(pid)})
        return procs


# ---- processes and /proc

def _terminate(daemons):
    """SIGTERM to each running daemon, then wait; SIGKILL those still up after the grace."""
    for d in daemons:
        if d.exit_code() is None:
            _signal(d.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for d in daemons:
        try:
            d.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(d.pid, signal.SIGKILL)
            d.proc.wait()


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _stat_fields(pid):
    """Fields of /proc/PID/stat after the command name (index 0 = state), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    return s[s.rfind(")") + 2:].split()


def _cpu_ticks(pid):
    """utime + stime + cutime + cstime of a live process, in clock ticks (0 if gone)."""
    fields = _stat_fields(pid)
    return sum(int(x) for x in fields[11:15]) if fields else 0


def _start_time(pid):
    fields = _stat_fields(pid)
    return fields[19] if fields else None


def child_pids(ppid):
    """[(pid, start time)] of the live children of ppid (the start time tells a reused pid)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(name)
            if fields and fields[1] == str(ppid):
                out.append((int(name), fields[19]))
    return out


def proc_memory(pid):
    """{"vmhwm_mib", "vmrss_mib"} of a live process (None when unreadable)."""
    vals = {"vmhwm_mib": None, "vmrss_mib": None}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = {"VmHWM:": "vmhwm_mib", "VmRSS:": "vmrss_mib"}.get(line.split(None, 1)[0])
                if key:
                    vals[key] = int(line.split()[1]) / 1024
    except (OSError, IndexError, ValueError):
        pass
    return vals


def proc_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    pairs = (kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def sha256_of(path):
    """Hex SHA-256 of a file (an executor names its workers' binaries by it)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
