#!/usr/bin/env bash
# tests/parallel/ep_equivalence.sh — parallel.ep (expert parallelism, docs/parallelism.md "Expert
# parallelism") through the llmtrain binary (CPU backend, one OpenMP thread per rank, 6 steps of a
# 2-layer MoE Llama: 4 experts of width 24, top-2, a shared expert, balance loss 0.05) against ep = 1
# at the same dp and global batch. Each rank holds only its EP index's experts (parallel/ep_grads.hpp:
# the ZeRO engine runs over the dp/ep ranks with the same experts, the dense gradients get one more
# sum over the EP group): ep 2 at dp 2; ep 4 at dp 4; ep 2 at dp 4 with ZeRO-1 and with ZeRO-3 (the
# experts sharded over the expert-dp group of 2); recomputed layers, capacity-limited routing and a
# sigmoid router with DeepSeek-V3's selection bias at ep 2; the ep 2 run's step-3 checkpoint (whole
# tensors, gathered from the EP ranks) resumed at ep 1, the ep 1 run's at ep 2 and the ep 2 ZeRO-3
# run's at ep 4 continue the unbroken runs.
# Tolerances: losses 1e-5 relative, weights 5e-5 absolute (AdamW at lr 0.01 turns gradient
# differences of a few ulps into weight differences up to 7.4e-6, measured at ep 4). Why not bitwise: an expert's weight
# gradient is one GEMM over the rows every rank of its ep group routed to it (rank order, then token
# order) where at ep 1 each rank sums its own rows and the gradient all-reduce adds the ranks' sums,
# so fp32 sums are reassociated (the forward's rows are each one GEMM row either way). The measured
# figures are printed.
# Also: refusals (exit 2 naming the key): ep not dividing n_experts, ep not dividing dp, a
# zero_group_size that ep does not divide (app/config/world.cpp; else parallel/ep_grads exit 1), ep without
# MoE, ep with HellaSwag in the loop; the dry run at ep 2 counts the all-to-all's bytes and the
# memory, the experts' weights, gradients and AdamW state halved (within 2% of the run's Allocator
# peak).
# Usage: ep_equivalence.sh <llmtrain> <mpiexec> <tiny_data_dir> <work_dir>
set -euo pipefail
BIN=$1 MPI=$2 DATA=$3 WORK=$4
VOCAB=$(cat "$DATA/vocab_size.txt")
PY=${LLMTRAIN_PYTHON:-/usr/bin/python3}
rm -rf "$WORK" && mkdir -p "$WORK"
source "$(dirname "$0")/equivalence_lib.sh"

MOE=("${LLAMA[@]}" --set model.moe.n_experts=4 --set model.moe.top_k=2 --set model.moe.expert_ffn=24
     --set model.moe.n_shared_experts=1 --set model.moe.aux_loss_coef=0.05 --set checkpoint.interval=3)
LT=1e-5 WT=5e-5

refuse() {  # refuse <np> <name> <expected message> [--set overrides...]: exit 2, the message, no run dir
    local np=$1 name=$2 msg=$3 code
    shift 3
    set +e
    "$MPI" --oversubscribe -np "$np" "$BIN" --set "model.vocab_size=$VOCAB" --set "data.train=\"$DATA/train.h5\"" \
        --set "data.val=\"$DATA/val.h5\"" --set "run.run_dir=\"$WORK/$name\"" --set metrics.enabled=false "$@" \
        >"$WORK/$name.log" 2>&1
    code=$?
    set -e
    [ $code = 2 ] && [ ! -e "$WORK/$name" ] && grep -qF "$msg" "$WORK/$name.log" ||
        { echo "$name: exit $code, expected 2 and: $msg"; cat "$WORK/$name.log"; exit 1; }
}
refuse 1 bad_div "parallel.ep: expected a divisor of model.moe.n_experts = 4, got 3" "${MOE[@]}" --set parallel.ep=3
refuse 2 bad_dp "parallel.ep: expected a divisor of the data-parallel ranks dp = 2, got 4" "${MOE[@]}" --set parallel.ep=4
refuse 4 bad_zg "parallel.zero_group_size: with parallel.ep = 4 expected 0 or a multiple of parallel.ep" "${MOE[@]}" \
    --set parallel.ep=4 --set parallel.zero_stage=1 --set parallel.zero_group_size=2
