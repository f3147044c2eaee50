#!/usr/bin/env bash
# tests/parallel/cp_equivalence.sh — parallel.cp (context parallelism, docs/parallelism.md "Context
# parallelism") through the llmtrain binary (CPU backend, one OpenMP thread per rank, 6 steps of a
# 2-layer, 4-head model at seq_len 16) against cp = 1 at the same global batch: cp 2 and cp 4
# against one process; cp 2 x dp 2 against dp 2; cp 2 with ZeRO-3 and cp 2 x tp 2 against one
# process; a Llama (grouped-query attention, rotary positions at the window's positions) with
# document masking and positions restarting per document at cp 2 against the same at cp 1, 4 layers
# with the first 2 recomputed at cp 2 against cp 1 (and for both, the log's 'context parallel
# backward' count of q|k|v windows gathered a layer ahead, still there, gathered when needed). The
# cp 2 run's step-3 checkpoint resumed at cp 1 and cp 4 continues the unbroken run. With pipeline
# stages (2 micro-batches a step, 1F1B): cp 2 x pp 2 against pp 2, GPT-2 and a Llama (rotary
# positions on both stages) with every layer recomputed; its step-3 checkpoint resumed in one
# process, and pp 2's resumed at cp 2 x pp 2, continue pp 2's run. The document-masked Llama at
# pp 2 and at cp 2 x pp 2 against one process.
# Tolerances: losses 1e-5 relative, weights 1e-4 absolute (the c_attn key bias excepted), as
# tp_equivalence.sh and for the same reason: the ranks' partial d k|v are summed over the CP group
# and each rank's parameter gradients over its Tw/cp tokens are summed by the gradient all-reduce,
# both reassociating fp32 sums (measured: see the printed figures).
# Also: a seq_len that 2 x cp does not divide is exit 2 naming the key (samples and HellaSwag at
# cp > 1: cp_eval.sh);
# llmtrain-plan plans a config at parallel.cp = 2 (exit 0, `cp = 2` in its TOML; tests/app/test_plan_cp.cpp
# checks the planner's cp axis);
# --dry-run at cp against the real run's Allocator peak of every rank (2%), and the per-rank peaks
# at cp 1, 2 and 4 printed (activations ∝ T/cp); at cp 2 x pp 2 each stage's row against its ranks.
# Usage: cp_equivalence.sh <llmtrain> <mpiexec> <tiny_data_dir> <work_dir>
set -euo pipefail
BIN=$1 MPI=$2 DATA=$3 WORK=$4
VOCAB=$(cat "$DATA/vocab_size.txt")
PY=${LLMTRAIN_PYTHON:-/usr/bin/python3}
rm -rf "$WORK" && mkdir -p "$WORK"
source "$(dirname "$0")/equivalence_lib.sh"

H4=(--set model.n_head=4 --set checkpoint.interval=3 --set run.sample_interval=0)
LT=1e-5 WT=1e-4
# Refusals: exit 2 naming the key, nothing written.
set +e
"$MPI" --oversubscribe -np 2 "$BIN" --set parallel.cp=2 --set model.seq_len=18 --set "run.run_dir=\"$WORK/bad_t\"" \
    >"$WORK/bad_t.log" 2>&1
code_t=$?
set -e
[ $code_t = 2 ] && [ ! -e "$WORK/bad_t" ] && grep -q "parallel.cp: expected model.seq_len = 18 to be a multiple of 2 x cp = 4" \
    "$WORK/bad_t.log" || { echo "bad_t: exit $code_t"; cat "$WORK/bad_t.log"; exit 1; }
set +e
"$(dirname "$BIN")/llmtrain-plan" --set parallel.cp=2 --set run.sample_interval=0 --world-size 4 --device-memory 80GiB --device-tflops 100 --cp 2 >"$WORK/plan.log" 2>&1
code_p=$?
set -e
[ $code_p = 0 ] && grep -q "^  cp = 2$" "$WORK/plan.log" ||
    { echo "plan at cp 2: exit $code_p"; cat "$WORK/plan.log"; exit 1; }

