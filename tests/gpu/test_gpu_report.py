#!/usr/bin/env python3
"""tests/gpu/test_gpu_report.py — tools/gpu/gpu_report.py, the GPU acceptance suite's comparisons
and summary table, on sample logs (tests/gpu/samples: a run that shows the H100 baseline's
failures, in the formats llmtrain, gtest, offload_bench and llmtrain-plan print) and on losses.tsv
files written here. References are independent of the script: float32 bit patterns from struct,
means computed from the numbers the sample log was made of, ratios from the documented figures.

Usage: python3 test_gpu_report.py   (ctest gpu_report)
"""
import os
import random
import struct
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "gpu"))
import gpu_report  # noqa: E402

SAMPLES = os.path.join(HERE, "samples")


def f32(x):
    """x rounded to float32."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def next_f32(x):
    """The float32 after x (x > 0): one ulp up."""
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    return struct.unpack("<f", struct.pack("<I", bits + 1))[0]


def write_losses(path, train, val=()):
    """A losses.tsv as app/report/run_log.cpp writes it: %.9g of float32 values."""
    with open(path, "w") as f:
        f.write("step\tkind\tloss\tlr\tgrad_norm\n")
        for step, loss, norm in train:
            f.write(f"{step}\ttrain\t{f32(loss):.9g}\t{f32(6e-4):.9g}\t{f32(norm):.9g}\n")
        for step, loss in val:
            f.write(f"{step}\tval\t{f32(loss):.9g}\t\t\n")


class LossComparisons(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.ref = os.path.join(self.dir.name, "ref.tsv")
        self.rows = [(s, 10.0 - 0.25 * s, 14.266242 - 0.5 * s) for s in range(1, 21)]
        write_losses(self.ref, self.rows)

    def tearDown(self):
        self.dir.cleanup()

    def test_nine_digits_name_a_float32(self):
        # What makes text equality bitwise: %.9g of a float32 reads back to the same bits, and the
        # next float32 up prints differently (checked over random values of every magnitude).
        rng = random.Random(18)
        for _ in range(2000):
            x = f32(rng.uniform(1, 2) * 2.0 ** rng.randint(-30, 30))
            self.assertEqual(f32(float(f"{x:.9g}")), x)
            self.assertNotEqual(f"{x:.9g}", f"{next_f32(x):.9g}")

    def test_same(self):
        run = os.path.join(self.dir.name, "run.tsv")
        write_losses(run, self.rows)
        code, line = gpu_report.compare_train(self.ref, run, "determinism native")
        self.assertEqual(code, 0)
        self.assertEqual(line, "determinism native: SAME (steps 1-20: loss and grad norm bitwise)")

    def test_one_ulp_of_a_grad_norm_is_different(self):
        rows = list(self.rows)
        s, loss, norm = rows[13]
        rows[13] = (s, loss, next_f32(f32(norm)))
        run = os.path.join(self.dir.name, "run.tsv")
        write_losses(run, rows)
        code, line = gpu_report.compare_train(self.ref, run, "determinism cudnn")
        self.assertEqual(code, 1)
        self.assertTrue(line.startswith("determinism cudnn: DIFFERENT from step 14 "), line)
        # Outside the compared window the difference does not count.
        code, _ = gpu_report.compare_train(self.ref, run, "resume", first=15, last=20)
        self.assertEqual(code, 0)

    def test_resume_window_and_missing_steps(self):
        run = os.path.join(self.dir.name, "run.tsv")
        write_losses(run, self.rows[:15])  # a resumed run that stopped at step 15
        code, line = gpu_report.compare_train(self.ref, run, "resume tiny bf16 nearest", first=11, last=20)
        self.assertEqual(code, 2)
        self.assertIn("MISSING (step 16 not in", line)
        code, line = gpu_report.compare_train(self.ref, os.path.join(self.dir.name, "absent.tsv"), "x")
        self.assertEqual(code, 2)

    def test_train_tolerance_for_multirank_layouts(self):
        # --tol: each loss and grad norm within the relative tolerance; NaN and a missing step fail.
        rows = [(s, loss * (1 + 3e-6), norm) for s, loss, norm in self.rows]
        run = os.path.join(self.dir.name, "run.tsv")
        write_losses(run, rows)
        code, line = gpu_report.compare_train(self.ref, run, "multirank zero3 np2", tol=1e-5)
        self.assertEqual(code, 0, line)
        self.assertTrue(line.startswith("multirank zero3 np2: PASS (steps 1-20: loss and grad norm within "
                                        "relative 1e-05; largest "), line)
        code, line = gpu_report.compare_train(self.ref, run, "multirank zero3 np2", tol=1e-6)
        self.assertEqual(code, 1, line)
        self.assertIn("FAIL", line)
        rows[4] = (rows[4][0], rows[4][1], float("nan"))
        write_losses(run, rows)
        code, line = gpu_report.compare_train(self.ref, run, "multirank zero3 np2", tol=1e-5)
        self.assertEqual(code, 1, line)
        self.assertIn("largest inf at step 5", line)
        write_losses(run, rows[:10])
        code, line = gpu_report.compare_train(self.ref, run, "multirank zero3 np2", tol=1e-5)
        self.assertEqual(code, 2, line)
        # The summary table reads the check line: against the 1-rank run, or bitwise when compared so.
        rows = gpu_report.check_rows("multirank pp2 np2: PASS (x)\nmultirank offload np2: DIFFERENT from step 3")
        self.assertEqual([(r[0], r[2], r[4]) for r in rows], [("multirank pp2 np2", "the 1-rank CUDA run's", "PASS"),
                                                              ("multirank offload np2", "bitwise", "FAIL")])

    def test_val_tolerance(self):
        ref, run = os.path.join(self.dir.name, "cpu.tsv"), os.path.join(self.dir.name, "gpu.tsv")
        write_losses(ref, [], [(125, 5.0), (250, 4.5)])
        write_losses(run, [], [(125, 5.00005), (250, 4.5)])
        code, line = gpu_report.compare_val(run, "tiny fp32 GPU vs CPU", 1e-4, ref_path=ref)
        self.assertEqual(code, 0, line)
        code, line = gpu_report.compare_val(run, "tiny fp32 GPU vs CPU", 1e-5, ref_path=ref)
        self.assertEqual(code, 1, line)
        self.assertIn("FAIL", line)
        # Documented figures (4 decimals) in place of a reference run.
        code, line = gpu_report.compare_val(run, "doc", 1.5e-4, expect=[(125, 5.0001), (250, 4.5)])
        self.assertEqual(code, 0, line)
        code, line = gpu_report.compare_val(run, "doc", 1.5e-4, expect=[(125, 5.0), (500, 4.0)])
        self.assertEqual(code, 2, line)


class Bench(unittest.TestCase):
    # tests/gpu/samples/llmtrain-124m-cudnn.log was written from these tokens/s, steps 1-10.
    TOKS = [298012, 505000, 506000, 510000, 511000, 509000, 510500, 510200, 509800, 510300]

    def test_llmtrain_log(self):
        with open(os.path.join(SAMPLES, "llmtrain-124m-cudnn.log")) as f:
            line = gpu_report.llmtrain_bench_line("gpt2-124m-cudnn", f.read())
        r = gpu_report.parse_bench(line)["gpt2-124m-cudnn"]
        steady = sum(self.TOKS[3:]) / 7
        self.assertEqual(r["tok_s"], round(steady))
        self.assertAlmostEqual(r["first_x"], round(steady / self.TOKS[0], 2))
        self.assertEqual(r["peak_mib"], 14846)
        self.assertEqual(r["ckpt_s"], 4.83)
        self.assertEqual(r["steps"], 7)
        # MFU: the mean of the logged per-step figures (one decimal each), within their rounding.
        mfu = 100 * steady * (6 * 124439808 + 6 * 12 * 1024 * 768) / 989e12
        self.assertAlmostEqual(r["mfu"], mfu, delta=0.1)

    def test_log_without_steady_steps(self):
        line = gpu_report.llmtrain_bench_line("x", "step 1/3 | loss 1 | lr 1 | norm 1 | 5 tok/s | MFU 1.0% | a\n")
        self.assertEqual(gpu_report.parse_bench(line)["x"]["error"], "no steps after warm-up")

    def test_table_ratios(self):
        runs = gpu_report.read_bench([os.path.join(SAMPLES, "logs", "bench-gpt2-124m.txt")])
        table = "\n".join(gpu_report.bench_table(runs))
        # cudnn 510.4K against llm.c's 531.1K, PyTorch's 451.9K and 58d410c's 510.4K
        self.assertIn("| cudnn | 510.4K | 41.5% | 1.71x | 14,846 | 0.96x | 1.13x | 1.00x |", table)
        self.assertIn("| PyTorch compiled | 451.9K | 36.8% | - | 15,012 | 0.85x | - | - |", table)


class Llmc(unittest.TestCase):
    """llm.c's train_gpt2cu log (tests/gpu/samples/llmc-124m.log, in train_gpt2.cu's printf formats:
    its tok/s column is an exponential moving average, so each step's tokens/s comes from its ms)."""
    MS = [1278.53, 496.10, 494.02, 493.75, 493.41, 494.60, 493.12, 493.98, 494.25, 493.66]

    def test_llmc_log(self):
        with open(os.path.join(SAMPLES, "llmc-124m.log")) as f:
            line = gpu_report.llmc_bench_line("gpt2-124m-llmc", f.read(), build="own attention")
        r = gpu_report.parse_bench(line)["gpt2-124m-llmc"]
        per_step = [262144 / m * 1e3 for m in self.MS]
        steady = sum(per_step[3:]) / 7
        self.assertEqual(r["tok_s"], round(steady))
        self.assertAlmostEqual(r["first_x"], round(steady / per_step[0], 2))
        self.assertEqual(r["peak_mib"], 15196)  # "device memory usage: 15196 MiB / 81079 MiB"
        self.assertEqual(r["steps"], 7)
        self.assertEqual(r["build"], "own attention")
        # llm.c's own MFU (its device table: 989.4 TFLOP/s for an H100 SXM), the printed one-decimal means
        mfu = 100 * steady * (6 * 124475904 + 6 * 12 * 1024 * 768) / 989.4e12
        self.assertAlmostEqual(r["mfu"], mfu, delta=0.1)

    def test_llmc_that_did_not_start(self):
        line = gpu_report.llmc_bench_line("x-llmc", "Bad magic in the data file\n")
        self.assertIn("did not start", gpu_report.parse_bench(line)["x-llmc"]["error"])

    def rows(self, text):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "bench-all.txt"), "w") as f:
                f.write(text)
            return Summary.rows(None, d)

    def test_ratios_against_llmc_in_the_same_call(self):
        out, t = self.rows(
            "bench: label=gpt2-124m-native tok_s=480000 mfu=39.0 first_x=1.3 peak_mib=- ckpt_s=- steps=7\n"
            "bench: label=gpt2-124m-cudnn tok_s=515000 mfu=41.8 first_x=1.3 peak_mib=15519 ckpt_s=- steps=7\n"
            "bench: label=gpt2-124m-cudnn+fp8_tensorwise tok_s=540000 mfu=43.9 first_x=1.4 peak_mib=- ckpt_s=- steps=7\n"
            "bench: label=gpt2-124m-llmc tok_s=530000 mfu=43.1 first_x=2.59 peak_mib=15196 ckpt_s=- steps=7 "
            "build=\"own attention\"\n"
            "bench: label=gpt2-1.5b-cudnn tok_s=46000 mfu=45.6 first_x=1.3 peak_mib=- ckpt_s=- steps=7\n"
            "bench: label=gpt2-1.5b-cudnn+fp8_tensorwise tok_s=51000 mfu=50.6 first_x=1.3 peak_mib=- ckpt_s=- steps=7\n"
            "bench: label=gpt2-1.5b-llmc tok_s=50000 mfu=49.6 first_x=1.3 peak_mib=44552 ckpt_s=- steps=7\n")
        self.assertEqual(t["GPT-2 124M llm.c (own attention)"][1:],
                         ["530.0K (43.1% MFU, 15,196 MiB after allocation)", "llm.c documented 531.1K (H100)",
                          "1.00x documented", "info"])
        # every path against llm.c measured in this call (515/530, 480/530), not the documented 531.1K
        self.assertEqual(t["GPT-2 124M cudnn"][2:4], ["llm.c (this call) 530.0K", "0.97x llm.c"])
        self.assertEqual(t["GPT-2 124M native"][3], "0.91x llm.c")
        self.assertEqual(t["GPT-2 124M cudnn+fp8_tensorwise"][3], "1.02x llm.c")
        self.assertEqual(t["GPT-2 124M FP8 tensorwise over bf16 (cudnn)"][1:],
                         ["540.0K vs 515.0K", "", "1.05x", "info"])
        self.assertEqual(t["GPT-2 124M fastest path vs llm.c (this call)"][1:],
                         ["cudnn+fp8_tensorwise 540.0K", ">= 1.00x llm.c 530.0K", "1.02x", "PASS"])
        # 1.5B: FP8 over bf16 51/46 = 1.11 < 1.15; FP8 against llm.c 51/50 = 1.02 < 1.05
        self.assertEqual(t["GPT-2 1.5B FP8 tensorwise over bf16 (cudnn)"][3:], ["1.11x", "FAIL"])
        self.assertEqual(t["GPT-2 1.5B FP8 vs llm.c (this call)"][1:],
                         ["cudnn+fp8_tensorwise 51.0K", ">= 1.05x llm.c 50.0K", "1.02x", "FAIL"])
        self.assertEqual(t["GPT-2 1.5B llm.c"][4], "info")
        # llm.c is neither "the fastest path" nor the path whose first step is held to the target
        self.assertEqual(t["GPT-2 124M fastest path"][1], "cudnn+fp8_tensorwise 540.0K")
        self.assertIn("GPT-2 124M first step / steady (cudnn+fp8_tensorwise)", t)

    def test_llmc_not_in_the_bundle(self):
        out, t = self.rows(
            "bench: label=gpt2-124m-cudnn tok_s=515000 mfu=41.8 first_x=1.3 peak_mib=- ckpt_s=- steps=7\n"
            "bench: label=gpt2-124m-llmc error=\"not run: no llm.c in the bundle (tools/gpu/bundle.sh LLMC_SRC)\"\n"
            "bench: label=gpt2-1.5b-llmc error=\"llm.c has no train_gpt2cu and did not build here\"\n")
        self.assertEqual(t["GPT-2 124M llm.c"][4], "info")
        self.assertEqual(t["GPT-2 124M cudnn"][2:4], ["llm.c 531.1K", "0.97x llm.c"])  # the documented figure
        self.assertNotIn("GPT-2 124M fastest path vs llm.c (this call)", t)
        self.assertEqual(t["GPT-2 1.5B llm.c"][4], "FAIL")


