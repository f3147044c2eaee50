#!/usr/bin/env bash
# tests/cuda/emu_zero.sh — ZeRO on the CUDA backend under cuda_emu: llmtrain-emu (NcclComm over the
# emulated NCCL, deferred streams, the comm stream ordered by events) trains 3 steps under mpirun
# and is compared with the CPU llmtrain's plain data parallelism on the same data and seed.
# Cases: ZeRO-3 on 2 ranks in fp32 under the three thread orders (forward, reverse, random) with a
# random block order — a missing event wait or barrier shows as NaN or a different loss — then
# ZeRO-2 on 2 ranks in bf16. Tolerances (relative, per train/val loss), as in emu_train.sh:
# fp32 1e-4 (the emulated kernels sum in another order than the CPU backend's), bf16 5e-3 (bf16
# weights and activations). Then the offloaded optimizer (docs/training.md "Optimizer offload")
# against the same emulated run without it, bitwise (tolerance 0): ZeRO-2 bf16 at offload_fraction
# 0.5, and ZeRO-0 bf16 with stochastic rounding at fraction 1. Last, a 2-stage pipeline (activations
# and gradients over NCCL send/recv, 3 micro-batches per step) against one CPU process, fp32 1e-4,
# with the default split and with pipeline.plan = "auto" (layers timed on the emulated backend). Usage: emu_zero.sh <llmtrain> <llmtrain-emu> <mpiexec> <tiny_data_dir> <work_dir>
set -euo pipefail
CPU=$1 EMU=$2 MPI=$3 DATA=$4 WORK=$5
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

run() {  # run <binary> <np> <name> [--set ...]
    local bin=$1 np=$2 name=$3
    shift 3
    "$MPI" --oversubscribe -np "$np" "$bin" --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 \
        --set model.seq_len=16 --set "model.vocab_size=$VOCAB" --set "data.train=\"$DATA/train.h5\"" \
        --set "data.val=\"$DATA/val.h5\"" --set "run.run_dir=\"$WORK/$name\"" --set metrics.enabled=false \
        --set training.micro_batch_size=2 --set run.log_interval=1 --set run.eval_interval=2 --set run.eval_steps=1 \
        --set run.sample_interval=2 --set run.sample_tokens=3 --set run.max_steps=3 --set checkpoint.interval=0 \
        "$@" >"$WORK/$name.log" 2>&1 || { echo "FAILED: $name exited $?"; cat "$WORK/$name.log"; exit 1; }
}
compare() {  # compare <reference> <run> <rel tolerance>
    awk -F'\t' -v tol="$3" -v name="$2" '
        FNR == 1 { next }
        NR == FNR { ref[$1 $2] = $3; next }
        { n++; d = $3 - ref[$1 $2]; if (d < 0) d = -d; r = d / ref[$1 $2];
          if (!(r <= tol)) { bad++; printf "%s step %s %s: %s vs %s (rel %.2e)\n", name, $1, $2, $3, ref[$1 $2], r } }
        END { if (n < 5 || bad) { print name ": " (bad + 0) " of " n " losses beyond " tol; exit 1 }
              print name ": " n " losses within " tol }' "$WORK/$1/losses.tsv" "$WORK/$2/losses.tsv"
}

run "$CPU" 2 cpu_dp
for order in forward reverse random:5; do
    CUDA_EMU_THREAD_ORDER=$order CUDA_EMU_BLOCK_ORDER=random:3 \
        run "$EMU" 2 "z3_${order%%:*}" --set 'run.backend="cuda"' --set parallel.zero_stage=3
    compare cpu_dp "z3_${order%%:*}" 1e-4
done
run "$EMU" 2 z2_bf16 --set 'run.backend="cuda"' --set 'training.precision="bf16"' --set parallel.zero_stage=2
compare cpu_dp z2_bf16 5e-3
OFF=(--set 'optimizer.offload="cpu"' --set optimizer.offload_chunk_mb=0.01)
run "$EMU" 2 z2_bf16_off --set 'run.backend="cuda"' --set 'training.precision="bf16"' --set parallel.zero_stage=2 \
    "${OFF[@]}" --set optimizer.offload_fraction=0.5
compare z2_bf16 z2_bf16_off 0
SR=(--set 'run.backend="cuda"' --set 'training.precision="bf16"' --set training.stochastic_rounding=true)
run "$EMU" 2 dp_bf16_sr "${SR[@]}"
run "$EMU" 2 dp_bf16_sr_off "${SR[@]}" "${OFF[@]}"
compare dp_bf16_sr dp_bf16_sr_off 0
run "$CPU" 1 cpu_m3 --set training.grad_accum_steps=3
run "$EMU" 2 pp2_emu --set 'run.backend="cuda"' --set parallel.pp=2 --set training.grad_accum_steps=3
compare cpu_m3 pp2_emu 1e-4
# pipeline.plan = "auto": rank 0 times the layers on the emulated CUDA backend and plans the split;
# any split and recomputation give the same losses, so the reference is the same.
run "$EMU" 2 pp2_auto_emu --set 'run.backend="cuda"' --set parallel.pp=2 --set training.grad_accum_steps=3 \
    --set 'pipeline.plan="auto"' --set pipeline.plan_memory_gib=1
grep -q "best: pp 2 x dp 1" "$WORK/pp2_auto_emu.log" || { echo "FAILED: no plan in pp2_auto_emu.log"; exit 1; }
compare cpu_m3 pp2_auto_emu 1e-4
echo "emu_zero: passed"
