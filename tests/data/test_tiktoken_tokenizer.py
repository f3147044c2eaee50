#!/usr/bin/env python3
"""tests/data/test_tiktoken_tokenizer.py — cl100k_base, o200k_base and tiktoken:PATH (data/tiktoken_*.cpp,
llmtrain-prep) against the reference: the npm package js-tiktoken's own JavaScript encoder run by node on
the same inputs (tiktoken_reference.mjs). Ids must be identical, string for string:

1. our split patterns are js-tiktoken's pat_str strings (gpt2, cl100k_base, o200k_base);
2. for cl100k_base and o200k_base: GPT-2's adversarial strings (adversarial_strings.py) plus pieces
   for these patterns (digit groups, contractions in every case, camel case, letter categories Lt Lm
   Lo M, CJK, emoji, whitespace and newline runs, slashes, the special tokens' texts), through
   encode_tool; invalid UTF-8 is an error naming the byte offset;
3. the whole Brown corpus through `llmtrain-prep --tokenizer cl100k_base | o200k_base`: every stored
   document is the reference's ids + <|endoftext|>; the attributes name the encoding, tokenizer_sha256
   is tiktoken's published hash of its ranks, the tokens are uint32 and ids above 65,535 occur;
4. `--tokenizer tiktoken:PATH` with cl100k's ranks written back in tiktoken format (lines shuffled)
   and Llama 3's special tokens given with --special: the Brown documents equal js-tiktoken's cl100k
   ids + the chosen eos; the /tokenizer container holds the specials and the ranks; the default
   special set (Llama 3's, after the last rank), tokenizer_config.json beside the file (in
   HuggingFace's original/ layout), --eos by id, and bad flags or files (exit 2 naming them).
Skips (exit 77) when node, js-tiktoken (tools/fetch_gpt2.sh data/gpt2) or the ranks
(tools/fetch_tiktoken.sh data/tiktoken) are missing; tools/setup.sh fetches both.
Usage: test_tiktoken_tokenizer.py ENCODE_TOOL LLMTRAIN_PREP SOURCE_DIR SCRATCH_DIR
"""
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_test_lib as tokenizer_lib  # noqa: E402
from adversarial_strings import adversarial_strings  # noqa: E402
from tokenizer_test_lib import check, failures, id_lines  # noqa: E402

tool, prep, src, scratch = sys.argv[1:5]
pkg_dir = os.path.join(src, "data", "gpt2")
tik_dir = os.path.join(src, "data", "tiktoken")
reference = os.path.join(src, "tests", "data", "tiktoken_reference.mjs")
# tiktoken's expected_hash of each ranks file; vocab = largest special id + 1; eos = <|endoftext|>
ENCODINGS = {
    "cl100k_base": ("223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7", 100277, 100257),
    "o200k_base": ("446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d", 200019, 199999),
}

if shutil.which("node") is None:
    print("node is missing (tools/setup.sh installs nodejs), skipped")
    sys.exit(77)
if not os.path.isfile(os.path.join(pkg_dir, "node_modules", "js-tiktoken", "package.json")):
    print(f"js-tiktoken is not in {pkg_dir} (tools/fetch_gpt2.sh data/gpt2; tools/setup.sh runs it), skipped")
    sys.exit(77)
if not all(os.path.isfile(os.path.join(tik_dir, f"{e}.tiktoken")) for e in ENCODINGS):
    print(f"the ranks are not in {tik_dir} (tools/fetch_tiktoken.sh data/tiktoken; tools/setup.sh runs it), skipped")
    sys.exit(77)

shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
t_start = time.time()


def write_inputs(dirname, blobs):
    return tokenizer_lib.write_inputs(scratch, dirname, blobs)


def ranks_of(enc):
    return os.path.join(tik_dir, f"{enc}.tiktoken")


def encode_ours(enc, paths):
    return id_lines([tool, enc, ranks_of(enc)], paths)


def encode_reference(enc, paths):
    return id_lines(["node", reference, pkg_dir, enc], paths)


def run_prep(tokenizer, out, inputs, *extra, val="0.05"):
    r = subprocess.run([prep, "--tokenizer", tokenizer, "--tiktoken-dir", tik_dir, "--num-threads", "2",
                        "--val-fraction", val, "--out-dir", out, *extra, *inputs], capture_output=True, text=True)
    print(r.stdout, r.stderr)
    return r


