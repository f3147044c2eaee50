#!/usr/bin/env python3
"""tests/data/test_gpt2_tokenizer.py — GPT-2's tokenizer (data/gpt2_bpe.cpp) against the reference:
the npm package js-tiktoken's own JavaScript encoder run by node on the same inputs
(gpt2_reference.mjs). Ids must be identical, string for string:

1. adversarial strings (emoji and ZWJ sequences, combining marks, CJK and other scripts, control
   bytes, every Unicode space on which PCRE2's \\s and JavaScript's differ, long runs of spaces,
   newlines and digits, contractions, "<|endoftext|>" as text, 3,000 rare characters in one piece)
   and 300 seeded random strings mixing all of them, through encode_tool (gpt2-bpe);
2. the whole Brown corpus through `llmtrain-prep --tokenizer gpt2` (2 threads, 5% val): every
   document of train.h5 and val.h5, read back with h5py, is the reference's ids + [50256]; the
   attributes say tokenizer "gpt2", format_version 2, vocab 50257, eos 50256, bos -1, and
   tokenizer_sha256 is tiktoken's published hash of r50k_base;
3. invalid UTF-8 (the documented behaviour: an error naming the byte offset, and for prep the file
   and document, exit 2), with the offsets checked.
Skips (exit 77) when node or the js-tiktoken package (tools/fetch_gpt2.sh data/gpt2) is missing.
Usage: test_gpt2_tokenizer.py ENCODE_TOOL LLMTRAIN_PREP SOURCE_DIR SCRATCH_DIR
"""
import hashlib
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_test_lib as tokenizer_lib  # noqa: E402
from adversarial_strings import adversarial_strings  # noqa: E402
from tokenizer_test_lib import check, failures, id_lines  # noqa: E402

tool, prep, src, scratch = sys.argv[1:5]
gpt2_dir = os.path.join(src, "data", "gpt2")
ranks = os.path.join(gpt2_dir, "gpt2.tiktoken")
reference = os.path.join(src, "tests", "data", "gpt2_reference.mjs")
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"  # tiktoken's expected_hash

if shutil.which("node") is None:
    print("node is missing (tools/setup.sh installs nodejs), skipped")
    sys.exit(77)
if not (os.path.isfile(os.path.join(gpt2_dir, "node_modules", "js-tiktoken", "package.json")) and os.path.isfile(ranks)):
    print(f"js-tiktoken is not in {gpt2_dir} (tools/fetch_gpt2.sh data/gpt2; tools/setup.sh runs it), skipped")
    sys.exit(77)

shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)


def write_inputs(dirname, blobs):
    return tokenizer_lib.write_inputs(scratch, dirname, blobs)


def encode_ours(paths):
    return id_lines([tool, "gpt2-bpe", ranks], paths)


def encode_reference(paths):
    return id_lines(["node", reference, gpt2_dir], paths)


# ---- 1. adversarial strings ----
adversarial = adversarial_strings()
paths = write_inputs("adversarial", [s.encode("utf-8") for s in adversarial])
ours, ref = encode_ours(paths), encode_reference(paths)
n_bad = 0
for s, a, b in zip(adversarial, ours, ref):
    if a != b:
        n_bad += 1
        if n_bad <= 5:
            print(f"  differ on {s[:60]!r}...: ours {a[:80]} / reference {b[:80]}")
check(len(ours) == len(ref) == len(adversarial) and n_bad == 0,
      f"adversarial strings: {n_bad} of {len(adversarial)} differ from js-tiktoken")
check(ours[adversarial.index("Hello world")] == "15496 995", "'Hello world' is 15496 995 (GPT-2's well-known ids)")

# ---- 2. the Brown corpus through llmtrain-prep ----
brown = os.path.join(src, "data", "brown")
if not os.path.isfile(os.path.join(brown, "text", ".complete")):
    subprocess.run([os.path.join(src, "tools", "fetch_brown.sh"), brown], check=True)
files = sorted(os.path.join(brown, "text", f) for f in os.listdir(os.path.join(brown, "text")) if f.endswith(".txt"))
check(len(files) == 500, f"Brown has 500 documents, found {len(files)}")
out = os.path.join(scratch, "brown_out")
os.makedirs(out)
with open(os.path.join(out, "tokenizer.model"), "wb") as f:
    f.write(b"stale SentencePiece model")
