#!/usr/bin/env python3
"""tests/model/moe_ref.py — an independent float64 mixture-of-experts layer for
tests/model/test_moe_torch.cpp.

Written from the papers and HuggingFace's documented MoE blocks (not from llmtrain's code), plain
torch with autograd:
- router: logits = x @ gate.weight^T. Mixtral (Jiang et al. 2024, eq. 1-2; HF
  MixtralSparseMoeBlock) and Qwen3-MoE (HF Qwen3MoeSparseMoeBlock): probabilities = softmax(logits),
  torch.topk of them, divided by their sum when norm_topk_prob (Mixtral always). DeepSeek-V3 (Liu et
  al. 2024, eq. 12-16): affinities s = sigmoid(logits), topk of s + e_score_correction_bias (the
  bias picks experts only), gates = the picked s over their sum, times routed_scaling_factor.
- experts: Mixtral's expert w2(silu(w1(x)) * w3(x)), applied HF-style: for each expert, the
  (token, slot) pairs that chose it, out.index_add_(token, gate * expert(x[token])).
- balance loss (DeepSeek-V3 eq. 17-20, Switch Transformer eq. 4-6 for k = 1):
  alpha * sum_e f_e P_e, f_e = E / (k N) * (number of pairs choosing e), P_e = mean over tokens of
  the softmax probabilities, or of s / sum(s) per token for sigmoid.
The loss is sum(out * R) + balance loss; its gradients w.r.t. x, the router and every expert
weight come from autograd.

INPUT (tensor_file.hpp format): "config" int32 [N, C, E, k, F, sigmoid, norm_topk, has_bias],
"hyper" fp32 [route_scale, alpha], "x" (N,C), "w_router" (E,C), "w1", "w3" (E,F,C), "w2" (E,C,F),
"bias" (E), "R" (N,C). OUTPUT: "out" (N,C), "ids" (N,k) (as float64), "aux" (1), "loss" (1),
"grad.x", "grad.w_router", "grad.w1", "grad.w3", "grad.w2".

Usage: moe_ref.py INPUT OUTPUT [INPUT OUTPUT ...]   (one case per pair; run with /usr/bin/python3: Debian's python3-torch)
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import read_tensors, write_tensors  # noqa: E402  (the tensor file format only)


def moe_layer(x, w_router, w1, w3, w2, bias, k, sigmoid, norm_topk, route_scale, alpha):
    N, C = x.shape
    E = w_router.shape[0]
    logits = x @ w_router.T
    if sigmoid:
        scores = torch.sigmoid(logits)
        choice = scores + bias if bias is not None else scores
        _, idx = torch.topk(choice.detach(), k, dim=-1)
        weights = scores.gather(1, idx)
    else:
        scores = F.softmax(logits, dim=-1)
        weights, idx = torch.topk(scores, k, dim=-1)
    if norm_topk:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights * route_scale

    out = torch.zeros_like(x)
    for e in range(E):
        tok, slot = torch.where(idx == e)
        if tok.numel() == 0:
            continue
        xe = x[tok]
        ye = (F.silu(xe @ w1[e].T) * (xe @ w3[e].T)) @ w2[e].T
        out = out.index_add(0, tok, weights[tok, slot, None] * ye)

    counts = torch.zeros(E, dtype=torch.float64)
    counts.index_add_(0, idx.reshape(-1), torch.ones(idx.numel(), dtype=torch.float64))
    f = counts * E / (k * N)
    q = scores / scores.sum(dim=-1, keepdim=True) if sigmoid else scores
    P = q.mean(dim=0)
    aux = alpha * (f * P).sum()
    return out, idx, aux


def run(in_path, out_path):
    inp = read_tensors(in_path)
    N, C, E, k, Fw, sigmoid, norm_topk, has_bias = [int(v) for v in inp["config"].tolist()]
    route_scale, alpha = [float(v) for v in inp["hyper"].tolist()]
    leaves = {n: inp[n].clone().requires_grad_(True) for n in ("x", "w_router", "w1", "w3", "w2")}
    assert leaves["w1"].shape == (E, Fw, C) and leaves["x"].shape == (N, C)
    bias = inp["bias"] if has_bias else None
    out, idx, aux = moe_layer(leaves["x"], leaves["w_router"], leaves["w1"], leaves["w3"], leaves["w2"],
                              bias, k, bool(sigmoid), bool(norm_topk), route_scale, alpha)
    loss = (out * inp["R"]).sum() + aux
    loss.backward()
    res = {"out": out, "ids": idx, "aux": aux.reshape(1), "loss": loss.reshape(1)}
    for n, t in leaves.items():
        res["grad." + n] = t.grad
    write_tensors(out_path, res)


def main():
    if len(sys.argv) < 3 or len(sys.argv) % 2 == 0:
        sys.exit("usage: moe_ref.py INPUT OUTPUT [INPUT OUTPUT ...]")
    for i in range(1, len(sys.argv), 2):
        run(sys.argv[i], sys.argv[i + 1])


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
