#!/usr/bin/env python3
"""tests/data/test_prep.py — llmtrain-prep end to end, checked with independent readers: h5py for the
files and Python's sentencepiece for the tokenization (the same .model must encode every document
to exactly the stored tokens, followed by EOS).

1. A generated corpus (globs + a path, one document per file, a blank file, a 10 kB line with spaces,
   a 6 kB line without, non-ASCII text) -> trained BPE tokenizer (vocab 400), 20% of the documents
   held out. Checks: format and attributes, every document in exactly one split and in order,
   tokens == sp.encode(text) + [eos], long-line text survives (decode(encode) round trip), the
   two long lines reported split, the unigram entropy printed matches the train tokens.
2. --separator with the tokenizer of run 1 (--tokenizer) and no validation split.
3. Bad inputs: each exits with code 2, names the problem, and leaves the previous outputs untouched.
Usage: test_prep.py LLMTRAIN_PREP SCRATCH_DIR
"""
import hashlib
import math
import os
import random
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np
import sentencepiece as spm

prep, scratch = sys.argv[1], sys.argv[2]
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args):
    r = subprocess.run([prep, *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def read_split(path):
    with h5py.File(path, "r") as f:
        t, offs = f["tokens"][()], f["doc_offsets"][()]
        info = {k: f.attrs[k] for k in f.attrs}
        info["tokenizer_kind"] = info.pop("tokenizer")
        info["dtype"], info["chunks"], info["compression"] = f["tokens"].dtype, f["tokens"].chunks, f["tokens"].compression
        info["tokenizer"] = f["tokenizer"][()].tobytes()
    docs = [t[offs[i]:offs[i + 1]].astype(np.int64).tolist() for i in range(len(offs) - 1)]
    return docs, info


# ---- 1. the corpus ----
rng = random.Random(3)
letters = "etaoinshrdlcumwfgypbvkjxqz"
words = ["".join(rng.choice(letters[: rng.randint(6, 26)]) for _ in range(rng.randint(1, 8))) for _ in range(300)]
corpus = os.path.join(scratch, "corpus")
os.makedirs(os.path.join(corpus, "more"))
texts = []  # the documents in the order llmtrain-prep reads them (sorted paths)
for d in range(40):
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 15))) + "." for _ in range(rng.randint(2, 20))]
    if d == 3:
        lines.insert(1, " ".join(rng.choice(words) for _ in range(2500)))  # ~10 kB, has spaces
    if d == 5:
        lines.append("".join(rng.choice(letters) for _ in range(6000)))   # 6 kB, no whitespace
    if d == 7:
        lines.append("Caf\u00e9 na\u00efve \u00fcber \u6f22\u5b57 \u2603 smart.")
    texts.append("\n".join(lines))
paths = [os.path.join(corpus, f"doc{d:02d}.txt") for d in range(35)] + \
        [os.path.join(corpus, "more", f"doc{d:02d}.txt") for d in range(35, 40)]
for p, text in zip(paths, texts):
    with open(p, "w", encoding="utf-8") as f:
        f.write(text + "\n")
with open(os.path.join(corpus, "blank.txt"), "w") as f:
    f.write("  \n\n\t\n")
order = sorted(range(40), key=lambda d: paths[d])  # prep sorts the expanded file list

out1 = os.path.join(scratch, "out1")
rc, out, err = run("--vocab-size", "400", "--val-fraction", "0.2", "--seed", "7", "--num-threads", "2",
                   "--out-dir", out1, os.path.join(corpus, "*.txt"), os.path.join(corpus, "more", "doc3*.txt"),
                   os.path.join(corpus, "more", "doc35.txt"))
