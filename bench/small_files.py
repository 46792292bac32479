#!/usr/bin/env python3
"""Real input layouts: wordcount over a directory of many small text files, and a wide
shuffle of tiny data, in ember (local[2] and a 2-executor cluster) and DuckDB.

    python3 bench/small_files.py build [--data DIR] [--files N]
    python3 bench/small_files.py run [--data DIR] [--out DIR] [--runs K] [--clients C]
                                     [--venv V] [--skip-cluster]

`build` makes DIR/smallfiles (default /tmp/data/smallfiles): N (default 1758) files of
5-50 KB of real text found on this machine (Markdown, plain text, reStructuredText and Rust
sources under /usr/share, ~/.cargo/registry and ~/.rustup), in a fixed order (sorted by
path), valid UTF-8 only. Whitespace other than space, tab and newline (CR, form feed,
vertical tab, no-break and other Unicode spaces) becomes a space, so that Rust's
`split_whitespace` and DuckDB's `\\s` agree on what a word is. `_manifest.json` records the
source of every file and the exact word totals (computed here, in Python).

`run` times, alternating engines run by run (inputs read once beforehand):
- ember `wordcount` in local[2] and on a local cluster (a driver and 2 executors of 2 cores),
- DuckDB: read_text over the directory, split on whitespace, group by word, write TSV,
- 12 (--clients) concurrent clients running the same wordcount on one cluster,
- `wideshuffle`: 1,000 map x 1,000 reduce tasks over 10,000 records, local and cluster.
Every answer is checked: wordcount outputs against the manifest's totals and DuckDB's
digest (`bench/reference/verify_output.py`), wideshuffle checks itself. Needs release builds of the
examples and daemons (`cargo build --release -p ember-driver -p ember-executor && cargo
build --release --examples`) and duckdb in --venv (default: none, DuckDB skipped).
"""
import argparse
import collections
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from emberbench.cluster import Cluster  # noqa: E402

SOURCES = ["/usr/share", os.path.expanduser("~/.cargo/registry/src"), os.path.expanduser("~/.rustup")]
EXTENSIONS = (".md", ".txt", ".rst", ".rs")
MIN_BYTES, MAX_BYTES = 5 * 1024, 50 * 1024
ODD_SPACE = re.compile(r"[^\S \t\n]")  # whitespace that is not space, tab or newline


def candidates():
    found = []
    for root in SOURCES:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(EXTENSIONS):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    size = os.lstat(path).st_size
                except OSError:
                    continue
                if MIN_BYTES <= size <= MAX_BYTES and os.path.isfile(path) and not os.path.islink(path):
                    found.append(path)
    return sorted(found)


def build(data, files):
    out = os.path.join(data, "smallfiles")
    manifest_path = os.path.join(out, "_manifest.json")
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            if json.load(f).get("files") == files:
                print(f"{out} exists")
                return out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    counts = collections.Counter()
    sources, total_bytes, seen = [], 0, set()
    for path in candidates():
        if len(sources) == files:
            break
        try:
            with open(path, "rb") as f:
                raw = f.read()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        digest = hashlib.sha256(raw).hexdigest()
        if digest in seen:  # the same file under two paths (toolchain copies)
            continue
        seen.add(digest)
        text = ODD_SPACE.sub(" ", text.replace("\r\n", "\n"))
        name = f"{len(sources):05d}.txt"
        with open(os.path.join(out, name), "w", encoding="utf-8", newline="") as f:
            f.write(text)
        counts.update(text.split())
        total_bytes += len(text.encode("utf-8"))
        sources.append({"file": name, "source": path})
    if len(sources) < files:
        sys.exit(f"only {len(sources)} suitable files found, {files} asked for")
    manifest = {"files": files, "bytes": total_bytes, "distinct_words": len(counts),
                "total_words": sum(counts.values()), "sources": sources}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"{out}: {files} files, {total_bytes} bytes, {manifest['total_words']} words, "
          f"{manifest['distinct_words']} distinct")
    return out


def ember_env(master):
    env = dict(os.environ)
    env.update({"EMBER_LOG": "warn", "EMBER_PROGRESS": "0", "EMBER_MASTER": master})
    return env


def run_timed(cmd, env, timeout=3600):
    t = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    secs = time.monotonic() - t
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return secs, p.stdout


def digest(verify, out_dir):
    p = subprocess.run([sys.executable, verify, "wordcount", out_dir], capture_output=True, text=True, check=True)
    return p.stdout.strip()


def wc_totals(out_dir):
    distinct = total = 0
    for name in os.listdir(out_dir):
        if name.startswith("part-"):
            with open(os.path.join(out_dir, name), encoding="utf-8") as f:
                for line in f:
                    distinct += 1
                    total += int(line.rsplit("\t", 1)[1])
    return distinct, total


def check_wc(out_dir, manifest):
    got = wc_totals(out_dir)
    want = (manifest["distinct_words"], manifest["total_words"])
    if got != want:
        raise RuntimeError(f"{out_dir}: (distinct, total) words {got}, expected {want}")


