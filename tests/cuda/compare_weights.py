#!/usr/bin/env python3
# tests/cuda/compare_weights.py — the newest checkpoint's weights (model.h5, h5py) of two runs of
# llmtrain, tensor by tensor; used by emu_train.sh and emu_zero.sh.
#
# Usage: compare_weights.py <name> <reference run dir> <run dir> [--bitwise]
# --bitwise: every tensor and every loss in losses.tsv (train and val) identical: for runs whose
#   sums are taken in the same order (the emulated NCCL sums in rank order, as MpiComm does).
# Otherwise, for fp32 runs whose backends order their sums each their own way (the emulated CUDA
# kernels against the CPU backend), after a few steps:
#   (a) RMS(w - ref) <= 1e-4 * RMS(ref): the bulk of every tensor agrees (seen <= 2.1e-5 for
#       configs/tiny.toml after 3 steps, <= 4e-7 for emu_zero.sh's 2-layer model);
#   (b) every |w - ref| <= 1e-3 * max|ref| (seen <= 4.8e-4, and <= 7e-6): a few elements differ by
#       more than 1e-4 because their gradient is mostly rounding noise, which Adam's normalized step
#       m/sqrt(v) passes on at up to lr per step;
#   (c) the key third of each attn.c_attn.bias, left out of (a) and (b): its exact gradient is zero
#       (a bias added to every key shifts a row's scores alike, which softmax ignores), so both
#       backends move it by noise of up to lr per step: |w - ref| <= 2 * sum of the run's lr.
import sys

import h5py
import numpy as np

name, ref_dir, run_dir = sys.argv[1:4]
bitwise = sys.argv[4:5] == ["--bitwise"]


def weights(d):
    step = open(f"{d}/checkpoints/latest").read().strip()
    out = {}
    with h5py.File(f"{d}/checkpoints/{step}/model.h5", "r") as f:
        f.visititems(lambda k, v: out.__setitem__(k, v[()]) if isinstance(v, h5py.Dataset) else None)
    return step, out


def losses(d):  # (step, kind, loss) as printed: 9 significant digits
    return [tuple(l.split("\t")[:3]) for l in open(f"{d}/losses.tsv")][1:]


(ref_step, ref), (step, got) = weights(ref_dir), weights(run_dir)
bad = []
if ref_step != step or sorted(ref) != sorted(got):
    bad.append(f"checkpoints differ: {ref_step} {sorted(ref)[:3]}... vs {step} {sorted(got)[:3]}...")
if bitwise:
    a, b = losses(ref_dir), losses(run_dir)
    if not a or a != b:
        bad.append(f"losses differ (or none): {b} vs reference {a}")
    for k in sorted(set(ref) & set(got)):
        if ref[k].shape != got[k].shape or not np.array_equal(ref[k], got[k]):
            n = int((ref[k] != got[k]).sum()) if ref[k].shape == got[k].shape else -1
            bad.append(f"{k}: {n} of {ref[k].size} elements differ (bitwise expected)")
    if not bad:
        print(f"{name}: {len(a)} losses and {len(ref)} tensors ({step}) bitwise equal")
else:
    lrs = [float(l.split("\t")[3]) for l in open(f"{ref_dir}/losses.tsv") if l.split("\t")[1:2] == ["train"]]
    key_bound = 2 * sum(lrs)
    worst_rms, worst_max = (0.0, ""), (0.0, "")
    for k in sorted(set(ref) & set(got)):
        r, g = ref[k].astype(np.float64).ravel(), got[k].astype(np.float64).ravel()
        if r.shape != g.shape:
            bad.append(f"{k}: {g.size} elements, reference {r.size}")
            continue
        keep = np.ones(r.size, bool)
        if k.endswith("attn.c_attn.bias"):
            C = r.size // 3
            keep[C:2 * C] = False
            if np.abs(g - r)[C:2 * C].max() > key_bound:
                bad.append(f"{k} keys: max diff {np.abs(g - r)[C:2 * C].max():.3e} > 2*sum(lr) = {key_bound:.3e}")
        r, g = r[keep], g[keep]
        d = np.abs(g - r)
        rms = np.sqrt(np.mean(d ** 2)) / np.sqrt(np.mean(r ** 2))
        mx = d.max() / np.abs(r).max()
        worst_rms, worst_max = max(worst_rms, (rms, k)), max(worst_max, (mx, k))
        if rms > 1e-4:
            bad.append(f"{k}: RMS diff {rms:.3e} of RMS(w) > 1e-4")
        if mx > 1e-3:
            i = int(d.argmax())
            bad.append(f"{k}: element {i} {g[i]!r} vs reference {r[i]!r}, diff {mx:.3e} of max|w| > 1e-3")
    print(f"{name} weights ({step}, {len(ref)} tensors): RMS diff <= {worst_rms[0]:.2e} of RMS(w) ({worst_rms[1]}; "
          f"tolerance 1e-4), max diff <= {worst_max[0]:.2e} of max|w| ({worst_max[1]}; tolerance 1e-3)")
for b in bad:
    print(f"{name} weights: {b}")
sys.exit(1 if bad else 0)
