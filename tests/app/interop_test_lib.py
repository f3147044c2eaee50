"""tests/app/interop_test_lib.py — what the HuggingFace interop tests share (interop_weights_test.py,
interop_llama_test.py): the list of failed checks and safetensors files read and written by the
format's published layout (an 8-byte little-endian header length, a JSON header of name -> dtype,
shape, data_offsets and an optional __metadata__, then the raw little-endian data), independent of
our C++ reader and writer."""
import json
import os
import struct

import numpy as np

failures = []  # what failed; each test exits 1 when any


def check(ok, what):
    """Prints ok/FAIL and `what`; records a failure when ok is false."""
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def load_safetensors(path):
    """name -> (dtype, float64 array) of an F32 or BF16 safetensors file, checking what the format
    requires of a file torch would write: __metadata__ {"format": "pt"}, the data 8-byte aligned and
    covered by the tensors without gaps or overlaps."""
    raw = read_bytes(path)
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    meta = header.pop("__metadata__", None)
    check(meta == {"format": "pt"}, f"{os.path.basename(path)}: __metadata__ is {{'format': 'pt'}} ({meta})")
    check((8 + n) % 8 == 0, f"{os.path.basename(path)}: data starts 8-byte aligned")
    spans = sorted(tuple(t["data_offsets"]) for t in header.values())
    check(spans[0][0] == 0 and spans[-1][1] == len(data) and all(a[1] == b[0] for a, b in zip(spans, spans[1:])),
          f"{os.path.basename(path)}: the data fully covered by the tensors, without gaps or overlaps")
    out = {}
    for name, t in header.items():
        lo, hi = t["data_offsets"]
        if t["dtype"] == "F32":
            a = np.frombuffer(data[lo:hi], dtype="<f4").astype(np.float64)
        else:
            assert t["dtype"] == "BF16", t["dtype"]
            bits = np.frombuffer(data[lo:hi], dtype="<u2").astype(np.uint32) << 16
            a = bits.view(np.float32).astype(np.float64)
        out[name] = (t["dtype"], a.reshape(t["shape"]))
    return out


def write_safetensors(path, tensors):
    """Writes name -> (numpy dtype string, safetensors dtype, array) as a safetensors file (numpy's
    casts), for hand-made inputs."""
    header, blobs, pos = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (npd, std, a) in tensors.items():
        b = np.ascontiguousarray(a, dtype=npd).tobytes()
        header[name] = {"dtype": std, "shape": list(a.shape), "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
