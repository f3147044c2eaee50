#!/usr/bin/env python3
"""tests/report/report_unit_test.py — llmtrain-report's reading and charting (tools/report/run_dir.py,
charts.py, page.py) on run dirs written here by hand, line by line as app/report/run_log.cpp and the trainer
write them: the expected figures are typed in below, not computed by the code under test.

  report_unit_test.py TOOLS_REPORT_DIR
"""
import json
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, sys.argv.pop(1))
import charts  # noqa: E402
import page  # noqa: E402
import run_dir  # noqa: E402

LOSSES = """step\tkind\tloss\tlr\tgrad_norm
1\ttrain\t5.5\t0.001\t2.5
2\ttrain\t5.25\t0.002\t2
2\tval\t5.375\t\t
3\ttrain\tnan\t0.002\tinf
4\ttrain\t4.75\t0.002\t1.5
4\thellaswag\t0.25\t\t
4\thellaswag_norm\t0.5\t\t
4\tval_web\t6.5\t\t
2\ttokens:web\t96\t\t
2\ttokens:code\t32\t\t
2\tval:web\t5.125\t\t
4\ttokens:web\t192\t\t
4\ttokens:code\t64\t\t
3\ttrain\t5\t0.002\t1.75
4\ttrain\t4.5\t0.002\t1.25
"""
LOG = """llmtrain: run 'x' in runs/x
batch: micro_batch_size 4 x grad_accum_steps 1 x dp 1 = global_batch_size 4 sequences = 64 tokens per step | 1e+05 FLOPs
memory (this rank): params 0.5 MiB, grads 0.5 MiB, optimizer 1.0 MiB, device total 2.0 MiB
start: from scratch (checkpoint.resume = "auto")
memory: peak RSS at start, after the init (MiB, VmHWM): rank 0 30.5, rank 1 31.5
step 2/4 | loss 5.2500 | lr 2.00e-03 | norm 2.000 | 12,345 tok/s | MFU 4.5% | 00:00:01 elapsed | ETA 00:00:01
step 2/4 | val loss 5.3750
step 3: loss nan, grad norm inf: not finite, no update (1 in a row, limit training.max_skipped_steps = 10)
checkpoint: step_2: training blocked 0.125 s; writers 0.50 s (slowest rank; 1.0 MiB in 1 part(s), 2 MiB/s), commit 0.01 s
resume: from runs/x/checkpoints/step_2 at step 2 (128 tokens seen)
step 4/4 | loss 4.5000 | lr 2.00e-03 | norm 1.250 | 23,456 tok/s | MFU 9.0% | 00:00:02 elapsed | ETA 00:00:00
peak device memory (MiB): rank 0 (stage 0) 2.50, rank 1 (stage 0) 3.25
"""
CONFIG = """[run]
name = "{name}"
run_dir = "runs/{name}"
max_steps = 4
[optimizer]
lr = {lr}
[model]
seq_len = 16
"""


def make_run(root, name, lr="0.002", losses=LOSSES, log=LOG):
    d = os.path.join(root, name)
    os.makedirs(d)
    for fname, text in (("losses.tsv", losses), ("log.txt", log), ("config.toml", CONFIG.format(name=name, lr=lr))):
        with open(os.path.join(d, fname), "w") as f:
            f.write(text)
    return d


class ReadRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run = run_dir.read_run(make_run(self.tmp.name, "x"))

    def tearDown(self):
        self.tmp.cleanup()

    def test_losses_later_line_wins_and_non_finite_left_out(self):
        self.assertEqual(self.run["train"], [(1, 5.5), (2, 5.25), (3, 5.0), (4, 4.5)])
        self.assertEqual(self.run["lr"], [(1, 0.001), (2, 0.002), (3, 0.002), (4, 0.002)])
        self.assertEqual(self.run["grad_norm"], [(1, 2.5), (2, 2.0), (3, 1.75), (4, 1.25)])
        self.assertEqual(self.run["val"], [(2, 5.375)])
        self.assertEqual(self.run["evals"], {"hellaswag": [(4, 0.25)], "hellaswag_norm": [(4, 0.5)],
                                             "val_web": [(4, 6.5)], "val:web": [(2, 5.125)],
                                             "tokens:web": [(2, 96.0), (4, 192.0)],
                                             "tokens:code": [(2, 32.0), (4, 64.0)]})

    def test_log_figures(self):
        r = self.run
        self.assertEqual(r["name"], "x")
        self.assertEqual(r["tokens_per_step"], 64)
        self.assertEqual(r["throughput"], [(2, 12345.0), (4, 23456.0)])
        self.assertEqual(r["mfu"], [(2, 0.045), (4, 0.09)])
        self.assertEqual(r["checkpoints"], [(2, 0.125, 0.5)])
        self.assertEqual(r["skipped"], [3])
        self.assertEqual([(k, s) for k, s, _ in r["starts"]], [("start", 0), ("resume", 2)])
        self.assertEqual(r["memory"], [("params", 0.5), ("grads", 0.5), ("optimizer", 1.0), ("device total", 2.0)])
        self.assertEqual(r["peak_device"], {0: 2.5, 1: 3.25})
        self.assertEqual(r["peak_rss"][-1][1], {0: 30.5, 1: 31.5})

    def test_charts(self):
        cs = {c["id"]: c for c in charts.build_charts([self.run])}
        self.assertEqual(list(cs), ["loss_step", "loss_tokens", "val_sources", "tokens_sources", "lr", "grad_norm",
                                    "throughput", "mfu", "hellaswag", "eval_val_web", "checkpoint_blocked"])
        # A mixture's sources: one run, a color each, sorted by name.
        self.assertEqual([s["label"] for s in cs["tokens_sources"]["series"]], ["code", "web"])
        self.assertEqual(cs["tokens_sources"]["data"], [[2, 4], [32.0, 64.0], [96.0, 192.0]])
        self.assertEqual(cs["val_sources"]["data"], [[2], [5.125]])
        # One run: labels without the run's name; aligned columns with None where a series has no point.
        self.assertEqual([s["label"] for s in cs["loss_step"]["series"]], ["train", "val"])
        self.assertEqual(cs["loss_tokens"]["data"], [[64, 128, 192, 256], [5.5, 5.25, 5.0, 4.5],
                                                     [None, 5.375, None, None]])
        self.assertEqual(cs["mfu"]["data"], [[2, 4], [4.5, 9.0]])
        self.assertEqual(cs["hellaswag"]["data"], [[4], [25.0], [50.0]])
        self.assertEqual(sorted((m["x"], m["kind"]) for m in cs["lr"]["markers"]), [(2, "restart"), (3, "skipped")])
        self.assertEqual(cs["checkpoint_blocked"]["data"], [[2], [0.125], [0.5]])

    def test_summary_and_memory(self):
        (row,) = charts.summary_rows([self.run])
        self.assertEqual((row["steps"], row["tokens"], row["final train loss"], row["best val loss"]),
                         (4, 256, 4.5, 5.375))
        self.assertEqual((row["starts"], row["resumed at"], row["skipped steps"], row["max blocked (s)"]),
                         (2, "2", 1, 0.125))
        (mem,) = charts.memory_rows([self.run])
        self.assertEqual((mem["params (MiB)"], mem["peak device (MiB)"], mem["peak RSS (MiB)"]), (0.5, 3.25, 31.5))


