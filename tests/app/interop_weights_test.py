#!/usr/bin/env python3
# tests/app/interop_weights_test.py — weights out to HuggingFace and llm.c, and back in (app/interop/).
#
# Drives the real binaries on a 2-layer model trained for a few steps on the tiny dataset:
#  1. llmtrain-export --format hf: model.safetensors is parsed here with numpy alone (8-byte length,
#     JSON header, raw little-endian tensors: the published format, no safetensors package) and
#     loaded into a PyTorch GPT-2 written below with HuggingFace's layout (Conv1D weights stored
#     (in, out), HF's parameter names, tied lm_head); its logits on a token sequence must match
#     llmtrain's own (dump_logits, CPU backend, fp32). The reference runs in float64, so the difference
#     is llmtrain's fp32 rounding alone: each logit goes through ~8 sequential matmul/LayerNorm stages
#     of dot products of length K <= 4 n_embd = 128; fp32 rounding per dot product is ~sqrt(K) u
#     (u = 2^-24) relative to sum |a_i b_i|, ~7e-7, and LayerNorm's 1/std rescaling can grow it
#     ~10x; a bound of 1e-5 x max|logit| + 1e-6 leaves margin over that, while any wrong name,
#     orientation or tie changes the logits by a sizable fraction of their magnitude.
#     config.json is checked key by key against GPT2Config's meaning.
#  2. llmtrain-export --format llmc (fp32 and bf16): read by an independent reader of llm.c's
#     published layout (train_gpt2.py write_model: 256 int32 header, magic 20240326, version 3 fp32 /
#     5 bf16, max_seq_len, vocab_size, n_layer, n_head, channels, padded_vocab_size; wte (Vp, C) with
#     zero padded rows, wpe, then ln1w ... fcprojb each stacked over the layers, lnfw, lnfb; Linear
#     (out, in) weights) and compared element for element with the HF export (transposed where HF
#     keeps Conv1D): bitwise in fp32, and in bf16 bitwise equal to torch's round-to-nearest-even cast.
#  3. export -> model.init_from -> export is bitwise, for HF (directory and model.safetensors, and a
#     hub-style file without the "transformer." prefix, with attn.bias buffers and a stored tied
#     lm_head), llm.c fp32 and llm.c bf16 (and an F16 safetensors file gives numpy's f16 -> f32):
#     llmtrain starts from the file and takes one step at
#     lr = 1e-30 with no weight decay; an AdamW update is then at most ~1e-30 per weight, below half an
#     ulp of every trained weight (|w| > 1e-20), so the step-1 checkpoint holds the loaded weights
#     exactly (padded rows: zero gradient, zero update).
#  4. bad files: bad magic, bad version, truncated, trailing bytes, a shape that differs from the
#     config (llm.c header, HF config.json, an HF tensor stored in Linear orientation), a missing
#     tensor, an untied lm_head, a missing path: llmtrain exits 1 before creating the run dir, with
#     an error naming the file, the tensor or key, and both values.
#     With optimizer.offload = "cpu" (half the shard offloaded) on 1 rank and with ZeRO-1 on 2 ranks,
#     the offloaded fp32 master weights come from the file too, cut at each rank's shard.
# Usage: interop_weights_test.py LLMTRAIN LLMTRAIN_EXPORT DUMP_LOGITS TINY_DATA_DIR WORK_DIR MPIEXEC
import json
import math
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_test_lib import check, failures, load_safetensors, read_bytes  # noqa: E402
from interop_test_lib import write_safetensors as lib_write_safetensors  # noqa: E402

LLMTRAIN, EXPORT, DUMP, DATA, WORK, MPIEXEC = sys.argv[1:7]
V = int(open(os.path.join(DATA, "vocab_size.txt")).read())
L, H, C, T = 2, 2, 32, 16
VP = (V + 127) // 128 * 128
LAYER_ORDER = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
               "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
               "mlp.c_proj.weight", "mlp.c_proj.bias"]
CONV1D = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"}
def llmtrain(run_dir, *sets, ranks=1):
    base = [f"model.n_layer={L}", f"model.n_head={H}", f"model.n_embd={C}", f"model.seq_len={T}",
            f"model.vocab_size={V}", f'data.train="{DATA}/train.h5"', f'data.val="{DATA}/val.h5"',
            f'run.run_dir="{run_dir}"', 'run.backend="cpu"', "metrics.enabled=false", "training.micro_batch_size=2",
            "run.eval_interval=0", "run.sample_interval=0", "checkpoint.interval=0"]
    argv = [MPIEXEC, "--oversubscribe", "-np", str(ranks), LLMTRAIN] if ranks > 1 else [LLMTRAIN]
    for s in base + list(sets):
        argv += ["--set", s]
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.run(argv, capture_output=True, text=True, env=env)


