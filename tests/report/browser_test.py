#!/usr/bin/env python3
"""tests/report/browser_test.py — llmtrain-report's page opened in a real browser (Debian's headless
Chromium) on two real llmtrain runs: every chart drew, with the right series and the runs' own numbers,
the console said nothing wrong, and the page asked for nothing but itself (no network at view time).

  browser_test.py LLMTRAIN TINY_DATA_DIR REPORT_TOOL WORK_DIR

The runs (tests/app's tiny data, 2 layers x 32 wide, 32 tokens per step): "a" 20 steps at lr 1e-2 on a
mixture of two sources (the same file at weights 0.75 and 0.25, each with its val loss);
"b" at lr 3e-3 with HellaSwag every 4 steps on two items, stopped at step 12 and resumed to 20. The
reference for every figure is the run dir itself, read here with the csv module, not by the tool.
The page, its PNG (the tool's --png) and the test's own screenshot stay in WORK_DIR as artifacts.
Exit 0 passed, 1 failed (the first failed check says why).
"""
import csv
import os
import shutil
import subprocess
import sys

LLMTRAIN, DATA, TOOL, WORK = sys.argv[1:5]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(TOOL))))
import chromium  # noqa: E402  (tools/report/chromium.py)

TOKENS_PER_STEP = 2 * 16  # micro_batch_size x seq_len


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


MIXTURE = """[[data.sources]]
name = "x"
path = "{DATA}/train.h5"
weight = 0.75
val = "{DATA}/val.h5"
[[data.sources]]
name = "y"
path = "{DATA}/train.h5"
weight = 0.25
val = "{DATA}/val.h5"
""".format(DATA=DATA)


def train(name, lr, max_steps, extra="", data=f'train = "{DATA}/train.h5"\n', mixture=""):
    """Runs llmtrain on the tiny data (or on the mixture's sources) into WORK/<name>; fails the test on a
    non-zero exit."""
    vocab = open(os.path.join(DATA, "vocab_size.txt")).read().strip()
    cfg = os.path.join(WORK, f"{name}.toml")
    with open(cfg, "w") as f:
        f.write(f"""[run]
name = "{name}"
run_dir = "{WORK}/{name}"
backend = "cpu"
max_steps = {max_steps}
log_interval = 2
eval_interval = 5
eval_steps = 2
sample_interval = 0
{extra}
[model]
n_layer = 2
n_head = 2
n_embd = 32
seq_len = 16
vocab_size = {vocab}
[data]
{data}val = "{DATA}/val.h5"
hellaswag = "{WORK}/items.txt"
[training]
micro_batch_size = 2
[optimizer]
lr = {lr}
[lr_schedule]
warmup_steps = 2
min_lr = 1e-3
[checkpoint]
interval = 10
[metrics]
enabled = false
{mixture}""")
    p = subprocess.run([LLMTRAIN, "--config", cfg], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    check(p.returncode == 0, f"llmtrain {name} exited {p.returncode}: {p.stderr[-2000:]}")


def tsv(run, kind):
    """{step: loss} of one kind from WORK/<run>/losses.tsv; a later line for a step wins."""
    with open(os.path.join(WORK, run, "losses.tsv")) as f:
        return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f, delimiter="\t") if r["kind"] == kind}


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
# Two HellaSwag items (context, label, four endings) in the tiny data's words, short for seq_len 16.
with open(os.path.join(WORK, "items.txt"), "w") as f:
    f.write("\n".join(["the cat", "0", "sat", "fox", "river", "over", "a big", "1", "dog", "tree", "the", "sun"]) + "\n")
train("a", "1e-2", 20, mixture=MIXTURE, data="")
train("b", "3e-3", 12, "eval_hellaswag_interval = 4")
train("b", "3e-3", 20, "eval_hellaswag_interval = 4")
html_path, png_path = os.path.join(WORK, "report.html"), os.path.join(WORK, "report.png")
p = subprocess.run([sys.executable, TOOL, f"{WORK}/a", f"{WORK}/b", "-o", html_path, "--png", png_path],
                   capture_output=True, text=True, timeout=150)
check(p.returncode == 0, f"llmtrain-report exited {p.returncode}: {p.stdout}{p.stderr}")
check(os.path.getsize(png_path) > 20000, f"{png_path}: {os.path.getsize(png_path)} bytes, expected a full page")

