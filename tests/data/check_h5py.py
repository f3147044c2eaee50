#!/usr/bin/env python3
"""tests/data/check_h5py.py — the token dataset format against h5py, an independent HDF5 library binding.

C++ -> h5py: files written by TokenDatasetWriter (through dataset_tool) must have exactly the layout
of docs/data.md: /tokens 1-D uint16 (vocab <= 65536) else uint32, chunked 1-4 MiB, no filters;
/doc_offsets uint64; /tokenizer uint8; the five attributes; tokens equal to the closed form
token_at(p) = (p * 2654435761 + 17) % vocab, documents of length 1 + (d * 37) % max_len.
h5py -> C++: a file written by h5py (other chunking, int32 and variable-length string attributes)
must be read back exactly by TokenDataset, and refused when its tokenizer hash is wrong.
Usage: check_h5py.py DATASET_TOOL SCRATCH_DIR
"""
import hashlib
import os
import subprocess
import sys

import h5py
import numpy as np

tool, scratch = sys.argv[1], sys.argv[2]
os.makedirs(scratch, exist_ok=True)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def expected_sample(vocab, n_docs, max_len):
    lengths = [1 + (d * 37) % max_len for d in range(n_docs)]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint64)
    p = np.arange(int(offsets[-1]), dtype=np.uint64)
    # (p * 2654435761 + 17) % vocab without uint64 overflow: p < 2^21 here, the product < 2^53
    tokens = ((p * np.uint64(2654435761) + np.uint64(17)) % np.uint64(vocab)).astype(np.int64)
    return offsets, tokens


# ---- C++ writer, h5py reader ----
for vocab, n_docs, max_len in [(1000, 50, 200), (65536, 30, 100), (65537, 30, 100), (1000, 700, 5000)]:
    path = os.path.join(scratch, f"cpp_{vocab}_{n_docs}.h5")
    subprocess.run([tool, "write", path, str(vocab), str(n_docs), str(max_len)], check=True)
    offsets, tokens = expected_sample(vocab, n_docs, max_len)
    with h5py.File(path, "r") as f:
        t = f["tokens"]
        want = np.uint16 if vocab <= 65536 else np.uint32
        tag = f"vocab {vocab}, {n_docs} docs"
        check(t.dtype == want, f"{tag}: /tokens dtype {t.dtype}, expected {np.dtype(want)}")
        check(t.ndim == 1 and t.shape[0] == len(tokens), f"{tag}: /tokens shape {t.shape}")
        check(t.chunks is not None, f"{tag}: /tokens not chunked")
        check(t.compression is None and t.shuffle is False, f"{tag}: /tokens has filters")
        chunk_bytes = t.chunks[0] * t.dtype.itemsize
        if len(tokens) * t.dtype.itemsize >= (1 << 20):
            check((1 << 20) <= chunk_bytes <= (4 << 20), f"{tag}: chunk of {chunk_bytes} bytes, not 1-4 MiB")
        check(np.array_equal(t[()].astype(np.int64), tokens), f"{tag}: token values differ from the closed form")
        check(f["doc_offsets"].dtype == np.uint64, f"{tag}: /doc_offsets dtype {f['doc_offsets'].dtype}")
        check(np.array_equal(f["doc_offsets"][()], offsets), f"{tag}: /doc_offsets differ")
        tok = f["tokenizer"][()]
        check(f["tokenizer"].dtype == np.uint8, f"{tag}: /tokenizer dtype {f['tokenizer'].dtype}")
        check(tok.tobytes() == bytes(range(256)), f"{tag}: /tokenizer bytes differ")
        a = f.attrs
        sha = a["tokenizer_sha256"]
        sha = sha.decode() if isinstance(sha, bytes) else str(sha)
        check(sha == hashlib.sha256(bytes(range(256))).hexdigest(), f"{tag}: tokenizer_sha256 {sha}")
        kind = a["tokenizer"].decode() if isinstance(a["tokenizer"], bytes) else str(a["tokenizer"])
        check(int(a["format_version"]) == 2 and kind == "sentencepiece" and int(a["vocab_size"]) == vocab,
              f"{tag}: format_version/tokenizer/vocab_size")
        check(int(a["eos_id"]) == 2 and int(a["bos_id"]) == 1, f"{tag}: eos_id/bos_id")


def dump(path):
    r = subprocess.run([tool, "dump", path], capture_output=True, text=True)
    fields = {}
    for line in r.stdout.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.split()
    return r.returncode, fields, r.stderr


# ---- h5py writer, C++ reader ----
rng = np.random.default_rng(5)
for vocab in (300, 100000):
    path = os.path.join(scratch, f"py_{vocab}.h5")
    tokens = rng.integers(0, vocab, size=5000)
    offsets = np.array([0, 1000, 1000, 4321, 5000], dtype=np.uint64)
    tokenizer = rng.integers(0, 256, size=777, dtype=np.uint8)
    with h5py.File(path, "w") as f:
        dt = np.uint16 if vocab <= 65536 else np.uint32
        f.create_dataset("tokens", data=tokens.astype(dt), chunks=(1024,), maxshape=(None,))
        f.create_dataset("doc_offsets", data=offsets)
        f.create_dataset("tokenizer", data=tokenizer)
        f.attrs["format_version"] = np.int32(1)
        f.attrs["vocab_size"] = np.int32(vocab)
        f.attrs["eos_id"] = np.int32(7)
        f.attrs["bos_id"] = np.int32(-1)
        f.attrs["tokenizer_sha256"] = hashlib.sha256(tokenizer.tobytes()).hexdigest()  # variable-length str
    rc, fields, err = dump(path)
    tag = f"h5py file, vocab {vocab}"
    check(rc == 0, f"{tag}: dataset_tool refused it: {err}")
    if rc == 0:
        check(fields["vocab_size"] == [str(vocab)] and fields["eos_id"] == ["7"] and fields["bos_id"] == ["-1"],
              f"{tag}: attributes read as {fields}")
        check(fields["token_bytes"] == ["2" if vocab <= 65536 else "4"], f"{tag}: token_bytes {fields['token_bytes']}")
        check([int(x) for x in fields["tokens"]] == tokens.tolist(), f"{tag}: tokens differ")
        check([int(x) for x in fields["doc_offsets"]] == offsets.tolist(), f"{tag}: doc_offsets differ")
        check(fields["tokenizer_len"] == ["777"], f"{tag}: tokenizer length {fields['tokenizer_len']}")
    with h5py.File(path, "r+") as f:
        f.attrs["tokenizer_sha256"] = "0" * 64
    rc, _, err = dump(path)
    check(rc == 2 and "/tokenizer has SHA-256" in err and path in err, f"{tag}: wrong hash accepted ({rc}, {err})")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("check_h5py: all checks passed")
