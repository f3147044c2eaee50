#!/usr/bin/env bash
# tools/bench/gpu_bench.sh — training throughput (tokens/s) and MFU of the CUDA backend on GPT-2
# 124M and 1.5B (configs/gpt2-124m.toml, configs/gpt2-1.5b.toml), one GPU, bf16.
#
# Usage: tools/bench/gpu_bench.sh [steps (default 20)] [extra llmtrain args, e.g. --set training.global_batch_size=64]
#   BUILD=build (default) must hold a CUDA build: app/llmtrain linked with llmtrain_cuda (nvcc found
#   at configure time) and tests/app/make_tiny_dataset.
# Data: the synthetic dataset of tests/app/make_tiny_dataset (token ids < 320); the models keep
# their 50257-token vocabulary, so the compute per token is GPT-2's (throughput does not depend on
# the token values). Steps 1-3 are warm-up (cuBLASLt heuristics, allocation) and are left out of
# the averages. Each step is 8 micro-batches of the config's micro_batch_size (the optimizer step
# is amortized as in training; override with --set training.grad_accum_steps=N).
# MFU = 6*N_params + 6*n_layer*seq_len*n_embd FLOPs/token (docs/reference.md) over the peak of
# run.peak_flops (default 989 TFLOP/s, H100 SXM dense bf16). llm.c reference: ~56% MFU (124M, A100)
# and ~46% (1.5B, H100). With >= 2 GPUs it also runs 124M under mpirun, one rank per GPU, at
# zero_stage 0 and 3 (the tokens/s of the log are per job, so the two compare directly).
# Attention: for each path of ATTENTIONS (default "native cublas cudnn"; model.attention, docs/cuda.md)
# first the forward and backward time of attention alone at the two models' shapes (attention_bench,
# bf16: 124M B=32 T=1024 C=768 NH=12, 1.5B B=8 T=1024 C=1600 NH=25, the configs' micro-batches),
# then each model's training step with that path (labels <model>-<path>). Choose paths with
# ATTENTIONS, not with --set model.attention (a later --set would relabel every run).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-20}
shift || true
BUILD=${BUILD:-build}
BIN=$BUILD/app/llmtrain
DATA=$BUILD/gpu_bench/data
[ -x "$BIN" ] || { echo "gpu_bench: $BIN not found: build with CUDA first (cmake --build $BUILD)"; exit 2; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || { echo "gpu_bench: no GPU"; exit 2; }
[ -f "$DATA/train.h5" ] || "$BUILD/tests/app/make_tiny_dataset" "$DATA" >/dev/null

# bench <label> <model> <launcher...> -- [llmtrain args]: trains, prints mean tokens/s and MFU after warm-up
bench() {
    local label=$1 model=$2
    shift 2
    local launch=()
    while [ "$1" != "--" ]; do launch+=("$1"); shift; done
    shift
    local rd=$BUILD/gpu_bench/$label
    rm -rf "$rd"
    "${launch[@]}" "$BIN" --config "configs/$model.toml" --set "run.run_dir=\"$rd\"" --set run.backend=\"cuda\" \
        --set "run.max_steps=$STEPS" --set run.log_interval=1 --set run.eval_interval=0 \
        --set run.sample_interval=0 --set metrics.enabled=false --set checkpoint.interval=0 \
        --set training.global_batch_size=0 --set training.grad_accum_steps=8 \
        --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\"" "$@" >"$rd.log" 2>&1 ||
        { echo "$label: llmtrain failed, see $rd.log"; tail -5 "$rd.log"; return; }
    # Log lines: "step k/N | loss L | lr .. | norm .. | 12,345 tok/s | MFU 45.6% | ..."
    awk -v label="$label" '
        /^step [0-9]+\// {
            split($2, s, "/"); if (s[1] + 0 <= 3) next
            for (i = 1; i <= NF; i++) {
                if ($i == "tok/s") { t = $(i - 1); gsub(",", "", t); tok += t; n++ }
                if ($i == "MFU") { m = $(i + 1); sub("%", "", m); mfu += m }
            }
        }
        END { if (n == 0) { print label ": no steps after warm-up"; exit }
              printf "%-16s %12.0f tokens/s   MFU %5.1f%%   (mean of %d steps)\n", label, tok / n, mfu / n, n }' \
        "$rd.log"
}

ATTENTIONS=${ATTENTIONS:-native cublas cudnn}
AB=$BUILD/tools/bench/attention_bench
if [ -x "$AB" ]; then
    for attention in $ATTENTIONS; do
        "$AB" "$attention" 32 1024 768 12 20 || echo "$attention: attention_bench failed at the 124M shape"
        "$AB" "$attention" 8 1024 1600 25 20 || echo "$attention: attention_bench failed at the 1.5B shape"
    done
else
    echo "gpu_bench: $AB not built: no attention timings"
fi

for model in gpt2-124m gpt2-1.5b; do
    for attention in $ATTENTIONS; do
        bench "$model-$attention" "$model" -- --set "model.attention=\"$attention\"" "$@"
    done
done

# ZeRO-3 against plain DP on every GPU of this node (one rank per GPU; tokens/s over all ranks).
GPUS=$(nvidia-smi -L | wc -l)
if [ "$GPUS" -ge 2 ]; then
    mpi=(mpirun --allow-run-as-root -np "$GPUS")
    bench "124m-dp$GPUS" gpt2-124m "${mpi[@]}" -- --set parallel.zero_stage=0 "$@"
    bench "124m-zero3-$GPUS" gpt2-124m "${mpi[@]}" -- --set parallel.zero_stage=3 "$@"
else
    echo "ZeRO-3 vs DP: needs >= 2 GPUs on this node, found $GPUS"
fi
