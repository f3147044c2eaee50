#!/usr/bin/env bash
# tests/cuda/emu_moe_ep.sh — expert parallelism (parallel.ep, docs/parallelism.md "Expert
# parallelism") on the CUDA backend under cuda_emu: llmtrain-emu at dp 2 with ep 2 (each rank holds
# 2 of the 4 experts; the token exchange is NcclComm::all_to_all_v, one ncclGroupStart..End of
# ncclSend/ncclRecv per call, parallel/nccl_comm.cpp) against ep 1 on the same binary, same data,
# seed and global batch; then at dp 4, ep 2 with ZeRO-1 and with ZeRO-3 (the experts sharded over
# each EP index's expert-dp group of 2) against ep 1 at ZeRO-1. Model: configs/moe-tiny.toml cut to emu_lib.sh's tiny shapes (2 layers,
# width 32, 2 heads over 2 key/value heads, 16 tokens, micro-batch 2) with 4 experts of width 24,
# top-2 and a shared expert; 3 steps at lr 1e-3, fp32.
# Tolerances: losses 1e-5 relative (tests/parallel/ep_equivalence.sh's bound); the step-3 weights
# within compare_weights.py's fp32 bounds (RMS 1e-4 of RMS(w), max 1e-3 of max|w|). Not bitwise: an
# expert's weight gradient at ep 2 is one GEMM over the rows both ranks routed to it where at ep 1
# each rank sums its own rows and the all-reduce adds the two sums, so the fp32 sums are
# reassociated from step 1's gradient on (step 1's loss, a forward of the same weights, is the
# same number up to the printed digits). The measured differences are printed.
# Usage: emu_moe_ep.sh <llmtrain-emu> <mpiexec> <moe-tiny.toml> <tiny_data_dir> <work_dir>
set -euo pipefail
EMU=$1 MPI=$2 CONFIG=$3 DATA=$4 WORK=$5
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

# shellcheck source=tests/cuda/emu_lib.sh
source "$(dirname "$0")/emu_lib.sh"
MOE=(--config "$CONFIG" --set 'run.backend="cuda"' --set 'training.precision="fp32"' --set model.n_kv_head=2
     --set model.intermediate_size=64 --set model.moe.n_experts=4 --set model.moe.top_k=2
     --set model.moe.expert_ffn=24 --set model.moe.n_shared_experts=1 --set model.moe.aux_loss_coef=0.05
     --set run.sample_interval=0)

run "$EMU" 2 ep1 "${MOE[@]}" --set parallel.ep=1
run "$EMU" 2 ep2 "${MOE[@]}" --set parallel.ep=2
compare ep1 ep2 1e-5
weights ep1 ep2
# dp 4: ep 2 with ZeRO-1 and ZeRO-3 (the experts sharded over each EP index's expert-dp group of 2)
run "$EMU" 4 dp4_ep1 "${MOE[@]}" --set parallel.ep=1 --set parallel.zero_stage=1
for z in 1 3; do
    run "$EMU" 4 dp4_ep2_zero$z "${MOE[@]}" --set parallel.ep=2 --set parallel.zero_stage=$z
    compare dp4_ep1 dp4_ep2_zero$z 1e-5
    weights dp4_ep1 dp4_ep2_zero$z
done
echo "emu_moe_ep: all checks passed"