run 1 ref "${H4[@]}"
run 2 cp2 "${H4[@]}" --set parallel.cp=2
compare ref cp2 $LT 0 $WT
grep -q "(1 data x cp 2)" "$WORK/cp2.log" || { echo "cp2: no CP layout in the start-up log"; exit 1; }
# The backward (model/gpt_cp.cpp) finds layer 1's q|k|v window still there from the forward and
# gathers layer 0's beside layer 1's attention backward: of 12 layer backwards (6 steps x 2 layers)
# 6 gathered a layer ahead, 6 without a gather, none waiting for a gather started when needed.
grep -q "context parallel backward: 12 layers, q|k|v windows gathered a layer ahead 6 (.*), still there from the forward 6, gathered when needed 0" \
    "$WORK/cp2.log" || { echo "cp2: backward gathers"; grep "context parallel" "$WORK/cp2.log"; exit 1; }
run 4 cp4 "${H4[@]}" --set parallel.cp=4
compare ref cp4 $LT 0 $WT
run 2 dp2 "${H4[@]}"
run 4 cp2dp2 "${H4[@]}" --set parallel.cp=2
compare dp2 cp2dp2 $LT 0 $WT
grep -q "x dp 2 = global_batch_size 4 " "$WORK/cp2dp2.log" || { echo "cp2dp2: global batch not 2 x dp 2"; exit 1; }
run 2 cp2z3 "${H4[@]}" --set parallel.cp=2 --set parallel.zero_stage=3
compare ref cp2z3 $LT 0 $WT
run 4 cp2tp2 "${H4[@]}" --set parallel.cp=2 --set parallel.tp=2
compare ref cp2tp2 $LT 0 $WT
DOC=(--set data.document_mask=true --set data.reset_position_ids=true)
run 1 llama_doc "${H4[@]}" "${LLAMA[@]}" "${DOC[@]}"
run 2 llama_doc_cp2 "${H4[@]}" "${LLAMA[@]}" "${DOC[@]}" --set parallel.cp=2
compare llama_doc llama_doc_cp2 $LT 0 $WT
# 4 layers, the first 2 recomputed: their windows are still there from the recomputation, as the top
# layer's from the forward; layer 2's is gathered beside layer 3's attention backward.
RC=(--set model.n_layer=4 --set activation_checkpoint.ratio=0.5)
run 1 recompute "${H4[@]}" "${RC[@]}"
run 2 recompute_cp2 "${H4[@]}" "${RC[@]}" --set parallel.cp=2
compare recompute recompute_cp2 $LT 0 $WT
grep -q "context parallel backward: 24 layers, q|k|v windows gathered a layer ahead 6 (.*), still there from the forward 18, gathered when needed 0" \
    "$WORK/recompute_cp2.log" || { echo "recompute_cp2: backward gathers"; grep "context parallel" "$WORK/recompute_cp2.log"; exit 1; }
# Training goes on from the cp 2 step-3 checkpoint at cp 1 and cp 4 as the unbroken run did.
CK=(--set "checkpoint.resume=\"$WORK/cp2/checkpoints/step_3\"")
run 1 cp2_then_1 "${H4[@]}" "${CK[@]}"
compare ref cp2_then_1 $LT 3 $WT
run 4 cp2_then_4 "${H4[@]}" "${CK[@]}" --set parallel.cp=4
compare ref cp2_then_4 $LT 3 $WT
# cp x pp: each stage's CP group holds its rows of the windows; the stages send (B,T/cp,C) between
# the same CP index. pp 2 is one process's run within 1e-6 (pipeline_equivalence.sh).
PP=(--set parallel.pp=2 --set training.grad_accum_steps=2)
CKL=(--set "activation_checkpoint.layers_per_stage=[1, 1]")
run 2 pp2 "${H4[@]}" "${PP[@]}"
run 4 cp2pp2 "${H4[@]}" "${PP[@]}" --set parallel.cp=2
compare pp2 cp2pp2 $LT 0 $WT
run 2 llama_pp2 "${H4[@]}" "${LLAMA[@]}" "${PP[@]}"
run 4 llama_cp2pp2 "${H4[@]}" "${LLAMA[@]}" "${PP[@]}" "${CKL[@]}" --set parallel.cp=2
compare llama_pp2 llama_cp2pp2 $LT 0 $WT
grep -q "stage 1: layers \[1, 2), 1 recomputed" "$WORK/llama_cp2pp2.log" || { echo "llama_cp2pp2: not recomputed"; exit 1; }
# Document masking with positions restarting per document through the stages: every stage finds
# the boundaries in its windows' ids. pp 2 against one process (pipeline_equivalence.sh's 1e-5
# and 1e-6), and cp 2 x pp 2 against it (LT, WT).
run 1 llama_doc_m2 "${H4[@]}" "${LLAMA[@]}" "${DOC[@]}" --set training.grad_accum_steps=2
run 2 llama_doc_pp2 "${H4[@]}" "${LLAMA[@]}" "${DOC[@]}" "${PP[@]}"
compare llama_doc_m2 llama_doc_pp2 1e-5
run 4 llama_doc_cp2pp2 "${H4[@]}" "${LLAMA[@]}" "${DOC[@]}" "${PP[@]}" --set parallel.cp=2
compare llama_doc_m2 llama_doc_cp2pp2 $LT 0 $WT
run 1 cp2pp2_then_1 "${H4[@]}" --set training.grad_accum_steps=2 --set "checkpoint.resume=\"$WORK/cp2pp2/checkpoints/step_3\""
compare pp2 cp2pp2_then_1 $LT 3 $WT
run 4 pp2_then_cp2pp2 "${H4[@]}" "${PP[@]}" --set parallel.cp=2 --set "checkpoint.resume=\"$WORK/pp2/checkpoints/step_3\""
compare pp2 pp2_then_cp2pp2 $LT 3 $WT

