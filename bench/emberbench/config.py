"""Shared constants of the benchmark harness: paths, the job/engine tables, the data set
parameters, the known results from bench/reference/README.md, and the log/die helpers."""
import os
import sys

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_PY = os.path.join(BENCH_DIR, "run.py")
REPO = os.path.dirname(BENCH_DIR)
# The data generator, the reference jobs and the output checker (bench/reference/README.md).
DEFAULT_REFERENCE = os.path.join(BENCH_DIR, "reference")

ALL_ENGINES = ["ember", "duckdb", "polars", "spark"]
DEFAULT_JOBS = ["wordcount", "kvsum", "sort", "latency", "tiny", "scaling", "cluster", "faults"]
# The scale jobs (emberbench/scale.py): run when named in --jobs.
SCALE_JOB_NAMES = ["scheduling", "memory", "tenx", "smallfiles", "wideshuffle", "pagerank", "parquet"]
# The join jobs, run when named in --jobs: the fact set (kv; kvskew for skewjoin) joined
# record by record with the dimension set `key,attr` (every key once, attr in DIM_GROUPS
# groups), the sum of value per attr.
JOIN_JOBS = ["join", "skewjoin"]
JOIN_FACT = {"join": "kv", "skewjoin": "kvskew"}
ALL_JOBS = DEFAULT_JOBS + SCALE_JOB_NAMES + JOIN_JOBS

# Which engines can run which job (ember is always first: it is what the ratios are about).
JOB_ENGINES = {
    "wordcount": ["ember", "duckdb", "polars", "spark"],
    "kvsum": ["ember", "duckdb", "polars", "spark"],
    "sort": ["ember", "duckdb", "polars", "spark"],
    "latency": ["ember", "spark"],
    "tiny": ["ember", "spark"],
    "scaling": ["ember"],
    "cluster": ["ember"],
    "faults": ["ember"],
    "join": ["ember", "duckdb", "polars", "spark"],
    "skewjoin": ["ember", "duckdb", "polars", "spark"],
}
# ember example each job needs (the cluster job also runs `latency`, see CLUSTER_EXAMPLES).
JOB_EXAMPLE = {"wordcount": "wordcount", "kvsum": "kvsum", "sort": "sort", "latency": "latency",
               "tiny": "wordcount", "scaling": "wordcount", "cluster": "wordcount", "faults": "faultjob",
               "join": "joinsum", "skewjoin": "joinsum"}
# Jobs that run on a local cluster of ember daemons (they need DAEMONS built).
CLUSTER_JOBS = ("cluster", "faults")

# The cluster job: a driver and CLUSTER_EXECUTORS executors of CLUSTER_CORES cores each on this
# machine, compared with local[2]; the targets are the (cluster wall <= 1.3x local[2],
# a trivial 8-task job under 20 ms once the binary is on the executors).
DAEMONS = ["ember-driver", "ember-executor"]
CLUSTER_EXAMPLES = ["wordcount", "latency"]
CLUSTER_EXECUTORS = 2
CLUSTER_CORES = 1
CLUSTER_MAX_RATIO = 1.3
CLUSTER_MAX_TRIVIAL_MS = 20.0
# The cluster job's rows (engine ids; the report shows the labels).
CLUSTER_LOCAL = "ember-local[2]"
CLUSTER_FIRST = "ember-cluster-first"
CLUSTER_WC = "ember-cluster"
CLUSTER_LATENCY = "ember-cluster-latency"
CLUSTER_LABELS = {
    CLUSTER_LOCAL: "wordcount local[2]",
    CLUSTER_FIRST: "wordcount cluster, first run (binary upload + fetch; not counted)",
    CLUSTER_WC: f"wordcount cluster (1 driver + {CLUSTER_EXECUTORS}x{CLUSTER_CORES} core)",
    CLUSTER_LATENCY: "latency cluster (trivial 8-task job)",
}

