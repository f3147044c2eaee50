#!/usr/bin/env python3
# tests/app/interop_llama_test.py — Llama weights out to HuggingFace and back in (app/interop/hf_llama.*,
# hf_shards.*), checked against an independent float64 PyTorch Llama.
#
# Drives the real binaries on 2-layer Llamas (4 query heads, 2 key/value heads, head size 8, SwiGLU
# width 48, rope_theta 500000) trained a few steps on the tiny dataset, one untied and one tied:
#  1. llmtrain-export --format hf: config.json key by key against LlamaConfig's meaning; the
#     safetensors parsed here by the published layout (8-byte length, JSON header, raw little-endian
#     data; the helpers of interop_weights_test.py's kind, no safetensors package): exactly HF's names
#     and shapes (q/k/v and gate/up separate; lm_head only when untied; vocab rows unpadded).
#  2. The reference, tests/model/llama_ref.py (written from HF's documented LlamaForCausalLM: rotate-half
#     RoPE on q_proj/k_proj rows as HF stores them, repeat_kv GQA, RMSNorm, SwiGLU; not our code), runs
#     on those tensors in float64. Its logits on a sequence must match llmtrain's (dump_logits, CPU
#     fp32) within 1e-5 x max|logit| + 1e-6 (fp32 rounding over ~10 sequential dot-product stages of
#     length <= 48, ~1e-6 relative, RMSNorm rescaling up to ~10x: the GPT-2 test's bound); the same
#     q/k rows in Meta's interleaved RoPE order must miss by over 10x the bound (so HF's rotate-half
#     layout, copied as is, is the one that matches). Its val loss over
#     the windows the trainer's val eval reads at step 12 (run.eval_steps = 0: the whole val file in
#     file order, seq_len + 1 tokens each, micro-batches of 2) must equal the loss the trainer logs to
#     losses.tsv within 1e-4 relative (an fp32 mean against float64: ~1e-6 apart).
#  3. --shard-mb 0.06 splits the untied model's 144 kB into 3 shards + model.safetensors.index.json:
#     weight_map covers every tensor once, total_size is the data's bytes, and the shards' tensors
#     equal the single file's bitwise. --dtype bf16: every tensor torch's round-to-nearest-even.
#  4. export -> model.init_from (directory, single file, sharded directory, the index file) -> one
#     step at lr 1e-30 (an update below half an ulp of every weight) -> export is bitwise equal to the
#     first export (config.json too).
#  5. Errors, exit 1 before the run directory exists, naming the file and tensor or key: a missing
#     tensor, a transposed k_proj (both shapes), an F64 tensor (its dtype), config.json's layer count,
#     a Llama directory with model.arch = "gpt2" (model_type), a missing shard (the index and the
#     shard); llmtrain-export --format llmc of a Llama.
# Usage: interop_llama_test.py LLMTRAIN LLMTRAIN_EXPORT DUMP_LOGITS TINY_DATA_DIR WORK_DIR
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
from llama_ref import llama_logits  # noqa: E402  (the independent Llama)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_test_lib import check, failures, load_safetensors, read_bytes, write_safetensors  # noqa: E402

LLMTRAIN, EXPORT, DUMP, DATA, WORK = sys.argv[1:6]
EVAL = sys.argv[6] if len(sys.argv) > 6 else ""  # llmtrain-eval: the same val loss from the checkpoint
V = int(open(os.path.join(DATA, "vocab_size.txt")).read())
L, H, KV, C, FF, T, B, THETA, EPS = 2, 4, 2, 32, 48, 16, 2, 500000.0, 1e-5
torch.set_default_dtype(torch.float64)
def llmtrain(run_dir, *sets, tied=False, llama=True):
    arch = ['model.arch="llama"', f"model.n_kv_head={KV}", f"model.intermediate_size={FF}",
            f"model.rope_theta={THETA}", f"model.norm_eps={EPS}", f"model.tie_embeddings={str(tied).lower()}"]
    base = [f"model.n_layer={L}", f"model.n_head={H}", f"model.n_embd={C}", f"model.seq_len={T}",
            f"model.vocab_size={V}"] + (arch if llama else []) + [
            f'data.train="{DATA}/train.h5"', f'data.val="{DATA}/val.h5"', f'run.run_dir="{run_dir}"',
            'run.backend="cpu"', "metrics.enabled=false", f"training.micro_batch_size={B}", "run.eval_interval=0",
            "run.sample_interval=0", "checkpoint.interval=0"]
    argv = [LLMTRAIN]
    for s in base + list(sets):
        argv += ["--set", s]
    return subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))