# --dry-run --world-size N at cp N (device total of the run's ZeRO-0 row) against the Allocator's
# peak of every rank of the real run, 2 steps of a wider, longer model (n_embd 128, seq_len 256),
# within 2%; the peaks by cp printed.
mem() {  # mem <cp> [<pp>, default 1; with 2 micro-batches a step]
    local cp=$1 pp=${2:-1} name=mem$1x${2:-1}
    local S=(--set model.n_layer=2 --set model.n_head=4 --set model.n_embd=128 --set model.seq_len=256
             --set "model.vocab_size=$VOCAB" --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\""
             --set metrics.enabled=false --set training.micro_batch_size=2 --set run.eval_interval=0
             --set run.sample_interval=0 --set checkpoint.interval=0 --set run.max_steps=2 --set parallel.cp="$cp"
             --set parallel.pp="$pp" --set training.grad_accum_steps="$pp")
    "$BIN" "${S[@]}" --dry-run --world-size $((cp * pp)) >"$WORK/$name.dry" 2>&1 || { echo "FAILED: dry $name"; cat "$WORK/$name.dry"; exit 1; }
    "$MPI" --oversubscribe -np $((cp * pp)) "$BIN" "${S[@]}" --set "run.run_dir=\"$WORK/$name\"" >"$WORK/$name.log" 2>&1 ||
        { echo "FAILED: $name"; cat "$WORK/$name.log"; exit 1; }
    "$PY" - "$WORK/$name.dry" "$WORK/$name.log" "$cp" "$pp" <<'PY'
import re, sys
dry, log, cp, pp = open(sys.argv[1]).read(), open(sys.argv[2]).read(), int(sys.argv[3]), int(sys.argv[4])
# The ZeRO-0 row (with a pipeline one per stage: zero, pp_stage, ...): its device total.
predicted = {}
for row in [l.split() for l in dry.splitlines() if re.match(r'^ +0 +[0-9]', l)]:
    predicted.setdefault(int(row[1]) if pp > 1 else 0, float(row[row.index('|') - 1]))
peaks = [(int(s), float(x)) for s, x in
         re.findall(r'rank [0-9]+ \(stage ([0-9]+)\) ([0-9.]+)', log.split('peak device memory')[1].splitlines()[0])]
assert len(peaks) == cp * pp and len(predicted) == pp, f'cp {cp} pp {pp}: {len(peaks)} peaks, {len(predicted)} dry rows'
worst = max(abs(p - predicted[s]) / predicted[s] for s, p in peaks)
assert worst <= 0.02, f'cp {cp} pp {pp}: dry run {predicted} MiB vs the ranks\' peaks {peaks}'
for s in sorted(predicted):
    mine = [p for t, p in peaks if t == s]
    off = max(abs(p - predicted[s]) / predicted[s] for p in mine)
    print(f'cp {cp} pp {pp} stage {s}: per-rank peak {max(mine):.2f} MiB (dry run {predicted[s]:.1f} MiB, within {off:.2%})')
PY
}
mem 1
mem 2
mem 4
mem 2 2
echo "cp_equivalence: cp 2 and 4 track cp 1 alone and with dp, ZeRO-3, tp, pp, document masking (with pp too) and resume"
