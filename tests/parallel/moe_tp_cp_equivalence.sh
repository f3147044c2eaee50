#!/usr/bin/env bash
# tests/parallel/moe_tp_cp_equivalence.sh — a mixture of experts under tensor, sequence and context
# parallelism (docs/parallelism.md "Mixture of experts under tp and cp") through the llmtrain binary
# (CPU backend, one OpenMP thread per rank, 6 steps of ep_equivalence.sh's 2-layer MoE Llama: 4
# experts of width 24, top-2, a shared expert of width 24, balance loss 0.05) against one process or
# plain dp at the same global batch: tp 2 (the shared expert split, the router and routed experts
# replicated on both TP ranks), tp 2 with sequence parallelism (the rows gathered before the router),
# cp 2 (each rank routes its half of every window; the balance loss over the whole window), cp 2 with
# a sigmoid router and DeepSeek-V3's bias update, ep 2 x tp 2 and ep 2 x cp 2 (4 ranks) against dp 2;
# a tp 2 checkpoint resumed at tp 1, a cp 2 one at cp 1 and an ep 2 x tp 2 one at dp 2 continue the
# unbroken runs.
# Compared: the train and val losses, the logged balance loss (moe_aux) and each layer's load
# imbalance (moe_imbalance:<layer>: max/mean tokens per expert, from the loads summed over the ranks)
# within 1e-5 relative, and the final weights within 1e-4 absolute (tp_equivalence.sh's and
# cp_equivalence.sh's tolerances). Why not bitwise: tp splits the attention's and the shared expert's
# matmuls and sums their partial products over the group, cp sums each rank's d k|v of the window and
# the ranks' gradients in another order, and cp's balance loss adds the ranks' fp32 score sums —
# fp32 sums reassociated; AdamW at lr 0.01 turns few-ulp gradient differences into weight differences
# of ~1e-6. The measured figures are printed.
# Usage: moe_tp_cp_equivalence.sh <llmtrain> <mpiexec> <tiny_data_dir> <work_dir>
set -euo pipefail
BIN=$1 MPI=$2 DATA=$3 WORK=$4
VOCAB=$(cat "$DATA/vocab_size.txt")
PY=${LLMTRAIN_PYTHON:-/usr/bin/python3}
rm -rf "$WORK" && mkdir -p "$WORK"
source "$(dirname "$0")/equivalence_lib.sh"

MOE=("${LLAMA[@]}" --set model.moe.n_experts=4 --set model.moe.top_k=2 --set model.moe.expert_ffn=24
     --set model.moe.n_shared_experts=1 --set model.moe.aux_loss_coef=0.05 --set checkpoint.interval=3)
LT=1e-5 WT=1e-4 KINDS="train val moe_aux moe_imbalance:0 moe_imbalance:1"

run 1 one "${MOE[@]}"
run 2 tp2 "${MOE[@]}" --set parallel.tp=2
compare one tp2 $LT 0 $WT "$KINDS"
run 2 tp2_sp "${MOE[@]}" --set parallel.tp=2 --set parallel.sequence_parallel=true
compare one tp2_sp $LT 0 $WT "$KINDS"
run 2 cp2 "${MOE[@]}" --set parallel.cp=2
compare one cp2 $LT 0 $WT "$KINDS"
# The sigmoid router's balance-loss gradient (through the per-row normalization) and the selection
# bias, updated from the loads summed over the ranks: the same on every rank of the window.
BIAS=(--set 'model.moe.router="sigmoid"' --set model.moe.bias_update_rate=0.01)
run 1 one_bias "${MOE[@]}" "${BIAS[@]}"
run 2 cp2_bias "${MOE[@]}" "${BIAS[@]}" --set parallel.cp=2
compare one_bias cp2_bias $LT 0 $WT "$KINDS"
# With expert parallelism: the ep groups hold ranks of one TP index (ep 2 x tp 2, each TP rank
# running its EP index's experts on all rows) or a window's CP group (ep 2 x cp 2: dp 4 carries cp 2
# and ep 2), against plain dp 2 (the same global batch).
run 2 dp2 "${MOE[@]}"
run 4 dp2_ep2_tp2 "${MOE[@]}" --set parallel.ep=2 --set parallel.tp=2
compare dp2 dp2_ep2_tp2 $LT 0 $WT "$KINDS"
run 4 dp2_ep2_cp2 "${MOE[@]}" --set parallel.ep=2 --set parallel.cp=2
compare dp2 dp2_ep2_cp2 $LT 0 $WT "$KINDS"
# Checkpoints hold whole tensors: tp 2 -> tp 1 and cp 2 -> cp 1 continue the unbroken runs.
run 1 tp2_then_1 "${MOE[@]}" --set "checkpoint.resume=\"$WORK/tp2/checkpoints/step_3\""
compare tp2 tp2_then_1 $LT 3 $WT "$KINDS"
run 1 cp2_then_1 "${MOE[@]}" --set "checkpoint.resume=\"$WORK/cp2/checkpoints/step_3\""
compare cp2 cp2_then_1 $LT 3 $WT "$KINDS"
# ... and ep 2 x tp 2's (its 4 writers' pieces, each gathered from the EP x TP holders) at dp 2.
run 2 ep2tp2_then_dp2 "${MOE[@]}" --set "checkpoint.resume=\"$WORK/dp2_ep2_tp2/checkpoints/step_3\""
compare dp2_ep2_tp2 ep2tp2_then_dp2 $LT 3 $WT "$KINDS"
echo "moe_tp_cp_equivalence: MoE at tp 2 (with and without sequence parallelism), cp 2, ep 2 x tp 2 and ep 2 x cp 2 tracks one process / dp 2; resume tp 2 -> 1, cp 2 -> 1 and ep 2 x tp 2 -> dp 2"
