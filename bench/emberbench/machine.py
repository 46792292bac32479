"""Description of the machine a benchmark ran on: CPUs, memory, load, tool versions and the
ember commit, for the report's header."""
import os
import platform
import subprocess
import sys

from .config import REPO


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
    for key, cmd in (("rustc", ["rustc", "--version"]), ("java", ["java", "-XX:-UsePerfData", "-version"])):
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
