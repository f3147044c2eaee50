"""tools/gpu/llmc_report.py — llm.c's and FP8's part of the GPU acceptance table (issue 44), imported by
tools/gpu/gpu_report.py (standard library only).

  llmc_bench_line(label, text)  the "bench:" line of one train_gpt2cu log (llm.c, karpathy/llm.c
                                train_gpt2.cu's prints), in gpu_report's format
  llmc_rows(...), fp8_rows(...), target_rows(...)
                                summary rows: llm.c measured in the same call; each FP8 run over its
                                bf16 run; issue 44's targets against llm.c measured in the same call

Labels (gpu_report's <model>-<path>): path "llmc" is llm.c's train_gpt2cu (its "build" field says
which: "cudnn" or "own attention"); "<path>+fp8_<mode>" is llmtrain with training.fp8 = <mode>
(tools/bench/gpu_bench.sh's FP8), beside "<path>", the same run in bf16.
"""
import re

LLMC_PATH = "llmc"
FP8_MARK = "+fp8_"
# Issue 44's targets: FP8 over bf16 on the 1.5B step; ours over llm.c measured in the same call
# (at 1.5B with FP8, at 124M the fastest path).
FP8_OVER_BF16 = {"gpt2-1.5b": 1.15}
VS_LLMC = {"gpt2-124m": (1.0, False), "gpt2-1.5b": (1.05, True)}  # (ratio, FP8 runs only)

# train_gpt2.cu: printf0("step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms |
# %.1f%% bf16 MFU | %.0f tok/s\n", step + 1, ...): the tok/s it prints is an exponential moving
# average, so each step's tokens/s is taken from its milliseconds and the tokens of a step.
STEP = re.compile(r"^step\s+(\d+)/\d+ \| loss \S+ \(\S+\)\| norm\s+\S+ \(\S+\)\| lr \S+ \| ([\d.]+) ms \| "
                  r"(-?[\d.]+)% bf16 MFU \| \d+ tok/s", re.M)
# printf0("batch_size B=%d * seq_len T=%d * num_processes=%d and total_batch_size=%d\n", ...):
# total_batch_size is the tokens of one optimizer step (B * T * processes * grad_accum_steps).
BATCH = re.compile(r"^batch_size B=(\d+) \* seq_len T=(\d+) \* num_processes=(\d+) and total_batch_size=(\d+)", re.M)
# gpt2_allocate_state: printf0("device memory usage: %zd MiB / %zd MiB\n", (total-free), total):
# cudaMemGetInfo's used memory once parameters, gradients, optimizer state and activations are
# allocated (the CUDA context included; cuBLAS's and cuDNN's workspaces come later).
MEMORY = re.compile(r"^device memory usage: (\d+) MiB / (\d+) MiB", re.M)


def llmc_bench_line(label, text, warmup=3, build="-"):
    """The "bench:" line of a train_gpt2cu log: mean tokens/s and MFU (llm.c's own figure, its
    device's promised bf16 FLOP/s) over the steps after `warmup`, first step / steady (mean steady
    tokens/s over step 1's), device memory in use after its allocations, MiB."""
    batch = BATCH.search(text)
    if not batch:
        return f'bench: label={label} error="no batch line (train_gpt2cu did not start; see its log)"'
    tokens = int(batch.group(4))
    steps = {int(m.group(1)): (tokens / float(m.group(2)) * 1e3, float(m.group(3)))
             for m in STEP.finditer(text) if float(m.group(2)) > 0}
    steady = [v for s, v in steps.items() if s > warmup]
    if not steady:
        return f'bench: label={label} error="no steps after warm-up"'
    tok = sum(t for t, _ in steady) / len(steady)
    mfu = sum(m for _, m in steady) / len(steady)
    first = f"{tok / steps[1][0]:.2f}" if 1 in steps else "-"
    mem = MEMORY.search(text)
    return (f"bench: label={label} tok_s={tok:.0f} mfu={mfu:.1f} first_x={first} "
            f"peak_mib={mem.group(1) if mem else '-'} ckpt_s=- steps={len(steady)} build=\"{build}\"")


def is_ours(path):
    """An llmtrain run's path (not llm.c's, not PyTorch's)."""
    return path not in (LLMC_PATH, "torch")


def llmc_rows(mn, run, documented, kilo, num):
    """The row of llm.c measured in this call (info: a reference, not a target), or why it did not
    run ("not run: ..." is info: a bundle without llm.c; another error is a FAIL)."""
    if run is None:
        return []
    t = num(run, "tok_s")
    if not t:
        err = run.get("error", "no steps measured")
        return [(f"{mn} llm.c", err, "", "", "info" if err.startswith("not run") else "FAIL")]
    mfu, peak = num(run, "mfu"), num(run, "peak_mib")
    got = f"{kilo(t)} ({mfu:.1f}% MFU" + (f", {peak:,.0f} MiB after allocation" if peak else "") + ")"
    build = run.get("build") or "-"
    return [(f"{mn} llm.c" + (f" ({build})" if build != "-" else ""), got,
             f"llm.c documented {kilo(documented)} (H100)" if documented else "",
             f"{t / documented:.2f}x documented" if documented else "", "info")]


def fp8_rows(model, mn, paths, kilo, num):
    """Each FP8 run over the same path's bf16 run: info at 124M, held to FP8_OVER_BF16 where set."""
    rows = []
    for path, r in paths.items():
        if FP8_MARK not in path:
            continue
        base, mode = path.split(FP8_MARK, 1)
        t, tb = num(r, "tok_s"), num(paths.get(base, {}), "tok_s")
        if not (t and tb):
            continue  # the failed run has its own row
        target = FP8_OVER_BF16.get(model)
        rows.append((f"{mn} FP8 {mode} over bf16 ({base})", f"{kilo(t)} vs {kilo(tb)}",
                     f">= {target:.2f}x" if target else "", f"{t / tb:.2f}x",
                     ("PASS" if t / tb >= target else "FAIL") if target else "info"))
    return rows


def target_rows(model, mn, paths, kilo, num):
    """Issue 44's targets against llm.c measured in this call: at 124M the fastest of our paths
    >= 1.0x, at 1.5B the fastest FP8 run >= 1.05x (a MISSING row when no FP8 run was measured)."""
    llmc = num(paths.get(LLMC_PATH, {}), "tok_s")
    if not llmc or model not in VS_LLMC:
        return []
    want, fp8_only = VS_LLMC[model]
    ours = {p: num(r, "tok_s") for p, r in paths.items()
            if is_ours(p) and num(r, "tok_s") and (FP8_MARK in p or not fp8_only)}
    name = f"{mn} {'FP8' if fp8_only else 'fastest path'} vs llm.c (this call)"
    ref = f">= {want:.2f}x llm.c {kilo(llmc)}"
    if not ours:
        return [(name, "no FP8 run measured" if fp8_only else "no run measured", ref, "", "MISSING")]
    best = max(ours, key=ours.get)
    ratio = ours[best] / llmc
    return [(name, f"{best} {kilo(ours[best])}", ref, f"{ratio:.2f}x", "PASS" if ratio >= want else "FAIL")]