def export(ckpt, out, *flags):
    p = subprocess.run([EXPORT, ckpt, "--format", "hf", *flags, out], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"llmtrain-export {ckpt} {flags} failed: {p.stderr}")


def hf_names(tied):
    layer = ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
             "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
             "input_layernorm.weight", "post_attention_layernorm.weight"]
    shapes = [(H * 8, C), (KV * 8, C), (KV * 8, C), (C, H * 8), (FF, C), (FF, C), (C, FF), (C,), (C,)]
    out = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    for l in range(L):
        out.update({f"model.layers.{l}.{n}": s for n, s in zip(layer, shapes)})
    if not tied:
        out["lm_head.weight"] = (V, C)
    return out


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
IDLE = ["run.max_steps=1", "optimizer.lr=1e-30", "optimizer.weight_decay=0", "lr_schedule.warmup_steps=0",
        'lr_schedule.decay="constant"', "lr_schedule.min_lr=0"]
val_tokens = h5py.File(f"{DATA}/val.h5", "r")["tokens"][:].astype(np.int64)
h5 = h5py.File(f"{DATA}/train.h5", "r")
BOS, EOS = int(h5.attrs["bos_id"]), int(h5.attrs["eos_id"])

for tied in (False, True):
    tag = "tied" if tied else "untied"
    run = f"{WORK}/{tag}"
    p = llmtrain(run, "run.max_steps=12", "optimizer.lr=0.01", "lr_schedule.warmup_steps=0",
                 'lr_schedule.decay="constant"', "run.eval_interval=12", "run.eval_steps=0", tied=tied)
    if p.returncode != 0:
        sys.exit(f"training the {tag} Llama failed: {p.stderr}")
    ckpt = f"{run}/checkpoints/step_12"
    hf = f"{WORK}/hf_{tag}"
    export(ckpt, hf)

    # ---- 1. config.json and the tensors ----
    cfg = json.load(open(f"{hf}/config.json"))
    want = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
            "intermediate_size": FF, "num_attention_heads": H, "num_key_value_heads": KV, "num_hidden_layers": L,
            "head_dim": C // H, "rms_norm_eps": EPS, "rope_theta": THETA, "vocab_size": V,
            "max_position_embeddings": T, "tie_word_embeddings": tied, "torch_dtype": "float32",
            "hidden_act": "silu", "bos_token_id": BOS, "eos_token_id": EOS, "rope_scaling": None,
            "attention_bias": False, "mlp_bias": False}
    check(all(cfg.get(k, "absent") == v for k, v in want.items()),
          f"{tag} config.json: " + ", ".join(f"{k}={cfg.get(k, 'absent')!r}" for k in want))
    st = load_safetensors(f"{hf}/model.safetensors")
    shapes = {k: a.shape for k, (_, a) in st.items()}
    check(shapes == hf_names(tied) and all(d == "F32" for d, _ in st.values()),
          f"{tag}: model.safetensors holds exactly HF's {len(hf_names(tied))} names and shapes, F32")

    # ---- 2. the independent reference: logits and val loss ----
    ref_p = {k: torch.from_numpy(a) for k, (_, a) in st.items()}
    ref = lambda idx: llama_logits(ref_p, idx, L, H, KV, C, tied, EPS, THETA)  # noqa: E731
    rng = np.random.default_rng(11)
    tokens = rng.integers(0, V, size=T).astype("<i4")
    tokens.tofile(f"{WORK}/tokens.i32")
    subprocess.run([DUMP, ckpt, f"{WORK}/tokens.i32", f"{WORK}/logits.f32"], check=True)
    ours = np.fromfile(f"{WORK}/logits.f32", dtype="<f4").reshape(T, V).astype(np.float64)
    with torch.no_grad():
        want_logits = ref(torch.from_numpy(tokens.astype(np.int64))[None])[0].numpy()
    err, scale = np.abs(ours - want_logits).max(), np.abs(want_logits).max()
    tol = 1e-5 * scale + 1e-6
    check(err <= tol, f"{tag}: float64 PyTorch Llama (tests/model/llama_ref.py) on the exported safetensors "
                      f"reproduces llmtrain's logits: max |diff| {err:.3g} <= {tol:.3g} (max |logit| {scale:.3g})")
    # The layout matters: the same rows in Meta's interleaved RoPE order (each head's two halves
    # interleaved, the inverse of HF's conversion permute) must not reproduce the logits.
    meta = dict(ref_p)
    for k in list(meta):
        if k.endswith(("q_proj.weight", "k_proj.weight")):
            a = meta[k]
            meta[k] = a.reshape(-1, 2, C // H // 2, C).transpose(1, 2).reshape(a.shape)
    with torch.no_grad():
        off = np.abs(llama_logits(meta, torch.from_numpy(tokens.astype(np.int64))[None], L, H, KV, C, tied, EPS,
                                  THETA)[0].numpy() - ours).max()
    check(off > 10 * tol, f"{tag}: q/k rows in Meta's interleaved order move the logits by {off:.3g} (> 10 x the bound): "
                           "HF's rotate-half layout is the one that matches")
    logged = [r.split("\t") for r in open(f"{run}/losses.tsv").read().splitlines()[1:]]
    val = [float(r[2]) for r in logged if r[0] == "12" and r[1] == "val"]
    n_win = (len(val_tokens) - 1) // T // B * B
    win = np.stack([val_tokens[w * T:w * T + T + 1] for w in range(n_win)])
    with torch.no_grad():
        lg = ref(torch.from_numpy(win[:, :-1]))
        ref_loss = F.cross_entropy(lg.reshape(-1, V), torch.from_numpy(win[:, 1:]).reshape(-1)).item()
    ours_loss = val[-1] if val else float("nan")
    check(abs(ours_loss - ref_loss) <= 1e-4 * abs(ref_loss),
          f"{tag}: val loss over {n_win} windows: the trainer's {ours_loss:.7f}, reference {ref_loss:.7f} "
          f"(rel. diff {abs(ours_loss - ref_loss) / ref_loss:.2e} <= 1e-4)")
    if EVAL:  # llmtrain-eval reads the llama checkpoint, a copy of it alone and the HF export alike
        alone = f"{WORK}/alone_{tag}/step_12"  # no run config.toml above: the architecture from state.toml
        shutil.rmtree(os.path.dirname(alone), ignore_errors=True)
        shutil.copytree(ckpt, alone)
        explicit = ["--data", f"{DATA}/val.h5", "--micro-batch", str(B), "--seq-len", str(T)]
        for what, argv in [("the run directory", [run]), ("the checkpoint alone", [alone, *explicit]),
                           ("the HF export", [hf, *explicit])]:
            ev = subprocess.run([EVAL, *argv, "--task", "val"], capture_output=True, text=True,
                                env=dict(os.environ, OMP_NUM_THREADS="1"))
            got = [l.split()[2] for l in ev.stdout.splitlines() if l.startswith("val loss ")]
            check(ev.returncode == 0 and len(got) == 1 and float(got[0]) == ours_loss,
                  f"{tag}: llmtrain-eval --task val on {what}: {got or ev.stderr.strip()[-200:]}, the trainer's "
                  f"{ours_loss:.8f} (bitwise: the same fp32 weights, forward and windows)")

    # ---- 4. round trips, bitwise ----
    def roundtrip(src, name, expected_dir):
        rt = f"{WORK}/rt_{tag}_{name}"
        p = llmtrain(rt, f'model.init_from="{src}"', *IDLE, tied=tied)
        if p.returncode != 0:
            check(False, f"{tag} init_from {name}: llmtrain failed: {p.stderr.strip()}")
            return
        export(f"{rt}/checkpoints/step_1", f"{rt}/export")
        same = all(read_bytes(f"{rt}/export/{f}") == read_bytes(f"{expected_dir}/{f}")
                   for f in ("model.safetensors", "config.json"))
        check(same, f"{tag}: export -> init_from {name} -> one step at lr 1e-30 -> export is bitwise")

    roundtrip(hf, "dir", hf)
    if tied:
        continue
    roundtrip(f"{hf}/model.safetensors", "file", hf)

    # ---- 3. shards and bf16 ----
    sh = f"{WORK}/hf_sharded"
    export(ckpt, sh, "--shard-mb", "0.06")
    files = sorted(os.listdir(sh))
    shards = [f"model-0000{k}-of-00003.safetensors" for k in (1, 2, 3)]
    check(files == sorted(["config.json", "model.safetensors.index.json"] + shards),
          f"--shard-mb 0.06: 3 shards and the index ({files})")
    index = json.load(open(f"{sh}/model.safetensors.index.json"))
    merged = {}
    for s in shards:
        part = load_safetensors(f"{sh}/{s}")
        check(all(index["weight_map"].get(k) == s for k in part), f"weight_map names {s} for its tensors")
        merged.update(part)
    check(sorted(index["weight_map"]) == sorted(st) and
          index["metadata"]["total_size"] == sum(a.size * 4 for _, a in st.values()),
          f"index: weight_map covers the {len(st)} tensors, total_size {index['metadata']['total_size']} bytes")
    check(merged.keys() == st.keys() and all(np.array_equal(merged[k][1], st[k][1]) for k in st),
          "the shards' tensors equal model.safetensors' bitwise")
    check(read_bytes(f"{sh}/config.json") == read_bytes(f"{hf}/config.json"), "sharded config.json = unsharded")
    roundtrip(sh, "sharded_dir", hf)
    roundtrip(f"{sh}/model.safetensors.index.json", "index_file", hf)
    b16 = f"{WORK}/hf_bf16"
    export(ckpt, b16, "--dtype", "bf16")
    st16 = load_safetensors(f"{b16}/model.safetensors")
    check(all(d == "BF16" for d, _ in st16.values()) and st16.keys() == st.keys() and
          all(np.array_equal(a, torch.from_numpy(st[k][1]).float().bfloat16().double().numpy())
              for k, (_, a) in st16.items()) and
          json.load(open(f"{b16}/config.json"))["torch_dtype"] == "bfloat16",
          "--dtype bf16: every tensor BF16, torch's round-to-nearest-even of the fp32 export; torch_dtype bfloat16")

    # ---- 5. errors ----
    def bad(name, src, expect, *sets, llama=True):
        rd = f"{WORK}/bad_{name}"
        p = llmtrain(rd, f'model.init_from="{src}"', *sets, llama=llama)
        err = p.stderr.strip()
        check(p.returncode == 1 and all(e in err for e in expect) and not os.path.exists(rd),
              f"bad {name}: exit {p.returncode}, run dir {'created' if os.path.exists(rd) else 'absent'}: {err}")

    def variant(name, tensors):
        d = f"{WORK}/{name}"
        os.makedirs(d)
        shutil.copy(f"{hf}/config.json", d)
        write_safetensors(f"{d}/model.safetensors", tensors)
        return d

    f32 = {k: ("<f4", "F32", a) for k, (_, a) in st.items()}
    bad("missing", variant("missing", {k: v for k, v in f32.items() if k != "model.norm.weight"}),
        ["model.safetensors", "model.norm.weight", "is missing"])
    k0 = "model.layers.0.self_attn.k_proj.weight"
    bad("shape", variant("shape", dict(f32, **{k0: ("<f4", "F32", st[k0][1].T)})),
        ["model.safetensors", k0, f"shape [{C}, {KV * 8}]", f"expected [{KV * 8}, {C}]"])
    bad("dtype", variant("dtype", dict(f32, **{k0: ("<f8", "F64", st[k0][1])})),
        ["model.safetensors", k0, "dtype F64", "expected F32, BF16 or F16"])
    bad("config", hf, ["config.json", "num_hidden_layers = 2", "model.n_layer = 1"], "model.n_layer=1")
    bad("arch", hf, ["config.json", 'model_type = "llama"', 'model.arch = "gpt2"'], llama=False)
    cut = f"{WORK}/cut_shards"
    shutil.copytree(sh, cut)
    os.remove(f"{cut}/{shards[1]}")
    bad("shard_missing", cut, ["model.safetensors.index.json", shards[1], "does not exist"])
    p = subprocess.run([EXPORT, ckpt, "--format", "llmc", f"{WORK}/x.bin"], capture_output=True, text=True)
    check(p.returncode == 1 and "llama" in p.stderr and "--format hf" in p.stderr,
          f"llmtrain-export --format llmc of a Llama: exit {p.returncode}: {p.stderr.strip()}")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all checks passed")