DUCKDB = r"""
import sys, time, duckdb
inp, out = sys.argv[1], sys.argv[2]
con = duckdb.connect()
t0 = time.perf_counter()
con.execute(f'''
    CREATE TEMP TABLE counts AS
    SELECT word, count(*)::BIGINT AS n
    FROM (SELECT unnest(regexp_split_to_array(content, '\s+')) AS word
          FROM read_text('{inp}/*.txt'))
    WHERE word <> ''
    GROUP BY word''')
con.execute(f"COPY counts TO '{out}/part-00000' (FORMAT csv, HEADER false, DELIMITER '\t', QUOTE '', ESCAPE '')")
print(f"ANCHOR in_job_s={time.perf_counter() - t0:.3f}")
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["build", "run"])
    ap.add_argument("--data", default="/tmp/data")
    ap.add_argument("--out", default="/tmp/ember-bench/smallfiles")
    ap.add_argument("--files", type=int, default=1758)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--venv", default=None)
    ap.add_argument("--reference", "--shared", dest="reference", default=os.path.join(REPO, "bench", "reference"))
    ap.add_argument("--skip-cluster", action="store_true")
    a = ap.parse_args()
    inp = build(a.data, a.files)
    if a.what == "build":
        return
    with open(os.path.join(inp, "_manifest.json")) as f:
        manifest = json.load(f)
    verify = os.path.join(a.reference, "verify_output.py")
    rel = os.path.join(REPO, "target", "release")
    bins = {"ember-driver": os.path.join(rel, "ember-driver"),
            "ember-executor": os.path.join(rel, "ember-executor")}
    wordcount = os.path.join(rel, "examples", "wordcount")
    wide = os.path.join(rel, "examples", "wideshuffle")
    os.makedirs(a.out, exist_ok=True)
    subprocess.run(f"cat {inp}/*.txt > /dev/null", shell=True, check=True)
    times = collections.defaultdict(list)
    digests = {}

    def ember_wc(label, master, i):
        out = os.path.join(a.out, f"{label}-{i}")
        shutil.rmtree(out, ignore_errors=True)
        secs, _ = run_timed([wordcount, "--master", master, inp, out], ember_env(master))
        check_wc(out, manifest)
        digests[label] = digest(verify, out)
        shutil.rmtree(out, ignore_errors=True)
        return secs

    def duck(i):
        out = os.path.join(a.out, f"duckdb-{i}")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        secs, stdout = run_timed([os.path.join(a.venv, "bin", "python"), "-c", DUCKDB, inp, out], dict(os.environ))
        check_wc(out, manifest)
        digests["duckdb"] = digest(verify, out)
        shutil.rmtree(out, ignore_errors=True)
        in_job = float(re.search(r"in_job_s=([\d.]+)", stdout).group(1))
        times["duckdb in-query"].append(in_job)
        return secs

    def wide_run(label, master):
        _, stdout = run_timed([wide, "--master", master, "--runs", str(a.runs)], ember_env(master))
        times[label] = [float(x) for x in re.findall(r"run\d+_s=([\d.]+)", stdout)]

    for i in range(a.runs):
        times["ember wordcount local[2]"].append(ember_wc("local", "local[2]", i))
        if a.venv:
            times["duckdb wordcount (whole process)"].append(duck(i))
    wide_run("ember wideshuffle 1000x1000 local[2]", "local[2]")
    cluster_info = None
    if not a.skip_cluster:
        with Cluster(bins, executors=2, cores=2, memory="2g", log_dir=a.out, prefix="smallfiles") as c:
            cluster_info = c.commands()
            for i in range(a.runs):
                times["ember wordcount cluster (2 executors x 2 cores)"].append(ember_wc("cluster", c.url, i))
            wide_run("ember wideshuffle 1000x1000 cluster", c.url)
            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(a.clients) as pool:
                per_client = list(pool.map(lambda i: ember_wc(f"client{i}", c.url, "c"), range(a.clients)))
            times[f"{a.clients} concurrent wordcount clients on the cluster: total"].append(time.monotonic() - t0)
            times[f"{a.clients} concurrent wordcount clients: per client"] = per_client
    if len(set(digests.values())) != 1:
        raise RuntimeError(f"answers differ: {digests}")
    print(f"\ninput: {inp}: {manifest['files']} files, {manifest['bytes']} bytes, "
          f"{manifest['total_words']} words, {manifest['distinct_words']} distinct; "
          f"every answer identical (digest {next(iter(digests.values()))})")
    if cluster_info:
        print(f"cluster: {cluster_info['driver']}\n         {cluster_info['executor']}")
    print("\n| measurement | median s | runs (s) |\n|---|---|---|")
    for k, v in times.items():
        print(f"| {k} | {statistics.median(v):.3f} | {', '.join(f'{x:.2f}' for x in v)} |")


if __name__ == "__main__":
    main()