def attr(a, key):
    v = a[key]
    return v.decode() if isinstance(v, bytes) else v


def read_dataset(out):
    """(attributes of train.h5, /tokenizer bytes, dtype, every stored document of train.h5 and val.h5)."""
    docs, attrs, blob, dtype = [], None, None, None
    for split in ("train", "val"):
        path = os.path.join(out, f"{split}.h5")
        if not os.path.exists(path):
            continue
        with h5py.File(path, "r") as f:
            if attrs is None:
                attrs = {k: attr(f.attrs, k) for k in f.attrs}
                blob = f["tokenizer"][()].tobytes()
                dtype = f["tokens"].dtype
            t, offs = f["tokens"][()], f["doc_offsets"][()]
            docs += [t[offs[i]:offs[i + 1]].astype(np.int64).tolist() for i in range(len(offs) - 1)]
    return attrs, blob, dtype, docs


# ---- 1. the patterns are js-tiktoken's ----
for enc in ("gpt2", *ENCODINGS):
    ours = subprocess.run([tool, "--pattern", enc], capture_output=True, text=True, check=True).stdout.split("\n")[0]
    ref = subprocess.run(["node", reference, "--pattern", pkg_dir, enc], capture_output=True, text=True,
                         check=True).stdout.rstrip("\n")
    check(ours == ref, f"{enc}: our pattern {ours!r} is js-tiktoken's {ref!r}")

print(f"[{time.time() - t_start:.1f} s]")
# ---- 2. adversarial strings ----
extra = [
    "1", "12", "123", "1234", "12345", "1234567", " 1234", "1,234,567.891", "2024-01-02", "x1234y", "١٢٣٤٥", "１２３４",
    "DON'T", "I'M", "We'Re", "THEY'LL", "she'D", "it'S", "'rE", "'Ll", "'lL", "'vE", "'ſ", "don\u2019t", "HE'S'S",
    "HelloWorld", "camelCaseString", "XMLHttpRequest", "ABCdef", "aBC", "\u01c5ungla", "\u01c8", "ʰʲʷ", "naïve",
    "nai\u0308ve", "Ünïcödé", "ÀÉÎ", "\u0915\u093f", "漢字かなカナ", "中文 字", "東京タワー123", "😀😀 😀", "👍🏽👍",
    "  \n\n  ", "\t\t x", " \r\n\r\n", "\n \n", "a\n\n\n", "   \n", "\r\r\n", "x  \t\n\ty",
    "a/b/c//", "http://x.org/a/b", "foo!!!\n\n", "...\n/", "<|endoftext|>", "<|fim_prefix|>", "<|endofprompt|>",
    "<|begin_of_text|>",
]
adversarial = adversarial_strings(extra, long_piece=600)  # 600: js-tiktoken is quadratic in a piece
paths = write_inputs("adversarial", [s.encode("utf-8") for s in adversarial])
for enc in ENCODINGS:
    ours, ref = encode_ours(enc, paths), encode_reference(enc, paths)
    n_bad = 0
    for s, a, b in zip(adversarial, ours, ref):
        if a != b:
            n_bad += 1
            if n_bad <= 5:
                print(f"  {enc} differs on {s[:60]!r}...: ours {a[:80]} / reference {b[:80]}")
    check(len(ours) == len(ref) == len(adversarial) and n_bad == 0,
          f"{enc}: {n_bad} of {len(adversarial)} adversarial strings differ from js-tiktoken")
    print(f"{enc}: {len(adversarial)} adversarial strings compared")
bad = {b"ok \xff": 3, b"abc\xe6\xbc": 3, b"x\xed\xa0\x80": 1}
for (blob, off), line in zip(bad.items(), encode_ours("o200k_base", write_inputs("invalid", list(bad)))):
    check(line.startswith(f"error: invalid UTF-8 at byte offset {off} "), f"invalid UTF-8 {blob!r}: got '{line}'")

print(f"[{time.time() - t_start:.1f} s]")
# ---- 3. the Brown corpus through llmtrain-prep ----
brown = os.path.join(src, "data", "brown")
if not os.path.isfile(os.path.join(brown, "text", ".complete")):
    subprocess.run([os.path.join(src, "tools", "fetch_brown.sh"), brown], check=True)