def export(ckpt, fmt, out, dtype="fp32"):
    p = subprocess.run([EXPORT, ckpt, "--format", fmt, "--dtype", dtype, out], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"llmtrain-export {ckpt} --format {fmt} failed: {p.stderr}")


def write_safetensors(path, tensors, dtype="F32"):
    """name -> array as F32 or F16 (numpy's casts), for the hand-made inputs of parts 3 and 4."""
    lib_write_safetensors(path, {k: ("<f4" if dtype == "F32" else "<f2", dtype, a) for k, a in tensors.items()})


# ---- a GPT-2 with HuggingFace's layout ----

class Conv1D(torch.nn.Module):
    """OpenAI's Conv1D as HF keeps it: weight (in, out), y = x @ weight + bias."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(n_in, n_out, dtype=torch.float64))
        self.bias = torch.nn.Parameter(torch.empty(n_out, dtype=torch.float64))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn, self.c_proj = Conv1D(C, 3 * C), Conv1D(C, C)

    def forward(self, x):
        t = x.shape[0]
        q, k, v = self.c_attn(x).split(C, dim=-1)
        q, k, v = (z.view(t, H, C // H).transpose(0, 1) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        return self.c_proj((att @ v).transpose(0, 1).reshape(t, C))


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(C, 4 * C), Conv1D(4 * C, C)

    def forward(self, x):
        h = self.c_fc(x)
        h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))  # gelu_new
        return self.c_proj(h)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn = torch.nn.LayerNorm(C, eps=1e-5, dtype=torch.float64), Attention()
        self.ln_2, self.mlp = torch.nn.LayerNorm(C, eps=1e-5, dtype=torch.float64), MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2LMHeadModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = torch.nn.ModuleDict(dict(
            wte=torch.nn.Embedding(V, C, dtype=torch.float64), wpe=torch.nn.Embedding(T, C, dtype=torch.float64),
            h=torch.nn.ModuleList([Block() for _ in range(L)]),
            ln_f=torch.nn.LayerNorm(C, eps=1e-5, dtype=torch.float64)))

    def forward(self, ids):
        tr = self.transformer
        x = tr.wte(ids) + tr.wpe(torch.arange(len(ids)))
        for b in tr.h:
            x = b(x)
        return tr.ln_f(x) @ tr.wte.weight.T  # lm_head tied to wte


# ---- 0. a trained checkpoint and its exports ----

shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
p = llmtrain(f"{WORK}/a", "run.max_steps=12", "optimizer.lr=0.01", "lr_schedule.warmup_steps=0",
             'lr_schedule.decay="constant"')
if p.returncode != 0:
    sys.exit("training the checkpoint failed: " + p.stderr)
CKPT = f"{WORK}/a/checkpoints/step_12"
export(CKPT, "hf", f"{WORK}/hf")
export(CKPT, "hf", f"{WORK}/hf_bf16", "bf16")
export(CKPT, "llmc", f"{WORK}/m.bin")
export(CKPT, "llmc", f"{WORK}/m_bf16.bin", "bf16")
export(f"{WORK}/a", "llmc", f"{WORK}/m_from_run_dir.bin")  # a run directory: its newest checkpoint
check(read_bytes(f"{WORK}/m_from_run_dir.bin") == read_bytes(f"{WORK}/m.bin"),
      "llmtrain-export of the run directory = of its newest checkpoint")

# ---- 1. HuggingFace: names, config.json, logits of a PyTorch GPT-2 with HF's layout ----

hf = load_safetensors(f"{WORK}/hf/model.safetensors")
names = ["transformer.wte.weight", "transformer.wpe.weight"] + \
        [f"transformer.h.{l}.{s}" for l in range(L) for s in LAYER_ORDER] + \
        ["transformer.ln_f.weight", "transformer.ln_f.bias"]
check(sorted(hf) == sorted(names), f"model.safetensors holds exactly HF's {len(names)} GPT-2 names (no lm_head)")
check(all(d == "F32" for d, _ in hf.values()), "every tensor F32")
model = GPT2LMHeadModel()
state = {k: torch.from_numpy(a) for k, (_, a) in hf.items()}
model.load_state_dict(state, strict=True)  # names and (Conv1D) shapes must be HF's exactly
cfg = json.load(open(f"{WORK}/hf/config.json"))
want = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": L, "n_head": H, "n_embd": C,
        "n_positions": T, "vocab_size": V, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": True, "n_inner": None, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "torch_dtype": "float32"}
check(all(cfg.get(k, "absent") == v for k, v in want.items()),
      "config.json: " + ", ".join(f"{k}={cfg.get(k, 'absent')!r}" for k in want))

rng = np.random.default_rng(7)
tokens = rng.integers(0, V, size=T).astype("<i4")
tokens.tofile(f"{WORK}/tokens.i32")
subprocess.run([DUMP, CKPT, f"{WORK}/tokens.i32", f"{WORK}/logits.f32"], check=True)
ours = np.fromfile(f"{WORK}/logits.f32", dtype="<f4").reshape(T, V).astype(np.float64)
with torch.no_grad():
    ref = model(torch.from_numpy(tokens.astype(np.int64))).numpy()
err, scale = np.abs(ours - ref).max(), np.abs(ref).max()
tol = 1e-5 * scale + 1e-6
check(err <= tol, f"PyTorch GPT-2 (HF layout, float64) on the exported safetensors reproduces llmtrain's logits: "
                  f"max |diff| {err:.3g} <= {tol:.3g} (max |logit| {scale:.3g}, {T} positions x {V})")

# ---- 2. llm.c's model file, by its published layout, against the HF export ----

def llmc_shapes(maxT, Vp):
    return [("wte", (Vp, C)), ("wpe", (maxT, C))] + \
           [(s, (L,) + shp) for s, shp in [("ln_1.weight", (C,)), ("ln_1.bias", (C,)),
                                             ("attn.c_attn.weight", (3 * C, C)), ("attn.c_attn.bias", (3 * C,)),
                                             ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
                                             ("ln_2.weight", (C,)), ("ln_2.bias", (C,)),
                                             ("mlp.c_fc.weight", (4 * C, C)), ("mlp.c_fc.bias", (4 * C,)),
                                             ("mlp.c_proj.weight", (C, 4 * C)), ("mlp.c_proj.bias", (C,))]] + \
           [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]


def read_llmc(path):
    raw = read_bytes(path)
    h = np.frombuffer(raw[:1024], dtype="<i4")
    es = 4 if h[1] == 3 else 2
    off, out = 1024, {}
    for name, shp in llmc_shapes(int(h[2]), int(h[7])):
        n = int(np.prod(shp))
        if es == 4:
            a = np.frombuffer(raw[off:off + 4 * n], dtype="<f4").astype(np.float64)
        else:
            a = (np.frombuffer(raw[off:off + 2 * n], dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        out[name] = a.astype(np.float64).reshape(shp)
        off += es * n
    return h, out, off, len(raw)


def hf_view(name, l=None):
    """The HF tensor in llm.c's orientation (Conv1D transposed back to (out, in))."""
    key = f"transformer.h.{l}.{name}" if l is not None else f"transformer.{name}"
    a = hf[key if name not in ("wte", "wpe") else key + ".weight"][1]
    return a.T if name in CONV1D else a


