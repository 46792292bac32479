"""Data sets: checking an input directory against its `_manifest.json`, generating it with the
`bench/reference/gen_data.py` when missing or stale, and the untimed page-cache warm-up read."""
import glob
import json
import os
import shutil
import subprocess
import time

from .config import die, log


# Generator arguments of the kv, kvskew and dim sets and the manifest field each must equal.
MANIFEST_FIELDS = {"--records": "records", "--keys": "keys", "--groups": "groups",
                   "--skew-percent": "skew_percent", "--hot-key": "hot_key"}


def data_files(d):
    return sorted(glob.glob(os.path.join(d, "part-*")))


def manifest_matches(d, gen_args):
    """The manifest in d exists, was made with gen_args, and the files it lists are intact."""
    mpath = os.path.join(d, "_manifest.json")
    try:
        with open(mpath) as f:
            man = json.load(f)
    except (OSError, ValueError):
        return None, "no readable _manifest.json"
    a = dict(zip(gen_args[1::2], gen_args[2::2]))
    kind = gen_args[0]
    files, seed = int(a["--files"]), int(a["--seed"])
    if man.get("kind") != kind or man.get("files") != files or man.get("seed") != seed:
        return None, f"manifest is for {man.get('kind')} files={man.get('files')} seed={man.get('seed')}"
    if kind == "text":
        want = int(a["--bytes"])
        per = want // files
        # each file is closed after the first line reaching per bytes (lines are <= 121 bytes)
        if not (per * files <= man.get("bytes", -1) < per * files + files * 128):
            return None, f"manifest bytes {man.get('bytes')} do not match --bytes {want}"
    else:
        # kv, kvskew, dim: every numeric generator argument given is a manifest field
        for flag, field in MANIFEST_FIELDS.items():
            if flag in a and man.get(field) != int(a[flag]):
                return None, f"manifest is for {field}={man.get(field)}, not {flag} {a[flag]}"
    listed = {pf["file"]: pf["bytes"] for pf in man.get("per_file", [])}
    present = {os.path.basename(p): os.path.getsize(p) for p in data_files(d)}
    if listed != present:
        return None, "data files do not match the manifest's per_file list (sizes or names)"
    return man, "ok"


def ensure_dataset(reference, data_root, name, gen_args, python):
    d = os.path.join(data_root, name)
    man, why = manifest_matches(d, gen_args)
    if man is not None:
        log(f"data: {d} present ({man['bytes'] / 2**20:.1f} MiB, manifest matches)")
        return d, man
    if os.path.exists(d):
        # only ever delete something that looks like one of our data sets
        stray = [x for x in os.listdir(d) if not (x.startswith("part-") or x.startswith("_"))]
        if stray:
            die(f"{d} exists, does not match ({why}) and holds non-data files {stray[:5]}; "
                f"move it away or pick another --data")
        log(f"data: {d} does not match ({why}); regenerating")
        shutil.rmtree(d)
    cmd = [python, os.path.join(reference, "gen_data.py")] + gen_args + ["--out", d, "--jobs", "2"]
    log(f"data: generating {d}: {' '.join(cmd)}")
    t0 = time.time()
    r = subprocess.run(cmd)
    if r.returncode != 0:
        die(f"gen_data.py failed with exit status {r.returncode}")
    man, why = manifest_matches(d, gen_args)
    if man is None:
        die(f"generated {d} but its manifest does not check out: {why}")
    log(f"data: generated {d} in {time.time() - t0:.0f} s")
    return d, man


def warm_up(d, done):
    """One untimed read of the input so every engine starts with it in the page cache."""
    if d in done:
        return
    files = data_files(d)
    t0 = time.time()
    subprocess.run(["cat"] + files, stdout=subprocess.DEVNULL, check=False)
    done.add(d)
    log(f"warm-up: read {d} ({len(files)} files) in {time.time() - t0:.1f} s")
