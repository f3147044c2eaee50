#!/usr/bin/env python3
"""tests/report/grafana_test.py — the Grafana dashboard (tools/grafana/llmtrain.json) against a real
Prometheus scraping real runs: every panel's PromQL query returns data.

  grafana_test.py LLMTRAIN TINY_DATA_DIR DASHBOARD_JSON WORK_DIR MPIEXEC [PROMETHEUS]

1. The JSON is a dashboard Grafana imports as is: unique panel ids, a grid position each, every query
   on the ${datasource} variable, the variables job and run defined.
2. llmtrain trains tests/app's tiny data twice: on 2 ranks (mpirun: per-rank step times, 2 scrape
   targets) with HellaSwag, and on 1 rank on a mixture of two sources (the same file; one with its own
   val loss); both with val loss and checkpoints every few hundred steps, each rank serving its metrics
   on an OS-picked port; Debian's prometheus scrapes the 3 targets every second.
3. Each panel query, with Grafana's variables put in ($job, $run: all; $__rate_interval: 5s), is asked
   of Prometheus's HTTP API until it answers at least one finite sample (90 s at most); so are the
   variables' label_values queries. Then SIGTERM stops both runs.
Every process started here is stopped by its pid. Exit 0 passed, 1 failed (the message says which query).
"""
import atexit
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

LLMTRAIN, DATA, DASHBOARD, WORK, MPIEXEC = sys.argv[1:6]
PROMETHEUS = sys.argv[6] if len(sys.argv) > 6 else "/usr/bin/prometheus"
VARIABLES = {"$__rate_interval": "5s", "$job": ".*", "$run": ".*"}
procs = []


def fail(msg):
    stop_all()
    print(f"FAIL: {msg}")
    for name in ("grafanatest.log", "grafanamix.log", "prom.log"):
        path = os.path.join(WORK, name)
        if os.path.exists(path):
            print(f"--- tail of {path}")
            print("".join(open(path, errors="replace").readlines()[-15:]), end="")
    sys.exit(1)


def stop(p):
    """SIGTERM to p (and, for mpirun, its ranks through it), SIGKILL after 15 s; returns the exit status."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return p.returncode


def stop_all():
    for p in reversed(procs):
        stop(p)


atexit.register(stop_all)  # also when this script itself fails


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# 1. The dashboard's shape.
dash = json.load(open(DASHBOARD))
panels = [p for p in dash["panels"] if p["type"] != "row"]
ids = [p["id"] for p in dash["panels"]]
if len(ids) != len(set(ids)):
    fail(f"panel ids repeat: {ids}")
variables = {v["name"]: v for v in dash["templating"]["list"]}
if sorted(variables) != ["datasource", "job", "run"] or variables["datasource"]["query"] != "prometheus":
    fail(f"variables {sorted(variables)}, expected datasource (prometheus), job, run")
queries = []  # (panel title, expr)
for p in panels:
    if not {"x", "y", "w", "h"} <= set(p.get("gridPos", {})):
        fail(f"panel '{p['title']}' has no complete gridPos")
    if not p.get("targets"):
        fail(f"panel '{p['title']}' has no query")
    for t in p["targets"]:
        if p["datasource"]["uid"] != "${datasource}" or t["datasource"]["uid"] != "${datasource}":
            fail(f"panel '{p['title']}' does not query the ${{datasource}} variable")
        queries.append((p["title"], t["expr"]))
for name in ("job", "run"):
    queries.append((f"variable {name}", variables[name]["query"]["query"]))
print(f"dashboard: {len(panels)} panels, {len(queries)} queries")

# 2. Two runs, scraped by prometheus: "grafanatest" on 2 ranks with HellaSwag, "grafanamix" on one rank
# on a mixture (one data.train and HellaSwag's tokenizer come from it: no mixture there).
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
with open(os.path.join(WORK, "items.txt"), "w") as f:
    f.write("\n".join(["the cat", "0", "sat", "fox", "river", "over", "a big", "1", "dog", "tree", "the", "sun"]) + "\n")
vocab = open(os.path.join(DATA, "vocab_size.txt")).read().strip()
ONE_FILE = f"""[data]
train = "{DATA}/train.h5"
val = "{DATA}/val.h5"
hellaswag = "{WORK}/items.txt"
"""
MIXTURE = f"""[data]
val = "{DATA}/val.h5"
[[data.sources]]
name = "x"
path = "{DATA}/train.h5"
weight = 0.75
val = "{DATA}/val.h5"
[[data.sources]]
name = "y"
path = "{DATA}/train.h5"
weight = 0.25
"""
env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def start_run(name, ranks, data, hellaswag_interval):
    """Starts llmtrain (under mpirun when ranks > 1) training "forever"; returns (process, metrics ports)."""
    with open(os.path.join(WORK, f"{name}.toml"), "w") as f:
        f.write(f"""[run]
