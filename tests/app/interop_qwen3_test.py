#!/usr/bin/env python3
# tests/app/interop_qwen3_test.py — the Llama with QK-norm (model.qk_norm, model.head_dim) out to
# HuggingFace's Qwen3MoeForCausalLM and Qwen3ForCausalLM layouts and back in (app/interop/hf_qwen3.*,
# hf_llama.*), checked against an independent float64 PyTorch Qwen3 written below.
#
# Drives the real binaries on a 2-layer Qwen3-MoE (4 query heads over 2 key/value heads of head_dim 16,
# twice n_embd / n_head = 8, QK-norm, 4 SwiGLU experts of width 24, top-2, untied) trained 12 steps on
# the tiny dataset, and a dense Qwen3 of the same attention trained 4:
#  1. llmtrain-export --format hf: config.json's Qwen3MoeConfig keys (model_type qwen3_moe, head_dim,
#     num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob true, decoder_sparse_step
#     1, mlp_only_layers []); the safetensors hold exactly Qwen3-MoE's names and shapes
#     (self_attn.q_norm / k_norm (head_dim); mlp.gate.weight (E, C); mlp.experts.<j>.gate_proj,
#     up_proj (F, C), down_proj (C, F)).
#  2. The reference, written from the Qwen3 architecture (the Qwen3 technical report and HF's
#     Qwen3Attention / Qwen3MoeSparseMoeBlock semantics), not from our code: RMSNorm
#     x * rsqrt(mean(x^2) + eps) * w; q, k, v projections to (heads, head_dim); q_norm / k_norm as that
#     RMSNorm over head_dim of each head, before rotate-half RoPE; grouped-query causal attention with
#     scale 1/sqrt(head_dim); o_proj from n_head * head_dim; the MoE block: softmax over all E router
#     logits, top k, weights divided by their sum (norm_topk_prob), each expert down(silu(gate x) * up x).
#     Its logits on a sequence must match llmtrain's (dump_logits, CPU fp32) within 1e-5 x max|logit| +
#     1e-6 (the Llama and Mixtral tests' bound); three wrong readings must miss by over 10x the bound:
#     no QK-norm, gate and up swapped, norm_topk_prob false. Its val loss over the trainer's val windows
#     equals the trainer's logged val loss within 1e-4 relative. The dense Qwen3's logits likewise.
#  3. llmtrain-eval --task val on the run and on the HF export: the trainer's val loss bitwise.
#  4. export -> model.init_from -> one step at lr 1e-30 -> export is bitwise equal to the first
#     (model.safetensors and config.json), for Qwen3-MoE and dense Qwen3.
#  5. Refusals, naming the key or file: a Qwen3-MoE directory into a config without model.qk_norm
#     (model.qk_norm), norm_topk_prob false, another num_experts, q_norm missing; the checkpoint of a
#     run without QK-norm resumed with model.qk_norm = true (the model identity names model.qk_norm).
# Usage: interop_qwen3_test.py LLMTRAIN LLMTRAIN_EXPORT DUMP_LOGITS TINY_DATA_DIR WORK_DIR LLMTRAIN_EVAL
import json
import math
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_test_lib import check, failures, load_safetensors, read_bytes, write_safetensors  # noqa: E402

LLMTRAIN, EXPORT, DUMP, DATA, WORK, EVAL = sys.argv[1:7]
V = int(open(os.path.join(DATA, "vocab_size.txt")).read())
L, H, KV, C, HD, T, B, THETA, EPS = 2, 4, 2, 32, 16, 16, 2, 1000000.0, 1e-6
E, K, FE, ALPHA = 4, 2, 24, 0.001
torch.set_default_dtype(torch.float64)


def llmtrain(run_dir, *sets, moe=True, qk=True):
    model = [f"model.n_layer={L}", f"model.n_head={H}", f"model.n_embd={C}", f"model.seq_len={T}",
             f"model.vocab_size={V}", 'model.arch="llama"', f"model.n_kv_head={KV}", "model.intermediate_size=48",
             f"model.rope_theta={THETA}", f"model.norm_eps={EPS}", "model.tie_embeddings=false"]
    if qk:
        model += ["model.qk_norm=true", f"model.head_dim={HD}"]
    if moe:
        model += [f"model.moe.n_experts={E}", f"model.moe.top_k={K}", f"model.moe.expert_ffn={FE}",
                  f"model.moe.aux_loss_coef={ALPHA}"]
    base = model + [f'data.train="{DATA}/train.h5"', f'data.val="{DATA}/val.h5"', f'run.run_dir="{run_dir}"',
                    'run.backend="cpu"', "metrics.enabled=false", f"training.micro_batch_size={B}",
                    "run.eval_interval=0", "run.sample_interval=0", "checkpoint.interval=0"]
    argv = [LLMTRAIN]
    for s in base + list(sets):
        argv += ["--set", s]
    return subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))


