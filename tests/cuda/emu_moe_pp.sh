#!/usr/bin/env bash
# tests/cuda/emu_moe_pp.sh — a mixture of experts in the 1F1B pipeline on the CUDA backend under
# cuda_emu (docs/parallelism.md "Expert parallelism", "With a pipeline"): llmtrain-emu at pp 2 (2
# micro-batches a step, one MoE layer per stage) and at ep 2 x pp 2 on 4 ranks (each stage's experts
# over its own ep group of its dp 2; the count exchange and the expert-load copies inside a stage)
# under mpirun, each against the CPU llmtrain in the same layout (same data, seed and global batch).
# Model: configs/moe-tiny.toml cut to emu_lib.sh's tiny shapes (2 layers, width 32, 2 heads over 2
# key/value heads, 16 tokens, micro-batch 2) with 4 experts of width 24, top-2, a shared expert and
# alpha 0.05; 3 steps, fp32. Tolerances: losses within 1e-4 relative (emu_lib.sh's fp32 bound for
# cuda vs cpu; measured equal to the 9 printed digits), the step-3 weights within compare_weights.py's
# fp32 bounds (measured RMS <= 6.7e-7 of RMS(w), max <= 6.5e-6 of max|w|). ~19 s on 2 cores.
# Usage: emu_moe_pp.sh <llmtrain> <llmtrain-emu> <mpiexec> <moe-tiny.toml> <tiny_data_dir> <work_dir>
set -euo pipefail
CPU=$1 EMU=$2 MPI=$3 CONFIG=$4 DATA=$5 WORK=$6
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

# shellcheck source=tests/cuda/emu_lib.sh
source "$(dirname "$0")/emu_lib.sh"
MOE=(--config "$CONFIG" --set 'training.precision="fp32"' --set model.n_kv_head=2 --set model.intermediate_size=64
     --set model.moe.n_experts=4 --set model.moe.top_k=2 --set model.moe.expert_ffn=24
     --set model.moe.n_shared_experts=1 --set model.moe.aux_loss_coef=0.05 --set run.sample_interval=0
     --set training.grad_accum_steps=2 --set parallel.pp=2)
run "$CPU" 2 cpu_pp2 "${MOE[@]}" --set 'run.backend="cpu"'
run "$EMU" 2 cuda_pp2 "${MOE[@]}" --set 'run.backend="cuda"'
compare cpu_pp2 cuda_pp2 1e-4
weights cpu_pp2 cuda_pp2
run "$CPU" 4 cpu_ep2_pp2 "${MOE[@]}" --set 'run.backend="cpu"' --set parallel.ep=2
run "$EMU" 4 cuda_ep2_pp2 "${MOE[@]}" --set 'run.backend="cuda"' --set parallel.ep=2
compare cpu_ep2_pp2 cuda_ep2_pp2 1e-4
weights cpu_ep2_pp2 cuda_ep2_pp2
echo "emu_moe_pp: all checks passed"
