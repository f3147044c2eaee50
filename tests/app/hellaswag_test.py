#!/usr/bin/env python3
# tests/app/hellaswag_test.py — HellaSwag end to end: in the training loop, llmtrain-eval, and an
# independent scorer (app/eval/hellaswag.hpp, docs/evaluation.md "HellaSwag").
#
# A small trained model: llmtrain-prep trains a 1,024-piece SentencePiece BPE on the contexts and
# correct endings of HellaSwag items 100..2099 (never scored here) and tokenizes them; llmtrain
# trains a 2-layer, width-64 GPT-2 on that for 150 steps, scoring the first 32 items (items.txt,
# cut from the project's copy, whose SHA-256 this script checks on its own) every 75 steps.
#  1. the loop logs "hellaswag acc ... acc_norm ... (32 items)" at steps 75 and 150 and writes both
#     figures to losses.tsv; llmtrain-eval on the final checkpoint with the loop's micro-batch
#     (4 x seq_len 128) gets exactly those counts (the same arithmetic); llmtrain-eval --task val
#     gets the loop's last val loss bit for bit (%.9g).
#  2. llmtrain-export --format hf, then a few lines of PyTorch (float64, HF's GPT-2 layout read
#     with numpy from the safetensors file) and python3-sentencepiece on tokenizer.model score the
#     same items by llm.c's rule: the chosen endings (acc and acc_norm) equal llmtrain-eval's item
#     for item, and every summed ending loss agrees within TOL = 2e-3 nats. Why 2e-3: llmtrain runs
#     in fp32; each position's loss is a log-sum-exp of logits of magnitude < 20 computed through
#     ~10 dot products of length <= 256, ~1e-6 relative each, so ~1e-5 per position, summed over
#     <= 40 ending positions: <= 4e-4; an item whose reference margin between its best two endings
#     is under 2 TOL could flip on rounding alone and is reported, not failed.
#  3. llmtrain-eval-emu --backend cuda (the CUDA code path on the CPU emulator, fp32) on the first
#     12 items (3 forwards of 16 rows; ~5 s idle): the same choices item for item, sums within TOL.
#  4. Layouts: the exported weights loaded back (model.init_from) and one step at lr 1e-30 (the
#     weights stay bit for bit: interop_weights_test.py's argument) scored in the loop on 1 rank,
#     2 data-parallel ranks under ZeRO-3, a 2-stage pipeline, tp 2, cp 2 and cp 2 x dp 2 under
#     ZeRO-3: the same counts on every layout, equal to llmtrain-eval's on those weights (items
#     split over the data-parallel ranks and summed; the pipeline's last stage, TP index 0 and CP
#     index 0 report; a CP group scores its windows together), and the same 24-token sample text
#     after the step (exact: the layouts' logits differ by rounding only, ~1e-6, and a token could
#     change only where two candidates' cumulative probabilities meet the draw that closely).
#  5. Errors: a row longer than seq_len (llmtrain-eval --seq-len 32, and the loop at model.seq_len 32)
#     exits 1 naming the item, its line and the file; a tokenizer other than the model's (the tiny
#     dataset's) exits 1 naming both hashes; a truncated gzip copy exits 1 naming the file.
# Usage: hellaswag_test.py LLMTRAIN PREP EVAL EVAL_EMU|- EXPORT HELLASWAG_GZ TINY_DATA WORK MPIEXEC
import gzip
import hashlib
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time

import numpy as np
import sentencepiece as spm
import torch

LLMTRAIN, PREP, EVAL, EVAL_EMU, EXPORT, STORED, TINY, WORK, MPIEXEC = sys.argv[1:10]
SHA256 = "d572539320eb2050e858ca34b495bbe2103e3b3f1391a9c3bcdf215b0bb93bd1"  # data_files/hellaswag/README.md
N_ITEMS, N_EMU, L, H, C, T, V, B = 32, 12, 2, 2, 64, 128, 1024, 4
TOL = 2e-3
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
failures = []
T0 = time.monotonic()


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + f"[{time.monotonic() - T0:5.1f} s] " + what, flush=True)
    if not ok:
        failures.append(what)


def run(argv, expect=0):
    p = subprocess.run(argv, capture_output=True, text=True, env=ENV)
    if expect is not None and p.returncode != expect:
        sys.exit(f"{' '.join(argv)}: exit {p.returncode}, expected {expect}\n{p.stdout}\n{p.stderr}")
    return p