for path, version, es in [(f"{WORK}/m.bin", 3, 4), (f"{WORK}/m_bf16.bin", 5, 2)]:
    h, w, end, size = read_llmc(path)
    tag = os.path.basename(path)
    check(h[0] == 20240326 and h[1] == version, f"{tag}: magic 20240326, version {version} ({h[0]}, {h[1]})")
    check(list(h[2:8]) == [T, V, L, H, C, VP] and not h[8:].any(),
          f"{tag}: header max_seq_len, vocab_size, n_layer, n_head, channels, padded_vocab_size = "
          f"{list(h[2:8])}, rest 0")
    nparams = sum(int(np.prod(s)) for _, s in llmc_shapes(T, VP))
    check(size == end == 1024 + es * nparams, f"{tag}: {size} bytes = 1024 + {nparams} parameters x {es}")
    rounded = (lambda a: a) if es == 4 else \
        (lambda a: torch.from_numpy(a).to(torch.float32).to(torch.bfloat16).to(torch.float64).numpy())
    same = np.array_equal(w["wte"][:V], rounded(hf_view("wte"))) and not w["wte"][V:].any()
    same = same and np.array_equal(w["wpe"], rounded(hf_view("wpe")))
    for name in LAYER_ORDER:
        same = same and all(np.array_equal(w[name][l], rounded(hf_view(name, l))) for l in range(L))
    same = same and all(np.array_equal(w[n], rounded(hf_view(n))) for n in ("ln_f.weight", "ln_f.bias"))
    check(same, f"{tag}: every tensor in llm.c's order equals the HF export (Conv1D transposed), "
                f"{'bitwise' if es == 4 else 'as torch rounds it to bf16'}; padded wte rows 0")

