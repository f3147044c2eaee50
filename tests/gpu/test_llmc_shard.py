#!/usr/bin/env python3
"""tests/gpu/test_llmc_shard.py — tools/prep/llmc_shard (a tokenized HDF5 dataset -> an llm.c shard,
tools/gpu/run.sh's llm.c steps) on make_tiny_dataset's train.h5. The shard is read back here as
llm.c's llmc/dataloader.h reads it: 256 int32 of header (magic 20240520, version 1, the token
count, zeros), then count uint16 tokens, nothing after them. The reference tokens are h5dump's raw
dump of /tokens (HDF5's own tool, independent of our reader); without h5dump only the header, the
size and the repeat are checked.

Usage: python3 test_llmc_shard.py <llmc_shard> <make_tiny_dataset>   (ctest llmc_shard)
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

EXE, MAKE = sys.argv[1], sys.argv[2]


def read_shard(path):
    """(header ints, token list) of an llm.c shard."""
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    n = header[2]
    assert len(data) == 1024 + 2 * n, f"{path}: {len(data)} bytes, header says {n} tokens"
    return header, list(struct.unpack(f"<{n}H", data[1024:]))


class LlmcShard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        subprocess.run([MAKE, cls.dir], check=True, stdout=subprocess.DEVNULL)
        cls.h5 = os.path.join(cls.dir, "train.h5")
        cls.ref = None
        if shutil.which("h5dump"):
            raw = os.path.join(cls.dir, "tokens.raw")
            subprocess.run(["h5dump", "-d", "/tokens", "-b", "LE", "-o", raw, cls.h5], check=True,
                           stdout=subprocess.DEVNULL)
            with open(raw, "rb") as f:
                data = f.read()
            cls.ref = list(struct.unpack(f"<{len(data) // 2}H", data))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def shard(self, *extra):
        out = os.path.join(self.dir, "train.bin")
        subprocess.run([EXE, self.h5, out, *extra], check=True, stdout=subprocess.DEVNULL)
        self.assertFalse(os.path.exists(out + ".tmp"))
        return read_shard(out)

    def test_same_tokens(self):
        header, tokens = self.shard()
        self.assertEqual(header[:2], (20240520, 1))
        self.assertEqual(set(header[3:]), {0})
        self.assertGreater(len(tokens), 32 * 1024)  # GPT-2 124M's B*T+1: llm.c's loader asserts it
        self.assertLess(max(tokens), 320)  # make_tiny_dataset's vocabulary
        if self.ref is not None:
            self.assertEqual(tokens, self.ref)

    def test_repeated_to_min_tokens(self):
        _, once = self.shard()
        want = 2 * len(once) + 5
        header, tokens = self.shard(str(want))
        self.assertEqual(header[2], want)
        self.assertEqual(tokens, once + once + once[:5])

    def test_errors(self):
        r = subprocess.run([EXE, os.path.join(self.dir, "absent.h5"), os.path.join(self.dir, "x.bin")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("absent.h5", r.stderr)
        self.assertEqual(subprocess.run([EXE], capture_output=True).returncode, 2)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