def llmtrain(run_dir, *sets, ranks=1, expect=0):
    base = [f"model.n_layer={L}", f"model.n_head={H}", f"model.n_embd={C}", f"model.seq_len={T}",
            f"model.vocab_size={V}", f'data.train="{WORK}/data/train.h5"', f'data.val="{WORK}/data/val.h5"',
            f'data.hellaswag="{WORK}/items.txt"', f'run.run_dir="{run_dir}"', 'run.backend="cpu"',
            "metrics.enabled=false", f"training.micro_batch_size={B}", "run.sample_interval=0",
            "checkpoint.interval=0", "run.log_interval=50"]
    argv = [MPIEXEC, "--oversubscribe", "-np", str(ranks), LLMTRAIN] if ranks > 1 else [LLMTRAIN]
    for s in base + list(sets):
        argv += ["--set", s]
    return run(argv, expect)


def hellaswag_lines(log):
    """step -> (acc, acc_norm, items) from the loop's log lines."""
    out = {}
    for m in re.finditer(r"step (\d+)/\d+ \| hellaswag acc ([0-9.]+) acc_norm ([0-9.]+) \(([0-9,]+) items\)", log):
        out[int(m.group(1))] = (m.group(2), m.group(3), int(m.group(4).replace(",", "")))
    return out


def eval_counts(stdout):
    m = re.search(r"hellaswag acc ([0-9.]+) acc_norm ([0-9.]+) \(([0-9,]+) items\)", stdout)
    return (m.group(1), m.group(2), int(m.group(3).replace(",", ""))) if m else None


def read_per_item(path):
    rows = [line.rstrip("\n").split("\t") for line in open(path)][1:]
    return [(int(r[2]), int(r[3]), [float(x) for x in r[4:8]]) for r in rows]


