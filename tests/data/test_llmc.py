#!/usr/bin/env python3
"""tests/data/test_llmc.py — `llmtrain-prep --from-llmc` against shards written here by a small
writer that follows llm.c's published layout (dev/data/data_common.py write_datafile: 256 int32
header [magic, version, n_tokens, 0...], then the tokens; GPT-2: magic 20240520 version 1 uint16,
LLaMA-3: magic 20240801 version 7 uint32), read back with h5py:

1. two uint16 shards (one of 1.2 M tokens, so reads cross the 1 Mi-token piece size, with an
   end-of-text token right at the piece edge) + a uint32 shard of GPT-2 ids, a document spanning
   the shard boundary, a tail without end-of-text, and a val shard: /tokens is the shards' tokens
   concatenated, unchanged; /doc_offsets cuts after every 50256 and at the end; attributes say gpt2.
2. bad inputs, each exit 2 naming the file, previous outputs untouched: bad magic, a version that
   does not go with the magic, truncation (header count > tokens present), trailing bytes, a file
   shorter than the header, a LLaMA-3 token id beyond GPT-2's vocabulary, a glob matching nothing.
The ranks file is a stand-in (gpt2_test_ranks.py): conversion only stores it.
Usage: test_llmc.py LLMTRAIN_PREP SCRATCH_DIR
"""
import hashlib
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_test_ranks import write_test_ranks  # noqa: E402

prep, scratch = sys.argv[1], sys.argv[2]
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
failures = []
EOT = 50256


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def write_shard(path, toks, magic=20240520, version=1, count=None, dtype=np.uint16, cut=0, extra=b""):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = magic, version, len(toks) if count is None else count
    data = header.tobytes() + np.asarray(toks, dtype=dtype).tobytes()
    with open(path, "wb") as f:
        f.write((data[:-cut] if cut else data) + extra)


ranks = os.path.join(scratch, "ranks.tiktoken")
write_test_ranks(ranks)
rng = np.random.default_rng(20240520)


def doc(n):
    return rng.integers(0, EOT, n).tolist()  # ordinary ids 0..50255


# shard 0: [EOT d0 EOT d1 ... EOT d_partial], 1.2 M tokens, with an EOT at index 2^20 - 1 (piece edge)
s0 = []
while len(s0) < 1_200_000:
    s0 += [EOT] + doc(int(rng.integers(1, 5000)))
s0 = s0[:1_200_000]
s0[(1 << 20) - 1] = EOT
s0[0], s0[1], s0[-1] = EOT, 50255, 0  # edge ids
s1 = doc(300) + [EOT] + doc(50) + [EOT] + doc(7)     # continues s0's last document; ends with a tail
s2 = [EOT] + doc(20) + [EOT] + [0, 1, 50255]          # uint32 shard of GPT-2 ids
val = [EOT] + doc(100) + [EOT] + doc(30)
shards = os.path.join(scratch, "shards")
os.makedirs(shards)
write_shard(os.path.join(shards, "train_000000.bin"), s0)
write_shard(os.path.join(shards, "train_000001.bin"), s1)
write_shard(os.path.join(shards, "train_000002.bin"), s2, magic=20240801, version=7, dtype=np.uint32)
write_shard(os.path.join(shards, "val_000000.bin"), val)


def expected_offsets(toks):
    cuts = [i + 1 for i, t in enumerate(toks) if t == EOT]
    if not cuts or cuts[-1] != len(toks):
        cuts.append(len(toks))
    return [0] + cuts


out = os.path.join(scratch, "out")
r = subprocess.run([prep, "--from-llmc", os.path.join(shards, "train_*.bin"), "--llmc-val",
                    os.path.join(shards, "val_*.bin"), "--gpt2-ranks", ranks, "--out-dir", out],
                   capture_output=True, text=True)
print(r.stdout, r.stderr)
check(r.returncode == 0, f"--from-llmc exits 0, got {r.returncode}")
for split, toks in (("train", s0 + s1 + s2), ("val", val)):
    with h5py.File(os.path.join(out, f"{split}.h5"), "r") as f:
        t, offs, a = f["tokens"][()], f["doc_offsets"][()], f.attrs
        check(t.dtype == np.uint16 and t.astype(np.int64).tolist() == toks, f"{split}: tokens identical to the shards'")
        check(offs.tolist() == expected_offsets(toks), f"{split}: doc_offsets cut after every end-of-text token")
        kind = a["tokenizer"].decode() if isinstance(a["tokenizer"], bytes) else a["tokenizer"]
        check(kind == "gpt2" and (int(a["vocab_size"]), int(a["eos_id"]), int(a["bos_id"])) == (50257, EOT, -1),
              f"{split}: gpt2 attributes")
        sha = a["tokenizer_sha256"]
        sha = sha.decode() if isinstance(sha, bytes) else sha
        check(f["tokenizer"][()].tobytes() == open(ranks, "rb").read() and
              sha == hashlib.sha256(open(ranks, "rb").read()).hexdigest(), f"{split}: the ranks are stored")
check(f"{len(s0) + len(s1) + len(s2)} tokens" in r.stdout, "the token count is reported")
before = {n: open(os.path.join(out, n), "rb").read() for n in ("train.h5", "val.h5")}

# ---- 2. bad shards ----
bad = os.path.join(scratch, "bad")
os.makedirs(bad)
cases = [
    ("magic.bin", dict(toks=[EOT, 1], magic=20240521), "bad magic 20240521"),
    ("version.bin", dict(toks=[EOT, 1], version=7), "version 7 with magic 20240520"),
    ("truncated.bin", dict(toks=[EOT, 1, 2, 3], cut=2), "truncated"),
    ("count.bin", dict(toks=[EOT, 1], count=3), "truncated"),
    ("trailing.bin", dict(toks=[EOT, 1], extra=b"\0\0"), "2 bytes after"),
    ("llama.bin", dict(toks=[128000, 1], magic=20240801, version=7, dtype=np.uint32), "token 128000 at index 0"),
    ("negative.bin", dict(toks=[], count=-1), "negative token count"),
]
for name, kw, message in cases:
    p = os.path.join(bad, name)
    write_shard(p, **kw)
    r = subprocess.run([prep, "--from-llmc", p, "--gpt2-ranks", ranks, "--out-dir", out], capture_output=True, text=True)
    check(r.returncode == 2 and name in r.stderr and message in r.stderr, f"{name}: exit 2 naming the file and '{message}': "
          f"{r.returncode} {r.stderr.strip()}")
with open(os.path.join(bad, "short.bin"), "wb") as f:
    f.write(b"\0" * 100)
r = subprocess.run([prep, "--from-llmc", os.path.join(bad, "short.bin"), "--gpt2-ranks", ranks, "--out-dir", out],
                   capture_output=True, text=True)
check(r.returncode == 2 and "short.bin" in r.stderr and "shorter than the 1024-byte header" in r.stderr,
      f"short.bin: {r.stderr.strip()}")
r = subprocess.run([prep, "--from-llmc", os.path.join(bad, "nothing_*.bin"), "--gpt2-ranks", ranks, "--out-dir", out],
                   capture_output=True, text=True)
check(r.returncode == 2 and "matches no file" in r.stderr, f"empty glob: {r.stderr.strip()}")
after = {n: open(os.path.join(out, n), "rb").read() for n in ("train.h5", "val.h5")}
check(before == after, "failed conversions leave the previous outputs untouched")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all llm.c conversion checks passed")
