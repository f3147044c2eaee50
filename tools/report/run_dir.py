"""tools/report/run_dir.py — what one llmtrain run dir records, read into plain Python data for the report.

A run dir (docs/report.md, "What it reads") holds, written by rank 0 (app/report/run_log.hpp):
  losses.tsv   step, kind, loss, lr, grad_norm: kind "train" every step, "val" every evaluation, "hellaswag" /
               "hellaswag_norm" (accuracy in the loss column) every HellaSwag evaluation, with a mixture
               (data.sources) "val:<source>" and "tokens:<source>" (tokens drawn so far, every log line),
               any other kind an evaluation of its own; after a resume a step may appear twice and the
               later line counts
  log.txt      the human log: step lines (tokens/s, MFU), checkpoint lines (training blocked s), skipped steps,
               "start:" / "resume:" lines (one per process start), the start-up memory and batch lines
  config.toml  every key of the run's config, as the last start wrote it
Errors: RunDirError naming the file and line when a file the report needs is missing or malformed.
"""
import math
import os
import re
import tomllib


class RunDirError(Exception):
    """A run dir that cannot be read: the message names the file (and line)."""


# "step 120/2000 | loss 4.5123 | lr 9.00e-04 | norm 0.812 | 3,412 tok/s | MFU 4.1% | ..." (app/report/run_log.cpp)
STEP_LINE = re.compile(r"^step (\d+)/\d+ \| loss \S+ \| lr \S+ \| norm \S+ \| ([\d,]+) tok/s \| MFU ([\d.]+)%")
# "checkpoint: step_10: training blocked 0.035 s; writers 0.03 s ..." (app/checkpoint/saver.cpp)
CKPT_LINE = re.compile(r"^checkpoint: step_(\d+): training blocked ([\d.]+) s; writers ([\d.]+) s")
# "step 7: loss nan, grad norm inf: not finite, no update (...)" (app/trainer.cpp)
SKIP_LINE = re.compile(r"^step (\d+): loss \S+, grad norm \S+: not finite, no update")
# "resume: from runs/x/checkpoints/step_250 at step 250 (...)" (app/trainer_checkpoint.cpp)
RESUME_LINE = re.compile(r"^resume: from (\S+) at step (\d+)")
# "batch: ... = global_batch_size 2 sequences = 32 tokens per step | ..." (app/run_summary.cpp)
BATCH_LINE = re.compile(r"^batch: .*= ([\d,]+) tokens per step")
# "memory (this rank): params 0.1 MiB, grads 0.1 MiB, ..., device total 0.8 MiB"
MEMORY_LINE = re.compile(r"^memory \(this rank\): (.*)$")
MEMORY_ITEM = re.compile(r"([a-z][a-z ]*?) ([\d.]+) MiB")
# "peak device memory (MiB): rank 0 (stage 0) 0.80, rank 1 (stage 0) 0.80"
PEAK_DEVICE_LINE = re.compile(r"^peak device memory \(MiB\): (.*)$")
PEAK_DEVICE_ITEM = re.compile(r"rank (\d+) \(stage \d+\) ([\d.]+)")
# "memory: peak RSS at start, ... (MiB, VmHWM): rank 0 36.1, rank 1 36.0"
PEAK_RSS_LINE = re.compile(r"^memory: peak RSS (.*) \(MiB, VmHWM\): (.*)$")
PEAK_RSS_ITEM = re.compile(r"rank (\d+) ([\d.]+)")


def _number(text, where):
    """float(text), or RunDirError naming `where`; an empty field is None."""
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise RunDirError(f"{where}: '{text}' is not a number") from None


def read_losses(path):
    """losses.tsv -> {kind: {step: (loss, lr, grad_norm)}}; a later line for a (kind, step) wins.

    Errors: RunDirError naming path and line for a missing header, a short line or a non-number.
    """
    kinds = {}
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n")
        if header.split("\t")[:3] != ["step", "kind", "loss"]:
            raise RunDirError(f"{path}:1: expected the header 'step\\tkind\\tloss\\tlr\\tgrad_norm', got '{header}'")
        for n, line in enumerate(f, start=2):
            line = line.rstrip("\n")
            if not line:
                continue
            fields = line.split("\t") + ["", ""]
            if len(fields) < 5 or not fields[1]:
                raise RunDirError(f"{path}:{n}: expected 5 tab-separated fields, got '{line}'")
            step = _number(fields[0], f"{path}:{n}: step")
            if step is None or step != int(step):
                raise RunDirError(f"{path}:{n}: step '{fields[0]}' is not an integer")
            values = tuple(_number(v, f"{path}:{n}") for v in fields[2:5])
            kinds.setdefault(fields[1], {})[int(step)] = values
    return kinds