class Thin(unittest.TestCase):
    def test_long_series_become_bucket_means(self):
        pts = [(s, float(s % 3)) for s in range(1, 10)]  # y: 1 2 0 1 2 0 1 2 0
        self.assertEqual(charts.thin(pts, 3), [(2.0, 1.0), (5.0, 1.0), (8.0, 1.0)])
        self.assertEqual(charts.thin(pts, 4), [(2.0, 1.0), (5.0, 1.0), (8.0, 1.0)])  # ceil(9 / 4) = 3 a bucket
        self.assertEqual(charts.thin(pts, 9), pts)
        self.assertEqual(charts.thin(pts[:7], 3), [(2.0, 1.0), (5.0, 1.0), (7.0, 1.0)])  # a short last bucket

    def test_chart_says_it_thinned(self):
        run = {"name": "x", "train": [(s, 1.0) for s in range(1, 2 * charts.MAX_POINTS + 2)], "val": [],
               "tokens_per_step": None, "lr": [], "grad_norm": [], "throughput": [], "mfu": [], "evals": {},
               "checkpoints": [], "skipped": [], "starts": []}
        loss = charts.build_charts([run])[0]
        self.assertEqual(loss["title"], "Loss by step (means of 3 points)")
        self.assertEqual(len(loss["data"][0]), -(-(2 * charts.MAX_POINTS + 1) // 3))


class SeveralRuns(unittest.TestCase):
    def test_config_differences_and_overlay(self):
        with tempfile.TemporaryDirectory() as tmp:
            a = run_dir.read_run(make_run(tmp, "a", lr="0.001"))
            b = run_dir.read_run(make_run(tmp, "b", lr="0.003"))
        # run.run_dir differs too but says nothing about the training.
        self.assertEqual(charts.config_differences([a, b]), [("optimizer.lr", [0.001, 0.003]), ("run.name", ["a", "b"])])
        loss = charts.build_charts([a, b])[0]
        self.assertEqual([s["label"] for s in loss["series"]], ["a train", "a val", "b train", "b val"])
        self.assertEqual(len({s["color"] for s in loss["series"]}), 2)
        # Several runs: the sources in the run's color, a dash pattern each.
        tok = next(c for c in charts.build_charts([a, b]) if c["id"] == "tokens_sources")
        self.assertEqual([(s["label"], s["color"], s["dash"]) for s in tok["series"]],
                         [("a code", charts.PALETTE[0], None), ("a web", charts.PALETTE[0], charts.SOURCE_DASH[1]),
                          ("b code", charts.PALETTE[1], None), ("b web", charts.PALETTE[1], charts.SOURCE_DASH[1])])

    def test_page_is_self_contained_and_script_safe(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = run_dir.read_run(make_run(tmp, "x"))
        run["name"] = "</script><b>x"
        text = page.render([run], "t")
        self.assertNotRegex(text, r"(src|href)=")  # nothing loaded from elsewhere
        self.assertEqual(text.count("</script>"), 3)  # the data, uPlot, report.js: the name cannot end one
        data = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)[1]
        self.assertEqual(json.loads(data)["charts"][0]["series"][0]["label"], "train")


class Errors(unittest.TestCase):
    def check_error(self, losses, pattern):
        with tempfile.TemporaryDirectory() as tmp:
            d = make_run(tmp, "x", losses=losses)
            with self.assertRaisesRegex(run_dir.RunDirError, pattern):
                run_dir.read_run(d)

    def test_bad_losses_name_file_and_line(self):
        self.check_error("step\tkind\tloss\tlr\tgrad_norm\n1\ttrain\t5\t0.1\t1\n2\ttrain\tfive\t0.1\t1\n",
                         r"losses\.tsv:3: 'five' is not a number")
        self.check_error("1\ttrain\t5\t0.1\t1\n", r"losses\.tsv:1: expected the header")
        self.check_error("step\tkind\tloss\tlr\tgrad_norm\n1.5\ttrain\t5\t0.1\t1\n", r"losses\.tsv:2: step '1.5'")

    def test_not_a_run_dir(self):
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaisesRegex(run_dir.RunDirError, "no losses.tsv"):
                run_dir.read_run(tmp)


if __name__ == "__main__":
    unittest.main(verbosity=1)
