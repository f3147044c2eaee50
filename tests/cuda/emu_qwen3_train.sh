#!/usr/bin/env bash
# tests/cuda/emu_qwen3_train.sh — Qwen3's attention (model.qk_norm: an RMSNorm over each q and k
# head, model/cuda/qk_norm.cu; model.head_dim other than n_embd / n_head) trained by llmtrain-emu
# with run.backend = "cuda" against the CPU llmtrain on the same config, data and seed: the sibling
# of emu_llama_train.sh and emu_moe_train.sh (docs/model.md "Qwen3").
#
# Usage: emu_qwen3_train.sh <llmtrain> <llmtrain-emu> <llama-tiny.toml> <moe-tiny.toml> <tiny_data_dir> <work_dir>
# Both configs cut to 2 layers at seq_len 64 (n_embd 256, n_head 4 over n_kv_head 2), micro_batch_size 2,
# with qk_norm on and head_dim 32 (q_proj (128, 256): the attention width is not n_embd). Checks, with
# emu_llama_train.sh's tolerances:
#   1. dense, 3 steps, cuda fp32 (cublas) vs cpu: every train loss within 1e-4 relative, and the final
#      checkpoint's weights tensor by tensor (compare_weights.py: q_norm and k_norm among them);
#   2. dense, 3 steps, cuda bf16 (native) vs cpu within 5e-3;
#   3. the mixture of experts (moe-tiny: 8 experts, top-2), 3 steps, cuda fp32 vs cpu within 1e-4.
set -euo pipefail
LLMTRAIN=$1 EMU=$2 CONFIG=$3 MOE_CONFIG=$4 DATA=$5 WORK=$6
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

# shellcheck source=tests/cuda/emu_train_lib.sh
source "$(dirname "$0")/emu_train_lib.sh"
# emu_train_lib.sh's run with the config cut to 2 layers at seq_len 64, Qwen3's attention.
run_qwen3() { run "$@" --set model.n_layer=2 --set model.seq_len=64 --set model.qk_norm=true --set model.head_dim=32; }

run_qwen3 "$LLMTRAIN" "$WORK/cpu" cpu fp32 3
run_qwen3 "$EMU" "$WORK/cuda_fp32" cuda fp32 3
compare "qwen3 cuda fp32 vs cpu" "$WORK/cpu" "$WORK/cuda_fp32" 1e-4
compare_weights "qwen3 cuda fp32 vs cpu" "$WORK/cpu" "$WORK/cuda_fp32"

run_qwen3 "$EMU" "$WORK/cuda_bf16" cuda bf16 3
compare "qwen3 cuda bf16 vs cpu" "$WORK/cpu" "$WORK/cuda_bf16" 5e-3

CONFIG=$MOE_CONFIG
run_qwen3 "$LLMTRAIN" "$WORK/cpu_moe" cpu fp32 3
run_qwen3 "$EMU" "$WORK/cuda_moe" cuda fp32 3
compare "qwen3-moe cuda fp32 vs cpu" "$WORK/cpu_moe" "$WORK/cuda_moe" 1e-4
echo "emu_qwen3_train: all checks passed"