# doc35.txt given twice (glob and path): read once; doc35-39 via the glob, so all 40 + the blank file.
check(rc == 0, f"run 1 failed ({rc}): {err}")
print(out)
sp = spm.SentencePieceProcessor(model_file=os.path.join(out1, "tokenizer.model"))
eos = sp.eos_id()
check(sp.get_piece_size() == 400, f"vocab {sp.get_piece_size()}")
check((sp.unk_id(), sp.bos_id(), eos, sp.pad_id()) == (0, 1, 2, -1), "special ids not unk 0, bos 1, eos 2, no pad")
check(sp.piece_to_id("<0x41>") != sp.unk_id(), "no byte-fallback pieces")
check("40 documents" in out and "1 blank skipped" in out, "summary: document counts")
check("(2 long lines split)" in out, "summary: the two long lines were not reported split")

model_bytes = open(os.path.join(out1, "tokenizer.model"), "rb").read()
train, tinfo = read_split(os.path.join(out1, "train.h5"))
val, vinfo = read_split(os.path.join(out1, "val.h5"))
check(len(val) == 8 and len(train) == 32, f"split {len(train)}/{len(val)}, expected 32/8 (20% of 40 documents)")
for name, info in (("train", tinfo), ("val", vinfo)):
    sha = info["tokenizer_sha256"]
    sha = sha.decode() if isinstance(sha, bytes) else str(sha)
    check(info["tokenizer"] == model_bytes, f"{name}: /tokenizer differs from tokenizer.model")
    check(sha == hashlib.sha256(model_bytes).hexdigest(), f"{name}: tokenizer_sha256")
    check(info["dtype"] == np.uint16 and info["compression"] is None and info["chunks"] is not None, f"{name}: layout")
    kind = info["tokenizer_kind"]
    check((int(info["vocab_size"]), int(info["eos_id"]), int(info["bos_id"]), int(info["format_version"])) ==
          (400, 2, 1, 2) and (kind.decode() if isinstance(kind, bytes) else kind) == "sentencepiece",
          f"{name}: attributes")

# Every document lands in exactly one split, each split keeps corpus order, tokens match Python.
ti = vi = 0
for d in order:
    want = sp.encode(texts[d]) + [eos]
    if ti < len(train) and train[ti] == want:
        ti += 1
    elif vi < len(val) and val[vi] == want:
        vi += 1
    else:
        check(False, f"document {paths[d]}: tokens not found in order in train or val")
check(ti == len(train) and vi == len(val), "splits hold documents that are not in the corpus")
for doc in train + val:
    check(doc.count(eos) == 1 and doc[-1] == eos, "EOS not exactly once, at the end of each document")
    check(max(doc) < 400, "token id >= vocab_size")

# Long lines and non-ASCII text come back whole (newlines become spaces under nmt_nfkc).
for d in (3, 5, 7):
    ids = sp.encode(texts[d])
    check(sp.decode(ids) == texts[d].replace("\n", " "), f"document {d}: decode(encode(text)) differs")

# Unigram entropy of the train tokens, in bits and nats.
counts = np.bincount(np.concatenate([np.array(x) for x in train]), minlength=400)
p = counts[counts > 0] / counts.sum()
bits = float(-(p * np.log2(p)).sum())
m = re.search(r"unigram entropy of train tokens: ([0-9.]+) bits/token = ([0-9.]+) nats/token", out)
check(m is not None and abs(float(m.group(1)) - bits) < 1e-3 and abs(float(m.group(2)) - bits * math.log(2)) < 1e-3,
      f"entropy line {m.group(0) if m else None}, expected {bits:.4f} bits")

# ---- 2. separator mode with an existing tokenizer, no validation split ----
sep_file = os.path.join(scratch, "sep.txt")
with open(sep_file, "w") as f:
    f.write("first doc line one\nline two\n<|doc|>\nsecond doc\n<|doc|>\r\n<|doc|>\nthird doc\n<|doc|>\n")
tail_file = os.path.join(scratch, "tail.txt")
with open(tail_file, "w") as f:
    f.write("a file without separators\nis one doc\n")
