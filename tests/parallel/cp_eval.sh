#!/usr/bin/env bash
# tests/parallel/cp_eval.sh — samples and HellaSwag in the loop with parallel.cp > 1 (docs/parallelism.md
# "Context parallelism"): the CP group runs each generation and scoring forward together, every rank
# its chunks of the window (GPT::logits_at hands the holder's logits row to the group, GPT::window_losses
# gathers the per-position losses in window order). Through the llmtrain binary (CPU backend, one
# OpenMP thread per rank, 6 steps of a 2-layer, 4-head model at seq_len 32, samples of 12 tokens and
# 8 HellaSwag-format items scored at steps 3 and 6): cp 2, cp 4, cp 2 with ZeRO-3 and cp 2 x tp 2
# against one process, cp 2 x dp 2 against dp 2, a Llama with document masking and restarting
# positions at cp 2 against cp 1; cp 2 x pp 2 against pp 2 (the last stage's CP rank holding the
# sampled row hands its logits to the group, GPT::logit_row); that Llama at pp 2 and cp 2 x pp 2
# against one process. Expected: the same sample text and
# the same HellaSwag acc and acc_norm, exactly. Why exact is fair: the runs' weights agree within
# 1e-6 (cp_equivalence.sh) and each logit within ~1e-6 relative; a sampled token (top-k with
# temperature 1, one uniform draw per token from the same RNG) or a chosen ending changes only where
# two candidates lie within that of each other, which a test with a fixed seed either never meets
# or always meets (it would then fail on every run, not by chance).
# Usage: cp_eval.sh <llmtrain> <mpiexec> <tiny_data_dir> <work_dir>
set -euo pipefail
BIN=$1 MPI=$2 DATA=$3 WORK=$4
VOCAB=$(cat "$DATA/vocab_size.txt")
PY=${LLMTRAIN_PYTHON:-/usr/bin/python3}
rm -rf "$WORK" && mkdir -p "$WORK"
source "$(dirname "$0")/equivalence_lib.sh"

# HellaSwag's format (data.hellaswag): context, label, four endings; the tiny dataset's words.
printf '%s\n' "The cat sat on the" 0 "mat." "sun." "river." "bird." \
    "The quick brown fox" 1 "sat." "jumps." "under." "cold." \
    "A bird sings at" 2 "stone." "the mat." "dawn." "rain." \
    "The rain falls on the" 3 "fox." "and." "sings." "house." \
    "The lazy dog" 0 "sleeps." "to." "a." "green." \
    "A small red" 1 "at." "tree." "then." "on." \
    "The cold river" 2 "sat on." "over." "falls." "in." \
    "The big dog ran to the" 3 "sun." "cat." "at." "house." >"$WORK/items.txt"
E=(--set model.n_head=4 --set model.seq_len=32 --set run.sample_interval=3 --set run.sample_tokens=12 --set run.eval_hellaswag_interval=3
   --set "data.hellaswag=\"$WORK/items.txt\"")

# same_eval <reference> <run>: the sample lines and the HellaSwag lines of the two logs alike.
same_eval() {
    "$PY" - "$WORK/$1.log" "$WORK/$2.log" "$2" <<'PY'
import re, sys
ref, run, name = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3]
def lines(log, pat): return [m.group(0) for m in re.finditer(pat, log)]
s_ref, s_run = lines(ref, r'sample at step \d+: .*'), lines(run, r'sample at step \d+: .*')
h_ref, h_run = lines(ref, r'hellaswag acc .*'), lines(run, r'hellaswag acc .*')
assert len(s_ref) == 2 and len(h_ref) == 2, f'reference: {len(s_ref)} samples, {len(h_ref)} hellaswag lines'
assert s_run == s_ref, f'{name}: samples {s_run} != {s_ref}'
assert h_run == h_ref, f'{name}: hellaswag {h_run} != {h_ref}'
print(f'{name}: samples and HellaSwag as the reference: {h_run[-1]}')
PY
}

run 1 ref "${E[@]}"
run 2 cp2 "${E[@]}" --set parallel.cp=2
same_eval ref cp2
run 4 cp4 "${E[@]}" --set parallel.cp=4
same_eval ref cp4
run 2 cp2z3 "${E[@]}" --set parallel.cp=2 --set parallel.zero_stage=3
same_eval ref cp2z3
run 4 cp2tp2 "${E[@]}" --set parallel.cp=2 --set parallel.tp=2
same_eval ref cp2tp2
run 2 dp2 "${E[@]}"
run 4 cp2dp2 "${E[@]}" --set parallel.cp=2 --set parallel.zero_stage=3
same_eval dp2 cp2dp2
DOC=(--set data.document_mask=true --set data.reset_position_ids=true)
run 1 llama_doc "${E[@]}" "${LLAMA[@]}" "${DOC[@]}"
run 2 llama_doc_cp2 "${E[@]}" "${LLAMA[@]}" "${DOC[@]}" --set parallel.cp=2
same_eval llama_doc llama_doc_cp2
PP=(--set parallel.pp=2 --set training.grad_accum_steps=2)
run 2 pp2 "${E[@]}" "${PP[@]}"
run 4 cp2pp2 "${E[@]}" "${PP[@]}" --set parallel.cp=2
same_eval pp2 cp2pp2
# The document-masked Llama through pipeline stages: every stage finds the boundaries in the windows.
run 1 llama_doc_m2 "${E[@]}" "${LLAMA[@]}" "${DOC[@]}" --set training.grad_accum_steps=2
run 2 llama_doc_pp2 "${E[@]}" "${LLAMA[@]}" "${DOC[@]}" "${PP[@]}"
same_eval llama_doc_m2 llama_doc_pp2
run 4 llama_doc_cp2pp2 "${E[@]}" "${LLAMA[@]}" "${DOC[@]}" "${PP[@]}" --set parallel.cp=2
same_eval llama_doc_m2 llama_doc_cp2pp2
echo "cp_eval: samples and HellaSwag at cp 2 and 4 (alone, ZeRO-3, tp, dp, document masking) as at cp 1, at cp 2 x pp 2 as at pp 2, document-masked at pp 2 and cp 2 x pp 2 as in one process"
