"""tests/data/tokenizer_test_lib.py — what the tokenizer comparisons with js-tiktoken share
(test_gpt2_tokenizer.py, test_tiktoken_tokenizer.py): the list of failed checks, input files
written one per string, and the first lines of a tool's output (one line of ids per input file)."""
import os
import subprocess

failures = []  # what failed; the test exits 1 when any


def check(cond, what):
    """Records `what` as a failure (and prints it) when cond is false."""
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def write_inputs(scratch, dirname, blobs):
    """Writes each bytes object of blobs to scratch/dirname/NNNNN.txt; returns the paths in order."""
    d = os.path.join(scratch, dirname)
    os.makedirs(d)
    paths = []
    for i, b in enumerate(blobs):
        p = os.path.join(d, f"{i:05d}.txt")
        with open(p, "wb") as f:
            f.write(b)
        paths.append(p)
    return paths


def id_lines(cmd, paths):
    """Runs cmd + paths (an encoder printing one line per file) and returns its first len(paths) lines."""
    r = subprocess.run([*cmd, *paths], capture_output=True, check=True)
    return r.stdout.decode().split("\n")[: len(paths)]
