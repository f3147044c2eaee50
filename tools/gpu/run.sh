#!/usr/bin/env bash
# tools/gpu/run.sh — the GPU acceptance suite (docs/gpu_acceptance.md), on a machine with a
# GPU and tools/gpu/bundle.sh's bundle: every step time-boxed, the suite going on past a failure,
# every step's log kept, and one markdown table last (tools/gpu/gpu_report.py summary).
#
# Usage: tools/gpu/run.sh [STAGE...]      STAGE: quick, tests, checks, bench124m, bench1.5b, llmc, multirank,
#                                         checkpoint or all (default: all = tests checks bench124m bench1.5b llmc)
#   quick      one call that decides (the 15-minute rule below): in value order, each step boxed,
#              BUDGET 400 s (under 7 minutes of wall time on an H100 with the unpacking and the table):
#                test_cuda_gpu's GPU-only suites (cuDNN, FlashAttention at GPT-2 shapes) 100 s, then the
#                rest 60 s; attention_bench (native, cublas, cudnn: TFLOP/s and each path's max error
#                against cuDNN's out and dqkv) at GPT-2 124M's shape 45 s and at head size 128 45 s
#                (at both also native-99k: native with its backward forced to the small tile of a
#                99 KiB device, an info row beside native's device-chosen large tile); native's
#                backward under ncu at both shapes 40 s (stall reasons, throughputs: logs/profile.txt);
#                determinism native 60 s and cudnn 60 s (3 steps, twice each), native against cudnn
#                at step 1, resume with round-to-nearest 60 s; GPT-2 124M training native and cudnn
#                100 s, cudnn with training.fp8 = "tensorwise" 45 s, llm.c's train_gpt2cu at the same
#                shape and steps 45 s (tools/gpu/steps_llmc.sh), PyTorch compiled 120 s; multirank over MpiCudaComm: the 1-rank run, ZeRO-1,
#                pp 2 and tp 2 on 2 ranks, 40 s each; llama-tiny fp32 and bf16 (GQA FlashAttention-2)
#                against the CPU backend 60 s; then, only if >= 90 s are left, checkpoint_bench
#                at 1.5B. Expected about 375 s of steps, 6.6 minutes with the setup (estimates in
#                docs/gpu_acceptance.md; the H200 ran the older steps in 162 s). STATE
#                is removed at its end (nothing stays on the lent disk); OUT gets 3 files.
#   tests      test_cuda_gpu on the device
#   checks     determinism: the same short GPT-2 124M run twice with each attention path (native,
#              cublas, cudnn, and auto where llmtrain accepts it), train losses and gradient norms
#              compared bitwise; resume: tiny bf16, 20 steps unbroken against 10 + resume, with
#              round-to-nearest and with stochastic rounding, steps 11-20 bitwise; tiny.toml in fp32
#              on the GPU against the CPU backend run in the same call (val losses)
#   bench124m  tools/bench/gpu_bench.sh on GPT-2 124M: attention alone and training with each path,
#              PyTorch compiled at the same shape (tools/bench/torch_gpt_gpu.py)
#   bench1.5b  offload_bench; llmtrain-plan --profile on GPT-2 1.5B; then the 124M stage's runs at
#              GPT-2 1.5B (native left out; no recompute, activation_checkpoint.ratio = 0), the cudnn
#              run's end-of-run checkpoint timed
#   llmc       issue 44's comparison, one call (~4-5 minutes): at GPT-2 124M, then 1.5B, cudnn in bf16,
#              with training.fp8 = "tensorwise" and "rowwise", and llm.c's train_gpt2cu at the same
#              shape, steps and tokens (a bundle without llm.c: "not run", an info row)
#   multirank  every distributed layout on 2 and 4 ranks of the one GPU over parallel.comm = "mpi"
#              (NCCL refuses two ranks on one device): tiny fp32, 10 steps, against the 1-rank run;
#              ZeRO-1 + offload against ZeRO-1 bitwise; a resume from ZeRO-3 on 2 ranks into pp 2 x dp 2
#   checkpoint tools/bench/checkpoint_bench at GPT-2 1.5B: the time an asynchronous checkpoint
#              blocks training against the snapshot copy, the writer against dd (needs ~45 GB of disk)
# The 15-minute rule: a lent machine gives 15 minutes of device time in all, its start-up (minutes)
# included, at most 10 minutes a command. So one call decides: `run.sh quick`, with a time box
# (timeout_s) of 480-540 s, which leaves the start-up and a margin. The other stages are for a
# machine lent longer (each call < 9 minutes); their table covers every stage run on this machine
# so far (STATE survives between calls while the machine stays warm, except after quick).
#
# Environment (defaults in parentheses):
#   BUNDLE  (.gpu/bundle.tar.gz) the bundle, carried from the build machine
#   STATE   (/tmp/llmtrain-gpu) the unpacked bundle, logs/ (every step's log and result: the
#           table's input) and runs/ (run directories, each deleted once compared)
#   OUT     (gpu-logs) receives 3 files: summary.md, env.txt, logs.tar.gz (STATE's logs/)
#   BUDGET  (400 with quick, else 520) seconds this call may use: a step that cannot start with
#           20 s left is skipped (reported as such), and each step's time box is cut to what is left
#   BOX_SCALE (100) percent applied to quick's time boxes and its 90 s checkpoint threshold (the
#           CPU test of tests/gpu runs quick against stand-ins at 20)
#   STEPS   (10) steps of each throughput run; the means are over steps 4+
#   BROWN   (data/brown) the quick start's Brown split (train.h5, val.h5 from tools/fetch_brown.sh;
#           carry it to the machine): tiny.toml then runs its 1,000 steps on both backends and is
#           also held against the documented CPU figures; without it, tests/app's synthetic
#           data and 250 steps
#   PYTHON  (python3) runs gpu_report.py (standard library) and, where it has torch, the baseline
# Needs the NVIDIA driver, CUDA 13's cudart, cuBLAS(Lt), cuDNN 9 (system or pip's nvidia-* wheels).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
export STATE=${STATE:-/tmp/llmtrain-gpu}
export LOGS=$STATE/logs RUNS=$STATE/runs DIR=$STATE/llmtrain-gpu PYTHON=${PYTHON:-python3}
export STEPS=${STEPS:-10} BROWN=${BROWN:-data/brown} DATA=$STATE/data
source tools/gpu/llmtrain_run.sh
source tools/gpu/steps_llmc.sh
report() { "$PYTHON" tools/gpu/gpu_report.py "$@"; }
LLMTRAIN=$DIR/app/llmtrain

