#!/usr/bin/env python3
# tests/app/checkpoint_fault_test.py — crash test of the checkpoint protocol (app/checkpoint/).
#
# Drives the real llmtrain binary on a 1-layer model: each trial starts it with resume = "auto" and
# LLMTRAIN_TEST_KILL_AT_CHECKPOINT_OP=k (random k, seeded and printed), so it dies by SIGKILL just
# before its k-th checkpoint operation: around the snapshot copy into host memory, in the
# background writer thread's part writes (checkpoint.async = true, the default: training runs on
# meanwhile), or in the commit (state.toml, renames, `latest`, pruning);
# sometimes the newest checkpoint is then damaged
# (one byte flipped, or the file cut short). The next start must
#   - resume from the checkpoint `latest` names when it is intact, else from the newest one that is
#     intact (a step_N renamed into place just before the kill, `latest` not yet moved to it, is
#     passed over: `latest` is the commit point), judged here independently of llmtrain:
#     model.h5 and optim_0.h5 byte-equal to the same step of an uninterrupted reference run (the
#     files are reproducible and training is deterministic), and state.toml's own SHA-256 and its
#     [files] checksums correct (Python's hashlib/tomllib); a .old_step_N whose step_N is gone
#     counts (start-up recovery restores it);
#   - start from scratch only when no step_N directory is left, and refuse (exit 1) when some
#     are left but none is intact;
#   - log train losses equal, as text (%.9g, exact fp32), to the reference run's at every step.
# A run that finishes must end with a step_<max> model.h5 equal to the reference one.
# Usage: checkpoint_fault_test.py LLMTRAIN TINY_DATA_DIR WORK_DIR [TRIALS] [SEED]
import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import tomllib

LLMTRAIN, DATA, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
TRIALS = int(sys.argv[4]) if len(sys.argv) > 4 else 55
SEED = int(sys.argv[5]) if len(sys.argv) > 5 else 1234
STEPS = 6
MAX_K = 550  # about the protocol's operations in a full run from scratch (6 checkpoints: 544)


def args(run_dir):
    vocab = open(os.path.join(DATA, "vocab_size.txt")).read().strip()
    sets = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.seq_len=16",
            f"model.vocab_size={vocab}", f'data.train="{DATA}/train.h5"', f'data.val="{DATA}/val.h5"',
            f'run.run_dir="{run_dir}"', 'run.backend="cpu"', "metrics.enabled=false",
            "training.micro_batch_size=2", "run.log_interval=1", "run.eval_interval=0", "run.sample_interval=0",
            'lr_schedule.decay="constant"', "lr_schedule.warmup_steps=2", "optimizer.lr=0.01",
            f"run.max_steps={STEPS}", "checkpoint.interval=1", "checkpoint.keep_last=2", 'checkpoint.resume="auto"']
    out = [LLMTRAIN]
    for s in sets:
        out += ["--set", s]
    return out


def run(run_dir, kill_at=None):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("LLMTRAIN_TEST_KILL_AT_CHECKPOINT_OP", None)
    if kill_at is not None:
        env["LLMTRAIN_TEST_KILL_AT_CHECKPOINT_OP"] = str(kill_at)
    return subprocess.run(args(run_dir), env=env, capture_output=True, text=True, timeout=120)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def train_losses(run_dir):
    """Every train line of losses.tsv as (step, loss text), in order."""
    path = os.path.join(run_dir, "losses.tsv")
    if not os.path.exists(path):
        return []
    rows = [l.rstrip("\n").split("\t") for l in open(path).readlines()[1:]]
    return [(int(r[0]), r[2]) for r in rows if len(r) > 2 and r[1] == "train"]


