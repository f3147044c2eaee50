#!/usr/bin/env python3
"""tools/bench/host_adamw_torch.py — torch.optim.AdamW on the CPU, parameters per second.

The PyTorch baseline of tools/bench/host_adamw_bench (#9: the host AdamW step should be >= 5x
PyTorch's CPU AdamW; DeepSpeed's CPU-Adam claims 5-7x). One fp32 parameter tensor of N elements with
its fp32 gradient preset, the same hyperparameters as host_adamw_bench (lr 1e-3, betas (0.9, 0.95),
eps 1e-8, weight_decay 0.1), torch.set_num_threads(K). Each implementation this torch has runs on
its own optimizer: the default (single-tensor loop on the CPU), foreach=True (torch._foreach_* ops),
and fused=True where the installed torch accepts it on the CPU (otherwise a line says why not). One
warm-up step allocates the moments; then each opt.step() is timed and the best of the reps printed.

Usage: /usr/bin/python3 host_adamw_torch.py [--millions M] [--reps R] [--threads K]
       (K defaults to OMP_NUM_THREADS, else torch's own default)
Prints one line per implementation: "torch AdamW <name>: <s> s per step, <G> G params/s".
"""
import argparse
import inspect
import os
import time

import torch


def time_steps(n, reps, **kwargs):
    """Best seconds of one AdamW step over `reps` steps of one fp32 tensor of n elements."""
    p = torch.nn.Parameter(torch.full((n,), 0.01))
    p.grad = torch.full((n,), 0.0078125)
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **kwargs)
    opt.step()  # warm-up: allocates exp_avg and exp_avg_sq
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--millions", type=float, default=64.0, help="parameters, in millions (default 64)")
    ap.add_argument("--reps", type=int, default=10, help="timed steps per implementation (default 10)")
    env_threads = os.environ.get("OMP_NUM_THREADS")
    ap.add_argument("--threads", type=int, default=int(env_threads) if env_threads else 0,
                    help="torch.set_num_threads (default: OMP_NUM_THREADS, else torch's default)")
    a = ap.parse_args()
    if a.millions <= 0 or a.reps < 1 or a.threads < 0:
        ap.error("--millions must be > 0, --reps >= 1, --threads >= 0")
    if a.threads:
        torch.set_num_threads(a.threads)
    n = int(a.millions * 1e6)
    print(f"host_adamw_torch: torch {torch.__version__}, {n} fp32 parameters, "
          f"{torch.get_num_threads()} threads, best of {a.reps} steps")

    variants = [("default", {}), ("foreach", {"foreach": True})]
    if "fused" in inspect.signature(torch.optim.AdamW.__init__).parameters:
        variants.append(("fused", {"fused": True}))
    else:
        print(f"torch AdamW fused: not offered by torch {torch.__version__} (no 'fused' argument)")
    for name, kwargs in variants:
        try:
            t = time_steps(n, a.reps, **kwargs)
        except (RuntimeError, ValueError) as e:  # fused=True on a torch without the CPU kernel
            print(f"torch AdamW {name}: not supported on the CPU here ({e})")
            continue
        print(f"torch AdamW {name}: {t:.4f} s per step, {n / t / 1e9:.4g} G params/s")


if __name__ == "__main__":
    main()