# What each chart must show: its series (label -> (run, losses.tsv kind or log figure)).
expected = {
    "loss_step": ["a train", "a val", "b train", "b val"],
    "loss_tokens": ["a train", "a val", "b train", "b val"],
    "val_sources": ["a x", "a y"], "tokens_sources": ["a x", "a y"],  # run b has one file, no sources
    "lr": ["a", "b"], "grad_norm": ["a", "b"], "throughput": ["a", "b"], "mfu": ["a", "b"],
    "hellaswag": ["b acc", "b acc_norm"],  # run a has no HellaSwag
    "checkpoint_blocked": ["a blocked", "b blocked", "a write (slowest rank)", "b write (slowest rank)"],
}
# Pixels of a series' color in its chart's plotting area (within 60 of its RGB, no grid or text is near).
PIXELS = """(() => {
  const out = {};
  for (const [id, u] of Object.entries(window.llmtrainReport.plots)) {
    const b = u.bbox, ctx = u.ctx, img = ctx.getImageData(b.left, b.top, b.width, b.height).data;
    const rgb = (c) => [1, 3, 5].map(i => parseInt(c.slice(i, i + 2), 16));
    out[id] = {labels: u.series.slice(1).map(s => s.label), n: u.data.length - 1,
               points: u.series.slice(1).map((s, i) => u.data[i + 1].filter(v => v != null).length),
               x: Array.from(u.data[0]), data: u.data.slice(1).map(a => Array.from(a)), colors: {}};
    for (const s of window.llmtrainReport.spec.find(c => c.id === id).series) {
      const [r, g, bl] = rgb(s.color);
      let n = 0;
      for (let k = 0; k < img.length; k += 4)
        if (img[k + 3] > 200 && Math.abs(img[k] - r) + Math.abs(img[k + 1] - g) + Math.abs(img[k + 2] - bl) < 60) n++;
      out[id].colors[s.color] = n;
    }
  }
  return out;
})()"""
with chromium.Chromium(width=1280, height=900) as c:
    c.open(html_path)
    drawn = c.evaluate(PIXELS)
    text = c.evaluate("document.body.innerText")
    problems = c.console_problems()
    urls = c.requested_urls()
    c.screenshot(os.path.join(WORK, "browser_test.png"))
check(not problems, f"the console reported: {problems}")
check(urls == ["file://" + os.path.abspath(html_path)], f"the page requested more than itself: {urls}")
check(sorted(drawn) == sorted(expected), f"charts {sorted(drawn)}, expected {sorted(expected)}")
for cid, labels in expected.items():
    d = drawn[cid]
    check(d["labels"] == labels, f"{cid}: series {d['labels']}, expected {labels}")
    check(d["n"] == len(labels), f"{cid}: {d['n']} data columns for {len(labels)} series")
    check(all(n > 0 for n in d["points"]), f"{cid}: a series without points: {d['points']}")
    for color, n in d["colors"].items():
        check(n >= 20, f"{cid}: only {n} pixels of {color} in the plotting area: a series did not draw")

# The numbers behind the curves are the run dirs' own: train and val loss by step and by tokens.
for run in ("a", "b"):
    for kind in ("train", "val"):
        ref = tsv(run, kind)
        col = expected["loss_step"].index(f"{run} {kind}")
        for cid, scale in (("loss_step", 1), ("loss_tokens", TOKENS_PER_STEP)):
            got = {int(x / scale): y for x, y in zip(drawn[cid]["x"], drawn[cid]["data"][col]) if y is not None}
            check(sorted(got) == sorted(ref), f"{cid} {run} {kind}: steps {sorted(got)}, losses.tsv {sorted(ref)}")
            bad = [s for s in ref if abs(got[s] - ref[s]) > 1e-6 * abs(ref[s])]
            check(not bad, f"{cid} {run} {kind}: steps {bad} differ from losses.tsv (rel. tolerance 1e-6)")
for src in ("x", "y"):
    for cid, kind in (("val_sources", f"val:{src}"), ("tokens_sources", f"tokens:{src}")):
        ref = tsv("a", kind)
        col = expected[cid].index(f"a {src}")
        got = {x: y for x, y in zip(drawn[cid]["x"], drawn[cid]["data"][col]) if y is not None}
        check(got == ref, f"{cid} a {src}: {got}, losses.tsv {kind} {ref}")
check(tsv("a", "tokens:x")[20] == 3 * tsv("a", "tokens:y")[20], "the mixture did not draw x:y as 3:1 by step 20")
hs = tsv("b", "hellaswag")
col = expected["hellaswag"].index("b acc")
got = {x: y for x, y in zip(drawn["hellaswag"]["x"], drawn["hellaswag"]["data"][col]) if y is not None}
check(got == {s: 100 * v for s, v in hs.items()}, f"hellaswag acc {got}, losses.tsv x 100 {hs}")
# The resume at step 12 and the config difference show in the page's text.
for needle in ("resume", "from " + f"{WORK}/b/checkpoints/step_12 at step 12", "optimizer.lr", "0.003",
               "run.eval_hellaswag_interval"):
    check(needle in text, f"the page's text lacks '{needle}'")
print(f"browser_test: passed; {len(drawn)} charts; artifacts in {WORK} (report.html, report.png, browser_test.png)")