r = subprocess.run([prep, "--tokenizer", "gpt2", "--gpt2-ranks", ranks, "--num-threads", "2", "--val-fraction", "0.05",
                    "--out-dir", out, os.path.join(brown, "text", "*.txt")], capture_output=True, text=True)
print(r.stdout, r.stderr)
check(r.returncode == 0, f"prep --tokenizer gpt2 on Brown exits 0, got {r.returncode}")
check("tokens/s" in r.stdout, "prep reports tokens/s")
check(not os.path.exists(os.path.join(out, "tokenizer.model")), "a stale tokenizer.model is removed")
# A document is its file's lines joined by '\n': the file minus its final newline.
texts = []
for p in files:
    with open(p, "rb") as f:
        b = f.read()
    texts.append(b[:-1] if b.endswith(b"\n") else b)
ref = encode_reference(write_inputs("brown_docs", texts))
stored = []
for split in ("train", "val"):
    with h5py.File(os.path.join(out, f"{split}.h5"), "r") as f:
        a = f.attrs
        check((a["tokenizer"].decode() if isinstance(a["tokenizer"], bytes) else a["tokenizer"]) == "gpt2", f"{split}: tokenizer attribute")
        check((int(a["format_version"]), int(a["vocab_size"]), int(a["eos_id"]), int(a["bos_id"])) == (2, 50257, 50256, -1),
              f"{split}: format_version/vocab/eos/bos")
        sha = a["tokenizer_sha256"]
        sha = sha.decode() if isinstance(sha, bytes) else sha
        blob = f["tokenizer"][()].tobytes()
        check(sha == R50K_SHA256 == hashlib.sha256(blob).hexdigest(), f"{split}: tokenizer_sha256 is r50k_base's")
        check(f["tokens"].dtype == np.uint16, f"{split}: uint16 tokens")
        t, offs = f["tokens"][()], f["doc_offsets"][()]
        stored += [t[offs[i]:offs[i + 1]].astype(np.int64).tolist() for i in range(len(offs) - 1)]
check(len(stored) == 500, f"500 documents stored, got {len(stored)}")
# prep keeps corpus order within each split; match documents by their reference ids.
want = sorted(([int(x) for x in line.split()] + [50256] for line in ref))
n_tokens = sum(len(d) for d in want)
check(sorted(stored) == want, "every Brown document's ids (+ EOS) equal js-tiktoken's")
print(f"Brown: {len(want)} documents, {n_tokens} tokens compared")

# ---- 3. invalid UTF-8: an error with the byte offset, never a silent replacement ----
bad = {b"ok \xff": 3, b"abc\xe6\xbc": 3, b"\xc0\xaf": 0, b"x\xed\xa0\x80": 1, b"xy\xf4\x90\x80\x80": 2, b"\x80": 0}
paths = write_inputs("invalid", list(bad))
for (blob, off), line in zip(bad.items(), encode_ours(paths)):
    check(line.startswith(f"error: invalid UTF-8 at byte offset {off} "), f"invalid UTF-8 {blob!r}: got '{line}'")
bad_dir = os.path.join(scratch, "bad_corpus")
os.makedirs(bad_dir)
for name, blob in (("a.txt", b"fine text\n"), ("b.txt", b"line one\nline \xfe two\n")):
    with open(os.path.join(bad_dir, name), "wb") as f:
        f.write(blob)
r = subprocess.run([prep, "--tokenizer", "gpt2", "--gpt2-ranks", ranks, "--val-fraction", "0", "--out-dir",
                    os.path.join(scratch, "bad_out"), os.path.join(bad_dir, "*.txt")], capture_output=True, text=True)
check(r.returncode == 2 and "b.txt" in r.stderr and "document 1" in r.stderr and "byte offset 14" in r.stderr,
      f"prep on invalid UTF-8 exits 2 naming file, document and offset: {r.returncode} {r.stderr.strip()}")
r = subprocess.run([prep, "--tokenizer", "gpt2", "--gpt2-ranks", os.path.join(scratch, "none.tiktoken"), "--val-fraction", "0", "--out-dir",
                    os.path.join(scratch, "bad_out"), os.path.join(bad_dir, "a.txt")], capture_output=True, text=True)
check(r.returncode == 2 and "none.tiktoken" in r.stderr and "fetch_gpt2.sh" in r.stderr,
      f"a missing ranks file is named, with the fetch script: {r.stderr.strip()}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all GPT-2 tokenizer checks passed")
