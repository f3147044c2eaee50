#!/usr/bin/env python3
"""tests/gpu/test_torch_gpt_gpu.py — tools/bench/torch_gpt_gpu.py (the PyTorch baseline of the GPU
benchmarks) runs on the CPU with Debian's python3-torch at a tiny shape, eager, in fp32 and under
bf16 autocast, and prints what gpu_bench.sh and gpu_report.py read. References: the parameter
count in closed form (GPT-2 124M: 124,439,808 with the unpadded vocabulary, tied head), the loss of
a freshly initialized model (ln V: the logits' spread at init, std ~0.02 sqrt(C) = 0.16, adds about
var/2 = 0.013, so within 0.1), and the training loss falling on a fixed batch.

Usage: python3 test_torch_gpt_gpu.py   (ctest gpu_torch_baseline_cpu)
"""
import math
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SCRIPT = os.path.join(ROOT, "tools", "bench", "torch_gpt_gpu.py")
sys.path.insert(0, os.path.join(ROOT, "tools", "gpu"))
import gpu_report  # noqa: E402

L, NH, C, T, V = 2, 2, 64, 32, 256


def run(*extra):
    args = [sys.executable, SCRIPT, "--device", "cpu", "--no-compile", "--n-layer", str(L), "--n-head", str(NH),
            "--n-embd", str(C), "--seq-len", str(T), "--vocab", str(V), "--batch", "2", "--grad-accum", "2",
            "--steps", "6", "--peak-tflops", "1e-6", *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


class TorchBaseline(unittest.TestCase):
    def check(self, dtype):
        p = run("--dtype", dtype)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        # V C + T C + L (12 C^2 + 13 C) + 2 C, counted here by hand
        self.assertIn(f"{V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C:,} parameters", out)
        losses = [float(x) for x in re.findall(r"^step \d+/6 \| loss ([\d.]+)", out, re.M)]
        self.assertEqual(len(losses), 6)
        self.assertAlmostEqual(losses[0], math.log(V), delta=0.1)
        self.assertLess(losses[-1], losses[0] - 0.1)  # the same batch every step: it learns it
        runs = gpu_report.parse_bench(out)
        r = runs[f"gpt-L{L}-C{C}-torch"]
        self.assertEqual(r["steps"], 3)  # steps 4-6
        self.assertGreater(r["tok_s"], 0)
        self.assertGreater(r["mfu"], 0)

    def test_fp32(self):
        self.check("fp32")

    def test_bf16_autocast(self):
        self.check("bf16")

    def test_gpt2_124m_parameters(self):
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import torch_gpt_gpu
        self.assertEqual(torch_gpt_gpu.num_parameters(12, 768, 1024, 50257), 124439808)

    def test_compile_needs_pytorch_2(self):
        import torch
        if hasattr(torch, "compile"):
            self.skipTest("this PyTorch has torch.compile")
        args = [sys.executable, SCRIPT, "--device", "cpu", "--n-layer", "1", "--n-head", "1", "--n-embd", "8",
                "--seq-len", "8", "--vocab", "16", "--steps", "4"]
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("torch.compile needs PyTorch 2", p.stderr)


if __name__ == "__main__":
    unittest.main()