glob = os.path.join(brown, "text", "*.txt")
files = sorted(os.path.join(brown, "text", f) for f in os.listdir(os.path.join(brown, "text")) if f.endswith(".txt"))
check(len(files) == 500, f"Brown has 500 documents, found {len(files)}")
texts = []  # a document is its file's lines joined by '\n': the file minus its final newline
for p in files:
    with open(p, "rb") as f:
        b = f.read()
    texts.append(b[:-1] if b.endswith(b"\n") else b)
doc_paths = write_inputs("brown_docs", texts)
reference_ids = {}
for enc, (sha, vocab, eos) in ENCODINGS.items():
    ref = [[int(x) for x in line.split()] for line in encode_reference(enc, doc_paths)]
    reference_ids[enc] = ref
    out = os.path.join(scratch, f"brown_{enc}")
    r = run_prep(enc, out, [glob])
    check(r.returncode == 0, f"prep --tokenizer {enc} on Brown exits 0, got {r.returncode}")
    a, blob, dtype, docs = read_dataset(out)
    check((a["tokenizer"], int(a["format_version"]), int(a["vocab_size"]), int(a["eos_id"]), int(a["bos_id"])) ==
          (enc, 2, vocab, eos, -1), f"{enc}: attributes tokenizer/format_version/vocab/eos/bos: {a}")
    check(a["tokenizer_sha256"] == sha == hashlib.sha256(blob).hexdigest(), f"{enc}: tokenizer_sha256 is tiktoken's")
    check(dtype == np.uint32, f"{enc}: uint32 tokens (vocab {vocab} > 65536), got {dtype}")
    check(max(max(d) for d in docs) > 65535, f"{enc}: ids above 65535 are stored whole")
    check(sorted(docs) == sorted(d + [eos] for d in ref), f"{enc}: every Brown document's ids (+ eos) equal js-tiktoken's")
    print(f"{enc} Brown: {len(docs)} documents, {sum(len(d) for d in ref)} tokens compared")

print(f"[{time.time() - t_start:.1f} s]")
# ---- 4. tiktoken:PATH: cl100k's ranks written back in tiktoken format, Llama 3's special tokens ----
with open(ranks_of("cl100k_base")) as f:
    lines = f.read().splitlines()
random.Random(5).shuffle(lines)  # the order of lines does not matter, the ranks do
user = os.path.join(scratch, "user", "original")
os.makedirs(user)
model = os.path.join(user, "tokenizer.model")
with open(model, "w") as f:
    f.write("\n".join(lines) + "\n")
n = len(lines)  # 100256 ranks: specials from 100256 on, Llama 3 style
specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|eot_id|>"]
flags = [x for i, s in enumerate(specials) for x in ("--special", f"{s}={n + i}")]
out = os.path.join(scratch, "brown_user")
r = run_prep(f"tiktoken:{model}", out, [glob], *flags)
check(r.returncode == 0, f"prep --tokenizer tiktoken:PATH on Brown exits 0, got {r.returncode}")
check("eos <|end_of_text|> = 100257" in r.stdout and "bos <|begin_of_text|> = 100256" in r.stdout,
      "the summary names eos and bos")
a, blob, dtype, docs = read_dataset(out)
check((a["tokenizer"], int(a["vocab_size"]), int(a["eos_id"]), int(a["bos_id"])) == ("tiktoken", n + 4, n + 1, n),
      f"tiktoken:PATH attributes: {a}")
check(a["tokenizer_sha256"] == hashlib.sha256(blob).hexdigest(), "tiktoken:PATH: tokenizer_sha256 is the blob's")
head, _, ranks = blob.partition(b"\nranks\n")
check(head.split(b"\n")[:3] == [b"llmtrain-tiktoken 1", b"pattern cl100k_base", b"eos <|end_of_text|>"]
      and f"special {n + 3} <|eot_id|>".encode() in head.split(b"\n"), f"the container's header: {head[:200]!r}")
with open(model, "rb") as f:
    check(ranks == f.read(), "the container holds the ranks file verbatim")
check(dtype == np.uint32, "tiktoken:PATH: uint32 tokens")
check(sorted(docs) == sorted(d + [n + 1] for d in reference_ids["cl100k_base"]),
      "tiktoken:PATH on Brown: every document equals js-tiktoken's cl100k ids + <|end_of_text|>")