# ---------------------------------------------------------------- one step each (run as `run.sh _step NAME`)

# train <log> <run dir> <limit s> <stop after step, 0 = to the end> [llmtrain args]: one CUDA run
train() {
    local log=$1 rd=$2 limit=$3 stop=$4
    shift 4
    llmtrain_run "$log" "$limit" "$stop" "$LLMTRAIN" --set "run.run_dir=\"$rd\"" --set run.backend=\"cuda\" \
        --set run.log_interval=1 --set run.sample_interval=0 --set metrics.enabled=false --set checkpoint.interval=0 "$@"
}
synthetic=(--set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\"")

# A step's exit status says whether it ran to its end; what it found is in its log and check-*.txt
# (the table's rows). test_cuda_gpu: 0 when gtest printed its summary, failures or not.
# step_test_cuda_gpu [part] [gtest filter]: the whole binary into test_cuda_gpu.log, or the tests the
# filter selects into test_cuda_gpu-<part>.log (a row of its own in the table).
step_test_cuda_gpu() {
    local log=$LOGS/test_cuda_gpu${1:+-$1}.log filter=()
    [ -n "${2:-}" ] && filter=("--gtest_filter=$2")
    "$DIR/tests/cuda/test_cuda_gpu" "${filter[@]}" >"$log" 2>&1
    local rc=$?
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran" "$log"
    grep -q "^\[==========\] .* ran\." "$log" && return 0
    return $rc
}

# The same short GPT-2 124M run (2 micro-batches of 32 x 1024 a step; 4 steps, or the second
# argument's) twice with one attention path. Run 1's losses.tsv is kept as det-<path>.losses.tsv for
# step_paths_agree (deleted there).
step_determinism() {
    local path=$1 steps=${2:-4} rc=0
    local args=(--config configs/gpt2-124m.toml "${synthetic[@]}" --set "model.attention=\"$path\"" --set "run.max_steps=$steps"
                --set run.eval_interval=0 --set training.global_batch_size=0 --set training.grad_accum_steps=2
                --set checkpoint.at_end=false)  # stopped after its last step: no host snapshot
    for i in 1 2; do
        rm -rf "$RUNS/det-$path-$i"
        train "$RUNS/det-$path-$i.log" "$RUNS/det-$path-$i" 150 "$steps" "${args[@]}" || { echo "run $i failed, see $RUNS/det-$path-$i.log"; rc=1; }
    done
    report compare-train "$RUNS/det-$path-1" "$RUNS/det-$path-2" --name "determinism $path" | tee "$LOGS/check-determinism-$path.txt"
    cat "$RUNS/det-$path-1.log" "$RUNS/det-$path-2.log" >"$LOGS/determinism-$path.log"
    cp "$RUNS/det-$path-1/losses.tsv" "$RUNS/det-$path.losses.tsv" 2>/dev/null
    rm -rf "$RUNS/det-$path-"[12]
    return $rc
}