out2 = os.path.join(scratch, "out2")
rc, out, err = run("--tokenizer", os.path.join(out1, "tokenizer.model"), "--separator", "<|doc|>",
                   "--val-fraction", "0", "--out-dir", out2, sep_file, tail_file)
check(rc == 0, f"run 2 failed ({rc}): {err}")
docs2, _ = read_split(os.path.join(out2, "train.h5"))
want2 = ["first doc line one\nline two", "second doc", "third doc", "a file without separators\nis one doc"]
check(docs2 == [sp.encode(t) + [eos] for t in want2], f"separator documents differ: {len(docs2)} docs")
check("1 blank skipped" in out, "separator mode: the empty document between separators not reported")
check(not os.path.exists(os.path.join(out2, "val.h5")), "val.h5 written with --val-fraction 0")
check(open(os.path.join(out2, "tokenizer.model"), "rb").read() == model_bytes, "tokenizer.model not copied")
out2b = os.path.join(scratch, "out2_bos")  # --add-bos: SentencePiece's <s> (id 1) starts every document
rc, out, err = run("--tokenizer", os.path.join(out1, "tokenizer.model"), "--separator", "<|doc|>", "--add-bos",
                   "--val-fraction", "0", "--out-dir", out2b, sep_file, tail_file)
docs2b, _ = read_split(os.path.join(out2b, "train.h5")) if rc == 0 else ([], None)
check(rc == 0 and docs2b == [[sp.bos_id()] + sp.encode(t) + [eos] for t in want2], f"--add-bos documents: {rc} {err}")

# ---- 3. bad inputs: exit 2, a clear message, previous outputs untouched ----
def snapshot(d):
    return {n: hashlib.sha256(open(os.path.join(d, n), "rb").read()).hexdigest() for n in sorted(os.listdir(d))}


before = snapshot(out1)
blank_dir = os.path.join(scratch, "blank")
os.makedirs(blank_dir)
open(os.path.join(blank_dir, "a.txt"), "w").write("\n \n")
junk = os.path.join(scratch, "junk.model")
open(junk, "wb").write(b"not a model")
a_file = os.path.join(scratch, "a_file")
open(a_file, "w").write("x")
good_input = os.path.join(corpus, "doc00.txt")
cases = [
    ("missing input", [os.path.join(scratch, "nope.txt")], "nope.txt: no such file"),
    ("glob without match", [os.path.join(scratch, "none", "*.txt")], "matches no file"),
    ("directory input", [corpus], "is a directory"),
    ("no documents", [os.path.join(blank_dir, "*.txt")], "no documents"),
    ("vocab too small", ["--vocab-size", "100", os.path.join(corpus, "*.txt")], "vocab_size 100"),
    ("missing tokenizer", ["--tokenizer", os.path.join(scratch, "missing.model"), good_input, os.path.join(corpus, "doc01.txt")],
     "missing.model"),
    ("corrupt tokenizer", ["--tokenizer", junk, good_input, os.path.join(corpus, "doc01.txt")], "not a SentencePiece model"),
    ("bad val fraction", ["--val-fraction", "1.5", good_input], "--val-fraction"),
    ("one document with val", [good_input], "at least 2 documents"),
]
for name, args, msg in cases:
    rc, out, err = run("--out-dir", out1, *args)
    check(rc == 2, f"{name}: exit code {rc}, expected 2 ({err.strip()})")
    check(msg in err, f"{name}: stderr lacks '{msg}': {err.strip()}")
    check(snapshot(out1) == before, f"{name}: out dir changed")
rc, out, err = run("--out-dir", os.path.join(a_file, "sub"), good_input, os.path.join(corpus, "doc01.txt"))
check(rc == 2 and "output directory" in err, f"unwritable out dir: {rc} {err.strip()}")
rc, out, err = run("--out-dir", out1)
check(rc == 2, f"no inputs: exit code {rc}")
check(snapshot(out1) == before, "out dir changed by the failed runs")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("test_prep: all checks passed")
