"""The engines: detecting which references (DuckDB, Polars, Spark) the venv provides, the
run context shared by a benchmark, and the command line each engine runs for each job."""
import glob
import os
import shutil
import subprocess

from .config import CLUSTER_LATENCY, FAULTS_PARTITIONS, JOB_EXAMPLE, JOIN_JOBS, SPARK_CLASS


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
        spark["why"] = (f"{args.spark_jar} not built: run VENV={args.venv} {args.reference}/spark/build.sh")
    else:
        spark.update(ok=True, submit=submit[0], version=has_module("pyspark"))
    refs["spark"] = spark
    refs["python"] = venv_py
    return refs


class Ctx:
    pass


def engine_label(engine):
    return engine


def make_command(ctx, job, engine, inp, out, master="local[2]"):
    """(cmd, env) for one run. `master` is ember's: local[N] or the cluster job's driver URL.
    For the join jobs `inp` is the fact set and ctx.join_dim the dimension set."""
    ember_env = {"EMBER_LOG": "warn", "EMBER_PROGRESS": "0", "EMBER_MASTER": master,
                 "EMBER_EXECUTOR_MEMORY": ctx.args.executor_memory}
    if engine.startswith("ember"):
        if job == "latency":
            return [ctx.bins["latency"]], ember_env
        if engine == CLUSTER_LATENCY:
            return [ctx.bins["latency"], "--master", master], ember_env
        if job == "faults":
            return [ctx.bins["faultjob"], "--master", master, "--partitions", str(FAULTS_PARTITIONS),
                    inp, out], ember_env
        exe = ctx.bins[JOB_EXAMPLE[job]]
        if job in JOIN_JOBS:
            return [exe, "--master", master, "--dim", ctx.join_dim, inp, out], ember_env
        return [exe, "--master", master, inp, out], ember_env
    if engine in ("duckdb", "polars") and job == "sort":
        # bench/reference/single_node.py has no sort; this repository's reference does.
        return [ctx.refs["python"], os.path.join(os.path.dirname(__file__), "sort_ref.py"), engine,
                inp, out], {}
    if engine in ("duckdb", "polars") and job in JOIN_JOBS:
        return [ctx.refs["python"], os.path.join(ctx.reference, "single_node.py"), engine, "joinsum",
                ctx.join_dim, inp, out], {}
    if engine in ("duckdb", "polars"):
        cmd = [ctx.refs["python"], os.path.join(ctx.reference, "single_node.py"), engine, job, inp]
        if job == "wordcount":
            cmd.append(out)
        return cmd, {}
    if engine == "spark":
        cmd = [ctx.refs["spark"]["submit"], "--master", "local[2]"]
        if job in ("wordcount", "kvsum", "sort") or job in JOIN_JOBS:
            cmd += ["--driver-memory", ctx.args.spark_driver_memory]
        cmd += ["--class", SPARK_CLASS[job], ctx.args.spark_jar]
        if job in JOIN_JOBS:
            cmd += [ctx.join_dim, inp, out, str(ctx.args.spark_partitions)]
        elif job in ("wordcount", "tiny", "sort"):
            cmd += [inp, out, str(ctx.args.spark_partitions)]
        elif job == "kvsum":
            cmd += [inp, str(ctx.args.spark_partitions)]
        # Spark prints its INFO log on stderr; keep it quiet-ish and local
        return cmd, {"SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    raise ValueError(engine)
