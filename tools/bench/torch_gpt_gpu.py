#!/usr/bin/env python3
"""tools/bench/torch_gpt_gpu.py — GPT-2 training throughput in PyTorch on one GPU: the baseline that
tools/bench/gpu_bench.sh measures llmtrain against in the same run, on the same machine.

The model is nanoGPT-style GPT-2 (pre-LayerNorm blocks, tanh GELU, LM head tied to the token
embedding, vocabulary padded from 50,257 to a multiple of 128 as llm.c and llmtrain do), trained as
llmtrain trains it: bf16 autocast over fp32 parameters, causal attention through
F.scaled_dot_product_attention (flash kernels on an H100), fused AdamW (lr 6e-4, betas 0.9/0.95,
eps 1e-8, weight decay 0.1 on matrices only), gradient clipping at 1.0, `torch.compile`, and
--grad-accum micro-batches of (--batch, --seq-len) tokens per optimizer step.
Tokens: uniform random ids below --data-vocab (8,192, as the Brown split of the quick start uses),
one fixed set per micro-batch slot: throughput does not depend on the token values.

Prints a line per step (loss, gradient norm, milliseconds, tokens/s), then one line that
tools/gpu/gpu_report.py parses:
  bench: label=<label> tok_s=<mean tokens/s over steps 4+> mfu=<%> first_x=- peak_mib=<MiB> compile_s=<s> steps=<n>
MFU counts (6 N + 6 n_layer T C) FLOPs per token (N: the parameters with the unpadded vocabulary;
llm.c's and llmtrain's formula) over --peak-tflops (989: H100 SXM dense bf16). compile_s is the
first step's time less a steady step's (compilation and autotuning).

Usage (GPU): python3 torch_gpt_gpu.py --model gpt2-124m --batch 32 --grad-accum 8 --steps 10
       (CPU check, tests/gpu): python3 torch_gpt_gpu.py --device cpu --dtype fp32 --no-compile
                               --n-layer 2 --n-head 2 --n-embd 64 --seq-len 32 --vocab 256 ...
Runs on PyTorch 2.x (compile, SDPA, fused AdamW) and, without those, on Debian's 1.13 for the CPU
check: each missing feature falls back to plain PyTorch and the header line says so.
"""
import argparse
import inspect
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# GPT-2's shapes (n_layer, n_head, n_embd); seq_len 1024 and vocab 50,257 for all.
MODELS = {"gpt2-124m": (12, 12, 768), "gpt2-350m": (24, 16, 1024), "gpt2-774m": (36, 20, 1280),
          "gpt2-1.5b": (48, 25, 1600)}
HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


