#!/usr/bin/env python3
"""tests/model/llama_ref.py — an independent Llama for tests/model/test_llama_torch.cpp.

Written from HuggingFace's documented LlamaForCausalLM semantics (not from llmtrain's code), in
float64 with plain torch: LlamaRMSNorm (x * rsqrt(mean(x^2) + eps) * weight), rotary embeddings
with inv_freq = 1 / theta^(arange(0, head_dim, 2) / head_dim), cos/sin of cat(freqs, freqs) and
rotate_half(x) = cat(-x2, x1), grouped-query attention through repeat_kv (key/value head j serves
query heads j*n_rep .. j*n_rep + n_rep - 1), a causal softmax, SwiGLU MLP down(silu(gate(x)) *
up(x)), no biases, the final norm and lm_head (the token table when tied). The loss is
cross_entropy over the real vocabulary (the tables carry llmtrain's padded rows, whose logits are
compared too).

INPUT (tensor_file.hpp format): "config" int32 [n_layer, n_head, n_kv_head, n_embd, vocab_size,
tied, B, T], "hyper" fp32 [norm_eps, rope_theta], "tokens"/"targets" (B,T), and every parameter as
"param.<HF name>". OUTPUT: "logits" (B,T,Vp), "loss" (1), "grad.<name>" for every parameter.

Usage: llama_ref.py INPUT OUTPUT   (run with /usr/bin/python3: Debian's python3-torch)
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import read_tensors, write_tensors  # noqa: E402  (the tensor file format only)


def rms_norm(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary_cos_sin(T, head_dim, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, head_dim)
    return emb.cos(), emb.sin()


def repeat_kv(x, n_rep):
    B, nkv, T, hd = x.shape
    return x[:, :, None, :, :].expand(B, nkv, n_rep, T, hd).reshape(B, nkv * n_rep, T, hd)


def llama_logits(p, idx, n_layer, n_head, n_kv, C, tied, eps, theta):
    B, T = idx.shape
    hd = C // n_head
    cos, sin = rotary_cos_sin(T, hd, theta)
    mask = torch.full((T, T), float("-inf")).triu(1)
    x = p["model.embed_tokens.weight"][idx]
    for l in range(n_layer):
        w = lambda n: p["model.layers.%d.%s" % (l, n)]
        h = rms_norm(x, w("input_layernorm.weight"), eps)
        q = (h @ w("self_attn.q_proj.weight").T).view(B, T, n_head, hd).transpose(1, 2)
        k = (h @ w("self_attn.k_proj.weight").T).view(B, T, n_kv, hd).transpose(1, 2)
        v = (h @ w("self_attn.v_proj.weight").T).view(B, T, n_kv, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, n_head // n_kv), repeat_kv(v, n_head // n_kv)
        att = (q @ k.transpose(2, 3)) / math.sqrt(hd) + mask
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w("self_attn.o_proj.weight").T
        h = rms_norm(x, w("post_attention_layernorm.weight"), eps)
        m = F.silu(h @ w("mlp.gate_proj.weight").T) * (h @ w("mlp.up_proj.weight").T)
        x = x + m @ w("mlp.down_proj.weight").T
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if tied else p["lm_head.weight"]
    return x @ head.T


def main():
    inp = read_tensors(sys.argv[1])
    n_layer, n_head, n_kv, C, V, tied, _, _ = inp["config"].tolist()
    eps, theta = inp["hyper"].tolist()
    tokens, targets = inp["tokens"], inp["targets"]
    p = {k[6:]: torch.nn.Parameter(v.clone()) for k, v in inp.items() if k.startswith("param.")}
    logits = llama_logits(p, tokens, n_layer, n_head, n_kv, C, bool(tied), eps, theta)
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    loss.backward()
    out = {"logits": logits, "loss": loss.reshape(1)}
    for name, t in p.items():
        out["grad." + name] = t.grad.clone()
    write_tensors(sys.argv[2], out)


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