def read_log(path):
    """log.txt -> the figures only the log holds (see the patterns above).

    Returns a dict: throughput {step: (tokens_per_s, mfu_ratio)} (later line wins), checkpoints
    [(step, blocked_s, write_s)], skipped [step], starts [(kind, step, text)] with kind "start" or
    "resume" (step 0 for a fresh start), tokens_per_step (int or None), memory [(category, MiB)] of the
    last start, peak_device {rank: MiB}, peak_rss [(when, {rank: MiB})].
    """
    out = {"throughput": {}, "checkpoints": [], "skipped": [], "starts": [], "tokens_per_step": None,
           "memory": [], "peak_device": {}, "peak_rss": []}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if m := STEP_LINE.match(line):
                out["throughput"][int(m[1])] = (float(m[2].replace(",", "")), float(m[3]) / 100)
            elif m := CKPT_LINE.match(line):
                out["checkpoints"].append((int(m[1]), float(m[2]), float(m[3])))
            elif m := SKIP_LINE.match(line):
                out["skipped"].append(int(m[1]))
            elif line.startswith("start: "):
                out["starts"].append(("start", 0, line[len("start: "):]))
            elif m := RESUME_LINE.match(line):
                out["starts"].append(("resume", int(m[2]), line[len("resume: "):]))
            elif m := BATCH_LINE.match(line):
                out["tokens_per_step"] = int(m[1].replace(",", ""))
            elif m := MEMORY_LINE.match(line):
                out["memory"] = [(k.strip(), float(v)) for k, v in MEMORY_ITEM.findall(m[1])]
            elif m := PEAK_DEVICE_LINE.match(line):
                out["peak_device"] = {int(r): float(v) for r, v in PEAK_DEVICE_ITEM.findall(m[1])}
            elif m := PEAK_RSS_LINE.match(line):
                out["peak_rss"].append((m[1], {int(r): float(v) for r, v in PEAK_RSS_ITEM.findall(m[2])}))
    return out


def flatten_config(table, prefix=""):
    """A parsed TOML table -> {"section.key": value} (arrays and scalars as they are)."""
    flat = {}
    for k, v in table.items():
        if isinstance(v, dict):
            flat.update(flatten_config(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def tokens_per_step(config, log):
    """Training tokens per optimizer step: the log's batch line, else global_batch_size x seq_len from the
    config (global_batch_size 0 means micro_batch_size x grad_accum_steps on one rank); None if unknown."""
    if log["tokens_per_step"]:
        return log["tokens_per_step"]
    gbs = config.get("training.global_batch_size") or (
        config.get("training.micro_batch_size", 0) * config.get("training.grad_accum_steps", 1))
    seq = config.get("model.seq_len")
    return gbs * seq if gbs and seq else None


def _finite(v):
    """True for a number that is neither None, NaN nor infinite."""
    return v is not None and math.isfinite(v)


def read_run(path):
    """One run dir -> a dict the page draws from (docs/report.md "What it reads").

    Keys: name, path, config (flat), tokens_per_step, train/val [(step, value)], lr, grad_norm,
    evals {kind: [(step, value)]} (every other kind of losses.tsv), throughput/mfu [(step, value)],
    checkpoints, skipped, starts, memory, peak_device, peak_rss (as read_log). Non-finite losses
    (skipped steps) are left out of the series and kept in skipped.
    Errors: RunDirError when losses.tsv is missing or malformed; log.txt and config.toml are optional.
    """
    losses_path = os.path.join(path, "losses.tsv")
    if not os.path.isfile(losses_path):
        raise RunDirError(f"{path}: no losses.tsv (is this an llmtrain run dir?)")
    kinds = read_losses(losses_path)
    config = {}
    config_path = os.path.join(path, "config.toml")
    if os.path.isfile(config_path):
        try:
            with open(config_path, "rb") as f:
                config = flatten_config(tomllib.load(f))
        except tomllib.TOMLDecodeError as e:
            raise RunDirError(f"{config_path}: {e}") from None
    log_path = os.path.join(path, "log.txt")
    log = read_log(log_path) if os.path.isfile(log_path) else read_log(os.devnull)
    train = kinds.pop("train", {})
    skipped = sorted(set(log["skipped"]) | {s for s, v in train.items() if not _finite(v[0])})

    def series(rows, col):
        return [(s, rows[s][col]) for s in sorted(rows) if _finite(rows[s][col])]

    run = {
        "name": config.get("run.name") or os.path.basename(os.path.normpath(path)),
        "path": path,
        "config": config,
        "tokens_per_step": tokens_per_step(config, log),
        "train": series(train, 0),
        "lr": series(train, 1),
        "grad_norm": series(train, 2),
        "val": series(kinds.pop("val", {}), 0),
        "evals": {k: series(v, 0) for k, v in sorted(kinds.items())},
        "throughput": [(s, v[0]) for s, v in sorted(log["throughput"].items())],
        "mfu": [(s, v[1]) for s, v in sorted(log["throughput"].items())],
        "checkpoints": log["checkpoints"],
        "skipped": skipped,
        "starts": log["starts"],
        "memory": log["memory"],
        "peak_device": log["peak_device"],
        "peak_rss": log["peak_rss"],
    }
    return run