class Summary(unittest.TestCase):
    def rows(self, logdir):
        out = gpu_report.summary(logdir)
        table = {}
        for line in out:
            cols = [c.strip() for c in line.strip("|").split("|")]
            if len(cols) == 5 and cols[0] not in ("check", "---"):
                table[cols[0]] = cols
        return out, table

    def test_baseline_sample(self):
        out, t = self.rows(os.path.join(SAMPLES, "logs"))
        self.assertEqual(t["test_cuda_gpu"][4], "FAIL")
        self.assertTrue(t["test_cuda_gpu"][1].startswith("75 passed, 5 failed: Cuda/OpsTest.Matmul/fp32_forward"))
        self.assertEqual(t["determinism native"][4], "PASS")
        self.assertEqual(t["determinism cudnn"][4], "FAIL")
        self.assertEqual(t["resume tiny bf16 nearest"][4], "PASS")
        self.assertEqual(t["resume tiny bf16 stochastic"][4], "FAIL")
        self.assertEqual(t["tiny fp32 GPU vs CPU"][4], "PASS")
        self.assertEqual(t["GPT-2 124M fastest path"][1:], ["cudnn 510.4K", ">= 560.0K (1.05x llm.c)", "0.91x target", "FAIL"])
        self.assertEqual(t["GPT-2 124M cublas"][4], "FAIL")  # 161.9K < 342K
        self.assertEqual(t["GPT-2 124M first step / steady (cudnn)"][1:], ["1.71x", "<= 1.5x", "", "FAIL"])
        self.assertEqual(t["GPT-2 1.5B first step / steady (cudnn)"][4], "PASS")
        self.assertIn("checkpoint 61.0 s", t["GPT-2 1.5B cudnn"][1])
        self.assertEqual(t["GPT-2 1.5B cublas"][4], "FAIL")
        self.assertEqual(t["offload_bench (cuda, bf16)"][1], "double-buffered 1.23x serial, wall / max(phase) 1.04")
        self.assertEqual(t["llmtrain-plan --profile (1.5B)"][4], "PASS")
        self.assertEqual(t["step checks/determinism-auto"][1], "timed out after 150 s")
        self.assertEqual(t["step bench1.5b/plan"][4], "FAIL")
        self.assertNotIn("step tests/test_cuda_gpu", t)  # ran to its end (exit 0)
        self.assertIn("6 passed, 11 failed, 0 missing (info rows have no target)", out)
        # Every step listed below the table, with its seconds (no box recorded in this older steps.tsv).
        self.assertIn("| checks/determinism-auto | - | 150 | timed out |", out)
        self.assertEqual(out[-1], "5 steps, 697 s in all")

    def test_targets_met(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "test_cuda_gpu.log"), "w") as f:
                f.write("[==========] 80 tests from 9 test suites ran. (1 ms total)\n[  PASSED  ] 80 tests.\n")
            with open(os.path.join(d, "bench-gpt2-124m.txt"), "w") as f:
                f.write("bench: label=gpt2-124m-cublas tok_s=350000 mfu=28.5 first_x=1.2 peak_mib=- ckpt_s=- steps=7\n"
                        "bench: label=gpt2-124m-auto tok_s=575000 mfu=46.8 first_x=1.3 peak_mib=- ckpt_s=- steps=7\n"
                        "bench: label=gpt2-124m-cudnn tok_s=570000 mfu=46.4 first_x=1.9 peak_mib=- ckpt_s=- steps=7\n")
            with open(os.path.join(d, "plan.txt"), "w") as f:
                f.write("llmtrain-plan: backend \"cuda\": this build has no CUDA backend (this executable was linked "
                        "without it); use backend = \"cpu\"\n")
            out, t = self.rows(d)
        self.assertEqual(t["test_cuda_gpu"][1:], ["80 passed, 0 failed", "all pass", "", "PASS"])
        self.assertEqual(t["GPT-2 124M fastest path"][4], "PASS")
        self.assertEqual(t["GPT-2 124M cublas"][4], "PASS")
        # The default path's first step is the one held to the target (auto, not the fastest cudnn).
        self.assertEqual(t["GPT-2 124M first step / steady (auto)"][4], "PASS")
        self.assertEqual(t["llmtrain-plan --profile (1.5B)"][4], "FAIL")  # the 58d410c failure
        self.assertEqual(out[-1], "4 passed, 1 failed, 0 missing (info rows have no target)")

    def test_quick_call(self):
        """run.sh quick's logs: test_cuda_gpu in two parts, attention_bench with errors against cuDNN,
        the paths' step-1 agreement, and every step with its box (an optional one not run: info)."""
        with tempfile.TemporaryDirectory() as d:
            def write(name, text):
                with open(os.path.join(d, name), "w") as f:
                    f.write(text)
            write("test_cuda_gpu-gpu.log", "[==========] 9 tests from 3 test suites ran. (1 ms total)\n"
                  "[  PASSED  ] 8 tests.\n[  FAILED  ] 1 test, listed below:\n"
                  "[  FAILED  ] Gpu/FlashGptShapes.MatchesCpuAndCudnn/HS128_T2048, where GetParam() = x\n")
            write("test_cuda_gpu-rest.log", "[==========] 70 tests from 9 test suites ran. (1 ms total)\n"
                  "[  PASSED  ] 70 tests.\n")
            write("test_cuda_gpu.log", "[ RUN      ] A.b\n[       OK ] A.b (5 ms)\n[ RUN      ] A.c\n"
                  "[  FAILED  ] A.c (7 ms)\n[ RUN      ] Gpu/D.e/f\n")  # killed at its box
            write("attention-124m.txt",
                  "native  B=32 T=1024 C=768 NH=12: forward    0.300 ms ( 171.0 TFLOP/s), backward    1.200 ms ( 107.0 TFLOP/s); "
                  "vs cudnn: out max abs 1.953e-03 = 0.0412 rms, dqkv max abs 2.441e-04 = 0.0187 rms\n"
                  "cublas  B=32 T=1024 C=768 NH=12: forward    2.100 ms (  24.0 TFLOP/s), backward   10.400 ms (  12.0 TFLOP/s); "
                  "vs cudnn: out max abs nan = nan rms, dqkv max abs 1.000e-02 = 0.7000 rms\n"
                  "cudnn   B=32 T=1024 C=768 NH=12: forward    0.165 ms ( 311.0 TFLOP/s), backward    0.610 ms ( 211.0 TFLOP/s); "
                  "the reference\n"
                  "native / cudnn: forward 0.55, backward 0.51 of cuDNN's TFLOP/s\n")
            write("attention-hs128.txt",
                  "native  B=8 T=2048 C=1536 NH=12: forward    1.000 ms ( 100.0 TFLOP/s), backward    2.000 ms ( 50.0 TFLOP/s)\n"
                  "cudnn   B=8 T=2048 C=1536 NH=12: unavailable: this build has no cuDNN\n")
            write("check-paths-native-cudnn.txt", "paths native vs cudnn at step 1: PASS (steps 1-1: loss and grad "
                  "norm within relative 0.01; largest 1.20e-04 at step 1)\n")
            write("steps.tsv", "quick\ttest_cuda_gpu-gpu\t0\t31\t50\nquick\tattention-124m\t124\t45\t45\n"
                  "quick\ttp2-np2\tskipped\t0\t0\nquick\tcheckpoint-1.5b\tnot-run\t0\t0\n")
            out, t = self.rows(d)
        self.assertEqual(t["test_cuda_gpu (gpu)"][4], "FAIL")
        self.assertIn("Gpu/FlashGptShapes.MatchesCpuAndCudnn/HS128_T2048", t["test_cuda_gpu (gpu)"][1])
        self.assertEqual(t["test_cuda_gpu (rest)"][1:], ["70 passed, 0 failed", "all pass", "", "PASS"])
        self.assertEqual(t["test_cuda_gpu"][1:], ["cut short (no gtest summary: timed out or crashed) after 1 passed, "
                                                  "1 failed: A.c; last started: Gpu/D.e/f", "all pass", "", "FAIL"])
        self.assertEqual(t["attention native (B 32, T 1024, HS 64)"][1:],
                         ["forward 171.0, backward 107.0 TFLOP/s", "cuDNN 311.0 / 211.0; target >= 0.5 of cuDNN",
                          "0.55x / 0.51x cuDNN", "PASS"])
        self.assertEqual(t["attention native vs cudnn (B 32, T 1024, HS 64)"][4], "PASS")
        self.assertIn("dqkv max abs 2.44e-04 = 0.0187 rms", t["attention native vs cudnn (B 32, T 1024, HS 64)"][1])
        self.assertEqual(t["attention cublas (B 32, T 1024, HS 64)"][4], "info")
        self.assertEqual(t["attention cublas vs cudnn (B 32, T 1024, HS 64)"][4], "FAIL")  # NaN, and 0.7 > 0.5
        self.assertEqual(t["attention cudnn (B 32, T 1024, HS 64)"][4], "info")
        self.assertEqual(t["attention native (B 8, T 2048, HS 128)"][4], "info")  # no cuDNN to hold it to
        self.assertEqual(t["attention cudnn (B 8, T 2048, HS 128)"][1], "unavailable: this build has no cuDNN")
        self.assertEqual(t["paths native vs cudnn at step 1"][2:], ["the other path's", "", "PASS"])
        self.assertEqual(t["step quick/attention-124m"][1], "timed out after 45 s")
        self.assertEqual(t["step quick/tp2-np2"][4], "FAIL")
        self.assertEqual(t["step quick/checkpoint-1.5b"][4], "info")
        self.assertIn("| quick/test_cuda_gpu-gpu | 50 | 31 | ran to its end |", out)
        self.assertIn("| quick/checkpoint-1.5b | 0 | 0 | not run (optional) |", out)
        self.assertIn("4 passed, 5 failed, 0 missing (info rows have no target)", out)

    def test_native_99k_rows(self):
        """attention_bench's native-99k (native with its backward forced to the small tile) at head size
        128: its TFLOP/s row with the ratio to cuDNN, info whatever the ratio (the 0.5 target is
        native's, whose verdict stays its own); its error row screened as native's; unavailable where
        flash_attention_backward_tiled refuses it (a device with too little shared memory)."""
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "attention-hs128.txt"), "w") as f:
                f.write("native  B=8 T=2048 C=1536 NH=12: forward    1.000 ms ( 300.0 TFLOP/s), backward    2.000 ms "
                        "( 200.0 TFLOP/s); vs cudnn: out max abs 1.953e-03 = 0.0412 rms, dqkv max abs 2.441e-04 = "
                        "0.0187 rms\n"
                        "native-99k B=8 T=2048 C=1536 NH=12: forward    1.000 ms ( 300.0 TFLOP/s), backward    "
                        "4.000 ms ( 104.0 TFLOP/s); vs cudnn: out max abs 1.953e-03 = 0.0412 rms, dqkv max abs "
                        "3.052e-04 = 0.6000 rms\n"
                        "cudnn   B=8 T=2048 C=1536 NH=12: forward    0.500 ms ( 500.0 TFLOP/s), backward    1.000 ms "
                        "( 400.0 TFLOP/s); the reference\n"
                        "native / cudnn: forward 0.60, backward 0.50 of cuDNN's TFLOP/s\n"
                        "native-99k / cudnn: forward 0.60, backward 0.26 of cuDNN's TFLOP/s\n")
            with open(os.path.join(d, "attention-124m.txt"), "w") as f:
                f.write("native-99k B=32 T=1024 C=768 NH=12: unavailable: cuda flash attention backward: the tile "
                        "of 128 keys x 64 rows at head size 64 needs 93184 B of shared memory per block; the device "
                        "allows 49152\n")
            out, t = self.rows(d)
        shape = "B 8, T 2048, HS 128"
        self.assertEqual(t[f"attention native-99k ({shape})"][1:],
                         ["forward 300.0, backward 104.0 TFLOP/s",
                          "cuDNN 500.0 / 400.0; native's backward in the small tile, for comparison (the target is "
                          "native's)",
                          "0.60x / 0.26x cuDNN", "info"])
        self.assertEqual(t[f"attention native ({shape})"][3:], ["0.60x / 0.50x cuDNN", "PASS"])
        self.assertEqual(t[f"attention native-99k vs cudnn ({shape})"][1:],
                         ["out max abs 1.95e-03 = 0.0412 rms, dqkv max abs 3.05e-04 = 0.6000 rms",
                          "<= 0.5 of the reference's rms (a screen)", "", "FAIL"])
        self.assertEqual(t[f"attention native vs cudnn ({shape})"][4], "PASS")
        self.assertEqual(t["attention native-99k (B 32, T 1024, HS 64)"][1:],
                         ["unavailable: cuda flash attention backward: the tile of 128 keys x 64 rows at head size "
                          "64 needs 93184 B of shared memory per block; the device allows 49152",
                          "", "", "info"])
        self.assertIn("2 passed, 1 failed, 1 missing (info rows have no target)", out)

    def test_empty_logdir(self):
        with tempfile.TemporaryDirectory() as d:
            out, t = self.rows(d)
        self.assertEqual(t["test_cuda_gpu"][1:], ["not run", "all pass", "", "MISSING"])
        self.assertEqual(out[-1], "0 passed, 0 failed, 1 missing (info rows have no target)")


if __name__ == "__main__":
    unittest.main()