def export(ckpt, out, *flags):
    return subprocess.run([EXPORT, ckpt, "--format", "hf", *flags, out], capture_output=True, text=True)


def val_loss_of(*argv):
    """llmtrain-eval --task val's loss on argv, or its stderr's end."""
    ev = subprocess.run([EVAL, *argv, "--task", "val"], capture_output=True, text=True,
                        env=dict(os.environ, OMP_NUM_THREADS="1"))
    got = [l.split()[2] for l in ev.stdout.splitlines() if l.startswith("val loss ")]
    return float(got[0]) if ev.returncode == 0 and len(got) == 1 else ev.stderr.strip()[-300:]


def qwen3_names(moe):
    layer = {"self_attn.q_proj.weight": (H * HD, C), "self_attn.k_proj.weight": (KV * HD, C),
             "self_attn.v_proj.weight": (KV * HD, C), "self_attn.o_proj.weight": (C, H * HD),
             "self_attn.q_norm.weight": (HD,), "self_attn.k_norm.weight": (HD,),
             "input_layernorm.weight": (C,), "post_attention_layernorm.weight": (C,)}
    if moe:
        layer["mlp.gate.weight"] = (E, C)
        for j in range(E):
            layer.update({f"mlp.experts.{j}.gate_proj.weight": (FE, C), f"mlp.experts.{j}.up_proj.weight": (FE, C),
                          f"mlp.experts.{j}.down_proj.weight": (C, FE)})
    else:
        layer.update({"mlp.gate_proj.weight": (48, C), "mlp.up_proj.weight": (48, C), "mlp.down_proj.weight": (C, 48)})
    out = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
    for l in range(L):
        out.update({f"model.layers.{l}.{n}": s for n, s in layer.items()})
    return out


# ---- the independent Qwen3 (float64) ----
def rmsnorm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def rope(x):  # x (B, heads, T, HD): rotate-half pairs (i, i + HD/2), angle t * THETA^(-2i/HD)
    inv = 1.0 / (THETA ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD))
    ang = torch.outer(torch.arange(x.shape[2], dtype=torch.float64), inv)
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
    x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat((-x2, x1), -1) * sin


def sparse_moe(w, x, norm_topk=True, swap=False):
    Bh, Th, _ = x.shape
    x = x.reshape(-1, C)
    probs = F.softmax(x @ w("mlp.gate.weight").T, dim=-1)
    weights, chosen = torch.topk(probs, K, dim=-1)
    if norm_topk:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for j in range(E):
        rows, slot = torch.where(chosen == j)
        ex = lambda n: w(f"mlp.experts.{j}.{n}.weight")  # noqa: E731
        g, u = (ex("up_proj"), ex("gate_proj")) if swap else (ex("gate_proj"), ex("up_proj"))
        y = (F.silu(x[rows] @ g.T) * (x[rows] @ u.T)) @ ex("down_proj").T
        out.index_add_(0, rows, y * weights[rows, slot, None])
    return out.reshape(Bh, Th, C)


def qwen3_logits(p, idx, moe=True, qk_norm=True, **kw):
    Bq, Tq = idx.shape
    mask = torch.full((Tq, Tq), float("-inf")).triu(1)
    x = p["model.embed_tokens.weight"][idx]
    for l in range(L):
        w = lambda n: p[f"model.layers.{l}.{n}"]  # noqa: E731
        h = rmsnorm(x, w("input_layernorm.weight"))
        heads = lambda name, n: (h @ w(f"self_attn.{name}.weight").T).view(Bq, Tq, n, HD).transpose(1, 2)  # noqa
        q, k, v = heads("q_proj", H), heads("k_proj", KV), heads("v_proj", KV)
        if qk_norm:
            q, k = rmsnorm(q, w("self_attn.q_norm.weight")), rmsnorm(k, w("self_attn.k_norm.weight"))
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        att = (q @ k.transpose(2, 3)) / math.sqrt(HD) + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(Bq, Tq, H * HD)
        x = x + y @ w("self_attn.o_proj.weight").T
        h = rmsnorm(x, w("post_attention_layernorm.weight"))
        if moe:
            x = x + sparse_moe(w, h, **kw)
        else:
            x = x + (F.silu(h @ w("mlp.gate_proj.weight").T) * (h @ w("mlp.up_proj.weight").T)) @ w(
                "mlp.down_proj.weight").T
    return rmsnorm(x, p["model.norm.weight"]) @ p["lm_head.weight"].T


