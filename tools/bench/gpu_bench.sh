#!/usr/bin/env bash
# tools/bench/gpu_bench.sh — training throughput (tokens/s), MFU and first step / steady step of the
# CUDA backend on GPT-2 124M and 1.5B (configs/gpt2-124m.toml, configs/gpt2-1.5b.toml), one GPU,
# bf16, with each attention path, beside PyTorch compiled (tools/bench/torch_gpt_gpu.py) at the
# same shapes in the same run; ends with the ratios (tools/gpu/gpu_report.py bench-table): to llm.c's
# H100 figures, to PyTorch measured here, to issue 18's targets and to commit 58d410c.
#
# Usage: tools/bench/gpu_bench.sh [steps (default 10)] [extra llmtrain args, e.g. --set training.grad_accum_steps=4]
# Environment (defaults in parentheses):
#   BUILD       (build) a CUDA build or the unpacked GPU bundle: app/llmtrain linked with
#               llmtrain_cuda, tests/app/make_tiny_dataset, tools/bench/attention_bench
#   MODELS      (gpt2-124m gpt2-1.5b)
#   ATTENTIONS  (native cublas cudnn, then auto where this llmtrain accepts model.attention = "auto")
#               model.attention paths; choose them here, not with --set (a later --set would
#               relabel every run); "none": no llmtrain run (e.g. PyTorch alone)
#   SKIP        (gpt2-1.5b-native) labels not run: native attention costs ~10 s a step at 1.5B
#   CHECKPOINT  (cudnn) the path whose runs write their end-of-run checkpoint and report its time;
#               the others stop after their last step (a 1.5B checkpoint is 19 GB and ~60 s)
#   PYTHON      (python3) runs the PyTorch baseline where it imports torch and sees a GPU; TORCH=0 skips
#   LOGDIR      ($BUILD/gpu_bench) each run's log (<label>.log); run directories are deleted after each run
#   RUN_TIMEOUT (300) seconds allowed per llmtrain run; PyTorch's gets 120 more (torch.compile: ~45 s
#               at 124M, ~120 s at 1.5B on an H100) unless TORCH_TIMEOUT says otherwise
#   ATTENTION_BENCH (1) 0: no attention_bench before each model's runs (tools/gpu/run.sh quick runs it
#               as a step of its own)
#   FP8         (empty: bf16) "tensorwise" or "rowwise": every llmtrain run with training.fp8 = FP8,
#               labelled <model>-<path>+fp8_<FP8> (tools/gpu/run.sh's FP8 steps, beside bf16 runs)
# Data: tests/app/make_tiny_dataset's synthetic tokens (ids < 320) for llmtrain and PyTorch; the
# models keep GPT-2's 50,257-token vocabulary, so the compute per token is GPT-2's (throughput does
# not depend on the token values). Each step is 8 micro-batches of the config's micro_batch_size
# (the optimizer step amortized as in training). Steps 1-3 are warm-up (cuBLASLt heuristics,
# allocation, torch.compile) and are left out of the means; first step / steady = the mean steady
# tokens/s over step 1's.
# MFU = (6 N + 6 n_layer seq_len n_embd) FLOPs/token over run.peak_flops (989 TFLOP/s, H100 SXM
# dense bf16), llm.c's formula. Per run one line for tools/gpu/gpu_report.py:
#   bench: label=<model>-<path> tok_s=.. mfu=.. first_x=.. peak_mib=.. ckpt_s=.. steps=..  (or error="...")
# Before each model's runs: every path's attention alone at that model's shape, side by side in one
# attention_bench process with each path's TFLOP/s over cuDNN's (bf16: 124M B=32 T=1024 C=768 NH=12,
# 1.5B B=8 T=1024 C=1600 NH=25; SKIP does not apply to these). With >= 2 GPUs: 124M under mpirun,
# one rank per GPU, ZeRO-0 against ZeRO-3 (tokens/s of the whole job).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-10}
shift || true
BUILD=${BUILD:-build}
BIN=$BUILD/app/llmtrain
DATA=$BUILD/gpu_bench/data
LOGDIR=${LOGDIR:-$BUILD/gpu_bench}
MODELS=${MODELS:-gpt2-124m gpt2-1.5b}
SKIP=${SKIP:-gpt2-1.5b-native}
CHECKPOINT=${CHECKPOINT:-cudnn}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
TORCH_TIMEOUT=${TORCH_TIMEOUT:-$((RUN_TIMEOUT + 120))}
ATTENTION_BENCH=${ATTENTION_BENCH:-1}
PYTHON=${PYTHON:-python3}
FP8=${FP8:-}
fp8_args=()
[ -n "$FP8" ] && fp8_args=(--set "training.fp8=\"$FP8\"")
source tools/gpu/llmtrain_run.sh
[ -x "$BIN" ] || { echo "gpu_bench: $BIN not found: build with CUDA first (cmake --build $BUILD)"; exit 2; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || { echo "gpu_bench: no GPU"; exit 2; }
mkdir -p "$LOGDIR"
[ -f "$DATA/train.h5" ] || "$BUILD/tests/app/make_tiny_dataset" "$DATA" >/dev/null
if [ -z "${ATTENTIONS:-}" ]; then
    ATTENTIONS="native cublas cudnn"
    "$BIN" --config configs/gpt2-124m.toml --set 'model.attention="auto"' --print-config >/dev/null 2>&1 &&
        ATTENTIONS="$ATTENTIONS auto"
fi
TORCH_OK=0
if [ "${TORCH:-1}" != 0 ] && "$PYTHON" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    TORCH_OK=1
else
    echo "gpu_bench: no PyTorch with CUDA for $PYTHON (or TORCH=0): no PyTorch baseline"
fi
RESULTS=$LOGDIR/bench_lines.txt
: >"$RESULTS"
common=(--set run.backend=\"cuda\" --set "run.max_steps=$STEPS" --set run.log_interval=1 --set run.eval_interval=0
        --set run.sample_interval=0 --set metrics.enabled=false --set checkpoint.interval=0
        --set training.global_batch_size=0 --set training.grad_accum_steps=8
        --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\"")

# result <line>: prints a bench line and keeps it for the table
result() { echo "$1" | tee -a "$RESULTS"; }

# bench <label> <model> <last step to stop at, 0 = run to the end> <launcher...> -- [llmtrain args]
bench() {
    local label=$1 model=$2 stop=$3
    shift 3
    local launch=()
    while [ "$1" != "--" ]; do launch+=("$1"); shift; done
    shift
    local rd=$BUILD/gpu_bench/$label log=$LOGDIR/$label.log rc=0
    rm -rf "$rd"
    llmtrain_run "$log" "$RUN_TIMEOUT" "$stop" "${launch[@]}" "$BIN" --config "configs/$model.toml" \
        --set "run.run_dir=\"$rd\"" "${common[@]}" "$@" || rc=$?
    rm -rf "$rd"  # its checkpoint: 1.5 GB at 124M, 19 GB at 1.5B
    if [ "$rc" != 0 ]; then
        result "bench: label=$label error=\"llmtrain exit $rc$([ "$rc" = 124 ] && echo " (over ${RUN_TIMEOUT} s)")\""
        tail -5 "$log"
        return
    fi
    result "$("$PYTHON" tools/gpu/gpu_report.py bench-line "$label" "$log")"
    # model.attention = "auto" names the path it chose in the start-up log.
    if [[ $label == *-auto ]]; then grep -m2 -i "attention" "$log" | sed "s/^/  $label: /" || true; fi
}

# torch_bench <model> [llmtrain args]: PyTorch at the shape llmtrain resolves for the same config and args
torch_bench() {
    local model=$1 cfg
    shift
    cfg=$("$BIN" --config "configs/$model.toml" "${common[@]}" "$@" --print-config) ||
        { result "bench: label=$model-torch error=\"cannot resolve configs/$model.toml\""; return 0; }
    key() { awk -v k="$1" '$1 == k && $2 == "=" { print $3; exit }' <<<"$cfg"; }
    local log=$LOGDIR/$model-torch.log rc=0
    timeout -k 10 "$TORCH_TIMEOUT" "$PYTHON" tools/bench/torch_gpt_gpu.py --label "$model-torch" \
        --n-layer "$(key n_layer)" --n-head "$(key n_head)" --n-embd "$(key n_embd)" --seq-len "$(key seq_len)" \
        --vocab "$(key vocab_size)" --data-vocab "$(cat "$DATA/vocab_size.txt")" --batch "$(key micro_batch_size)" \
        --grad-accum "$(key grad_accum_steps)" --steps "$STEPS" >"$log" 2>&1 || rc=$?
    if grep -q "^bench: " "$log"; then
        grep "^bench: " "$log" | tee -a "$RESULTS"
    else
        result "bench: label=$model-torch error=\"torch_gpt_gpu.py exit $rc\""
        tail -5 "$log"
    fi
}

AB=$BUILD/tools/bench/attention_bench
for model in $MODELS; do
    case $model in
        gpt2-124m) shape=(32 1024 768 12) ;;
        gpt2-1.5b) shape=(8 1024 1600 25) ;;
        *) shape=() ;;
    esac
    echo "== $model"
    if [ "$ATTENTION_BENCH" != 0 ] && [ -x "$AB" ] && [ ${#shape[@]} -gt 0 ]; then  # every path side by side in one process, ratios to cudnn
        paths=${ATTENTIONS// /,}
        timeout -k 5 300 "$AB" "$paths" "${shape[@]}" 20 || echo "attention_bench failed at $model's shape"
    fi
    for attention in $ATTENTIONS; do
        [ "$attention" = none ] && continue
        [[ " $SKIP " == *" $model-$attention "* ]] && { echo "$model-$attention: skipped (SKIP)"; continue; }
        stop=$STEPS
        at_end=false  # the runs stopped after their last step allocate no host snapshot (checkpoint.at_end)
        [ "$attention" = "$CHECKPOINT" ] && stop=0 at_end=true
        bench "$model-$attention${FP8:++fp8_$FP8}" "$model" "$stop" -- --set "model.attention=\"$attention\"" \
            --set "checkpoint.at_end=$at_end" "${fp8_args[@]}" "$@"
    done
    [ "$TORCH_OK" = 1 ] && torch_bench "$model" "$@"
done

# ZeRO-3 against plain DP on every GPU of this node (one rank per GPU; tokens/s over all ranks).
GPUS=$(nvidia-smi -L | wc -l)
if [ "$GPUS" -ge 2 ] && [[ " $MODELS " == *" gpt2-124m "* ]]; then
    mpi=(mpirun --allow-run-as-root -np "$GPUS")
    bench "124m-dp$GPUS" gpt2-124m 0 "${mpi[@]}" -- --set parallel.zero_stage=0 "$@"
    bench "124m-zero3-$GPUS" gpt2-124m 0 "${mpi[@]}" -- --set parallel.zero_stage=3 "$@"
fi

echo
if command -v "$PYTHON" >/dev/null; then
    "$PYTHON" tools/gpu/gpu_report.py bench-table "$RESULTS"
else
    cat "$RESULTS"
fi