# step_paths_agree <path> <reference path>: the first step of the two determinism runs, which start
# from the same weights and data, so their loss and gradient norm differ only by where each path
# rounds to bf16 (P and dS where they enter a GEMM, the outputs: 2^-8 relative each,
# tests/cuda/attention_bound.hpp), carried through 12 layers. Relative 1e-2 (2.5 bf16 units of 2^-8):
# a gradient element moves by a few bf16 units at most, and the norm, a sum of 124M squares whose
# rounding errors do not share one sign, far less (cudnn against itself at 58d410c: 1.2e-5; the loss
# at step 1, ~ln(50257) at init, hardly depends on attention at all). What it is there to catch moves
# them by much more: dK without its 1/sqrt(64) scales that gradient 8x, a wrong causal mask or a
# head left out changes every layer's attention gradients by O(1) of their size.
step_paths_agree() {
    local path=$1 ref=$2
    report compare-train "$RUNS/det-$ref.losses.tsv" "$RUNS/det-$path.losses.tsv" --from 1 --to 1 --tol 1e-2 \
        --name "paths $path vs $ref at step 1" | tee "$LOGS/check-paths-$path-$ref.txt"
    rm -f "$RUNS/det-$path.losses.tsv" "$RUNS/det-$ref.losses.tsv"
    return 0  # what it found is in the check file
}

# step_attention <label> <paths> B T C NH: attention_bench, the paths (comma-separated) side by side
# (TFLOP/s, ratios to cuDNN, each path's max error against cuDNN's out and dqkv, or cuBLAS's where
# cuDNN is absent).
step_attention() {
    local label=$1 paths=$2
    shift 2
    "$DIR/tools/bench/attention_bench" "$paths" "$@" 20 2>&1 | tee "$LOGS/attention-$label.txt"
    return "${PIPESTATUS[0]}"
}

# step_profile: where native's fused backward and its dQ sum spend their time, by Nsight Compute
# (ncu: $NCU, else on PATH or in CUDA's bin/; absent, the step says so and ends) over the second
# (fused kernel, dQ sum) pair of attention_bench's native backward at GPT-2 124M's shape and at head
# size 128: each kernel's duration (at ncu's locked clocks: longer than the bench's), issue slots
# busy, shared/L1, DRAM and tensor-pipe throughput, and the warp stall reasons per issued
# instruction of at least 0.1 (lg_throttle: the global store queue, barrier, short_scoreboard:
# shared-memory results, ...). Info: logs/profile.txt, read by hand (docs/cuda.md "Measured on an H200").
step_profile() {
    local ncu=${NCU:-$(command -v ncu)} f
    for f in /usr/local/cuda*/bin/ncu; do [ -z "$ncu" ] && [ -x "$f" ] && ncu=$f; done
    [ -n "$ncu" ] || { echo "profile: no ncu on this machine" | tee "$LOGS/profile.txt"; return 0; }
    local m=gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
    m+=,l1tex__throughput.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
    m+=,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
    m+=',regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
    local shape rc=0
    for shape in "32 1024 768 12" "8 2048 1536 12"; do
        echo "== native backward, B T C NH = $shape"
        # shellcheck disable=SC2086  # the shape is four words
        "$ncu" --kernel-name regex:'flash_backward_kernel|flash_dq_reduce' --launch-skip 2 --launch-count 2 \
            --metrics "$m" "$DIR/tools/bench/attention_bench" native $shape 3 2>&1 |
            awk '/^==PROF==/ { next } / void / { print; next }
                 NF >= 3 && $NF ~ /^[0-9.,]+$/ { v = $NF; gsub(",", "", v); if ($1 !~ /stalled/ || v + 0 >= 0.1) print }'
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    done >"$LOGS/profile.txt"
    cat "$LOGS/profile.txt"
    return $rc
}