# ---- 0. items, corpus, tokenizer, a trained model ----
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
text = gzip.open(STORED, "rb").read()
check(hashlib.sha256(text).hexdigest() == SHA256, f"{STORED}: SHA-256 of the decompressed text is {SHA256}")
lines = text.decode("utf-8").split("\n")[:-1]
items = [lines[6 * i:6 * i + 6] for i in range(len(lines) // 6)]
check(len(items) == 10042, f"{len(items)} items in the stored copy (10,042 in HellaSwag's validation split)")
with open(f"{WORK}/items.txt", "w") as f:
    f.write("".join("\n".join(it) + "\n" for it in items[:N_ITEMS]))
with open(f"{WORK}/corpus.txt", "w") as f:
    f.write("".join(f"{it[0]} {it[2 + int(it[1])]}\n===\n" for it in items[100:2100]))
run([PREP, "--out-dir", f"{WORK}/data", "--separator", "===", "--vocab-size", str(V), f"{WORK}/corpus.txt"])
sp = spm.SentencePieceProcessor(model_file=f"{WORK}/data/tokenizer.model")
longest = max(len(sp.encode(it[0])) + len(sp.encode(" " + e)) for it in items[:N_ITEMS] for e in it[2:6])
check(longest <= T, f"the longest row of the {N_ITEMS} items is {longest} tokens (<= seq_len {T})")

rd = f"{WORK}/run"
p = llmtrain(rd, "run.max_steps=150", "optimizer.lr=3e-3", "lr_schedule.warmup_steps=10", "run.eval_interval=150",
             "run.eval_steps=0", "run.eval_hellaswag_interval=75")
loop = hellaswag_lines(p.stdout)
check(sorted(loop) == [75, 150] and all(v[2] == N_ITEMS for v in loop.values()),
      f"the loop scores {N_ITEMS} items at steps 75 and 150: {loop}")
tsv = [line.split("\t") for line in open(f"{rd}/losses.tsv")]
hs = {(int(r[0]), r[1]): float(r[2]) for r in tsv[1:] if r[1].startswith("hellaswag")}
check(f"{hs.get((150, 'hellaswag'), -1):.4f}" == loop[150][0] and
      f"{hs.get((150, 'hellaswag_norm'), -1):.4f}" == loop[150][1],
      f"losses.tsv holds step 150's hellaswag and hellaswag_norm ({hs.get((150, 'hellaswag'))}, "
      f"{hs.get((150, 'hellaswag_norm'))})")

# ---- 1. llmtrain-eval on the final checkpoint ----
p = run([EVAL, rd, "--task", "hellaswag", "--items", f"{WORK}/items.txt", "--micro-batch", str(B), "--seq-len", str(T)])
check(eval_counts(p.stdout) == loop[150], f"llmtrain-eval at the loop's micro-batch: {eval_counts(p.stdout)} "
      f"== the loop's at step 150 {loop[150]}")
check("equals the training data's" in p.stdout, "llmtrain-eval checked the tokenizer against the run's data.train")
val_loop = [r[2] for r in tsv[1:] if r[1] == "val" and r[0] == "150"]
p = run([EVAL, rd, "--task", "val"])
m = re.search(r"val loss (\S+) perplexity (\S+)", p.stdout)
check(m is not None and val_loop and m.group(1) == val_loop[-1] and
      abs(float(m.group(2)) - math.exp(float(m.group(1)))) < 1e-5 * float(m.group(2)),
      f"llmtrain-eval --task val: {m.group(0) if m else p.stdout!r} == the loop's val loss {val_loop}")
p = run([EVAL, rd, "--task", "hellaswag", "--items", f"{WORK}/items.txt", "--per-item", f"{WORK}/cpu.tsv"])
cpu = read_per_item(f"{WORK}/cpu.tsv")
check(len(cpu) == N_ITEMS, f"--per-item wrote {len(cpu)} items")

# ---- 2. the independent scorer: PyTorch float64 on the HF export ----
run([EXPORT, rd, "--format", "hf", f"{WORK}/hf"])
raw = open(f"{WORK}/hf/model.safetensors", "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
hdr = json.loads(raw[8:8 + n])
hdr.pop("__metadata__", None)
W = {k: torch.from_numpy(np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], "<f4")
                         .astype(np.float64).reshape(v["shape"])) for k, v in hdr.items()}
cfg = json.load(open(f"{WORK}/hf/config.json"))
nl, nh, ne = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
F = torch.nn.functional


def gpt2_losses(ids):
    """Per-position cross-entropy (len(ids) - 1) of HF's GPT-2 layout: pre-LN, gelu_new, tied head."""
    x = W["transformer.wte.weight"][ids[:-1]] + W["transformer.wpe.weight"][:len(ids) - 1]
    t = x.shape[0]
    for i in range(nl):
        w = lambda k: W[f"transformer.h.{i}.{k}"]  # noqa: E731
        h = F.layer_norm(x, (ne,), w("ln_1.weight"), w("ln_1.bias"), 1e-5)
        q, k, v = (h @ w("attn.c_attn.weight") + w("attn.c_attn.bias")).split(ne, dim=1)
        q, k, v = (z.view(t, nh, ne // nh).transpose(0, 1) for z in (q, k, v))
        a = (q @ k.transpose(1, 2)) / math.sqrt(ne // nh)
        a = a.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        x = x + (a @ v).transpose(0, 1).reshape(t, ne) @ w("attn.c_proj.weight") + w("attn.c_proj.bias")
        h = F.layer_norm(x, (ne,), w("ln_2.weight"), w("ln_2.bias"), 1e-5) @ w("mlp.c_fc.weight") + w("mlp.c_fc.bias")
        h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
        x = x + h @ w("mlp.c_proj.weight") + w("mlp.c_proj.bias")
    logits = F.layer_norm(x, (ne,), W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], 1e-5) @ \
        W["transformer.wte.weight"].T
    return F.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none")


agree = agree_norm = near = 0
worst = 0.0
for i, it in enumerate(items[:N_ITEMS]):
    ctx = sp.encode(it[0])
    sums, counts = [], []
    for e in it[2:6]:
        end = sp.encode(" " + e)
        losses = gpt2_losses(ctx + end)
        sums.append(float(losses[len(ctx) - 1:].sum()))  # the positions predicting the ending's tokens
        counts.append(len(end))
    means = [s / c for s, c in zip(sums, counts)]
    ref, ref_norm = int(np.argmin(sums)), int(np.argmin(means))
    pred, pred_norm, got = cpu[i]
    worst = max(worst, max(abs(a - b) for a, b in zip(got, sums)))
    margin = min(sorted(sums)[1] - sorted(sums)[0], (sorted(means)[1] - sorted(means)[0]) * min(counts))
    if margin < 2 * TOL:
        near += 1
        print(f"note: item {i}: the reference's best two endings are {margin:.2e} apart (a near tie)")
        continue
    agree += pred == ref
    agree_norm += pred_norm == ref_norm
check(agree == agree_norm == N_ITEMS - near, f"PyTorch float64 chooses as llmtrain-eval: acc {agree}, acc_norm "
      f"{agree_norm} of {N_ITEMS - near} items ({near} near ties left out)")
check(worst <= TOL, f"summed ending losses agree within {TOL} nats (worst {worst:.2e})")

# ---- 3. the emulated CUDA backend ----
if EVAL_EMU != "-":
    run([EVAL_EMU, rd, "--backend", "cuda", "--task", "hellaswag", "--items", f"{WORK}/items.txt", "--n", str(N_EMU),
         "--per-item", f"{WORK}/emu.tsv"])
    emu = read_per_item(f"{WORK}/emu.tsv")
    same = sum(a[0] == b[0] and a[1] == b[1] for a, b in zip(cpu, emu))
    diff = max(abs(x - y) for a, b in zip(cpu, emu) for x, y in zip(a[2], b[2]))
    check(len(emu) == N_EMU and same == N_EMU, f"emulated CUDA (fp32) chooses as the CPU on {same} of {N_EMU} items")
    check(diff <= TOL, f"emulated CUDA's summed losses within {TOL} of the CPU's (worst {diff:.2e})")
else:
    print("skip: no llmtrain-eval-emu in this build")

# ---- 4. every layout scores alike ----
want = eval_counts(run([EVAL, f"{WORK}/hf", "--task", "hellaswag", "--items", f"{WORK}/items.txt", "--tokenizer",
                        f"{WORK}/data/tokenizer.model", "--micro-batch", str(B), "--seq-len", str(T)]).stdout)
same = ["run.max_steps=1", f'model.init_from="{WORK}/hf"', "optimizer.lr=1e-30", "lr_schedule.min_lr=0", "optimizer.weight_decay=0",
        "run.eval_interval=0", "run.eval_hellaswag_interval=1", "run.sample_interval=1", "run.sample_tokens=24"]
layouts = {"1 rank": (1, []), "dp 2, ZeRO-3": (2, ["parallel.zero_stage=3"]),
           "pp 2": (2, ["parallel.pp=2", "training.grad_accum_steps=2"]), "tp 2": (2, ["parallel.tp=2"]),
           "cp 2": (2, ["parallel.cp=2"]), "cp 2 x dp 2, ZeRO-3": (4, ["parallel.cp=2", "parallel.zero_stage=3"])}
first_sample = None
for k, (name, (ranks, sets)) in enumerate(layouts.items()):
    out = llmtrain(f"{WORK}/layout{k}", *same, *sets, ranks=ranks).stdout
    got = hellaswag_lines(out)
    check(got.get(1) == want, f"{name}: the loop's {got.get(1)} == llmtrain-eval's on the same weights {want}")
    sample = re.findall(r"sample at step 1: (.*)", out)
    first_sample = first_sample if first_sample is not None else sample
    check(len(sample) == 1 and sample == first_sample, f"{name}: the step-1 sample is the 1-rank run's: {sample}")

# ---- 5. errors ----
p = run([EVAL, rd, "--task", "hellaswag", "--items", f"{WORK}/items.txt", "--seq-len", "32"], expect=1)
check(re.search(r"hellaswag item \d+ \(line \d+ of '.*items.txt'\).*longer than the model's seq_len 32", p.stderr)
      is not None, f"llmtrain-eval: a row over --seq-len names the item: {p.stderr.strip()}")
p = llmtrain(f"{WORK}/short", "model.seq_len=32", "run.max_steps=1", "run.eval_hellaswag_interval=1", expect=1)
check("hellaswag item 0 (line 1 of" in p.stderr and "seq_len 32" in p.stderr and not os.path.exists(f"{WORK}/short"),
      f"llmtrain: an item over model.seq_len fails the start, naming it: {p.stderr.strip()[-200:]}")
p = run([EVAL, rd, "--task", "hellaswag", "--items", f"{WORK}/items.txt", "--tokenizer", f"{TINY}/train.h5"], expect=None)
check(p.returncode == 1 and "not the one the model trained with" in p.stderr,
      f"another tokenizer: exit {p.returncode}: {p.stderr.strip()[:160]}")
gz = open(STORED, "rb").read()
open(f"{WORK}/cut.txt.gz", "wb").write(gz[:len(gz) // 3])
p = run([EVAL, rd, "--task", "hellaswag", "--items", f"{WORK}/cut.txt.gz"], expect=1)
check("cut.txt.gz" in p.stderr and "truncated" in p.stderr, f"a truncated copy: {p.stderr.strip()}")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all checks passed")
