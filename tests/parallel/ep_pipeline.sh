#!/usr/bin/env bash
# tests/parallel/ep_pipeline.sh — a mixture of experts in the 1F1B pipeline (issue 45; docs/parallelism.md
# "Expert parallelism", "Pipeline parallelism") through the llmtrain binary (CPU backend, one OpenMP
# thread per rank, 6 steps of the 2-layer MoE Llama of ep_equivalence.sh: 4 experts of width 24,
# top-2, a shared expert, balance loss 0.05; 8 windows of 16 tokens per step) against one process
# accumulating the same 8 windows (and, for the val loss, whose windows follow dp, against dp 2):
#   pp 2 (2 ranks: a stage per layer, 4 micro-batches),
#   ep 2 x pp 2 (4 ranks: dp 2 per stage, each stage's MoE layer split over its ep group of 2,
#   2 micro-batches per rank), and the same at ZeRO-1,
#   the pp 2 run's step-3 checkpoint resumed in one process, the one process's at ep 2 x pp 2 and
#   the ep 2 x pp 2 run's in one process; ep 4 at pp 2 on 4 ranks (dp 2 per stage) exits 2 naming parallel.ep.
# Compared: the train and val losses, the balance loss (`moe_aux`, the sum over both stages' layers)
# and each layer's load imbalance (`moe_imbalance:<layer>`, the loads gathered from both stages) of
# every step, and the final weights.
# Tolerances: 1e-5 relative for the losses, 5e-5 absolute for the weights (AdamW at lr 0.01). Not
# bitwise: the tied wte's two gradient parts are summed once per step at pp 2, per micro-batch in
# one process (docs/parallelism.md "Pipeline parallelism": fp32 reassociation), the balance loss is
# a float sum of the two stages' parts, and with ep an expert's weight gradient is one GEMM over the
# rows of the ep group where one process adds micro-batch by micro-batch. Step 1's train loss (no
# update yet) must be bitwise equal. The measured figures are printed.
# Usage: ep_pipeline.sh <llmtrain> <mpiexec> <tiny_data_dir> <work_dir>
set -euo pipefail
BIN=$1 MPI=$2 DATA=$3 WORK=$4
VOCAB=$(cat "$DATA/vocab_size.txt")
PY=${LLMTRAIN_PYTHON:-/usr/bin/python3}
rm -rf "$WORK" && mkdir -p "$WORK"
source "$(dirname "$0")/equivalence_lib.sh"

MOE=("${LLAMA[@]}" --set model.moe.n_experts=4 --set model.moe.top_k=2 --set model.moe.expert_ffn=24
     --set model.moe.n_shared_experts=1 --set model.moe.aux_loss_coef=0.05 --set checkpoint.interval=3
     --set run.sample_interval=0)
LT=1e-5 WT=5e-5
KINDS="train val moe_aux moe_imbalance:0 moe_imbalance:1"

# The ep groups are per stage: at world 4, pp 2 leaves dp 2 per stage, which ep 4 does not divide.
set +e
"$BIN" "${LLAMA[@]}" --set model.moe.n_experts=4 --set "model.vocab_size=$VOCAB" --dry-run --world-size 4 \
    --set parallel.pp=2 --set parallel.ep=4 >"$WORK/bad_ep.log" 2>&1
code=$?
set -e
[ $code = 2 ] && grep -qF "parallel.ep: expected a divisor of the data-parallel ranks dp = 2, got 4" "$WORK/bad_ep.log" ||
    { echo "ep 4 at pp 2 x dp 2: exit $code"; cat "$WORK/bad_ep.log"; exit 1; }

run 1 one "${MOE[@]}" --set training.grad_accum_steps=4
run 2 pp2 "${MOE[@]}" --set training.grad_accum_steps=4 --set parallel.pp=2
compare one pp2 $LT 0 $WT "$KINDS"
# At dp 2 each rank evaluates its own val windows: the val losses compare with dp 2 in one stage.
run 2 dp2 "${MOE[@]}" --set training.grad_accum_steps=2
run 4 ep2_pp2 "${MOE[@]}" --set training.grad_accum_steps=2 --set parallel.pp=2 --set parallel.ep=2
compare one ep2_pp2 $LT 0 $WT "${KINDS/val /}"
compare dp2 ep2_pp2 $LT 0 $WT "$KINDS"
run 4 ep2_pp2_z1 "${MOE[@]}" --set training.grad_accum_steps=2 --set parallel.pp=2 --set parallel.ep=2 \
    --set parallel.zero_stage=1
compare dp2 ep2_pp2_z1 $LT 0 $WT "$KINDS"
# Step 1 (the same weights everywhere): the cross-entropy bitwise equal.
for r in pp2 ep2_pp2; do
    a=$(awk -F'\t' '$1 == 1 && $2 == "train" {print $3}' "$WORK/one/losses.tsv")
    b=$(awk -F'\t' '$1 == 1 && $2 == "train" {print $3}' "$WORK/$r/losses.tsv")
    [ -n "$a" ] && [ "$a" = "$b" ] || { echo "$r: step 1 train loss $b, one process $a (bitwise expected)"; exit 1; }
done
# The log's balance line covers both stages' layers (2 imbalances).
grep -qE 'moe aux [0-9.e+-]+ \| load max/mean by layer [0-9.]+ [0-9.]+ \|' "$WORK/ep2_pp2.log" ||
    { echo "ep2_pp2: no moe line with both layers"; grep -i moe "$WORK/ep2_pp2.log"; exit 1; }
# Checkpoints hold whole tensors: pp 2 -> one process, one process -> ep 2 x pp 2.
run 1 pp2_then_1 "${MOE[@]}" --set training.grad_accum_steps=4 --set "checkpoint.resume=\"$WORK/pp2/checkpoints/step_3\""
compare pp2 pp2_then_1 $LT 3 $WT "$KINDS"
run 4 one_then_ep2_pp2 "${MOE[@]}" --set training.grad_accum_steps=2 --set parallel.pp=2 --set parallel.ep=2 \
    --set "checkpoint.resume=\"$WORK/one/checkpoints/step_3\""
compare ep2_pp2 one_then_ep2_pp2 $LT 3 $WT "$KINDS"
# ... and ep 2 x pp 2 -> one process (its 4 ranks' pieces, 2 writers per stage, make the whole tensors).
run 1 ep2_pp2_then_1 "${MOE[@]}" --set training.grad_accum_steps=4 \
    --set "checkpoint.resume=\"$WORK/ep2_pp2/checkpoints/step_3\""
compare one ep2_pp2_then_1 $LT 3 $WT "$KINDS"
echo "ep_pipeline: pp 2 and ep 2 x pp 2 (ZeRO-0 and -1) track one process; resume pp 2 -> 1, 1 -> ep 2 x pp 2 and back"