def reference(st, idx, **kw):
    with torch.no_grad():
        return qwen3_logits({k: torch.from_numpy(a) for k, (_, a) in st.items()}, idx, **kw)


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
IDLE = ["run.max_steps=1", "optimizer.lr=1e-30", "optimizer.weight_decay=0", "lr_schedule.warmup_steps=0",
        'lr_schedule.decay="constant"', "lr_schedule.min_lr=0"]
TRAIN = ["optimizer.lr=0.01", "lr_schedule.warmup_steps=0", 'lr_schedule.decay="constant"', "run.eval_steps=0"]
tokens = np.random.default_rng(11).integers(0, V, size=T).astype("<i4")
tokens.tofile(f"{WORK}/tokens.i32")
idx = torch.from_numpy(tokens.astype(np.int64))[None]
val_tokens = h5py.File(f"{DATA}/val.h5", "r")["tokens"][:].astype(np.int64)
n_win = (len(val_tokens) - 1) // T // B * B
win = np.stack([val_tokens[w * T:w * T + T + 1] for w in range(n_win)])

for moe, steps in [(True, 12), (False, 4)]:
    kind = "Qwen3-MoE" if moe else "Qwen3"
    run = f"{WORK}/{'moe' if moe else 'dense'}"
    p = llmtrain(run, f"run.max_steps={steps}", f"run.eval_interval={steps}", *TRAIN, moe=moe)
    if p.returncode != 0:
        sys.exit(f"training the {kind} failed: {p.stderr}")
    ckpt = f"{run}/checkpoints/step_{steps}"
    hf = f"{run}_hf"
    ex = export(ckpt, hf)
    if ex.returncode != 0:
        sys.exit(f"llmtrain-export of the {kind} failed: {ex.stderr}")

    # ---- 1. config.json and the tensors ----
    cfg = json.load(open(f"{hf}/config.json"))
    want = {"model_type": "qwen3_moe" if moe else "qwen3", "hidden_size": C, "num_attention_heads": H,
            "num_key_value_heads": KV, "num_hidden_layers": L, "head_dim": HD, "rms_norm_eps": EPS,
            "rope_theta": THETA, "vocab_size": V, "max_position_embeddings": T, "tie_word_embeddings": False,
            "hidden_act": "silu", "attention_bias": False, "use_sliding_window": False, "torch_dtype": "float32",
            "architectures": ["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"]}
    if moe:
        want.update({"num_experts": E, "num_experts_per_tok": K, "moe_intermediate_size": FE, "norm_topk_prob": True,
                     "decoder_sparse_step": 1, "mlp_only_layers": [], "router_aux_loss_coef": ALPHA})
    else:
        want["intermediate_size"] = 48
    check(all(cfg.get(k, "absent") == v for k, v in want.items()),
          f"{kind} config.json: " + ", ".join(f"{k}={cfg.get(k, 'absent')!r}" for k in want))
    st = load_safetensors(f"{hf}/model.safetensors")
    shapes = {k: a.shape for k, (_, a) in st.items()}
    check(shapes == qwen3_names(moe) and all(d == "F32" for d, _ in st.values()),
          f"{kind}: model.safetensors holds exactly its {len(qwen3_names(moe))} HF names and shapes, F32")

    # ---- 2. the independent reference ----
    subprocess.run([DUMP, ckpt, f"{WORK}/tokens.i32", f"{WORK}/logits.f32"], check=True)
    ours = np.fromfile(f"{WORK}/logits.f32", dtype="<f4").reshape(T, V).astype(np.float64)
    want_logits = reference(st, idx, moe=moe)[0].numpy()
    err, scale = np.abs(ours - want_logits).max(), np.abs(want_logits).max()
    tol = 1e-5 * scale + 1e-6
    check(err <= tol, f"{kind}: float64 PyTorch Qwen3 on the exported safetensors reproduces llmtrain's logits: "
                      f"max |diff| {err:.3g} <= {tol:.3g} (max |logit| {scale:.3g})")
    wrong = [("no QK-norm", {"qk_norm": False})]
    if moe:
        wrong += [("gate and up swapped", {"swap": True}), ("norm_topk_prob false", {"norm_topk": False})]
    for what, kw in wrong:
        off = np.abs(reference(st, idx, moe=moe, **kw)[0].numpy() - ours).max()
        check(off > 10 * tol, f"{kind}, {what}: the logits move by {off:.3g} (> 10 x the bound)")
    logged = [r.split("\t") for r in open(f"{run}/losses.tsv").read().splitlines()[1:]]
    val = [float(r[2]) for r in logged if r[0] == str(steps) and r[1] == "val"]
    lg = reference(st, torch.from_numpy(win[:, :-1]), moe=moe)
    ref_loss = F.cross_entropy(lg.reshape(-1, V), torch.from_numpy(win[:, 1:]).reshape(-1)).item()
    ours_loss = val[-1] if val else float("nan")
    check(abs(ours_loss - ref_loss) <= 1e-4 * abs(ref_loss),
          f"{kind}: val loss over {n_win} windows: the trainer's {ours_loss:.7f}, reference {ref_loss:.7f} "
          f"(rel. diff {abs(ours_loss - ref_loss) / ref_loss:.2e} <= 1e-4)")

    # ---- 3. llmtrain-eval on the run and the export ----
    explicit = ["--data", f"{DATA}/val.h5", "--micro-batch", str(B), "--seq-len", str(T)]
    for what, argv in [("the run directory", [run]), ("the HF export", [hf, *explicit])]:
        got = val_loss_of(*argv)
        check(got == ours_loss, f"{kind}: llmtrain-eval --task val on {what}: {got}, the trainer's {ours_loss:.8f}")

    # ---- 4. the round trip, bitwise ----
    rt = f"{run}_rt"
    p = llmtrain(rt, f'model.init_from="{hf}"', *IDLE, moe=moe)
    ex = export(f"{rt}/checkpoints/step_1", f"{rt}/export") if p.returncode == 0 else p
    same = ex.returncode == 0 and all(read_bytes(f"{rt}/export/{f}") == read_bytes(f"{hf}/{f}")
                                      for f in ("model.safetensors", "config.json"))
    check(same, f"{kind}: export -> init_from -> one step at lr 1e-30 -> export is bitwise ({ex.stderr.strip()})")


