#!/usr/bin/env python3
# tests/app/interop_moe_test.py — the mixture-of-experts Llama ([model.moe]) out to HuggingFace's
# MixtralForCausalLM layout and back in (app/interop/hf_moe.*, hf_llama.*), checked against an
# independent float64 PyTorch Mixtral.
#
# Drives the real binaries on a 2-layer MoE Llama (4 query heads, 2 key/value heads, head size 8,
# 4 SwiGLU experts of width 24, top-2, softmax router, untied) trained 12 steps on the tiny dataset:
#  1. llmtrain-export --format hf: config.json's MixtralConfig keys (model_type mixtral,
#     intermediate_size = the expert width, num_local_experts, num_experts_per_tok,
#     router_aux_loss_coef = model.moe.aux_loss_coef, sliding_window null); the safetensors parsed by
#     the published layout (interop_test_lib.py): exactly Mixtral's names and shapes
#     (block_sparse_moe.gate.weight (E, C); experts.<e>.w1 (F, C), w2 (C, F), w3 (F, C)).
#  2. The reference: tests/model/llama_ref.py's attention (from HF's LlamaForCausalLM) with each MLP
#     replaced by mixtral_moe below, written from Mixtral's paper (Jiang et al. 2024, eq. 1-2:
#     G(x) = Softmax(TopK(x Wg)), each expert w2(silu(w1 x) * w3 x)) and HF's MixtralSparseMoeBlock
#     (softmax over all E router logits, torch.topk, the k weights divided by their sum, the experts
#     applied expert by expert with index_add), not from our code, in float64 on the exported
#     tensors. Its logits on a sequence must match llmtrain's (dump_logits, CPU fp32) within
#     1e-5 x max|logit| + 1e-6 (the Llama test's bound: fp32 rounding over ~10 dot-product stages;
#     routing is discrete, and no top-k choice here is within fp32 rounding of a tie). Two wrong
#     readings must miss by over 10x the bound: w1 and w3 swapped (gate|up split the wrong way round),
#     and the top-k weights not renormalized (Qwen3-MoE's norm_topk_prob = false, not Mixtral).
#     Its val loss over the trainer's val windows must equal the trainer's logged val loss (the
#     cross-entropy; the balance loss is not in it) within 1e-4 relative.
#  3. llmtrain-eval --task val on the run, the checkpoint alone and the HF export: the trainer's val
#     loss bitwise (the same fp32 weights, forward and windows).
#  4. export -> model.init_from (the directory; shards and their index) -> one step at lr 1e-30 (an
#     update below half an ulp of every weight) -> export is bitwise equal to the first (config.json
#     too), and llmtrain-eval of that run gives the same val loss bitwise.
#  5. Refusals, naming the key or the file and tensor: export of shared experts
#     (model.moe.n_shared_experts) and of a sigmoid router (model.moe.router), exit 1 and no output;
#     init_from (exit 1, no run directory) with an expert tensor missing, a transposed w1 (both
#     shapes), another expert count (num_local_experts), the Mixtral files into a dense Llama
#     (model_type), a Qwen3-MoE config.json (q_norm).
# Usage: interop_moe_test.py LLMTRAIN LLMTRAIN_EXPORT DUMP_LOGITS TINY_DATA_DIR WORK_DIR LLMTRAIN_EVAL
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))
from llama_ref import llama_logits  # noqa: E402  (the independent Llama attention)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_test_lib import check, failures, load_safetensors, read_bytes, write_safetensors  # noqa: E402

LLMTRAIN, EXPORT, DUMP, DATA, WORK, EVAL = sys.argv[1:7]
V = int(open(os.path.join(DATA, "vocab_size.txt")).read())
L, H, KV, C, T, B, THETA, EPS = 2, 4, 2, 32, 16, 2, 500000.0, 1e-5
E, K, FE, ALPHA = 4, 2, 24, 0.02
torch.set_default_dtype(torch.float64)


