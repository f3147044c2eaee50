#!/usr/bin/env bash
# tests/cuda/emu_tp.sh — parallel.tp on the CUDA backend under cuda_emu: llmtrain-emu (the TP group's
# all-reduces and all-gathers over NcclComm on the emulated NCCL, the vocabulary-parallel encoder and
# cross-entropy kernels) trains 3 steps under mpirun, against the CPU llmtrain in one process with
# the same data and seed (emu_zero.sh's settings; grad_clip 0). Tolerances as emu_zero.sh's for
# kernels that sum in another order: fp32 losses within 1e-4 relative and weights within
# compare_weights.py's (RMS 1e-4 of RMS(w), max 1e-3 of max|w|, the key bias by lr); bf16 losses
# within 5e-3. Cases: tp 2 (fp32), tp 2 in bf16, tp 2 with sequence parallelism (reduce-scatter and
# all-gather over NCCL), and tp 2 x dp 2 at ZeRO-1 on 4 emulated ranks
# against 2 CPU ranks, also with TP index 1's ZeRO sums perturbed by one ulp. Each run's checkpoint
# also checks that the replicated tensors stayed bitwise equal over the TP group, else the run fails.
# Usage: emu_tp.sh <llmtrain> <llmtrain-emu> <mpiexec> <tiny_data_dir> <work_dir>
set -euo pipefail
CPU=$1 EMU=$2 MPI=$3 DATA=$4 WORK=$5
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

# shellcheck source=tests/cuda/emu_lib.sh
source "$(dirname "$0")/emu_lib.sh"
CUDA=(--set 'run.backend="cuda"' --set parallel.tp=2)

run "$CPU" 1 cpu
run "$EMU" 2 tp2 "${CUDA[@]}"
grep -q "TP groups {0,1}" "$WORK/tp2.log" || { echo "tp2: no TP group in the start-up log"; exit 1; }
compare cpu tp2 1e-4
weights cpu tp2
run "$EMU" 2 tp2_bf16 "${CUDA[@]}" --set 'training.precision="bf16"'
compare cpu tp2_bf16 5e-3
run "$EMU" 2 tp2_sp "${CUDA[@]}" --set parallel.sequence_parallel=true
compare cpu tp2_sp 1e-4
weights cpu tp2_sp
run "$CPU" 2 cpu_dp2
run "$EMU" 4 tp2_dp2_z1 "${CUDA[@]}" --set parallel.zero_stage=1
compare cpu_dp2 tp2_dp2_z1 1e-4
weights cpu_dp2 tp2_dp2_z1
# Each TP index reduces its gradients over its own ZeRO communicators (here [0,2] and [1,3]); real
# NCCL need not sum equal inputs alike on two communicators. CUDA_EMU_NCCL_PERTURB=1,3 moves every
# sum of TP index 1's ZeRO group up by one unit in the last place: the replicated tensors must still
# be saved bitwise equal over the TP group (the trainer broadcasts their reduced gradients from TP
# index 0; without that broadcast this run's checkpoint fails naming wpe), and training must still
# track the CPU run (losses 1e-4: the perturbation is one ulp per step on the split tensors).
CUDA_EMU_NCCL_PERTURB=1,3 run "$EMU" 4 tp2_dp2_z1_perturbed "${CUDA[@]}" --set parallel.zero_stage=1
compare cpu_dp2 tp2_dp2_z1_perturbed 1e-4
echo "emu_tp: all comparisons passed"