refuse 1 bad_dense "parallel.ep: expert parallelism needs a mixture of experts" "${LLAMA[@]}" --set parallel.ep=2
refuse 2 bad_hs "parallel.ep: HellaSwag in the loop does not run with expert parallelism yet" "${MOE[@]}" \
    --set parallel.ep=2 --set run.eval_hellaswag_interval=3

run 2 dp2 "${MOE[@]}"
run 2 dp2_ep2 "${MOE[@]}" --set parallel.ep=2
compare dp2 dp2_ep2 $LT 0 $WT
run 4 dp4 "${MOE[@]}"
run 4 dp4_ep4 "${MOE[@]}" --set parallel.ep=4
compare dp4 dp4_ep4 $LT 0 $WT
# ZeRO over the ranks that hold the same experts: at dp 4, ep 2 each EP index's engine shards its
# experts and the dense tensors over its 2 ranks (ZeRO-1 and ZeRO-3), the dense gradients summed over
# the EP group after the engine's reduction.
run 4 dp4_z1_ep2 "${MOE[@]}" --set parallel.zero_stage=1 --set parallel.ep=2
compare dp4 dp4_z1_ep2 $LT 0 $WT
run 4 dp4_z3_ep2 "${MOE[@]}" --set parallel.zero_stage=3 --set parallel.ep=2
compare dp4 dp4_z3_ep2 $LT 0 $WT
# Recomputed layers run the exchange again in the backward (every rank of the group alike).
run 2 dp2_rc "${MOE[@]}" --set activation_checkpoint.ratio=1
run 2 dp2_rc_ep2 "${MOE[@]}" --set activation_checkpoint.ratio=1 --set parallel.ep=2
compare dp2_rc dp2_rc_ep2 $LT 0 $WT
# Capacity (Switch Transformer's, per rank's micro-batch as at ep 1): the dropped pairs are sent
# nowhere, their outputs and input gradients stay zero.
run 2 dp2_cap "${MOE[@]}" --set model.moe.capacity_factor=0.5
run 2 dp2_cap_ep2 "${MOE[@]}" --set model.moe.capacity_factor=0.5 --set parallel.ep=2
compare dp2_cap dp2_cap_ep2 $LT 0 $WT
# DeepSeek-V3's selection bias (sigmoid router, bias_update_rate): every rank of a group routes with
# the same per-layer bias (the loads are summed over dp before the update).
BIAS=(--set 'model.moe.router="sigmoid"' --set model.moe.bias_update_rate=0.01)
run 2 dp2_bias "${MOE[@]}" "${BIAS[@]}"
run 2 dp2_bias_ep2 "${MOE[@]}" "${BIAS[@]}" --set parallel.ep=2
compare dp2_bias dp2_bias_ep2 $LT 0 $WT
# Checkpoints hold whole expert tensors: ep 2 -> ep 1 and ep 1 -> ep 2 continue the unbroken runs.
run 2 ep2_then_1 "${MOE[@]}" --set "checkpoint.resume=\"$WORK/dp2_ep2/checkpoints/step_3\""
compare dp2_ep2 ep2_then_1 $LT 3 $WT
run 2 ep1_then_2 "${MOE[@]}" --set parallel.ep=2 --set "checkpoint.resume=\"$WORK/dp2/checkpoints/step_3\""
compare dp2 ep1_then_2 $LT 3 $WT
# ... and across ZeRO stages and expert-dp groups: the ep 2 ZeRO-3 run's (written by its 4 ranks, each
# a piece of the whole model gathered from the 2 x 2 shards) resumed at ep 4, ZeRO-0.
run 4 z3ep2_then_ep4 "${MOE[@]}" --set parallel.ep=4 --set "checkpoint.resume=\"$WORK/dp4_z3_ep2/checkpoints/step_3\""
compare dp4_z3_ep2 z3ep2_then_ep4 $LT 3 $WT
# The all-to-all's bytes: a wider model (C 128, B·T 256, 3 steps, no evaluation) at ep 2 over 2
# ranks, each its own node: the dry run's ep row (balanced routing: half the rows leave, 4 exchanges
# per layer and micro-batch, 1.0 MiB per rank per step) against rank 0's measured all_to_all bytes
# (the rows its routing actually sent away, plus 8 bytes of counts per layer forward): printed, and
# checked to lie within (0, 2x the dry run], the dropless bound where every row leaves.
WIDE=("${MOE[@]}" --set model.n_embd=128 --set model.n_head=4 --set model.seq_len=64 --set training.micro_batch_size=4
      --set checkpoint.interval=0 --set run.eval_interval=0 --set run.sample_interval=0)