print(f"[{time.time() - t_start:.1f} s]")
small = [files[0], files[1]]
# The default: Llama 3's 256 special tokens after the last rank; eos <|end_of_text|>, bos <|begin_of_text|>.
r = run_prep(f"tiktoken:{model}", os.path.join(scratch, "default"), small, val="0")
a, _, _, docs = read_dataset(os.path.join(scratch, "default"))
check(r.returncode == 0 and "Llama 3" in r.stdout and (int(a["vocab_size"]), int(a["eos_id"]), int(a["bos_id"])) ==
      (n + 256, n + 1, n), f"the default special set: {r.returncode} {a}")
check(sorted(docs) == sorted(d + [n + 1] for d in reference_ids["cl100k_base"][:2]), "default set: ids + eos")
# --add-bos: Llama 3's document framing, <|begin_of_text|> ids <|end_of_text|>.
r = run_prep(f"tiktoken:{model}", os.path.join(scratch, "add_bos"), small, "--add-bos", val="0")
_, _, _, docs = read_dataset(os.path.join(scratch, "add_bos"))
check(r.returncode == 0 and sorted(docs) == sorted([n] + d + [n + 1] for d in reference_ids["cl100k_base"][:2]),
      f"--add-bos: <|begin_of_text|> + ids + <|end_of_text|> ({r.returncode} {r.stderr.strip()[-200:]})")
# --eos by id, --bos none.
r = run_prep(f"tiktoken:{model}", os.path.join(scratch, "eos_id"), small, "--eos", str(n + 9), "--bos", "none", val="0")
a, _, _, _ = read_dataset(os.path.join(scratch, "eos_id"))
check(r.returncode == 0 and (int(a["eos_id"]), int(a["bos_id"])) == (n + 9, -1), f"--eos ID, --bos none: {a}")
# tokenizer_config.json in the parent of original/ (HuggingFace's layout): its specials, eos_token, bos_token.
config = {"added_tokens_decoder": {str(n + i): {"content": s, "special": True} for i, s in enumerate(specials)},
          "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
with open(os.path.join(scratch, "user", "tokenizer_config.json"), "w") as f:
    json.dump(config, f)
r = run_prep(f"tiktoken:{model}", os.path.join(scratch, "hf"), small, val="0")
a, _, _, _ = read_dataset(os.path.join(scratch, "hf"))
check(r.returncode == 0 and "tokenizer_config.json" in r.stdout and
      (int(a["vocab_size"]), int(a["eos_id"]), int(a["bos_id"])) == (n + 4, n + 3, n), f"tokenizer_config.json: {a}")

print(f"[{time.time() - t_start:.1f} s]")
# Errors: exit 2 naming the flag or file.
bad_ranks = os.path.join(scratch, "bad_dir")
os.makedirs(bad_ranks)
with open(os.path.join(bad_ranks, "cl100k_base.tiktoken"), "w") as f:
    f.write("\n".join(sorted(lines, key=lambda l: int(l.split()[1]))[:-1]) + "\n")
cases = [
    ([f"tiktoken:{model}", "--eos", "<|nope|>"], ["<|nope|>", "--eos"]),
    ([f"tiktoken:{model}", "--special", "no-id"], ["--special 'no-id'", "TEXT=ID"]),
    ([f"tiktoken:{model}", "--special", "<|x|>=5", "--eos", "<|x|>"], ["<|x|>", "id 5", "rank"]),
    (["cl100k_base", "--special", "<|x|>=100300"], ["tiktoken:PATH"]),
    ([f"tiktoken:{os.path.join(scratch, 'none.model')}"], ["none.model"]),
    (["cl100k_base", "--tiktoken-dir", bad_ranks], ["cl100k_base.tiktoken", "SHA-256", "tiktoken:PATH"]),
    ([f"tiktoken:{model}", "--special-tokens", os.path.join(scratch, "missing.json")], ["missing.json"]),
    ([f"tiktoken:{model}", "--bos", "none", "--add-bos"], ["--add-bos", "bos_id = -1", "--bos"]),
    (["cl100k_base", "--tiktoken-dir", tik_dir, "--add-bos"], ["--add-bos", "cl100k_base", "no BOS"]),
]
for args, words in cases:
    r = subprocess.run([prep, "--tokenizer", *args, "--val-fraction", "0", "--out-dir", os.path.join(scratch, "bad_out"),
                        small[0]], capture_output=True, text=True)
    check(r.returncode == 2 and all(w in r.stderr for w in words), f"{args}: exit 2 naming {words}: {r.returncode} {r.stderr}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all tiktoken-family tokenizer checks passed")
