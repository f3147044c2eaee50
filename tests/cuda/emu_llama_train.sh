#!/usr/bin/env bash
# tests/cuda/emu_llama_train.sh — the Llama architecture (model.arch = "llama": RMSNorm, RoPE,
# SwiGLU, grouped-query attention, no positions) trained by llmtrain-emu with run.backend = "cuda"
# against the CPU llmtrain on the same config, data and seed: the sibling of emu_train.sh (GPT-2).
#
# Usage: emu_llama_train.sh <llmtrain> <llmtrain-emu> <llama-tiny.toml> <tiny_data_dir> <work_dir>
# configs/llama-tiny.toml's shapes cut to 2 layers at seq_len 64 (n_embd 256, n_head 4, head size 64,
# SwiGLU width 768), micro_batch_size 2, to keep the emulated run to seconds. Checks, with
# emu_train.sh's GPT-2 tolerances:
#   1. n_kv_head 2, 3 steps, cuda fp32 vs cpu: every train loss within 1e-4 relative, and the final
#      checkpoint's weights tensor by tensor (compare_weights.py); model.attention = "auto" in fp32
#      is cublas (no cuDNN, no fp32 FlashAttention): query heads mapped in its head split;
#   2. n_kv_head 2, 3 steps, cuda bf16 vs cpu within 5e-3 ("auto": native, FlashAttention-2 reading
#      key/value head h / 2 for query head h, the log says so);
#   3. n_kv_head 1 (multi-query), 3 steps, model.attention = "native" fp32 (attention.cu on the
#      expanded heads) vs cpu within 1e-4.
set -euo pipefail
LLMTRAIN=$1 EMU=$2 CONFIG=$3 DATA=$4 WORK=$5
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

run() {  # run <binary> <run_dir> <backend> <precision> <max_steps> [--set overrides...]
    local bin=$1 rd=$2 backend=$3 prec=$4 steps=$5
    shift 5
    "$bin" --config "$CONFIG" "$@" \
        --set "run.run_dir=\"$rd\"" --set "run.backend=\"$backend\"" --set "training.precision=\"$prec\"" \
        --set "run.max_steps=$steps" --set "model.vocab_size=$VOCAB" \
        --set model.n_layer=2 --set model.seq_len=64 \
        --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\"" \
        --set training.micro_batch_size=2 --set training.grad_accum_steps=1 --set run.log_interval=1 \
        --set run.eval_interval=0 --set run.sample_interval=0 --set metrics.enabled=false \
        --set checkpoint.interval=0 --set lr_schedule.warmup_steps=2 >"$rd.log" 2>&1 ||
        { echo "FAILED: $bin ($backend $prec) exited $?; log:"; cat "$rd.log"; exit 1; }
}

# compare <name> <reference run dir> <run dir> <relative tolerance>: train losses per step
compare() {
    awk -F'\t' -v tol="$4" -v name="$1" '
        FNR == 1 { next }
        $2 != "train" { next }
        NR == FNR { ref[$1] = $3; next }
        { n++; d = $3 - ref[$1]; if (d < 0) d = -d; r = d / (ref[$1] < 0 ? -ref[$1] : ref[$1]);
          printf "%s step %d: loss %s (reference %s, rel diff %.2e)\n", name, $1, $3, ref[$1], r;
          if (r > tol) bad++ }
        END { if (n == 0) { print name ": no losses compared"; exit 1 }
              if (bad) { print name ": " bad " steps beyond " tol; exit 1 } }' \
        "$2/losses.tsv" "$3/losses.tsv"
}

run "$LLMTRAIN" "$WORK/cpu" cpu fp32 3
run "$EMU" "$WORK/cuda_fp32" cuda fp32 3
grep -q "attention: cublas" "$WORK/cuda_fp32.log" || { echo "auto in fp32 did not pick cublas"; exit 1; }
compare "llama cuda fp32 (cublas, n_kv_head 2) vs cpu" "$WORK/cpu" "$WORK/cuda_fp32" 1e-4
"${LLMTRAIN_PYTHON:-/usr/bin/python3}" "$(dirname "$0")/compare_weights.py" "llama cuda fp32 vs cpu" \
    "$WORK/cpu" "$WORK/cuda_fp32"

run "$EMU" "$WORK/cuda_bf16" cuda bf16 3
grep -q "attention: native (auto: this build has no cuDNN; FlashAttention-2" "$WORK/cuda_bf16.log" ||
    { echo "auto in bf16 at head size 64 without cuDNN did not pick native (FlashAttention-2)"; exit 1; }
compare "llama cuda bf16 (FlashAttention-2, n_kv_head 2) vs cpu" "$WORK/cpu" "$WORK/cuda_bf16" 5e-3

run "$LLMTRAIN" "$WORK/cpu_mqa" cpu fp32 3 --set model.n_kv_head=1
run "$EMU" "$WORK/cuda_mqa" cuda fp32 3 --set model.n_kv_head=1 --set 'model.attention="native"'
compare "llama cuda fp32 (native, n_kv_head 1) vs cpu" "$WORK/cpu_mqa" "$WORK/cuda_mqa" 1e-4
echo "emu_llama_train: all checks passed"
