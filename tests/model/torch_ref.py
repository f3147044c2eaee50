#!/usr/bin/env python3
"""tests/model/torch_ref.py — the PyTorch reference of tests/model/test_gpt_torch.cpp.

Builds GPT-2 from the parameters in INPUT (tensor_file.hpp format) in float64 with stock torch
layers (layer_norm, masked softmax attention, tanh GELU, cross_entropy over the real vocabulary),
the LM head tied to wte. Writes to OUTPUT: the logits, loss and every parameter gradient of batch
0, then the loss, gradient norm and parameters of 3 steps of torch.optim.AdamW (weight decay on
2-D tensors only, clip_grad_norm_ before each step, one learning rate per step).

Usage: torch_ref.py INPUT OUTPUT   (run with /usr/bin/python3: Debian's python3-torch)
"""
import math
import struct
import sys

import torch
import torch.nn.functional as F


def read_tensors(path):
    out = {}
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos); pos += 4
        name = data[pos:pos + n].decode(); pos += n
        dtype, ndim = struct.unpack_from("<II", data, pos); pos += 8
        shape = struct.unpack_from("<%dq" % ndim, data, pos); pos += 8 * ndim
        count = math.prod(shape)
        fmt = {0: "f", 1: "i"}[dtype]
        vals = struct.unpack_from("<%d%s" % (count, fmt), data, pos); pos += 4 * count
        t = torch.tensor(vals, dtype=torch.float64 if dtype == 0 else torch.int64)
        out[name] = t.reshape(shape)
    return out


def write_tensors(path, tensors):
    with open(path, "wb") as f:
        for name, t in tensors.items():
            t = t.detach().to(torch.float64).contiguous()
            b = name.encode()
            f.write(struct.pack("<I", len(b)) + b + struct.pack("<II", 2, t.dim()))
            f.write(struct.pack("<%dq" % t.dim(), *t.shape))
            f.write(struct.pack("<%dd" % t.numel(), *t.reshape(-1).tolist()))


def gpt_logits(p, idx, n_layer, n_head, C):
    B, T = idx.shape
    HS = C // n_head
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = p["wte"][idx] + p["wpe"][:T]
    for l in range(n_layer):
        w = lambda n: p["h.%d.%s" % (l, n)]
        h = F.layer_norm(x, (C,), w("ln_1.weight"), w("ln_1.bias"), 1e-5)
        q, k, v = (h @ w("attn.c_attn.weight").T + w("attn.c_attn.bias")).split(C, dim=2)
        q, k, v = (t.view(B, T, n_head, HS).transpose(1, 2) for t in (q, k, v))  # (B,NH,T,HS)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w("attn.c_proj.weight").T + w("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), w("ln_2.weight"), w("ln_2.bias"), 1e-5)
        h = F.gelu(h @ w("mlp.c_fc.weight").T + w("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ w("mlp.c_proj.weight").T + w("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    return x @ p["wte"].T  # (B,T,Vp): tied LM head over the padded vocabulary


def main():
    inp = read_tensors(sys.argv[1])
    n_layer, n_head, C, _, V, _, _ = inp["config"].tolist()
    beta1, beta2, eps, weight_decay, grad_clip = inp["hyper"].tolist()
    lrs = inp["lrs"].tolist()
    tokens, targets = inp["tokens"], inp["targets"]
    p = {k[6:]: torch.nn.Parameter(v.clone()) for k, v in inp.items() if k.startswith("param.")}

    def loss_of(s):
        logits = gpt_logits(p, tokens[s], n_layer, n_head, C)
        return logits, F.cross_entropy(logits[..., :V].reshape(-1, V), targets[s].reshape(-1))

    out = {}
    logits, loss = loss_of(0)
    loss.backward()
    out["logits"] = logits
    out["loss"] = loss.reshape(1)
    for name, t in p.items():
        out["grad." + name] = t.grad.clone()

    decay = [t for t in p.values() if t.dim() == 2]
    no_decay = [t for t in p.values() if t.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lrs[0], betas=(beta1, beta2), eps=eps)
    for s, lr in enumerate(lrs):
        opt.zero_grad()
        _, loss = loss_of(s)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(p.values()), grad_clip)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        out["loss_step%d" % s] = loss.reshape(1)
        out["norm_step%d" % s] = norm.reshape(1)
    for name, t in p.items():
        out["param." + name] = t
    write_tensors(sys.argv[2], out)


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