"$BIN" --set model.n_layer=2 --set "model.vocab_size=$VOCAB" "${WIDE[@]}" --set parallel.ep=2 --dry-run --world-size 2 \
    --ranks-per-node 1 >"$WORK/dry_ep2.log" 2>&1 || { cat "$WORK/dry_ep2.log"; exit 1; }
dry=$(awk '$1 == "ep" {print $6}' "$WORK/dry_ep2.log")
# Its expert line: 2 layers x 4 experts x 3 x Fe 24 x C 128 = 73,728 routed-expert parameters, half
# run per rank; receive rows 2 x B*T 256 x top_k 2.
grep -qF "expert parallelism: ep 2, each rank runs 2 of the 4 experts per layer (36864 of the 73728 routed-expert parameters) and holds only those, its ZeRO group the dp / ep ranks with the same experts; receive buffers for ep x B*T x top_k = 1024 rows per layer" \
    "$WORK/dry_ep2.log" || { echo "dry run at ep 2: no expert line"; grep -i expert "$WORK/dry_ep2.log"; exit 1; }
grep -q "ep: all-to-alls of the MoE rows" "$WORK/dry_ep2.log" && [ "$dry" = "1.0" ] ||
    { echo "dry run at ep 2: ep row per rank '$dry' MiB, expected 1.0"; cat "$WORK/dry_ep2.log"; exit 1; }
"$MPI" --oversubscribe -np 2 "$BIN" --set model.n_layer=2 --set "model.vocab_size=$VOCAB" --set "data.train=\"$DATA/train.h5\"" \
    --set "data.val=\"$DATA/val.h5\"" --set "run.run_dir=\"$WORK/wide_ep2\"" --set metrics.enabled=false \
    --set run.max_steps=3 "${WIDE[@]}" --set parallel.ep=2 >"$WORK/wide_ep2.log" 2>&1 ||
    { echo "wide_ep2 failed"; cat "$WORK/wide_ep2.log"; exit 1; }
"$PY" - "$WORK/wide_ep2.log" <<'PY'
import re, sys
m = re.search(r'expert parallel: (\d+) all-to-alls, (\d+) bytes sent', open(sys.argv[1]).read())
assert m, 'no "expert parallel" line in the log'
calls, sent = int(m.group(1)), int(m.group(2))
per_step = sent / 3
dry = 4 * 2 * 0.5 * 256 * 2 * 128 * 4  # exchanges x layers x (P-1)/P x B*T*k x C x 4 bytes
assert calls == 3 * 2 * 5, f'{calls} all-to-alls, expected 3 steps x 2 layers x 5'
assert 0 < per_step <= 2 * dry + 2 * 8, f'{per_step} bytes per step, dry run {dry}'
print(f'ep 2: rank 0 sent {per_step:.0f} bytes per step by all-to-all (measured/dry run {per_step / dry:.3f}; dry run {dry:.0f} = {dry / 2**20:.1f} MiB)')
PY
# The same dry run's memory (the receive buffers sized for P·N·k rows included) against the
# Allocator's peak of both ranks of the real run, within 2% (the ZeRO-0 row's device total).
"$PY" - "$WORK/dry_ep2.log" "$WORK/wide_ep2.log" <<'PY'
import re, sys
dry, log = open(sys.argv[1]).read(), open(sys.argv[2]).read()
row = [l.split() for l in dry.splitlines() if re.match(r'^ +0 +[0-9]', l)][0]
predicted = float(row[row.index('|') - 1])
peaks = [float(x) for x in re.findall(r'rank [0-9]+ \(stage 0\) ([0-9.]+)', log.split('peak device memory')[1].splitlines()[0])]
assert len(peaks) == 2 and max(abs(p - predicted) / predicted for p in peaks) <= 0.02, f'dry run {predicted} MiB, peaks {peaks}'
print(f'ep 2: per-rank peak {max(peaks):.2f} MiB, dry run {predicted:.1f} MiB')
PY
echo "ep_equivalence: ep 2 and 4 (each rank holding its experts only) track ep 1 at dp 2 and 4, with ZeRO-1 and ZeRO-3 over the expert-dp groups, recomputation and resume across ep"