hf16 = load_safetensors(f"{WORK}/hf_bf16/model.safetensors")
check(all(d == "BF16" for d, _ in hf16.values()) and
      all(np.array_equal(a, torch.from_numpy(hf[k][1]).float().bfloat16().double().numpy())
          for k, (_, a) in hf16.items()),
      "hf --dtype bf16: every tensor BF16, torch's round-to-nearest-even of the fp32 export")
check(json.load(open(f"{WORK}/hf_bf16/config.json"))["torch_dtype"] == "bfloat16", "hf bf16 config.json torch_dtype")

# ---- 3. export -> model.init_from -> export, bitwise ----

IDLE = ["run.max_steps=1", "optimizer.lr=1e-30", "optimizer.weight_decay=0", "lr_schedule.warmup_steps=0",
        'lr_schedule.decay="constant"', "lr_schedule.min_lr=0"]
hub = f"{WORK}/hub"  # the hub's older naming: no "transformer." prefix, mask buffers, a stored tied lm_head
os.makedirs(hub)
shutil.copy(f"{WORK}/hf/config.json", hub)
hub_tensors = {k[len("transformer."):]: a for k, (_, a) in hf.items()}
for l in range(L):
    hub_tensors[f"h.{l}.attn.bias"] = np.tril(np.ones((T, T)))[None, None]
hub_tensors["lm_head.weight"] = hf["transformer.wte.weight"][1]
write_safetensors(f"{hub}/model.safetensors", hub_tensors)


def roundtrip(src, fmt, dtype, expected, tag, *sets, ranks=1):
    run = f"{WORK}/rt_{tag}"
    p = llmtrain(run, f'model.init_from="{src}"', *IDLE, *sets, ranks=ranks)
    if p.returncode != 0:
        check(False, f"init_from {tag}: llmtrain failed: {p.stderr.strip()}")
        return
    check(f"weights from model.init_from = {src}" in p.stdout, f"init_from {tag}: the log names the file")
    out = f"{run}/export" + ("" if fmt == "hf" else ".bin")
    export(f"{run}/checkpoints/step_1", fmt, out, dtype)
    got = [f"{out}/model.safetensors", f"{out}/config.json"] if fmt == "hf" else [out]
    check(all(read_bytes(g) == read_bytes(e) for g, e in zip(got, expected)),
          f"export -> init_from {tag} -> one step at lr 1e-30 -> export is bitwise")


roundtrip(f"{WORK}/hf", "hf", "fp32", [f"{WORK}/hf/model.safetensors", f"{WORK}/hf/config.json"], "hf_dir")
roundtrip(f"{WORK}/hf/model.safetensors", "hf", "fp32", [f"{WORK}/hf/model.safetensors", f"{WORK}/hf/config.json"],
          "hf_file")
roundtrip(hub, "hf", "fp32", [f"{WORK}/hf/model.safetensors", f"{WORK}/hf/config.json"], "hf_hub_names")
half = f"{WORK}/hf_f16"  # F16 tensors (some hub files): read exactly, so the export is numpy's f16 -> f32
os.makedirs(half)
shutil.copy(f"{WORK}/hf/config.json", half)
write_safetensors(f"{half}/model.safetensors", {k: a for k, (_, a) in hf.items()}, "F16")
p = llmtrain(f"{WORK}/rt_hf_f16", f'model.init_from="{half}"', *IDLE)
if p.returncode == 0:
    export(f"{WORK}/rt_hf_f16/checkpoints/step_1", "hf", f"{WORK}/rt_hf_f16/export")
    back = load_safetensors(f"{WORK}/rt_hf_f16/export/model.safetensors")
    check(all(np.array_equal(back[k][1], a.astype(np.float16).astype(np.float64)) for k, (_, a) in hf.items()),
          "init_from an F16 safetensors: the weights are numpy's f16 rounding, converted exactly")
else:
    check(False, f"init_from hf_f16: llmtrain failed: {p.stderr.strip()}")