# tiny.toml in bf16 (native attention: the resume alone, not an attention path's repeatability), a
# constant lr after 5 warm-up steps (so max_steps does not shape the schedule): 20 steps unbroken
# against 10, a checkpoint, and a resumed run to 20; steps 11-20 must be bitwise the unbroken run's.
step_resume() {
    local name=$1 sr=$2 u=$RUNS/resume-$1-unbroken b=$RUNS/resume-$1-resumed
    local args=(--config configs/tiny.toml "${synthetic[@]}" --set "model.vocab_size=$(cat "$DATA/vocab_size.txt")"
                --set training.precision=\"bf16\" --set "training.stochastic_rounding=$sr" --set model.attention=\"native\"
                --set lr_schedule.decay=\"constant\" --set lr_schedule.warmup_steps=5 --set run.eval_interval=0)
    rm -rf "$u" "$b"
    train "$u.log" "$u" 120 0 "${args[@]}" --set run.max_steps=20 &&
        train "$b.log" "$b" 120 0 "${args[@]}" --set run.max_steps=10 &&
        train "$b.resume.log" "$b" 120 0 "${args[@]}" --set run.max_steps=20
    local rc=$?
    cat "$u.log" "$b.log" "$b.resume.log" >"$LOGS/resume-$name.log" 2>/dev/null
    [ $rc = 0 ] || { echo "a run failed: see resume-$name.log"; return 1; }
    if [ "$(grep -c $'^1\ttrain\t' "$b/losses.tsv")" != 1 ]; then  # a fresh start would also reach step 20
        echo "resume tiny bf16 $name: MISSING (the second run did not resume from step 10)" | tee "$LOGS/check-resume-$name.txt"
        return 1
    fi
    report compare-train "$u" "$b" --from 11 --to 20 --name "resume tiny bf16 $name" | tee "$LOGS/check-resume-$name.txt"
    rm -rf "$u" "$b"
}

# TINY: tiny.toml's model and data (the Brown split when BROWN has it, else the synthetic data: 250 steps)
if [ -f "$BROWN/train.h5" ] && [ -f "$BROWN/val.h5" ]; then
    TINY=(--config configs/tiny.toml --set "data.train=\"$BROWN/train.h5\"" --set "data.val=\"$BROWN/val.h5\"")
else
    TINY=(--config configs/tiny.toml "${synthetic[@]}" --set run.max_steps=250 --set run.eval_interval=125)
    [ -f "$DATA/vocab_size.txt" ] && TINY+=(--set "model.vocab_size=$(cat "$DATA/vocab_size.txt")")
fi

# tiny.toml in fp32 on the GPU against the CPU backend's run started at the beginning of the
# checks (stage_checks, below): every val loss within 1e-4 (the H100 matched the CPU to 4 decimals at
# 58d410c; two CPU sum orders differ by ~5e-7, docs/design.md). With Brown, also against the
# documented CPU figures to 4 decimals (1.5e-4: 1e-4 plus their rounding).
step_tiny() {
    local g=$RUNS/tiny-gpu c=$RUNS/tiny-cpu rc=0 waited=0
    rm -rf "$g"
    train "$g.log" "$g" 200 0 "${TINY[@]}" || rc=1
    cp "$g.log" "$LOGS/tiny-gpu.log"
    while kill -0 "${CPU_TINY_PID:-0}" 2>/dev/null && [ $waited -lt 240 ]; do sleep 2; waited=$((waited + 2)); done
    cp "$c.log" "$LOGS/tiny-cpu.log" 2>/dev/null
    report compare-val "$g" --ref "$c" --tol 1e-4 --name "tiny fp32 GPU vs CPU" | tee "$LOGS/check-tiny-cpu.txt"
    if [ -f "$BROWN/train.h5" ]; then
        report compare-val "$g" --expect 250=6.3407,500=6.0715,750=5.9519,1000=5.8896 --tol 1.5e-4 \
            --name "tiny fp32 GPU vs documented CPU" | tee "$LOGS/check-tiny-doc.txt"
    fi
    rm -rf "$g"
    return $rc
}

# configs/llama-tiny.toml (Llama: RMSNorm, RoPE, SwiGLU, grouped-query attention with 2 query heads
# per key/value head) on the GPU, issue 30's check on hardware: fp32 against the CPU backend's run of
# the same config, data and seed, every train loss of 10 steps within 1e-4 relative (the emulated
# backend's tolerance, tests/cuda/emu_llama_train.sh); bf16 with model.attention = "native"
# (FlashAttention-2 mapping query head h to key/value head h / 2) for 3 steps within 5e-3 of the CPU's
# (the emulator's bf16 tolerance: bf16 activations round each GEMM's inputs, ~2^-8 relative, and
# three steps keep the loss within a few of those).
step_llama() {
    local g=$RUNS/llama-fp32 b=$RUNS/llama-bf16 c=$RUNS/llama-cpu rc=0
    local args=(--config configs/llama-tiny.toml "${synthetic[@]}" --set "model.vocab_size=$(cat "$DATA/vocab_size.txt")"
                --set run.max_steps=10 --set run.eval_interval=0 --set lr_schedule.warmup_steps=2
                --set checkpoint.at_end=false)
    rm -rf "$g" "$b" "$c"
    OMP_NUM_THREADS=$(nproc) llmtrain_run "$c.log" 60 0 "$LLMTRAIN" "${args[@]}" --set "run.run_dir=\"$c\"" \
        --set run.backend=\"cpu\" --set run.log_interval=1 --set run.sample_interval=0 --set metrics.enabled=false \
        --set checkpoint.interval=0 || rc=1
    train "$g.log" "$g" 60 0 "${args[@]}" --set training.precision=\"fp32\" || rc=1
    train "$b.log" "$b" 60 0 "${args[@]}" --set training.precision=\"bf16\" --set model.attention=\"native\" \
        --set run.max_steps=3 || rc=1
    cat "$c.log" "$g.log" "$b.log" >"$LOGS/llama.log" 2>/dev/null
    {
        report compare-train "$c" "$g" --tol 1e-4 --name "llama-tiny fp32 GPU vs CPU"
        report compare-train "$c" "$b" --to 3 --tol 5e-3 --name "llama-tiny bf16 native (GQA FlashAttention-2) vs CPU"
    } | tee "$LOGS/check-llama.txt"
    rm -rf "$g" "$b" "$c"
    return $rc
}

# Multi-rank layouts on the one GPU over MpiCudaComm (parallel.comm = "mpi", docs/cuda.md "Several
# ranks on one GPU"): tiny.toml in fp32 with native attention, 10 steps of 4 micro-batches of 4 at a
# constant lr 1e-3, run by the bundle's mpirun. Against the 1-rank run each train loss and gradient
# norm within relative 1e-5: dp sums the ranks' partial gradients, a reassociation of the 1-rank
# sum over micro-batches (<= 2 roundings of 2^-24 per element a step), which 3 emulated steps carry
# to <= 2.2e-7 (tests/cuda/emu_mpi_comm.sh); 10 steps grow it about linearly, 1e-5 leaves a factor
# >= 10. ZeRO-1 with half the optimizer offloaded is ZeRO-1's sums exactly: bitwise.
MPIRUN=$DIR/openmpi/bin/mpirun
mr_args() {
    printf '%s\n' --config configs/tiny.toml "${synthetic[@]}" --set "model.vocab_size=$(cat "$DATA/vocab_size.txt")" \
        --set training.precision=\"fp32\" --set model.attention=\"native\" --set training.micro_batch_size=4 \
        --set training.global_batch_size=16 --set training.grad_accum_steps=0 --set lr_schedule.warmup_steps=0 \
        --set lr_schedule.decay=\"constant\" --set run.eval_interval=0 --set run.max_steps=10 \
        --set parallel.comm=\"mpi\"
}
# mr_train <np> <name> [llmtrain args]: one run into $RUNS/mr-<name> (kept for the stage's comparisons)
mr_train() {
    local np=$1 name=$2 args
    shift 2
    mapfile -t args < <(mr_args)
    local cmd=("$LLMTRAIN")
    [ "$np" -gt 1 ] && cmd=("$MPIRUN" --oversubscribe -np "$np" -x LD_LIBRARY_PATH -x OMPI_MCA_mca_base_component_path
                           -x OPAL_PKGDATADIR "$LLMTRAIN")
    llmtrain_run "$RUNS/mr-$name.log" 150 0 "${cmd[@]}" "${args[@]}" --set "run.run_dir=\"$RUNS/mr-$name\"" \
        --set run.backend=\"cuda\" --set run.log_interval=1 --set run.sample_interval=0 --set metrics.enabled=false \
        --set checkpoint.interval=0 "$@"
    local rc=$?
    cp "$RUNS/mr-$name.log" "$LOGS/multirank-$name.log" 2>/dev/null
    return $rc
}
step_multirank_ref() { rm -rf "$RUNS"/mr-*; mr_train 1 ref; }
# step_multirank <np> <name> [args]: the layout against the 1-rank run (and, for offload, ZeRO-1 bitwise)
step_multirank() { step_multirank_tol 1e-5 "$@"; }
# step_multirank_tol <relative tolerance> <np> <name> [args]: the same within another tolerance
step_multirank_tol() {
    local tol=$1 np=$2 name=$3
    shift 3
    mr_train "$np" "$name-np$np" "$@" || { echo "multirank $name np$np: MISSING (the run failed: see multirank-$name-np$np.log)" |
        tee "$LOGS/check-multirank-$name-np$np.txt"; return 1; }
    {
        report compare-train "$RUNS/mr-ref" "$RUNS/mr-$name-np$np" --tol "$tol" --name "multirank $name np$np"
        if [ "$name" = offload ]; then
            report compare-train "$RUNS/mr-zero1-np$np" "$RUNS/mr-$name-np$np" --name "multirank offload vs zero1 np$np"
        fi
    } | tee "$LOGS/check-multirank-$name-np$np.txt"
    return 0  # the run ended; what it found is in the check file (the table's rows)
}
# ZeRO-3 on 2 ranks to step 5 (its end-of-run checkpoint), then pp 2 x dp 2 on 4 ranks to step 10
# in the same run directory; every step against the 1-rank run.
step_multirank_resume() {
    rm -rf "$RUNS/mr-resume"
    mr_train 2 resume --set parallel.zero_stage=3 --set run.max_steps=5 &&
        mr_train 4 resume --set parallel.pp=2 --set parallel.zero_stage=1
    if [ "$(grep -c $'^1\ttrain\t' "$RUNS/mr-resume/losses.tsv" 2>/dev/null)" != 1 ]; then
        echo "multirank resume zero3 np2 to pp2xdp2 np4: MISSING (no resumed run)" | tee "$LOGS/check-multirank-resume.txt"
        return 1
    fi
    report compare-train "$RUNS/mr-ref" "$RUNS/mr-resume" --tol 1e-5 --name "multirank resume zero3 np2 to pp2xdp2 np4" |
        tee "$LOGS/check-multirank-resume.txt"
    return 0
}

# step_bench <model> [s per run] [llmtrain args]: gpu_bench.sh, every path and PyTorch
step_bench() {
    MODELS=$1 BUILD=$DIR LOGDIR=$LOGS/bench-$1 RUN_TIMEOUT=${2:-300} bash tools/bench/gpu_bench.sh "$STEPS" "${@:3}" |
        tee "$LOGS/bench-$1.txt"
}

# step_bench_paths <model> <paths> <steps> <s per run> [llmtrain args]: llmtrain's training runs alone (no
# attention_bench, no PyTorch), each stopped after its last step (no end-of-run checkpoint).
step_bench_paths() {
    MODELS=$1 ATTENTIONS=$2 TORCH=0 ATTENTION_BENCH=0 CHECKPOINT=none BUILD=$DIR LOGDIR=$LOGS/bench-$1 RUN_TIMEOUT=$4 \
        bash tools/bench/gpu_bench.sh "$3" "${@:5}" | tee "$LOGS/bench-$1-train.txt"
}

# step_bench_torch <model> <steps> <s>: PyTorch compiled alone at the model's shape (torch.compile included).
step_bench_torch() {
    MODELS=$1 ATTENTIONS=none ATTENTION_BENCH=0 BUILD=$DIR LOGDIR=$LOGS/bench-$1 TORCH_TIMEOUT=$3 \
        bash tools/bench/gpu_bench.sh "$2" | tee "$LOGS/bench-$1-torch.txt"
}

step_offload() {
    "$DIR/tools/bench/offload_bench" --backend cuda --params 200 --trace "$LOGS/offload_trace.json" 2>&1 |
        tee "$LOGS/offload.txt"
}

step_checkpoint() {
    "$DIR/tools/bench/checkpoint_bench" --backend cuda --model 1.5B --dir "$RUNS/checkpoint-bench" 2>&1 |
        tee "$LOGS/checkpoint.txt"
}

step_plan() {
    local mem
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    "$DIR/app/llmtrain-plan" --config configs/gpt2-1.5b.toml --world-size 8 --device-memory "${mem}MiB" --profile \
        --link-gbps 200 --compare 2>&1 | tee "$LOGS/plan.txt"
}

if [ "${1:-}" = _step ]; then
    shift
    name=$1
    shift
    "step_$name" "$@"
    exit $?
fi

# ---------------------------------------------------------------- the stages

CALL_START=$SECONDS
[[ " $* " == *" quick "* ]] && BUDGET=${BUDGET:-400}
BUDGET=${BUDGET:-520}
# step <stage> <name> <limit s> <function> [args]: runs `run.sh _step function args` time-boxed,
# its output in logs/<name>.out, and records stage, name, exit status, seconds and the box it had in
# logs/steps.tsv (the table lists every step).
step() {
    local stage=$1 name=$2 limit=$3
    shift 3
    local left=$((BUDGET - (SECONDS - CALL_START))) t0=$SECONDS rc
    if [ $left -lt 20 ]; then
        echo "== $stage/$name: skipped (the call's budget of ${BUDGET} s is spent)"
        printf '%s\t%s\tskipped\t0\t0\n' "$stage" "$name" >>"$LOGS/steps.tsv"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $stage/$name (at most ${limit} s)"
    timeout -k 10 "$limit" bash tools/gpu/run.sh _step "$@" 2>&1 | tee "$LOGS/$name.out"
    rc=${PIPESTATUS[0]}
    echo "== $stage/$name: exit $rc after $((SECONDS - t0)) s"
    printf '%s\t%s\t%s\t%s\t%s\n' "$stage" "$name" "$rc" "$((SECONDS - t0))" "$limit" >>"$LOGS/steps.tsv"
}

# quick's time boxes: the figure for an H100 (seconds), times BOX_SCALE percent, at least 1 s.
box() { local b=$(($1 * ${BOX_SCALE:-100} / 100)); echo $((b > 0 ? b : 1)); }

# The suites that only a GPU runs (cuDNN; FlashAttention-2 at GPT-2's shapes, test_flash_gpt_shapes.cpp)
# and the tensor-core native path's own tests: the first part of quick's test_cuda_gpu.
GPU_FIRST='Gpu/*:CudnnAttentionBackward.*:*FlashAttention*'

# One call that decides (the 15-minute rule, header): value order, each step boxed (a box is the most
# it may take; the expected times, from the 58d410c timings, are in docs/gpu_acceptance.md),
# the call going on past failures; the boxes add up to more than BUDGET, so whatever runs late pushes
# the last steps out (reported as skipped), never the first.
stage_quick() {
    step quick test_cuda_gpu-gpu "$(box 100)" test_cuda_gpu gpu "$GPU_FIRST"
    step quick test_cuda_gpu-rest "$(box 60)" test_cuda_gpu rest "-$GPU_FIRST"
    # native-99k: native's backward in the small tile (a 99 KiB device's) beside the large one an
    # H100/H200 takes
    step quick attention-124m "$(box 45)" attention 124m native,native-99k,cublas,cudnn 32 1024 768 12
    step quick attention-hs128 "$(box 45)" attention hs128 native,native-99k,cublas,cudnn 8 2048 1536 12
    step quick profile "$(box 40)" profile
    step quick determinism-native "$(box 60)" determinism native 3
    step quick determinism-cudnn "$(box 60)" determinism cudnn 3
    step quick paths-native-cudnn "$(box 15)" paths_agree native cudnn
    step quick resume-nearest "$(box 60)" resume nearest false
    step quick train-124m "$(box 100)" bench_paths gpt2-124m "native cudnn" 8 "$(box 45)"
    # issue 44: FP8 beside the bf16 cudnn run, then llm.c at the same shape, steps and tokens
    step quick fp8-124m "$(box 45)" bench_fp8 gpt2-124m cudnn 8 "$(box 40)" tensorwise
    step quick llmc-124m "$(box 45)" llmc gpt2-124m 8 "$(box 45)"
    step quick torch-124m "$(box 120)" bench_torch gpt2-124m 8 "$(box 110)"
    step quick multirank-ref "$(box 40)" multirank_ref
    step quick zero1-np2 "$(box 40)" multirank 2 zero1 --set parallel.zero_stage=1
    step quick pp2-np2 "$(box 40)" multirank 2 pp2 --set parallel.pp=2
    # tp splits every row-parallel GEMM's inner sum (attention and MLP output projections) into 2
    # partial sums added by the all-reduce, and the vocab-parallel cross-entropy combines per-rank
    # maxima and sums: fp32 reassociations inside each layer's forward and backward, not only in the
    # gradient sum as dp's; tests/cuda/emu_tp.sh holds tp 2 to 1e-4 against the CPU, as here.
    step quick tp2-np2 "$(box 40)" multirank_tol 1e-4 2 tp2 --set parallel.tp=2
    rm -rf "$RUNS"/mr-*
    step quick llama-tiny "$(box 60)" llama
    local left=$((BUDGET - (SECONDS - CALL_START)))
    if [ "$left" -ge "$(box 90)" ]; then
        step quick checkpoint-1.5b "$left" checkpoint
    else
        echo "== quick/checkpoint-1.5b: not run (${left} s left, it needs $(box 90))"
        printf '%s\t%s\tnot-run\t0\t0\n' quick checkpoint-1.5b >>"$LOGS/steps.tsv"
    fi
    rm -rf "$RUNS/checkpoint-bench"
}

stage_tests() {
    step tests test_cuda_gpu 330 test_cuda_gpu
}

stage_checks() {
    # The CPU reference of tiny.toml starts first and runs beside the GPU checks (host cores only);
    # step_tiny waits for it, and it is stopped at the end of the stage if still running.
    rm -rf "$RUNS/tiny-cpu"
    OMP_NUM_THREADS=$(($(nproc) > 6 ? $(nproc) - 4 : 2)) timeout -k 10 400 "$LLMTRAIN" "${TINY[@]}" \
        --set "run.run_dir=\"$RUNS/tiny-cpu\"" --set run.backend=\"cpu\" --set run.sample_interval=0 \
        --set metrics.enabled=false --set checkpoint.interval=0 >"$RUNS/tiny-cpu.log" 2>&1 &
    export CPU_TINY_PID=$!
    local paths="native cublas cudnn"
    "$LLMTRAIN" --config configs/gpt2-124m.toml --set 'model.attention="auto"' --print-config >/dev/null 2>&1 &&
        paths="$paths auto"
    for p in $paths; do step checks "determinism-$p" 150 determinism "$p"; done
    step checks resume-nearest 150 resume nearest false
    step checks resume-stochastic 150 resume stochastic true
    step checks tiny-fp32 300 tiny
    kill "$CPU_TINY_PID" 2>/dev/null
    wait "$CPU_TINY_PID" 2>/dev/null
    rm -rf "$RUNS/tiny-cpu"
}

stage_bench124m() {
    step bench124m gpt2-124m 480 bench gpt2-124m 240
}

# offload_bench and the plan first: they take about a minute together, and a slow torch.compile at
# 1.5B must not crowd them out of the call's budget.
stage_bench1_5b() {
    step bench1.5b offload 90 offload
    step bench1.5b plan 180 plan
    # no recompute (gpt2-1.5b.toml recomputes every layer): as the documented H100 figures, llm.c's
    # -r 0 and the llmc stage, whose runs at 1.5B share these labels
    step bench1.5b gpt2-1.5b 480 bench gpt2-1.5b 200 --set activation_checkpoint.ratio=0
}

# issue 44's table in one call: per model, bf16 cudnn, FP8 tensorwise and rowwise, llm.c (STEPS each);
# no recompute on either side (llm.c's -r 0; gpt2-1.5b.toml recomputes every layer: ratio 0 here and
# in bench1.5b; 44 GB at micro-batch 8 on an H100, docs/cuda.md "Measured on an H100").
stage_llmc() {
    local r0=(--set activation_checkpoint.ratio=0)
    step llmc train-124m 60 bench_paths gpt2-124m cudnn "$STEPS" 50
    step llmc fp8-124m 60 bench_fp8 gpt2-124m cudnn "$STEPS" 50 tensorwise
    step llmc fp8row-124m 60 bench_fp8 gpt2-124m cudnn "$STEPS" 50 rowwise
    step llmc llmc-124m 60 llmc gpt2-124m "$STEPS" 60
    step llmc train-1.5b 110 bench_paths gpt2-1.5b cudnn "$STEPS" 100 "${r0[@]}"
    step llmc fp8-1.5b 110 bench_fp8 gpt2-1.5b cudnn "$STEPS" 100 tensorwise "${r0[@]}"
    step llmc llmc-1.5b 110 llmc gpt2-1.5b "$STEPS" 110
    step llmc fp8row-1.5b 110 bench_fp8 gpt2-1.5b cudnn "$STEPS" 100 rowwise "${r0[@]}"
}

stage_multirank() {
    step multirank ref 60 multirank_ref
    for np in 2 4; do
        step multirank "zero1-np$np" 60 multirank "$np" zero1 --set parallel.zero_stage=1
        step multirank "zero2-np$np" 60 multirank "$np" zero2 --set parallel.zero_stage=2
        step multirank "zero3-np$np" 60 multirank "$np" zero3 --set parallel.zero_stage=3
        step multirank "pp$np-np$np" 60 multirank "$np" "pp$np" --set parallel.pp="$np"
    done
    step multirank offload-np2 60 multirank 2 offload --set parallel.zero_stage=1 --set optimizer.offload=\"cpu\" \
        --set optimizer.offload_fraction=0.5
    step multirank subdp2x2-np4 60 multirank 4 subdp2x2 --set parallel.zero_stage=2 --set parallel.zero_group_size=2
    step multirank pp2xdp2-np4 60 multirank 4 pp2xdp2 --set parallel.pp=2 --set parallel.zero_stage=1
    step multirank resume 120 multirank_resume
    rm -rf "$RUNS"/mr-*
}

stage_checkpoint() {
    step checkpoint checkpoint-1.5b 420 checkpoint
}

stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(all)
for s in "${stages[@]}"; do
    case $s in
        quick | tests | checks | bench124m | bench1.5b | llmc | multirank | checkpoint | all) ;;
        *) echo "run.sh: unknown stage '$s' (expected quick, tests, checks, bench124m, bench1.5b, llmc, multirank, checkpoint or all)"; exit 2 ;;
    esac
