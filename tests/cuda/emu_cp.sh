#!/usr/bin/env bash
# tests/cuda/emu_cp.sh — parallel.cp on the CUDA backend under cuda_emu: llmtrain-emu (each layer's
# q|k|v all-gathered and its gradient reduce-scattered over NcclComm on the emulated NCCL, the
# attention of each rank's rows on the cuBLAS path, model/gpt_cp.cpp) trains 3 steps under mpirun,
# against the CPU llmtrain in one process with the same data and seed (emu_lib.sh's settings,
# samples off but in one case). Tolerances as emu_tp.sh's: fp32 losses within 1e-4 relative and
# weights within compare_weights.py's; bf16 losses within 5e-3. Cases: cp 2 and cp 4 (fp32), cp 2 and
# cp 4 in bf16, a Llama (grouped-query attention, rotary positions at window positions) with document masking at
# cp 2, cp 2 x dp 2 at ZeRO-1 on 4 emulated ranks against 2 CPU ranks, and cp 2 x pp 2 (2
# micro-batches a step, 1F1B; each CP index's stages linked over NCCL beside the CP groups) for
# GPT-2 (learned positions on stage 0) and a Llama (rotary positions on both stages), every layer
# recomputed, on 4 emulated ranks against one CPU process, and the document-masked Llama at cp 2 x pp 2. Samples at cp 2 (the holder's logits row
# all-reduced over the emulated NCCL, GPT::logit_row): the CPU process's 12-token samples exactly
# (as tests/parallel/cp_eval.sh argues: logits within rounding, a token changes only at a near tie).
# Usage: emu_cp.sh <llmtrain> <llmtrain-emu> <mpiexec> <tiny_data_dir> <work_dir>
set -euo pipefail
CPU=$1 EMU=$2 MPI=$3 DATA=$4 WORK=$5
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

# shellcheck source=tests/cuda/emu_lib.sh
source "$(dirname "$0")/emu_lib.sh"
NS=(--set run.sample_interval=0)
CUDA=(--set 'run.backend="cuda"' --set parallel.cp=2 "${NS[@]}")
LLAMA=(--set 'model.arch="llama"' --set model.n_head=4 --set model.n_kv_head=2 --set model.intermediate_size=64
       --set data.document_mask=true --set data.reset_position_ids=true)

run "$CPU" 1 cpu "${NS[@]}"
run "$EMU" 2 cp2 "${CUDA[@]}"
grep -q "(1 data x cp 2)" "$WORK/cp2.log" || { echo "cp2: no CP layout in the start-up log"; exit 1; }
compare cpu cp2 1e-4
weights cpu cp2
run "$EMU" 2 cp2_bf16 "${CUDA[@]}" --set 'training.precision="bf16"'
compare cpu cp2_bf16 5e-3
# cp 4 on 4 emulated ranks: seq_len 16 in 8 chunks of 2 rows, rank i holding chunks i and 7-i.
CUDA4=(--set 'run.backend="cuda"' --set parallel.cp=4 "${NS[@]}")
run "$EMU" 4 cp4 "${CUDA4[@]}"
grep -q "(1 data x cp 4)" "$WORK/cp4.log" || { echo "cp4: no CP layout in the start-up log"; exit 1; }
compare cpu cp4 1e-4
weights cpu cp4
run "$EMU" 4 cp4_bf16 "${CUDA4[@]}" --set 'training.precision="bf16"'
compare cpu cp4_bf16 5e-3
run "$CPU" 1 cpu_llama "${NS[@]}" "${LLAMA[@]}"
run "$EMU" 2 cp2_llama "${CUDA[@]}" "${LLAMA[@]}"
compare cpu_llama cp2_llama 1e-4
weights cpu_llama cp2_llama
run "$CPU" 2 cpu_dp2 "${NS[@]}"
run "$EMU" 4 cp2_dp2_z1 "${CUDA[@]}" --set parallel.zero_stage=1
compare cpu_dp2 cp2_dp2_z1 1e-4
weights cpu_dp2 cp2_dp2_z1
PP=(--set training.grad_accum_steps=2)
PP2=(--set parallel.pp=2 --set "activation_checkpoint.layers_per_stage=[1, 1]")
GQA=(--set 'model.arch="llama"' --set model.n_head=4 --set model.n_kv_head=2 --set model.intermediate_size=64)
run "$CPU" 1 cpu_a2 "${NS[@]}" "${PP[@]}"
run "$EMU" 4 cp2_pp2 "${CUDA[@]}" "${PP[@]}" "${PP2[@]}"
compare cpu_a2 cp2_pp2 1e-4
weights cpu_a2 cp2_pp2
run "$CPU" 1 cpu_gqa_a2 "${NS[@]}" "${GQA[@]}" "${PP[@]}"
run "$EMU" 4 cp2_pp2_gqa "${CUDA[@]}" "${GQA[@]}" "${PP[@]}" "${PP2[@]}"
compare cpu_gqa_a2 cp2_pp2_gqa 1e-4
weights cpu_gqa_a2 cp2_pp2_gqa
# Document masking with restarting positions through cp 2 x pp 2 (every stage builds the window's
# documents itself, model/gpt_documents.cpp)
run "$CPU" 1 cpu_llama_a2 "${NS[@]}" "${LLAMA[@]}" "${PP[@]}"
run "$EMU" 4 cp2_pp2_docs "${CUDA[@]}" "${LLAMA[@]}" "${PP[@]}" "${PP2[@]}"
compare cpu_llama_a2 cp2_pp2_docs 1e-4
weights cpu_llama_a2 cp2_pp2_docs
S=(--set run.sample_tokens=12)
run "$CPU" 1 cpu_samples "${S[@]}"
run "$EMU" 2 cp2_samples --set 'run.backend="cuda"' --set parallel.cp=2 "${S[@]}"
grep "sample at" "$WORK/cpu_samples.log" >"$WORK/cpu_samples.txt"
grep "sample at" "$WORK/cp2_samples.log" >"$WORK/cp2_samples.txt"
[ -s "$WORK/cpu_samples.txt" ] && cmp -s "$WORK/cpu_samples.txt" "$WORK/cp2_samples.txt" ||
    { echo "cp2_samples: not the CPU's samples"; cat "$WORK/cpu_samples.txt" "$WORK/cp2_samples.txt"; exit 1; }
echo "cp2_samples: $(wc -l <"$WORK/cp2_samples.txt") samples as the CPU's: $(tail -1 "$WORK/cp2_samples.txt")"
echo "emu_cp: all comparisons passed"
