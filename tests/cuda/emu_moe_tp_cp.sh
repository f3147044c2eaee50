#!/usr/bin/env bash
# tests/cuda/emu_moe_tp_cp.sh — a mixture of experts with tensor and context parallelism on the CUDA
# backend under cuda_emu (docs/parallelism.md "Mixture of experts under tp and cp"): llmtrain-emu
# at tp 2 (the shared expert split as the dense MLP, router and routed experts replicated) and at
# cp 2 with the balance loss on (the window's fractions f_e all-reduced over the CP group and taken
# by CudaOps::moe_dispatch_backward from MoeShape::aux_f, cuda_ops_moe.cu) under mpirun, each against
# the CPU llmtrain in the same layout (same data, seed and global batch). Model: configs/moe-tiny.toml
# cut to emu_lib.sh's tiny shapes (2 layers, width 32, 2 heads over 2 key/value heads, 16 tokens,
# micro-batch 2) with 4 experts of width 24, top-2, a shared expert and alpha 0.05; 3 steps, fp32.
# Then tp 2 with sequence parallelism against the CPU tp 2 run, and ep 2 x tp 2 on 4 ranks.
# Tolerances: losses within 1e-4 relative (emu_lib.sh's fp32 bound for cuda vs cpu; measured equal
# to the 9 printed digits), the step-3 weights within compare_weights.py's fp32 bounds (measured
# RMS <= 2.5e-6 of RMS(w), max <= 5.1e-5 of max|w|). ~30 s on 2 cores.
# Usage: emu_moe_tp_cp.sh <llmtrain> <llmtrain-emu> <mpiexec> <moe-tiny.toml> <tiny_data_dir> <work_dir>
set -euo pipefail
CPU=$1 EMU=$2 MPI=$3 CONFIG=$4 DATA=$5 WORK=$6
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

# shellcheck source=tests/cuda/emu_lib.sh
source "$(dirname "$0")/emu_lib.sh"
MOE=(--config "$CONFIG" --set 'training.precision="fp32"' --set model.n_kv_head=2 --set model.intermediate_size=64
     --set model.moe.n_experts=4 --set model.moe.top_k=2 --set model.moe.expert_ffn=24
     --set model.moe.n_shared_experts=1 --set model.moe.aux_loss_coef=0.05 --set run.sample_interval=0)
for layout in tp cp; do
    run "$CPU" 2 cpu_$layout "${MOE[@]}" --set 'run.backend="cpu"' --set parallel.$layout=2
    run "$EMU" 2 cuda_$layout "${MOE[@]}" --set 'run.backend="cuda"' --set parallel.$layout=2
    compare cpu_$layout cuda_$layout 1e-4
    weights cpu_$layout cuda_$layout
done
# tp 2 with sequence parallelism (the router's rows gathered first) against the CPU tp 2 run.
run "$EMU" 2 cuda_tp_sp "${MOE[@]}" --set 'run.backend="cuda"' --set parallel.tp=2 --set parallel.sequence_parallel=true
compare cpu_tp cuda_tp_sp 1e-4
weights cpu_tp cuda_tp_sp
# ep 2 x tp 2 on 4 ranks (each TP index's own expert groups) against the CPU binary's same layout.
run "$CPU" 4 cpu_ep_tp "${MOE[@]}" --set 'run.backend="cpu"' --set parallel.tp=2 --set parallel.ep=2
run "$EMU" 4 cuda_ep_tp "${MOE[@]}" --set 'run.backend="cuda"' --set parallel.tp=2 --set parallel.ep=2
compare cpu_ep_tp cuda_ep_tp 1e-4
weights cpu_ep_tp cuda_ep_tp
echo "emu_moe_tp_cp: all checks passed"