# ---- 5. refusals ----
def bad(name, src, expect, *sets, **kw):
    rd = f"{WORK}/bad_{name}"
    p = llmtrain(rd, f'model.init_from="{src}"', *sets, **kw)
    err = p.stderr.strip()
    check(p.returncode == 1 and all(e in err for e in expect) and not os.path.exists(rd),
          f"bad {name}: exit {p.returncode}, run dir {'created' if os.path.exists(rd) else 'absent'}: {err}")


def variant(name, tensors, config):
    d = f"{WORK}/{name}"
    os.makedirs(d)
    json.dump(config, open(f"{d}/config.json", "w"))
    write_safetensors(f"{d}/model.safetensors", tensors)
    return d


hf = f"{WORK}/moe_hf"
cfg = json.load(open(f"{hf}/config.json"))
st = load_safetensors(f"{hf}/model.safetensors")
f32 = {k: ("<f4", "F32", a) for k, (_, a) in st.items()}
bad("no_qk", hf, ["config.json", 'model_type = "qwen3_moe"', "model.qk_norm"], qk=False)
bad("topk", variant("topk", f32, dict(cfg, norm_topk_prob=False)), ["config.json", "norm_topk_prob"])
bad("experts", hf, ["config.json", f"num_experts = {E}", "model.moe.n_experts = 8"], "model.moe.n_experts=8")
gone = "model.layers.1.self_attn.q_norm.weight"
bad("missing", variant("missing", {k: v for k, v in f32.items() if k != gone}, cfg),
    ["model.safetensors", gone, "is missing"])
plain = f"{WORK}/plain"  # a run without QK-norm, resumed with it: the model identity names the key
p = llmtrain(plain, "run.max_steps=1", "checkpoint.interval=1", qk=False)
q = llmtrain(plain, "run.max_steps=2", 'checkpoint.resume="auto"', "model.qk_norm=true", qk=False) \
    if p.returncode == 0 else p
check(q.returncode != 0 and "model.qk_norm" in q.stderr,
      f"resume of a checkpoint without QK-norm with model.qk_norm = true: exit {q.returncode}: {q.stderr.strip()[-300:]}")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all checks passed")
