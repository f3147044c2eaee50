#!/usr/bin/env python3
"""tools/bench/torch_eager.py — the bench_cpu model in PyTorch eager (fp32, CPU), tokens/s.

Same GPT-2 as llmtrain's CPU backend (4 layers, 4 heads, width 256, seq_len 256, vocab 8192 padded
to a multiple of 128, tied LM head, tanh GELU) and the same step: zero grads, forward + backward of
one micro-batch, clip_grad_norm_, AdamW. Prints the step time, tokens/s and tokens per CPU-second
(all threads) after warmup steps.

Usage: /usr/bin/python3 torch_eager.py [--steps N] [--warmup N] [--batch B] [--threads K]
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x, causal):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~causal[:T, :T], float("-inf")).softmax(dim=-1)
        x = x + self.attn_proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer=4, n_head=4, C=256, seq_len=256, vocab=8192):
        super().__init__()
        self.vocab = vocab
        vp = (vocab + 127) // 128 * 128
        self.wte, self.wpe = nn.Embedding(vp, C), nn.Embedding(seq_len, C)
        self.h = nn.ModuleList(Block(C, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("causal", torch.ones(seq_len, seq_len, dtype=torch.bool).tril())

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x, self.causal)
        logits = self.ln_f(x) @ self.wte.weight.T  # tied LM head
        return F.cross_entropy(logits[..., :self.vocab].reshape(-1, self.vocab), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT()
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    B, T = args.batch, 256
    idx = torch.randint(0, 8192, (B, T))
    tgt = torch.randint(0, 8192, (B, T))
    total = cpu = 0.0
    for s in range(args.warmup + args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        model(idx, tgt).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if s >= args.warmup:
            total += time.perf_counter() - t0
            cpu += time.process_time() - c0
    step = total / args.steps
    print("torch_eager: torch %s, %d threads, micro_batch_size %d" % (torch.__version__, args.threads, B))
    print("step %.1f ms" % (1e3 * step))
    print("cpu-seconds/step %.2f, tokens per cpu-second %.1f" % (cpu / args.steps, B * T * args.steps / cpu))
    print("tokens/s %.1f" % (B * T / step))


if __name__ == "__main__":
    main()
