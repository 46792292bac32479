#!/usr/bin/env python3
"""The web UI in a real headless browser (chromium + chromedriver through selenium).

Starts a driver (`--ui-port 0`) and an executor on loopback from the workspace's debug
binaries, runs `examples/wordcount` on data/sample-text against them, then opens the
jobs page, follows the link to the job, from there to its map stage, and opens the
executors page, checking that each page shows the numbers the REST API gives (which
tests/cluster_ui.rs checks against the job itself); the stage's summary quantiles
against the task list, and the operators in the DAG's stage boxes. Then runs
`examples/cache` holding its context open and opens the Storage page (its cached RDD,
every partition) and the Environment page (the driver's flags, the session's
configuration, no secret). The driver has an operator secret
(`--operator-secret-file`): the API calls and the browser (every request, through the
DevTools protocol) carry it as a bearer token, and a request without it must get 401.
Saves a screenshot of every page in --out. Every process and temporary directory is removed at the end, also on failure.

    cargo build -p ember-driver -p ember-executor && cargo build -p ember --example wordcount --example cache
    python3 ui/tests/browser.py --out target/ui-screenshots
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.by import By

REPO = Path(__file__).resolve().parents[2]


def first_line(proc, prefix, timeout=30):
    """The first stdout line of `proc` starting with `prefix`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line.strip()
    raise SystemExit(f"no line starting with {prefix!r}")


OPERATOR = os.urandom(32).hex()


def api(ui, path, secret=OPERATOR):
    req = urllib.request.Request(f"{ui}{path}")
    if secret is not None:
        req.add_header("Authorization", f"Bearer {secret}")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def check_summary(browser, tasks):
    """The stage page's summary row of records in: the nearest-rank quantiles of the
    successful tasks' records, computed here from the task list."""
    done = sorted(t["metrics"]["records_in"] for t in tasks if t["status"] == "succeeded")
    assert f"Summary metrics for {len(done)} completed tasks" in browser.page_source
    want = [str(done[min(int(q * len(done)), len(done) - 1)]) for q in (0, 0.25, 0.5, 0.75, 1)]
    row = browser.find_element(By.XPATH, "//table[@class='summary']//tr[td[1]='Records in']")
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")][1:]
    assert cells == want, (cells, want)


def check_storage(browser, ui):
    """The Storage page lists the cached RDD with every partition cached, as the API."""
    deadline = time.monotonic() + 10
    while True:
        rdds = api(ui, "/api/v1/storage/rdd")
        if rdds and rdds[0]["partitions_cached"] == rdds[0]["num_partitions"] == 3:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"the cached RDD never showed: {rdds}")
        time.sleep(0.1)
    assert rdds[0]["memory_bytes"] > 0 and rdds[0]["storage_level"] == "memory", rdds
    browser.find_element(By.LINK_TEXT, "Storage").click()
    row = browser.find_elements(By.CSS_SELECTOR, "table.storage tr")[1]
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    assert cells[0] == str(rdds[0]["rdd_id"]) and cells[3] == "3 / 3" and cells[4] == "100%", cells


