#!/usr/bin/env python3
"""tests/data/test_prep_memory.py — `llmtrain-prep --tokenizer gpt2` streams: its peak memory does
not grow with the corpus. Two generated corpora (8 KB documents, --separator) of 4 MiB and 28 MiB
are prepared with 2 threads; the peak resident set (max RSS from wait4) of the larger run may
exceed the smaller one's by at most 6 MiB while the corpus grew by 24 MiB. Derivation: what grows
with the corpus is the train/val choice, 8 bytes per document while drawn (3,000 more documents =
24 KB), plus allocator noise; a prep that held the corpus (or its ids, 4 bytes per token) would
grow by >= 24 MiB. Both runs must also stay under an absolute 96 MiB cap: measured 38 MiB (the
ranks' map, one block of <= 256 documents = 2 MiB of text and its ids, HDF5's chunk buffers). The ranks are a stand-in (gpt2_test_ranks.py) holding the
corpus words, so encoding is fast; GPT-2's real ids are tested in test_gpt2_tokenizer.py.
Skips (exit 77) in the Sanitize build, whose ASan inflates RSS.
Usage: test_prep_memory.py LLMTRAIN_PREP SCRATCH_DIR
"""
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_test_ranks import write_test_ranks  # noqa: E402

prep, scratch = sys.argv[1], sys.argv[2]
if "ASAN_OPTIONS" in os.environ:  # set for every test of the Sanitize build (tests/sanitize)
    print("Sanitize build: ASan's shadow memory and quarantine make peak RSS meaningless, skipped")
    sys.exit(77)
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
failures = []
MiB = 1 << 20


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


rng = np.random.default_rng(7)
letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
words = sorted({"".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(3000)})
ranks = os.path.join(scratch, "ranks.tiktoken")
write_test_ranks(ranks, words)


def make_corpus(name, mib):
    d = os.path.join(scratch, name)
    os.makedirs(d)
    total, k = 0, 0
    while total < mib * MiB:
        # one file of 64 documents of ~8 KB: lines of 12 words, "@@" between documents
        ids = rng.integers(0, len(words), (64, 100, 12))
        docs = ["\n".join(" ".join(words[i] for i in line) for line in doc) for doc in ids]
        text = "\n@@\n".join(docs) + "\n"
        with open(os.path.join(d, f"part{k:04d}.txt"), "w") as f:
            f.write(text)
        total += len(text)
        k += 1
    return d, total


def run_measured(corpus, out):
    args = [prep, "--tokenizer", "gpt2", "--gpt2-ranks", ranks, "--separator", "@@", "--num-threads", "2",
            "--val-fraction", "0.01", "--out-dir", out, os.path.join(corpus, "*.txt")]
    p = subprocess.Popen(args, stdout=open(os.path.join(scratch, "stdout"), "w"), stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    print(open(os.path.join(scratch, "stdout")).read())
    return p.returncode, usage.ru_maxrss * 1024  # ru_maxrss is in KiB on Linux


small, small_bytes = make_corpus("small", 4)
large, large_bytes = make_corpus("large", 28)
rc_s, rss_s = run_measured(small, os.path.join(scratch, "out_small"))
rc_l, rss_l = run_measured(large, os.path.join(scratch, "out_large"))
print(f"corpus {small_bytes / MiB:.1f} MiB: peak RSS {rss_s / MiB:.1f} MiB; "
      f"corpus {large_bytes / MiB:.1f} MiB: peak RSS {rss_l / MiB:.1f} MiB")
check(rc_s == 0 and rc_l == 0, f"both runs exit 0 ({rc_s}, {rc_l})")
check(large_bytes - small_bytes >= 24 * MiB, "the large corpus is >= 24 MiB larger")
check(rss_l - rss_s <= 6 * MiB, f"peak RSS grew by {(rss_l - rss_s) / MiB:.1f} MiB (<= 6 MiB allowed)")
check(max(rss_s, rss_l) <= 96 * MiB, f"peak RSS {max(rss_s, rss_l) / MiB:.1f} MiB under the 96 MiB cap")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("memory bound checks passed")