name = "{name}"
run_dir = "{WORK}/{name}"
backend = "cpu"
max_steps = 100000000
log_interval = 50
eval_interval = 300
eval_steps = 2
eval_hellaswag_interval = {hellaswag_interval}
sample_interval = 0
[model]
n_layer = 2
n_head = 2
n_embd = 32
seq_len = 16
vocab_size = {vocab}
[training]
micro_batch_size = 2
[lr_schedule]
warmup_steps = 10
decay = "constant"
[checkpoint]
interval = 1000
keep_last = 1
[metrics]
listen = "127.0.0.1:0"
{data}""")
    log_path = os.path.join(WORK, f"{name}.log")
    argv = [LLMTRAIN, "--config", f"{WORK}/{name}.toml"]
    if ranks > 1:
        argv = [MPIEXEC, "--oversubscribe", "-np", str(ranks)] + argv
    p = subprocess.Popen(argv, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, env=env)
    procs.append(p)
    deadline = time.monotonic() + 60
    while True:
        ports = re.findall(r"^metrics(?: \(rank \d+\))?: listening on http://127\.0\.0\.1:(\d+)/metrics$",
                           open(log_path, errors="replace").read(), re.M)
        if len(ports) == ranks:
            return p, ports
        if time.monotonic() > deadline or p.poll() is not None:
            fail(f"run {name} did not say where its {ranks} ranks listen within 60 s (exit {p.poll()})")
        time.sleep(0.2)


train, ports = start_run("grafanatest", 2, ONE_FILE, 300)
mix, mix_ports = start_run("grafanamix", 1, MIXTURE, 0)
ports += mix_ports
prom_port = free_port()
with open(os.path.join(WORK, "prometheus.yml"), "w") as f:
    f.write(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: llmtrain
    static_configs:
      - targets: [{", ".join(f'"127.0.0.1:{p}"' for p in ports)}]
""")
if not os.access(PROMETHEUS, os.X_OK):
    fail(f"no prometheus server at {PROMETHEUS} (tools/setup.sh installs Debian's prometheus)")
prom = subprocess.Popen([PROMETHEUS, f"--config.file={WORK}/prometheus.yml", f"--storage.tsdb.path={WORK}/tsdb",
                         f"--web.listen-address=127.0.0.1:{prom_port}"],
                        stdout=open(os.path.join(WORK, "prom.log"), "w"), stderr=subprocess.STDOUT)
procs.append(prom)


def query(expr):
    """Prometheus's instant answer to expr: the list of samples (empty when it has none yet)."""
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            answer = json.load(r)
    except OSError:
        return []  # not up yet
    if answer["status"] != "success":
        fail(f"prometheus refused {expr!r}: {answer}")
    return answer["data"]["result"]


def label_values(expr):
    """Grafana's label_values(selector, label) as Prometheus's series API answers it: the values."""
    selector, label = re.fullmatch(r"label_values\((.*), (\w+)\)", expr).groups()
    url = f"http://127.0.0.1:{prom_port}/api/v1/series?" + urllib.parse.urlencode({"match[]": selector})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return sorted({s[label] for s in json.load(r)["data"] if label in s})
    except OSError:
        return []


# 3. Every query until it answers.
pending = list(queries)
deadline = time.monotonic() + 90
while pending and time.monotonic() < deadline:
    for p in (train, mix):
        if p.poll() is not None:
            fail(f"a run exited ({p.returncode}) while the queries waited")
    if prom.poll() is not None:
        fail("prometheus exited")
    still = []
    for title, expr in pending:
        for k, v in VARIABLES.items():
            expr = expr.replace(k, v)
        if expr.startswith("label_values("):
            ok = bool(label_values(expr))
        else:
            ok = any(math.isfinite(float(s["value"][1])) for s in query(expr))
        if not ok:
            still.append((title, expr))
    pending = still
    time.sleep(1)
if pending:
    fail("no data within 90 s for: " + "; ".join(f"'{t}': {e}" for t, e in pending))
ranks = {s["metric"]["rank"] for s in query('llmtrain_step{run="grafanatest"}')}
if ranks != {"0", "1"}:
    fail(f"ranks {ranks} in prometheus, expected 0 and 1")
if label_values('label_values(llmtrain_step{job=~".*"}, run)') != ["grafanamix", "grafanatest"]:
    fail("the run variable does not list 'grafanamix' and 'grafanatest'")
stop(prom)
stop(train)  # mpirun forwards SIGTERM to the ranks and exits non-zero itself, maybe before their last lines
stop(mix)
if not re.search(r"^stopping after step \d+ on SIGTERM$", open(os.path.join(WORK, "grafanamix.log")).read(), re.M):
    fail("run grafanamix did not stop at a step on SIGTERM")
print(f"grafana_test: passed; {len(queries)} queries answered")