class Block(nn.Module):
    """One pre-LN transformer block: x + attn(ln_1(x)), then + mlp(ln_2(x)). x: (B, T, C)."""

    def __init__(self, C, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def attention(self, q, k, v):
        """Causal softmax(q kᵀ / sqrt(HS)) v; q, k, v: (B, NH, T, HS)."""
        if HAVE_SDPA:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        return att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        x = x + self.attn_proj(self.attention(q, k, v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2: token + position embedding, n_layer blocks, ln_f, LM head tied to wte.
    forward(idx (B, T) int64, targets (B, T) int64) -> mean cross-entropy over the real vocabulary."""

    def __init__(self, n_layer, n_head, C, seq_len, vocab):
        super().__init__()
        self.vocab = vocab
        self.wte = nn.Embedding((vocab + 127) // 128 * 128, C)
        self.wpe = nn.Embedding(seq_len, C)
        self.h = nn.ModuleList(Block(C, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(C)
        # GPT-2's initialization: N(0, 0.02), the residual projections scaled by 1/sqrt(2 n_layer).
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        # the padded columns left out, as llmtrain and llm.c do; autocast runs cross_entropy in fp32
        return F.cross_entropy(logits[..., :self.vocab].reshape(-1, self.vocab), targets.reshape(-1))


def num_parameters(n_layer, C, seq_len, vocab):
    """Parameters with the unpadded vocabulary, the LM head tied: V C + T C + L (12 C² + 13 C) + 2 C."""
    return vocab * C + seq_len * C + n_layer * (12 * C * C + 13 * C) + 2 * C


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), help="GPT-2 size (or give --n-layer/--n-head/--n-embd)")
    ap.add_argument("--n-layer", type=int)
    ap.add_argument("--n-head", type=int)
    ap.add_argument("--n-embd", type=int)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--data-vocab", type=int, default=8192, help="token ids are drawn below this (and below --vocab)")
    ap.add_argument("--batch", type=int, default=32, help="micro_batch_size")
    ap.add_argument("--grad-accum", type=int, default=8, help="micro-batches per optimizer step")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of the mean")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="autocast dtype (params stay fp32)")
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    if a.model:
        a.n_layer, a.n_head, a.n_embd = MODELS[a.model]
    if not (a.n_layer and a.n_head and a.n_embd) or a.n_embd % a.n_head:
        ap.error("give --model, or --n-layer, --n-head and --n-embd with n_head dividing n_embd")
    if a.steps <= a.warmup:
        ap.error(f"--steps ({a.steps}) must exceed --warmup ({a.warmup})")
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_gpt_gpu: PyTorch sees no CUDA device (torch " + torch.__version__ + ")")
    label = a.label or (a.model or f"gpt-L{a.n_layer}-C{a.n_embd}") + "-torch"
    torch.manual_seed(1337)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    model = GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab).to(dev)
    nparams = num_parameters(a.n_layer, a.n_embd, a.seq_len, a.vocab)
    padding = (model.wte.num_embeddings - a.vocab) * a.n_embd
    if sum(p.numel() for p in model.parameters()) - padding != nparams:  # the MFU's N must be the model's
        sys.exit(f"torch_gpt_gpu: the model holds {sum(p.numel() for p in model.parameters()) - padding:,} "
                 f"parameters, the formula {nparams:,}")
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    fused = dev.type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if fused else {}))
    compiled = a.compile and hasattr(torch, "compile")
    if a.compile and not compiled:
        sys.exit("torch_gpt_gpu: torch.compile needs PyTorch 2 (this is " + torch.__version__ + "); use --no-compile")
    step_model = torch.compile(model) if compiled else model
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}: "
          f"{label}, {nparams:,} parameters, micro-batch {a.batch} x {a.seq_len}, {a.grad_accum} micro-batches a "
          f"step, autocast {a.dtype}, attention {'SDPA' if HAVE_SDPA else 'plain (no SDPA)'}, "
          f"AdamW {'fused' if fused else 'foreach/default'}, {'compiled' if compiled else 'eager'}", flush=True)

    g = torch.Generator(device="cpu").manual_seed(0)
    data = torch.randint(0, min(a.data_vocab, a.vocab), (a.grad_accum, a.batch, a.seq_len + 1), generator=g).to(dev)
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    tokens = a.grad_accum * a.batch * a.seq_len
    fpt = 6.0 * nparams + 6.0 * a.n_layer * a.seq_len * a.n_embd
    times = []
    for step in range(1, a.steps + 1):
        sync()
        t0 = time.perf_counter()
        total = 0.0
        for m in range(a.grad_accum):
            with amp:
                loss = step_model(data[m, :, :-1], data[m, :, 1:]) / a.grad_accum
            loss.backward()
            total += loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        dt = time.perf_counter() - t0
        times.append(dt)
        print(f"step {step}/{a.steps} | loss {float(total):.4f} | norm {float(norm):.4f} | {1e3 * dt:.1f} ms | "
              f"{tokens / dt:,.0f} tok/s", flush=True)
    steady = times[a.warmup:]
    tok_s = tokens * len(steady) / sum(steady)
    mean_dt = sum(steady) / len(steady)
    peak = f"{torch.cuda.max_memory_allocated(dev) / 2**20:.0f}" if dev.type == "cuda" else "-"
    print(f"bench: label={label} tok_s={tok_s:.0f} mfu={100 * fpt * tok_s / (a.peak_tflops * 1e12):.1f} first_x=- "
          f"peak_mib={peak} compile_s={times[0] - mean_dt:.1f} steps={len(steady)}", flush=True)


if __name__ == "__main__":
    main()
