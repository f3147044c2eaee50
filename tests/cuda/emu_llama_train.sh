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

# shellcheck source=tests/cuda/emu_train_lib.sh
source "$(dirname "$0")/emu_train_lib.sh"
# emu_train_lib.sh's run with configs/llama-tiny.toml cut to 2 layers at seq_len 64.
run_llama() { run "$@" --set model.n_layer=2 --set model.seq_len=64; }

run_llama "$LLMTRAIN" "$WORK/cpu" cpu fp32 3
run_llama "$EMU" "$WORK/cuda_fp32" cuda fp32 3
grep -q "attention: cublas" "$WORK/cuda_fp32.log" || { echo "auto in fp32 did not pick cublas"; exit 1; }
compare "llama cuda fp32 (cublas, n_kv_head 2) vs cpu" "$WORK/cpu" "$WORK/cuda_fp32" 1e-4
compare_weights "llama cuda fp32 vs cpu" "$WORK/cpu" "$WORK/cuda_fp32"

run_llama "$EMU" "$WORK/cuda_bf16" cuda bf16 3
grep -q "attention: native (auto: this build has no cuDNN; FlashAttention-2" "$WORK/cuda_bf16.log" ||
    { echo "auto in bf16 at head size 64 without cuDNN did not pick native (FlashAttention-2)"; exit 1; }
compare "llama cuda bf16 (FlashAttention-2, n_kv_head 2) vs cpu" "$WORK/cpu" "$WORK/cuda_bf16" 5e-3

run_llama "$LLMTRAIN" "$WORK/cpu_mqa" cpu fp32 3 --set model.n_kv_head=1
run_llama "$EMU" "$WORK/cuda_mqa" cuda fp32 3 --set model.n_kv_head=1 --set 'model.attention="native"'
compare "llama cuda fp32 (native, n_kv_head 1) vs cpu" "$WORK/cpu_mqa" "$WORK/cuda_mqa" 1e-4
echo "emu_llama_train: all checks passed"
