#!/usr/bin/env python3
"""tests/model/documents_ref.py — the reference of tests/model/test_documents_torch.cpp.

Document masking (data.document_mask with data.reset_position_ids) by its definition: a packed
window is the same as its documents run one by one. This script never packs: it cuts each row of
the tokens after every EOS token (a document ends with its EOS; the row's tail after the last EOS
is a document too), runs each document alone as a sequence of its own, from position 0, through
the independent float64 models of torch_ref.py (GPT-2: learned positions) or llama_ref.py (Llama:
rotary positions), and puts its logits back at the document's place. The loss is the mean
cross-entropy over all B*T positions, as the packed run computes it.

INPUT (tensor_file.hpp format): "config" int32 [arch (0 gpt2, 1 llama), n_layer, n_head,
n_kv_head, n_embd, vocab_size, eos, B, T], "hyper" fp32 [norm_eps, rope_theta],
"tokens"/"targets" (B,T), every parameter as "param.<name>". OUTPUT: "logits" (B,T,Vp), "loss"
(1), "grad.<name>" for every parameter.

Usage: documents_ref.py INPUT OUTPUT   (run with /usr/bin/python3: Debian's python3-torch)
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import gpt_logits, read_tensors, write_tensors  # noqa: E402
from llama_ref import llama_logits  # noqa: E402


def documents(row, eos):
    """[(start, end)] of the documents of one row: each ends just after an EOS, or at the row's end."""
    out, start = [], 0
    for t, tok in enumerate(row.tolist()):
        if tok == eos:
            out.append((start, t + 1))
            start = t + 1
    if start < len(row):
        out.append((start, len(row)))
    return out


def main():
    inp = read_tensors(sys.argv[1])
    arch, n_layer, n_head, n_kv, C, V, eos, B, T = inp["config"].tolist()
    eps, theta = inp["hyper"].tolist()
    tokens, targets = inp["tokens"], inp["targets"]
    p = {k[6:]: torch.nn.Parameter(v.clone()) for k, v in inp.items() if k.startswith("param.")}
    tied = "lm_head.weight" not in p
    rows = []
    for b in range(B):
        pieces = []
        for s, e in documents(tokens[b], eos):
            idx = tokens[b:b + 1, s:e]  # (1, length): the document alone
            if arch == 0:
                pieces.append(gpt_logits(p, idx, n_layer, n_head, C)[0])
            else:
                pieces.append(llama_logits(p, idx, n_layer, n_head, n_kv, C, tied, eps, theta)[0])
        rows.append(torch.cat(pieces, dim=0))
    logits = torch.stack(rows)  # (B,T,Vp)
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    loss.backward()
    out = {"logits": logits, "loss": loss.reshape(1)}
    for name, t in p.items():
        out["grad." + name] = t.grad.clone() if t.grad is not None else torch.zeros_like(t)
    write_tensors(sys.argv[2], out)


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
