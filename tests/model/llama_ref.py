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

Mixture of experts (an optional "moe" input): each block's MLP is replaced by moe_ref.py's float64
MoE layer (Mixtral's softmax top-k router with the gates renormalized over the k, or DeepSeek-V3's
sigmoid affinities; SwiGLU experts applied expert by expert with index_add; the balance loss
alpha * sum_e f_e P_e of Switch Transformer / DeepSeek-V3), the experts' w1|w3 read from the
stacked "mlp.experts.gate_up_proj" (E, 2Fe, C) and w2 from "mlp.experts.down_proj" (E, C, Fe), plus
the shared experts' dense SwiGLU ("mlp.shared_experts.*") when there are any. The objective whose
gradients are returned is cross_entropy + the sum of the layers' balance losses.

QK-norm and a free head size (an optional "qk" input, Qwen3's attention from HuggingFace's
Qwen3Attention): q and k are (n_head | n_kv_head, head_dim) heads with head_dim given (q_proj is
(n_head * head_dim, C), o_proj (C, n_head * head_dim)), and with qk_norm each q head is
rms_norm(q, self_attn.q_norm.weight) and each k head rms_norm(k, self_attn.k_norm.weight) over
head_dim (eps as the other norms), after the projections and before the rotation.

INPUT (tensor_file.hpp format): "config" int32 [n_layer, n_head, n_kv_head, n_embd, vocab_size,
tied, B, T], "hyper" fp32 [norm_eps, rope_theta], "tokens"/"targets" (B,T), every parameter as
"param.<HF name>", optionally "moe" int32 [E, k, n_shared, Fe, sigmoid] and "moe_hyper" fp32 [alpha],
and "qk" int32 [head_dim, qk_norm].
OUTPUT: "logits" (B,T,Vp), "loss" (1, the cross-entropy), "aux" (1, the balance losses' sum, 0 without
MoE), "grad.<name>" for every parameter.

Usage: llama_ref.py INPUT OUTPUT   (run with /usr/bin/python3: Debian's python3-torch)
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import read_tensors, write_tensors  # noqa: E402  (the tensor file format only)
from moe_ref import moe_layer  # noqa: E402  (the float64 MoE layer from the papers)


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


def swiglu(h, gate, up, down):
    return (F.silu(h @ gate.T) * (h @ up.T)) @ down.T


def moe_mlp(w, h, moe):
    """The MoE MLP of one block on h (B,T,C): routed experts plus shared ones; returns (out, aux)."""
    E, k, n_shared, Fe, sigmoid, alpha = moe
    B, T, C = h.shape
    w13 = w("mlp.experts.gate_up_proj")
    x = h.reshape(B * T, C)
    out, _, aux = moe_layer(x, w("mlp.router.weight"), w13[:, :Fe], w13[:, Fe:], w("mlp.experts.down_proj"),
                            None, k, sigmoid, True, 1.0, alpha)
    out = out.reshape(B, T, C)
    if n_shared > 0:
        s = "mlp.shared_experts."
        out = out + swiglu(h, w(s + "gate_proj.weight"), w(s + "up_proj.weight"), w(s + "down_proj.weight"))
    return out, aux


def llama_logits(p, idx, n_layer, n_head, n_kv, C, tied, eps, theta, mlp=None):
    return llama_forward(p, idx, n_layer, n_head, n_kv, C, tied, eps, theta, mlp=mlp)[0]


def llama_forward(p, idx, n_layer, n_head, n_kv, C, tied, eps, theta, moe=None, mlp=None, head_dim=0,
                  qk_norm=False):
    """The logits and the MoE balance losses' sum (0 without moe). mlp, if given, is each block's
    MLP in place of the SwiGLU one: mlp(w, h) -> (B,T,C), with w(name) the layer's tensor
    "model.layers.<l>.<name>" and h the post-attention RMSNorm's output (e.g. another layout's MoE
    block, tests/app/interop_moe_test.py's Mixtral). head_dim (0: C // n_head) and qk_norm: Qwen3's
    attention (the module docstring)."""
    B, T = idx.shape
    hd = head_dim if head_dim > 0 else C // n_head
    cos, sin = rotary_cos_sin(T, hd, theta)
    mask = torch.full((T, T), float("-inf")).triu(1)
    x = p["model.embed_tokens.weight"][idx]
    aux_sum = torch.zeros(())
    for l in range(n_layer):
        w = lambda n: p["model.layers.%d.%s" % (l, n)]
        h = rms_norm(x, w("input_layernorm.weight"), eps)
        q = (h @ w("self_attn.q_proj.weight").T).view(B, T, n_head, hd).transpose(1, 2)
        k = (h @ w("self_attn.k_proj.weight").T).view(B, T, n_kv, hd).transpose(1, 2)
        v = (h @ w("self_attn.v_proj.weight").T).view(B, T, n_kv, hd).transpose(1, 2)
        if qk_norm:  # Qwen3: each head normalized over head_dim before the rotation
            q = rms_norm(q, w("self_attn.q_norm.weight"), eps)
            k = rms_norm(k, w("self_attn.k_norm.weight"), eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, n_head // n_kv), repeat_kv(v, n_head // n_kv)
        att = (q @ k.transpose(2, 3)) / math.sqrt(hd) + mask
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, n_head * hd)
        x = x + y @ w("self_attn.o_proj.weight").T
        h = rms_norm(x, w("post_attention_layernorm.weight"), eps)
        if mlp is not None:
            x = x + mlp(w, h)
        elif moe is not None:
            m, aux = moe_mlp(w, h, moe)
            x = x + m
            aux_sum = aux_sum + aux
        else:
            x = x + swiglu(h, w("mlp.gate_proj.weight"), w("mlp.up_proj.weight"), w("mlp.down_proj.weight"))
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if tied else p["lm_head.weight"]
    return x @ head.T, aux_sum


def main():
    inp = read_tensors(sys.argv[1])
    n_layer, n_head, n_kv, C, V, tied, _, _ = inp["config"].tolist()
    eps, theta = inp["hyper"].tolist()
    tokens, targets = inp["tokens"], inp["targets"]
    p = {k[6:]: torch.nn.Parameter(v.clone()) for k, v in inp.items() if k.startswith("param.")}
    moe = None
    if "moe" in inp:
        E, k, n_shared, Fe, sigmoid = [int(v) for v in inp["moe"].tolist()]
        moe = (E, k, n_shared, Fe, bool(sigmoid), float(inp["moe_hyper"].tolist()[0]))
    head_dim, qk_norm = [int(v) for v in inp["qk"].tolist()] if "qk" in inp else (0, 0)
    logits, aux = llama_forward(p, tokens, n_layer, n_head, n_kv, C, bool(tied), eps, theta, moe,
                                head_dim=head_dim, qk_norm=bool(qk_norm))
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    (loss + aux).backward()
    out = {"logits": logits, "loss": loss.reshape(1), "aux": aux.reshape(1)}
    for name, t in p.items():
        out["grad." + name] = t.grad.clone()
    write_tensors(sys.argv[2], out)


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