def llmtrain(run_dir, *sets, moe=True):
    model = [f"model.n_layer={L}", f"model.n_head={H}", f"model.n_embd={C}", f"model.seq_len={T}",
             f"model.vocab_size={V}", 'model.arch="llama"', f"model.n_kv_head={KV}", "model.intermediate_size=48",
             f"model.rope_theta={THETA}", f"model.norm_eps={EPS}", "model.tie_embeddings=false"]
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
    """llmtrain-eval --task val's loss (text, as printed) on argv, or its stderr's end."""
    ev = subprocess.run([EVAL, *argv, "--task", "val"], capture_output=True, text=True,
                        env=dict(os.environ, OMP_NUM_THREADS="1"))
    got = [l.split()[2] for l in ev.stdout.splitlines() if l.startswith("val loss ")]
    return float(got[0]) if ev.returncode == 0 and len(got) == 1 else ev.stderr.strip()[-300:]


def mixtral_names():
    attn = {"self_attn.q_proj.weight": (H * 8, C), "self_attn.k_proj.weight": (KV * 8, C),
            "self_attn.v_proj.weight": (KV * 8, C), "self_attn.o_proj.weight": (C, H * 8),
            "input_layernorm.weight": (C,), "post_attention_layernorm.weight": (C,),
            "block_sparse_moe.gate.weight": (E, C)}
    for e in range(E):
        attn.update({f"block_sparse_moe.experts.{e}.w1.weight": (FE, C),
                     f"block_sparse_moe.experts.{e}.w2.weight": (C, FE),
                     f"block_sparse_moe.experts.{e}.w3.weight": (FE, C)})
    out = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
    for l in range(L):
        out.update({f"model.layers.{l}.{n}": s for n, s in attn.items()})
    return out


