#!/usr/bin/env bash
# tests/cuda/emu_moe_train.sh — a mixture of experts ([model.moe]; docs/model.md "Mixture of
# experts") trained by llmtrain-emu with run.backend = "cuda" (cuda_ops_moe.cu: the router, plan and
# permute kernels, the experts' grouped GEMM of moe_grouped_gemm.cu) against the CPU llmtrain on the
# same config, data and seed, and resumed. The sibling of emu_llama_train.sh.
#
# Usage: emu_moe_train.sh <llmtrain> <llmtrain-emu> <moe-tiny.toml> <tiny_data_dir> <work_dir>
# configs/moe-tiny.toml's shapes cut to 2 layers at seq_len 64 (n_embd 256, 8 experts of width 384,
# top-2, softmax router, balance loss alpha 0.01), micro_batch_size 2. Checks:
#   1. 4 steps, cuda fp32 vs cpu: every train loss within 1e-4 relative (emu_train.sh's fp32 bound;
#      the routing is the CPU's, so what differs is the order of fp32 sums);
#      step 1's logged balance loss and expert loads are the CPU's line;
#   2. 3 steps, cuda bf16 vs cpu within 5e-3 (emu_llama_train.sh's bf16 bound);
#   3. DeepSeek-V3's router: sigmoid scores with the selection bias updated every step
#      (bias_update_rate 1e-3) and a capacity factor of 1.0 (pairs dropped), cuda fp32 vs cpu within 1e-4;
#   4. resume: the cuda fp32 run of check 1 from its step-2 checkpoint to step 4 gives steps 3 and 4
#      of the unbroken run within 1e-6 relative (the same backend and routing: the bits, up to the
#      printed digits).
set -euo pipefail
LLMTRAIN=$1 EMU=$2 CONFIG=$3 DATA=$4 WORK=$5
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

# shellcheck source=tests/cuda/emu_train_lib.sh
source "$(dirname "$0")/emu_train_lib.sh"
# emu_train_lib.sh's run with configs/moe-tiny.toml cut to 2 layers at seq_len 64.
run_moe() { run "$@" --set model.n_layer=2 --set model.seq_len=64; }

run_moe "$LLMTRAIN" "$WORK/cpu" cpu fp32 4
run_moe "$EMU" "$WORK/cuda_fp32" cuda fp32 4 --set checkpoint.interval=2
compare "moe cuda fp32 vs cpu" "$WORK/cpu" "$WORK/cuda_fp32" 1e-4
# Step 1's balance loss and expert loads as logged: the same routing gives the same line (the cuda
# trainer's start-up warm-up pass must not add its own to step 1's).
moe_line() { grep -m1 '^step 1/4 | moe aux' "$1.log" || echo "no moe line in $1.log"; }
[ "$(moe_line "$WORK/cpu")" = "$(moe_line "$WORK/cuda_fp32")" ] ||
    { echo "FAILED: step 1's MoE line differs:"; moe_line "$WORK/cpu"; moe_line "$WORK/cuda_fp32"; exit 1; }

run_moe "$EMU" "$WORK/cuda_bf16" cuda bf16 3
compare "moe cuda bf16 vs cpu" "$WORK/cpu" "$WORK/cuda_bf16" 5e-3

DSV3=(--set 'model.moe.router="sigmoid"' --set model.moe.bias_update_rate=0.001 --set model.moe.capacity_factor=1.0)
run_moe "$LLMTRAIN" "$WORK/cpu_dsv3" cpu fp32 4 "${DSV3[@]}"
run_moe "$EMU" "$WORK/cuda_dsv3" cuda fp32 4 "${DSV3[@]}"
compare "moe sigmoid + bias + capacity, cuda fp32 vs cpu" "$WORK/cpu_dsv3" "$WORK/cuda_dsv3" 1e-4

resume_dir "$WORK/cuda_fp32" 2 "$WORK/cuda_resume"
run_moe "$EMU" "$WORK/cuda_resume" cuda fp32 4
[ "$(grep -c $'\ttrain\t' "$WORK/cuda_resume/losses.tsv")" = 2 ] ||
    { echo "FAILED: the resumed run did not start at step 3"; cat "$WORK/cuda_resume/losses.tsv"; exit 1; }
compare "moe cuda fp32 resumed at step 2 vs unbroken" "$WORK/cuda_fp32" "$WORK/cuda_resume" 1e-6
echo "emu_moe_train: all checks passed"