roundtrip(f"{WORK}/m.bin", "llmc", "fp32", [f"{WORK}/m.bin"], "llmc_fp32")
roundtrip(f"{WORK}/m_bf16.bin", "llmc", "bf16", [f"{WORK}/m_bf16.bin"], "llmc_bf16")
OFFLOAD = ['optimizer.offload="cpu"', "optimizer.offload_fraction=0.5"]
roundtrip(f"{WORK}/m.bin", "llmc", "fp32", [f"{WORK}/m.bin"], "llmc_offload", *OFFLOAD)
roundtrip(f"{WORK}/m.bin", "llmc", "fp32", [f"{WORK}/m.bin"], "llmc_zero1_offload_2ranks", *OFFLOAD,
          "parallel.zero_stage=1", ranks=2)

# ---- 4. bad files: a clear error, exit 1, nothing created ----

def bad(tag, src, expect, *sets):
    run = f"{WORK}/bad_{tag}"
    p = llmtrain(run, f'model.init_from="{src}"', *sets)
    err = p.stderr.strip()
    check(p.returncode == 1 and all(e in err for e in expect) and not os.path.exists(run),
          f"bad {tag}: exit {p.returncode}, run dir {'created' if os.path.exists(run) else 'not created'}: {err}")


def patched(name, data):
    path = f"{WORK}/{name}"
    with open(path, "wb") as f:
        f.write(data)
    return path


m = read_bytes(f"{WORK}/m.bin")
bad("magic", patched("magic.bin", struct.pack("<i", 20240327) + m[4:]),
    ["magic.bin", "magic 20240327, expected 20240326"])
bad("version", patched("version.bin", m[:4] + struct.pack("<i", 4) + m[8:]),
    ["version.bin", "version 4, expected 3 (fp32) or 5 (bf16)"])
bad("truncated", patched("truncated.bin", m[:-100]),
    ["truncated.bin", f"{len(m) - 100} bytes", str(len(m)), "truncated"])
bad("trailing", patched("trailing.bin", m + b"\0" * 4), ["trailing.bin", "trailing bytes"])
bad("llmc_shape", f"{WORK}/m.bin", ["m.bin", "channels = 32", "model.n_embd = 64"], "model.n_embd=64")
bad("hf_config", f"{WORK}/hf", ["config.json", "n_layer = 2", "model.n_layer = 1"], "model.n_layer=1")
linear = f"{WORK}/linear"  # c_attn stored (out, in), as a Linear would: the Conv1D orientation is checked
os.makedirs(linear)
shutil.copy(f"{WORK}/hf/config.json", linear)
write_safetensors(f"{linear}/model.safetensors",
                  {k: (a.T if k == "transformer.h.0.attn.c_attn.weight" else a) for k, (_, a) in hf.items()})
bad("hf_shape", linear, ["transformer.h.0.attn.c_attn.weight", f"shape [{3 * C}, {C}]", f"expected [{C}, {3 * C}]"])
missing = f"{WORK}/missing"
os.makedirs(missing)
shutil.copy(f"{WORK}/hf/config.json", missing)
write_safetensors(f"{missing}/model.safetensors", {k: a for k, (_, a) in hf.items() if k != "transformer.ln_f.bias"})
bad("hf_missing", missing, ["transformer.ln_f.bias", "is missing"])
untied = f"{WORK}/untied"
os.makedirs(untied)
shutil.copy(f"{WORK}/hf/config.json", untied)
write_safetensors(f"{untied}/model.safetensors",
                  dict({k: a for k, (_, a) in hf.items()}, **{"lm_head.weight": hf["transformer.wte.weight"][1] * 2}))
bad("hf_untied", untied, ["lm_head.weight", "differs from transformer.wte.weight"])
cut = f"{WORK}/cut"
os.makedirs(cut)
shutil.copy(f"{WORK}/hf/config.json", cut)
patched("cut/model.safetensors", read_bytes(f"{WORK}/hf/model.safetensors")[:-8])
bad("hf_truncated", cut, ["cut/model.safetensors", "truncated"])
bad("no_such_path", f"{WORK}/nowhere", ["nowhere", "no such file or directory"])
p = subprocess.run([EXPORT, f"{WORK}/nowhere", "--format", "hf", f"{WORK}/x"], capture_output=True, text=True)
check(p.returncode == 1 and "nowhere" in p.stderr,
      f"llmtrain-export of no checkpoint: exit {p.returncode}: {p.stderr.strip()}")
p = subprocess.run([EXPORT, CKPT, "--format", "onnx", f"{WORK}/x"], capture_output=True, text=True)
check(p.returncode == 2, f"llmtrain-export --format onnx: exit {p.returncode} (usage)")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all checks passed")