def mixtral_moe(w, h, renormalize=True, swap_w1_w3=False):
    """HF's MixtralSparseMoeBlock on h (B,T,C) with the layer's tensors w(name)."""
    Bh, Th, Ch = h.shape
    x = h.reshape(-1, Ch)
    probs = F.softmax(x @ w("block_sparse_moe.gate.weight").T, dim=-1)  # over all E experts
    weights, chosen = torch.topk(probs, K, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(E):
        rows, slot = torch.where(chosen == e)
        if rows.numel() == 0:
            continue
        ex = lambda n: w(f"block_sparse_moe.experts.{e}.{n}.weight")  # noqa: E731
        w1, w3 = (ex("w3"), ex("w1")) if swap_w1_w3 else (ex("w1"), ex("w3"))
        y = (F.silu(x[rows] @ w1.T) * (x[rows] @ w3.T)) @ ex("w2").T
        out.index_add_(0, rows, y * weights[rows, slot, None])
    return out.reshape(Bh, Th, Ch)


def reference(p, idx, **kw):
    with torch.no_grad():
        return llama_logits(p, idx, L, H, KV, C, False, EPS, THETA, mlp=lambda w, h: mixtral_moe(w, h, **kw))


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
IDLE = ["run.max_steps=1", "optimizer.lr=1e-30", "optimizer.weight_decay=0", "lr_schedule.warmup_steps=0",
        'lr_schedule.decay="constant"', "lr_schedule.min_lr=0"]
run = f"{WORK}/moe"
p = llmtrain(run, "run.max_steps=12", "optimizer.lr=0.01", "lr_schedule.warmup_steps=0",
             'lr_schedule.decay="constant"', "run.eval_interval=12", "run.eval_steps=0")
if p.returncode != 0:
    sys.exit(f"training the MoE Llama failed: {p.stderr}")
ckpt = f"{run}/checkpoints/step_12"
hf = f"{WORK}/hf"
ex = export(ckpt, hf)
if ex.returncode != 0:
    sys.exit(f"llmtrain-export of the MoE Llama failed: {ex.stderr}")

# ---- 1. config.json and the tensors ----
cfg = json.load(open(f"{hf}/config.json"))
want = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": C, "intermediate_size": FE,
        "num_attention_heads": H, "num_key_value_heads": KV, "num_hidden_layers": L, "head_dim": C // H,
        "num_local_experts": E, "num_experts_per_tok": K, "router_aux_loss_coef": ALPHA, "sliding_window": None,
        "output_router_logits": False, "rms_norm_eps": EPS, "rope_theta": THETA, "vocab_size": V,
        "max_position_embeddings": T, "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "float32"}
check(all(cfg.get(k, "absent") == v for k, v in want.items()),
      "config.json: " + ", ".join(f"{k}={cfg.get(k, 'absent')!r}" for k in want))
st = load_safetensors(f"{hf}/model.safetensors")
shapes = {k: a.shape for k, (_, a) in st.items()}
check(shapes == mixtral_names() and all(d == "F32" for d, _ in st.values()),
      f"model.safetensors holds exactly Mixtral's {len(mixtral_names())} names and shapes, F32")

# ---- 2. the independent reference: logits and val loss ----
ref_p = {k: torch.from_numpy(a) for k, (_, a) in st.items()}
tokens = np.random.default_rng(11).integers(0, V, size=T).astype("<i4")
tokens.tofile(f"{WORK}/tokens.i32")
subprocess.run([DUMP, ckpt, f"{WORK}/tokens.i32", f"{WORK}/logits.f32"], check=True)
ours = np.fromfile(f"{WORK}/logits.f32", dtype="<f4").reshape(T, V).astype(np.float64)
idx = torch.from_numpy(tokens.astype(np.int64))[None]
want_logits = reference(ref_p, idx)[0].numpy()
err, scale = np.abs(ours - want_logits).max(), np.abs(want_logits).max()
tol = 1e-5 * scale + 1e-6
check(err <= tol, f"float64 PyTorch Mixtral on the exported safetensors reproduces llmtrain's logits: "
                  f"max |diff| {err:.3g} <= {tol:.3g} (max |logit| {scale:.3g})")
for what, kw in [("w1 and w3 swapped", {"swap_w1_w3": True}), ("top-k weights not renormalized", {"renormalize": False})]:
    off = np.abs(reference(ref_p, idx, **kw)[0].numpy() - ours).max()
    check(off > 10 * tol, f"{what}: the logits move by {off:.3g} (> 10 x the bound)")
logged = [r.split("\t") for r in open(f"{run}/losses.tsv").read().splitlines()[1:]]
val = [float(r[2]) for r in logged if r[0] == "12" and r[1] == "val"]
val_tokens = h5py.File(f"{DATA}/val.h5", "r")["tokens"][:].astype(np.int64)
n_win = (len(val_tokens) - 1) // T // B * B
win = np.stack([val_tokens[w * T:w * T + T + 1] for w in range(n_win)])
lg = reference(ref_p, torch.from_numpy(win[:, :-1]))
ref_loss = F.cross_entropy(lg.reshape(-1, V), torch.from_numpy(win[:, 1:]).reshape(-1)).item()
ours_loss = val[-1] if val else float("nan")
check(abs(ours_loss - ref_loss) <= 1e-4 * abs(ref_loss),
      f"val loss over {n_win} windows: the trainer's {ours_loss:.7f}, reference {ref_loss:.7f} "
      f"(rel. diff {abs(ours_loss - ref_loss) / ref_loss:.2e} <= 1e-4)")

# ---- 3. llmtrain-eval on the run, the checkpoint alone and the HF export ----
alone = f"{WORK}/alone/step_12"  # no run config.toml above: the model from state.toml's identity
shutil.copytree(ckpt, alone)
explicit = ["--data", f"{DATA}/val.h5", "--micro-batch", str(B), "--seq-len", str(T)]
for what, argv in [("the run directory", [run]), ("the checkpoint alone", [alone, *explicit]),
                   ("the HF export", [hf, *explicit])]:
    got = val_loss_of(*argv)
    check(got == ours_loss, f"llmtrain-eval --task val on {what}: {got}, the trainer's {ours_loss:.8f} (bitwise)")

# ---- 4. round trips, bitwise ----
sh = f"{WORK}/hf_sharded"
ex = export(ckpt, sh, "--shard-mb", "0.1")
shards = sorted(f for f in os.listdir(sh) if f.endswith(".safetensors"))
check(ex.returncode == 0 and len(shards) > 1 and os.path.exists(f"{sh}/model.safetensors.index.json"),
      f"--shard-mb 0.1: {len(shards)} shards and the index")
for name, src in [("dir", hf), ("index_file", f"{sh}/model.safetensors.index.json")]:
    rt = f"{WORK}/rt_{name}"
    p = llmtrain(rt, f'model.init_from="{src}"', *IDLE)
    if p.returncode != 0:
        check(False, f"init_from {name}: llmtrain failed: {p.stderr.strip()}")
        continue
    ex = export(f"{rt}/checkpoints/step_1", f"{rt}/export")
    same = ex.returncode == 0 and all(read_bytes(f"{rt}/export/{f}") == read_bytes(f"{hf}/{f}")
                                      for f in ("model.safetensors", "config.json"))
    check(same, f"export -> init_from {name} -> one step at lr 1e-30 -> export is bitwise")
    got = val_loss_of(rt)
    check(got == ours_loss, f"init_from {name}: llmtrain-eval's val loss {got}, the trainer's {ours_loss:.8f} (bitwise)")

# ---- 5. refusals ----
for name, sets, key in [("shared", ["model.moe.n_shared_experts=1"], "model.moe.n_shared_experts = 1"),
                        ("sigmoid", ['model.moe.router="sigmoid"'], 'model.moe.router = "sigmoid"')]:
    rd = f"{WORK}/{name}"
    p = llmtrain(rd, "run.max_steps=1", *sets)
    ex = export(f"{rd}/checkpoints/step_1", f"{rd}/hf") if p.returncode == 0 else p
    check(ex.returncode == 1 and key in ex.stderr and "MixtralForCausalLM" in ex.stderr and
          not os.path.exists(f"{rd}/hf/model.safetensors"),
          f"export of {name}: exit {ex.returncode}: {ex.stderr.strip()}")


def bad(name, src, expect, *sets, moe=True):
    rd = f"{WORK}/bad_{name}"
    p = llmtrain(rd, f'model.init_from="{src}"', *sets, moe=moe)
    err = p.stderr.strip()
    check(p.returncode == 1 and all(e in err for e in expect) and not os.path.exists(rd),
          f"bad {name}: exit {p.returncode}, run dir {'created' if os.path.exists(rd) else 'absent'}: {err}")


def variant(name, tensors, config=None):
    d = f"{WORK}/{name}"
    os.makedirs(d)
    json.dump(config or cfg, open(f"{d}/config.json", "w"))
    write_safetensors(f"{d}/model.safetensors", tensors)
    return d


f32 = {k: ("<f4", "F32", a) for k, (_, a) in st.items()}
gone = "model.layers.1.block_sparse_moe.experts.3.w2.weight"
bad("missing", variant("missing", {k: v for k, v in f32.items() if k != gone}),
    ["model.safetensors", gone, "is missing"])
w1 = "model.layers.0.block_sparse_moe.experts.2.w1.weight"
bad("shape", variant("shape", dict(f32, **{w1: ("<f4", "F32", st[w1][1].T)})),
    ["model.safetensors", w1, f"shape [{C}, {FE}]", f"expected [{FE}, {C}]"])
bad("experts", hf, ["config.json", f"num_local_experts = {E}", "model.moe.n_experts = 8"], "model.moe.n_experts=8")
bad("dense", hf, ["config.json", 'model_type = "mixtral"', "[model.moe]"], moe=False)
bad("qwen3", variant("qwen3", f32, dict(cfg, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"])),
    ["config.json", 'model_type = "qwen3_moe"', "q_norm"])

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all checks passed")