def state_ok(d):
    """state.toml's self-checksum and every [files] checksum hold (independent of llmtrain)."""
    try:
        text = open(os.path.join(d, "state.toml"), "rb").read()
        cut = text.rindex(b"\n[integrity]\n") + 1
        if hashlib.sha256(text[:cut]).hexdigest() != tomllib.loads(text.decode())["integrity"]["state_sha256"]:
            return False
        files = tomllib.loads(text.decode())["files"]
        return all(os.path.isfile(os.path.join(d, n)) and sha(os.path.join(d, n)) == h for n, h in files.items())
    except (OSError, ValueError, KeyError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False


def intact(d, step, ref):
    if not state_ok(d) or step not in ref:
        return False
    return all(os.path.isfile(os.path.join(d, n)) and sha(os.path.join(d, n)) == h for n, h in ref[step].items())


def expected_resume(ck, ref):
    """('resume', N) | ('scratch', None) | ('refuse', None) for the next start."""
    if not os.path.isdir(ck):
        return "scratch", None
    names = os.listdir(ck)
    steps = {int(n[5:]) for n in names if re.fullmatch(r"step_\d+", n)}
    good = {s for s in steps if intact(os.path.join(ck, f"step_{s}"), s, ref)}
    for n in names:  # a replace interrupted after moving step_N aside
        m = re.fullmatch(r"\.old_step_(\d+)", n)
        if m and int(m.group(1)) not in steps:
            s = int(m.group(1))
            if intact(os.path.join(ck, n), s, ref):
                good.add(s)
                steps.add(s)
    try:
        latest = open(os.path.join(ck, "latest")).read().strip()
    except OSError:
        latest = ""
    m = re.fullmatch(r"step_(\d+)", latest)
    if m and int(m.group(1)) in good:
        return "resume", int(m.group(1))
    if good:
        return "resume", max(good)
    return ("refuse", None) if steps else ("scratch", None)


def damage(ck, rng):
    steps = sorted(int(n[5:]) for n in os.listdir(ck) if re.fullmatch(r"step_\d+", n)) if os.path.isdir(ck) else []
    if not steps:
        return None
    d = os.path.join(ck, f"step_{steps[-1]}")
    files = sorted(os.listdir(d))
    if not files:
        return None
    p = os.path.join(d, rng.choice(files))
    size = os.path.getsize(p)
    if size == 0:
        return None
    if rng.random() < 0.5:
        os.truncate(p, rng.randrange(size))
        return f"truncated {p}"
    pos = rng.randrange(size)
    with open(p, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
    return f"flipped a bit of byte {pos} of {p}"


def main():
    rng = random.Random(SEED)
    print(f"checkpoint fault test: seed {SEED}, {TRIALS} trials, k in [1, {MAX_K}]", flush=True)
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    # The uninterrupted reference run, keeping every checkpoint (a later --set wins).
    ref_dir = os.path.join(WORK, "reference")
    r = subprocess.run(args(ref_dir) + ["--set", "checkpoint.keep_last=0"], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=120)
    assert r.returncode == 0, r.stderr
    ref_losses = dict(train_losses(ref_dir))
    assert sorted(ref_losses) == list(range(1, STEPS + 1)), ref_losses
    ref = {}
    for s in range(1, STEPS + 1):
        d = os.path.join(ref_dir, "checkpoints", f"step_{s}")
        ref[s] = {n: sha(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".h5")}

    episode, runs_dir, counts = 0, None, {"killed": 0, "finished": 0, "refused": 0, "damaged": 0}
    for trial in range(TRIALS):
        if runs_dir is None:
            episode += 1
            runs_dir = os.path.join(WORK, f"episode_{episode}")
        ck = os.path.join(runs_dir, "checkpoints")
        want, want_step = expected_resume(ck, ref)
        k = rng.randint(1, MAX_K)
        r = run(runs_dir, k)
        what = f"trial {trial} (episode {episode}, k={k}, expected {want} {want_step}): rc {r.returncode}"
        print(what, flush=True)
        if want == "refuse":
            assert r.returncode == 1 and "verifies" in r.stderr, f"{what}\n{r.stderr}"
            counts["refused"] += 1
            runs_dir = None
            continue
        started = re.search(r"^(resume: from (\S+)|start: from scratch)", r.stdout, re.M)
        if r.returncode != -9 or started:  # a kill during start-up recovery may come before the choice
            assert started, f"{what}\n{r.stdout}\n{r.stderr}"
            if want == "resume":
                assert started.group(2) == os.path.join(ck, f"step_{want_step}"), f"{what}\n{r.stdout}"
            else:
                assert started.group(0) == "start: from scratch", f"{what}\n{r.stdout}"
        for step, loss in train_losses(runs_dir):
            assert loss == ref_losses[step], f"{what}: step {step} loss {loss} != reference {ref_losses[step]}"
        if r.returncode == 0:
            final = os.path.join(ck, f"step_{STEPS}")
            assert intact(final, STEPS, ref), f"{what}: final checkpoint differs from the reference"
            counts["finished"] += 1
            runs_dir = None
            continue
        assert r.returncode == -9, f"{what}\n{r.stderr}"
        counts["killed"] += 1
        if rng.random() < 0.3:
            note = damage(ck, rng)
            if note:
                counts["damaged"] += 1
                print("  " + note, flush=True)
    print(f"checkpoint fault test: passed ({counts})")


if __name__ == "__main__":
    main()