# The faults job: `faultjob --partitions FAULTS_PARTITIONS` over the kv set on a driver and
# FAULTS_EXECUTORS executors of FAULTS_CORES core each; fault-free runs vs runs in which the
# executor holding the most map outputs of the first shuffle is SIGKILLed as soon as the
# driver submits the second map stage. FAULTS_DRIVER_LOG is the driver's EMBER_LOG: info (the
# stage submissions, fetch failures, lost executors and map outputs) plus debug for the
# scheduler's completion module alone, the only place that logs each running task lost with
# an executor ("task lost with its executor"; a handful of lines per run).
FAULTS_PARTITIONS = 6
FAULTS_EXECUTORS = 3
FAULTS_CORES = 1
FAULTS_DRIVER_LOG = "info,ember_driver::scheduler::completion=debug"
FAULTS_FIRST = "ember-faults-first"
FAULTS_FREE = "ember-faults-free"
FAULTS_KILL = "ember-faults-kill"
FAULTS_LABELS = {
    FAULTS_FIRST: "faultjob cluster, first run (binary upload + fetch; not counted)",
    FAULTS_FREE: f"faultjob cluster, fault-free (1 driver + {FAULTS_EXECUTORS}x{FAULTS_CORES} core)",
    FAULTS_KILL: "faultjob cluster, executor SIGKILLed at the 2nd map stage",
}

# cargo profiles the harness can build (--profile): name -> cargo flags (target/<name>/).
PROFILES = {"release": ["--release"], "debug": []}
SPARK_CLASS = {"wordcount": "WordCount", "kvsum": "KvSum", "sort": "SortByKey", "latency": "Latency",
               "tiny": "WordCount", "join": "JoinSum", "skewjoin": "JoinSum"}

# Data sets: name -> (generator args). `--jobs 2` is added when generating.
# The join jobs' sets: "dim" has a key for each of the kv set's keys (so every fact record
# joins), "kvskew" is the kv set with 20 % of its records' keys rewritten to one hot key.
DIM_GROUPS = 1000
SKEW_PERCENT = 20
DATASETS_FULL = {
    "text": ("text1g", ["text", "--bytes", "1073741824", "--files", "8", "--seed", "1"]),
    "kv": ("kv", ["kv", "--records", "50000000", "--keys", "5000000", "--files", "8", "--seed", "3"]),
    "kvskew": ("kvskew", ["kvskew", "--records", "50000000", "--keys", "5000000", "--files", "8", "--seed", "3",
                          "--skew-percent", str(SKEW_PERCENT)]),
    "dim": ("dim5m", ["dim", "--keys", "5000000", "--groups", str(DIM_GROUPS), "--files", "4", "--seed", "5"]),
}
DATASETS_SMALL = {
    "text": ("text100m", ["text", "--bytes", "104857600", "--files", "4", "--seed", "2"]),
    "kv": ("kv5m", ["kv", "--records", "5000000", "--keys", "500000", "--files", "8", "--seed", "3"]),
    "kvskew": ("kvskew5m", ["kvskew", "--records", "5000000", "--keys", "500000", "--files", "8", "--seed", "3",
                            "--skew-percent", str(SKEW_PERCENT)]),
    "dim": ("dim500k", ["dim", "--keys", "500000", "--groups", str(DIM_GROUPS), "--files", "4", "--seed", "5"]),
}
DATASET_TINY = ("tiny1k", ["text", "--bytes", "1024", "--files", "1", "--seed", "4"])

# Known results from bench/reference/README.md, keyed by the generator parameters that produce them.
KNOWN_TEXT = {
    # (bytes, files, seed): (distinct words, total words, digest of word<TAB>count output)
    (1073741824, 8, 1): (995357, 116208746, "6971086b45523b8e"),
    (104857600, 4, 2): (633751, 13039148, "8101d160ddd3da1a"),
}
KNOWN_KV = {
    # (records, keys, files, seed): (distinct keys, exact value sum in thousandths)
    (50000000, 5000000, 8, 3): (4999752, 24998224826264),
}

KNOWN_JOIN = {
    # checks.join_gen_key(fact manifest, dim manifest): (attrs in the answer, exact total in
    # thousandths, digest of the attr<TAB>sum lines); see bench/reference/README.md. The
    # --small sets (kv5m / kvskew5m joined with dim500k); the full sets are not pinned yet.
    ("kv", 5000000, 500000, 8, 3, 0, None, 500000, 1000, 4, 5): (1000, 2500090342031, "f3e023489a3facf8"),
    ("kvskew", 5000000, 500000, 8, 3, 20, 170619, 500000, 1000, 4, 5): (1000, 2500090342031, "2050a12d0a420a6d"),
}

INSTALL_HINT = ("python3 -m venv {venv} && {venv}/bin/pip install -r {req}\n"
                "    VENV={venv} {reference}/spark/build.sh")


def log(msg=""):
    print(msg, flush=True)


def die(msg):
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)