done
BUNDLE=${BUNDLE:-.gpu/bundle.tar.gz}
OUT=${OUT:-gpu-logs}
mkdir -p "$LOGS" "$RUNS" "$OUT"
sum=$(sha256sum "$BUNDLE" 2>/dev/null | cut -d' ' -f1)
[ -n "$sum" ] || { echo "run.sh: cannot read $BUNDLE"; exit 2; }
if [ "$(cat "$STATE/bundle.sha256" 2>/dev/null)" != "$sum" ]; then
    rm -rf "$DIR" "${LOGS:?}"/* "${RUNS:?}"/* "$DATA"  # another bundle: the earlier logs are another build's
    tar -C "$STATE" -xzf "$BUNDLE" || { echo "run.sh: cannot unpack $BUNDLE"; exit 2; }
    echo "$sum" >"$STATE/bundle.sha256"
fi

# The folder holding `lib` (e.g. libcudnn.so.9), searched where CUDA and pip's wheels put it.
find_lib() {
    local f root
    for root in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu /; do
        f=$(find "$root" -xdev -name "$1" -print -quit 2>/dev/null)
        [ -n "$f" ] && { dirname "$f"; return 0; }
    done
    return 1
}
cuda_libdirs=
for lib in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libcudnn.so.9; do
    d=$(find_lib "$lib") || { echo "run.sh: $lib not found on this machine"; exit 2; }
    cuda_libdirs=${cuda_libdirs:+$cuda_libdirs:}$d
done
source tools/gpu/bundle_env.sh
bundle_env "$DIR" "$cuda_libdirs"
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    echo "cores $(nproc), bundle sha256 $sum"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ldd "$LLMTRAIN" | grep -E "not found|cudart|cublasLt|cudnn"
    "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1
} 2>&1 | tee "$LOGS/env.txt"
[ -f "$DATA/train.h5" ] || "$DIR/tests/app/make_tiny_dataset" "$DATA" >/dev/null

for s in "${stages[@]}"; do
    case $s in
        quick) stage_quick ;;
        tests) stage_tests ;;
        checks) stage_checks ;;
        bench124m) stage_bench124m ;;
        bench1.5b) stage_bench1_5b ;;
        llmc) stage_llmc ;;
        multirank) stage_multirank ;;
        checkpoint) stage_checkpoint ;;
        all) stage_tests; stage_checks; stage_bench124m; stage_bench1_5b; stage_llmc ;;
    esac
done

{
    echo "GPU acceptance: $(sed -n 2p "$LOGS/env.txt"), $(sed -n 1p "$LOGS/env.txt"); this call ran: ${stages[*]} (the table holds every stage run on this machine with this bundle)"
    echo
    report summary "$LOGS"
} >"$OUT/summary.md"
cp "$LOGS/env.txt" "$OUT/"
tar -C "$STATE" -czf "$OUT/logs.tar.gz" logs
echo
echo "== summary (also $OUT/summary.md; every log in $OUT/logs.tar.gz)"
cat "$OUT/summary.md"
# quick leaves nothing on the lent machine's disk: the bundle, the data, the logs (now in OUT), any run.
if [[ " ${stages[*]} " == *" quick "* ]]; then
    rm -rf "${STATE:?}"
    echo "(quick: $STATE removed after $((SECONDS - CALL_START)) s)"
fi