def check_environment(browser, ui, operator_file, holder):
    """The driver's flags (its secret file redacted) and the session's configuration;
    the operator secret nowhere in the page."""
    browser.find_element(By.LINK_TEXT, "Environment").click()
    rows = {}
    for tr in browser.find_elements(By.CSS_SELECTOR, "table.environment tr"):
        cells = [c.text for c in tr.find_elements(By.TAG_NAME, "td")]
        if cells:
            rows.setdefault(cells[0], cells[1])
    assert rows["--ui-port"] == "0" and rows["--host"] == "127.0.0.1", rows
    assert rows["--operator-secret-file"] == "*********(redacted)", rows
    assert rows["EMBER_MASTER"].startswith("http://127.0.0.1:"), rows
    assert OPERATOR not in browser.page_source and str(operator_file) not in browser.page_source
    sections = api(ui, "/api/v1/environment")["sections"]
    assert [s["title"] for s in sections][:1] == ["Driver flags"], sections


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for the screenshots")
    ap.add_argument("--bin", type=Path, default=REPO / "target/debug")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for b in ["ember-driver", "ember-executor", "examples/wordcount", "examples/cache"]:
        if not (a.bin / b).exists():
            raise SystemExit(f"{a.bin / b} is missing: cargo build -p ember-driver -p ember-executor && cargo build -p ember --example wordcount --example cache")
    scratch = Path(tempfile.mkdtemp(prefix="ember-ui-browser-"))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EMBER_SECRET") and k != "EMBER_OPERATOR_SECRET_FILE"}
    env["EMBER_LOG"] = "warn"
    operator_file = scratch / "operator-secret"
    operator_file.write_text(OPERATOR)
    operator_file.chmod(0o600)
    procs = []
    browser = None
    try:
        driver = subprocess.Popen(
            [str(a.bin / "ember-driver"), "--host", "127.0.0.1", "--port", "0", "--ui-port", "0",
             "--binary-dir", str(scratch / "binaries"),
             "--operator-secret-file", str(operator_file)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        procs.append(driver)
        grpc = first_line(driver, "ember-driver listening on ").split()[-1]
        ui = first_line(driver, "ember-driver ui on ").split()[-1]
        executor = subprocess.Popen(
            [str(a.bin / "ember-executor"), "--driver", grpc, "--cores", "2", "--memory", "512m",
             "--shuffle-port", "0", "--work-dir", str(scratch / "executor")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        procs.append(executor)
        try:
            api(ui, "/api/v1/jobs", secret=None)
            raise SystemExit("the UI answered a request without the operator secret")
        except urllib.error.HTTPError as e:
            assert e.code == 401, e
        deadline = time.monotonic() + 30
        while not api(ui, "/api/v1/executors"):
            if time.monotonic() > deadline:
                raise SystemExit("the executor did not register")
            time.sleep(0.1)
        subprocess.run(
            [str(a.bin / "examples/wordcount"), "--master", grpc, "--partitions", "3",
             str(REPO / "data/sample-text"), str(scratch / "out")],
            check=True, env=env, timeout=120, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while api(ui, "/api/v1/jobs")[0]["status"] != "succeeded":
            if time.monotonic() > deadline:
                raise SystemExit("the job never showed as succeeded")
            time.sleep(0.1)
        job = api(ui, "/api/v1/jobs")[0]
        stages = api(ui, f"/api/v1/jobs/{job['job_id']}/stages")
        map_stage = stages[0]
        tasks = api(ui, f"/api/v1/stages/{map_stage['stage_id']}/tasks")
        # The client's first job and stage are numbered 0 in its application, as Spark
        # numbers them per SparkContext (the driver's own ids address the pages).
        assert (job["number"], map_stage["number"]) == (0, 0), (job, map_stage)
        assert job["application"].startswith("wordcount #"), job

        opts = webdriver.ChromeOptions()
        opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                    f"--user-data-dir={scratch / 'chromium'}"]:
            opts.add_argument(arg)
        service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
        browser = webdriver.Chrome(options=opts, service=service)
        browser.set_page_load_timeout(30)
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd("Network.setExtraHTTPHeaders",
                                {"headers": {"Authorization": f"Bearer {OPERATOR}"}})

        browser.get(f"{ui}/jobs")
        assert "Succeeded jobs (1)" in browser.page_source, browser.page_source
        assert job["description"] in browser.find_element(By.TAG_NAME, "body").text
        # The event timeline: the executor's registration and the job's bar.
        executor_id = api(ui, "/api/v1/executors")[0]["executor_id"]
        added = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "svg.events g.executor-added text")]
        assert added == [f"executor {executor_id} added"], added
        assert len(browser.find_elements(By.CSS_SELECTOR, "svg.events g.job rect")) == 1
        assert browser.find_elements(By.CSS_SELECTOR, "svg.events text.tick"), "a time axis"
        browser.save_screenshot(str(a.out / "1-jobs.png"))

        # Addresses carry the application (its id, one path segment) and its own
        # numbers: the number a link shows is the number in the address it leads to.
        app = f"/apps/{urllib.parse.quote(job['application'], safe='')}"
        assert api(ui, "/api/v1/apps") == [{"id": job["application"], "jobs": 1}]
        assert job["application"] in browser.find_element(By.TAG_NAME, "body").text
        browser.find_element(By.CSS_SELECTOR, "table").find_element(By.LINK_TEXT, str(job["number"])).click()
        assert browser.current_url.endswith(f"{app}/jobs/{job['number']}"), browser.current_url
        heading = browser.find_element(By.TAG_NAME, "h1").text
        assert heading == f"Job {job['number']} of {job['application']}", heading
        boxes = browser.find_elements(By.CSS_SELECTOR, "svg.dag g.stage")
        assert len(boxes) == len(stages), "a DAG of stages"
        for box, stage in zip(boxes, stages):
            # Named by operator and call site, wrapped at words (not cut mid-word).
            assert "(shuffle" not in stage["name"], stage["name"]
            lines = [t.text for t in box.find_elements(By.TAG_NAME, "tspan")]
            label = " ".join(lines)
            if label.endswith("…"):  # too long for the box: two lines, then `…`
                flat = lambda t: t.replace(" ", "")  # a word wider than a line is cut
                assert flat(stage["name"]).startswith(flat(label[:-1])) and len(lines) == 2, (lines, stage["name"])
            else:
                assert label == stage["name"], (lines, stage["name"])
        rows = browser.find_elements(By.CSS_SELECTOR, "table tr")[1:]
        assert len(rows) == len(stages), (len(rows), len(stages))
        cells = [c.text for c in rows[0].find_elements(By.TAG_NAME, "td")]
        want = f"{map_stage['tasks_succeeded']} / 0 / 0 of {map_stage['num_tasks']}"
        assert cells[3] == want and cells[4] == str(map_stage["metrics"]["records_in"]), (cells, want)
        ops = browser.find_elements(By.CSS_SELECTOR, "svg.dag g.stage text.operator")
        want_ops = sum(len(s["operators"]) for s in stages)
        assert want_ops >= 2 and len(ops) == want_ops, (len(ops), want_ops)
        browser.save_screenshot(str(a.out / "2-job.png"))

        browser.find_element(By.CSS_SELECTOR, "table").find_element(By.LINK_TEXT, str(map_stage["number"])).click()
        assert browser.current_url.endswith(f"{app}/stages/{map_stage['number']}"), browser.current_url
        heading = browser.find_element(By.TAG_NAME, "h1").text
        assert heading == f"Stage {map_stage['number']} of {job['application']}", heading
        assert f"Tasks ({len(tasks)})" in browser.page_source
        # One bar per task attempt, over a labelled time axis.
        bars = browser.find_elements(By.CSS_SELECTOR, "svg.timeline rect.task")
        assert len(bars) == len(tasks) == map_stage["num_tasks"], (len(bars), len(tasks))
        ticks = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg.timeline text.tick")]
        assert len(ticks) >= 2 and ticks[0] == "0 ms", ticks
        task_rows = browser.find_elements(By.XPATH, "//h2[starts-with(., 'Tasks')]/following-sibling::table[1]//tr")[1:]
        assert len(task_rows) == len(tasks), (len(task_rows), len(tasks))
        check_summary(browser, tasks)
        browser.save_screenshot(str(a.out / "3-stage.png"))
        # The driver's ids (the JSON's) still lead to the page, by a redirect.
        browser.get(f"{ui}/stages/{map_stage['stage_id']}")
        assert browser.current_url.endswith(f"{app}/stages/{map_stage['number']}"), browser.current_url
        assert api(ui, f"{app.replace('/apps/', '/api/v1/apps/')}/stages/{map_stage['number']}/tasks") == tasks

        browser.find_element(By.LINK_TEXT, "Executors").click()
        body = browser.find_element(By.TAG_NAME, "body").text
        assert executor_id in body and "active" in body, body
        browser.save_screenshot(str(a.out / "4-executors.png"))

        holder = subprocess.Popen(
            [str(a.bin / "examples/cache"), "--master", grpc, "--partitions", "3",
             "--hold-until-stdin-closes", "1", str(REPO / "data/sample-text"), str(scratch / "cached")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        procs.append(holder)
        first_line(holder, "lines\t", timeout=120)
        check_storage(browser, ui)
        browser.save_screenshot(str(a.out / "5-storage.png"))
        check_environment(browser, ui, operator_file, holder)
        browser.save_screenshot(str(a.out / "6-environment.png"))
        holder.stdin.close()
        holder.wait(timeout=60)
        print(f"ui browser test: 6 pages checked, screenshots in {a.out}")
        return 0
    finally:
        if browser is not None:
            browser.quit()
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
