#!/usr/bin/env bash
# tests/cuda/emu_mpi_comm.sh — parallel.comm = "mpi" (MpiCudaComm: device buffers staged through
# pinned host memory and summed by MpiComm) on the emulated CUDA backend under mpirun, every
# layout against the 1-rank emulated CUDA run and against the same layout over the emulated NCCL.
#
# All runs: 3 steps of a 2-layer model at lr 3e-3 with no warm-up (a wrong gradient moves the
# losses), 4 micro-batches of 2 sequences per step (1 rank: grad_accum_steps 4; dp 2: 2; dp 4: 1),
# which read the same train windows (docs/data.md "DataLoader"; eval reads dp-dependent windows,
# so it is off). Compared per step: train loss, lr and gradient norm (losses.tsv's columns); a NaN
# or a missing row fails.
#   - mpi vs nccl, same layout: BITWISE (tolerance 0). Both add the dp ranks' gradients in rank
#     order in fp32, rounded once (MpiComm; the emulated NCCL, docs/cuda_emu.md), so every value
#     must agree to the bit; a wrong or mis-ordered staging copy does not.
#   - any layout vs 1 rank: relative 2e-6. One rank adds its micro-batches' gradients into one
#     buffer as the backward kernels go (((x1 + x2) + x3) + x4); dp 2 sums per-rank partial sums
#     ((x1 + x2) + (x3 + x4)), a reassociation of 4 fp32 terms: <= 2 roundings of 2^-24 relative
#     per gradient element (the pipeline's tied wte alike, summed once per step). AdamW's update
#     m/sqrt(v) passes a relative gradient change of ~1e-7 through as a like change of the step,
#     so after 3 steps of lr 3e-3 the losses and norms move by a few 1e-7 (observed <= 2.2e-7
#     over every layout); 2e-6 leaves a factor 10.
# Layouts (2 ranks, then 4): ZeRO-1, ZeRO-2, ZeRO-3, pp 2, ZeRO-1 with half the optimizer offloaded;
# ZeRO-2 in sub-DP groups of 2 (2x2), pp 2 x dp 2. Last, a resume across layouts: ZeRO-3 on 2
# ranks stops at step 2 and pp 2 x dp 2 resumes it to step 3; its step 3 must be the 1-rank run's
# within 2e-6.
# Usage: emu_mpi_comm.sh <llmtrain-emu> <mpiexec> <tiny_data_dir> <work_dir>
set -euo pipefail
EMU=$1 MPI=$2 DATA=$3 WORK=$4
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

run() {  # run <np> <name> [--set ...]
    local np=$1 name=$2
    shift 2
    "$MPI" --oversubscribe -np "$np" "$EMU" --set 'run.backend="cuda"' --set model.n_layer=2 --set model.n_head=2 \
        --set model.n_embd=32 --set model.seq_len=16 --set "model.vocab_size=$VOCAB" \
        --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\"" --set "run.run_dir=\"$WORK/$name\"" \
        --set metrics.enabled=false --set training.micro_batch_size=2 --set training.global_batch_size=8 \
        --set training.grad_accum_steps=0 --set optimizer.lr=3e-3 --set lr_schedule.warmup_steps=0 \
        --set 'lr_schedule.decay="constant"' \
        --set run.log_interval=1 --set run.eval_interval=0 --set run.sample_interval=0 \
        --set run.max_steps=3 --set checkpoint.interval=0 "$@" >"$WORK/$name.log" 2>&1 ||
        { echo "FAILED: $name exited $?"; cat "$WORK/$name.log"; exit 1; }
}
compare() {  # compare <reference> <run> <rel tolerance>: every row of the reference, each number
    awk -F'\t' -v tol="$3" -v name="$2" '
        FNR == 1 { next }
        NR == FNR { for (c = 3; c <= NF; c++) ref[$1 $2, c] = $c; rows[$1 $2] = NF; next }
        ($1 $2) in rows { seen[$1 $2] = 1
          for (c = 3; c <= rows[$1 $2]; c++) { a = ref[$1 $2, c]; if (a == "") continue; n++
            d = $c - a; if (d < 0) d = -d; s = a < 0 ? -a : a; r = s > 0 ? d / s : d
            if ($c ~ /nan|inf/ || (tol == 0 ? $c != a : !(r <= tol))) { bad++; printf "%s step %s %s col %d: %s vs %s (rel %.2e)\n", name, $1, $2, c, $c, a, r } } }
        END { for (k in rows) if (!(k in seen)) { bad++; print name ": no row " k }
              if (n < 9 || bad) { print name ": " (bad + 0) " of " n " values beyond " tol; exit 1 }
              print name ": " n " values within " tol }' "$WORK/$1/losses.tsv" "$WORK/$2/losses.tsv"
}
MPI_COMM=(--set 'parallel.comm="mpi"')
NCCL_COMM=(--set 'parallel.comm="nccl"')

run 1 ref
run 1 ref_mpi "${MPI_COMM[@]}"  # one rank: no collective moves data, so bitwise the same
compare ref ref_mpi 0
for z in 1 2 3; do
    run 2 "z${z}_mpi" "${MPI_COMM[@]}" --set parallel.zero_stage=$z
    compare ref "z${z}_mpi" 2e-6
done
run 2 z3_nccl "${NCCL_COMM[@]}" --set parallel.zero_stage=3
compare z3_nccl z3_mpi 0
run 2 pp2_mpi "${MPI_COMM[@]}" --set parallel.pp=2
compare ref pp2_mpi 2e-6
run 2 pp2_nccl "${NCCL_COMM[@]}" --set parallel.pp=2
compare pp2_nccl pp2_mpi 0
run 2 off_mpi "${MPI_COMM[@]}" --set parallel.zero_stage=1 --set 'optimizer.offload="cpu"' \
    --set optimizer.offload_fraction=0.5 --set optimizer.offload_chunk_mb=0.01
compare ref off_mpi 2e-6
compare z1_mpi off_mpi 0  # the offloaded half steps bitwise like the device (docs/parallelism.md)
export CUDA_EMU_WORKERS=1  # 4 ranks on 2 cores
run 4 sub2x2_mpi "${MPI_COMM[@]}" --set parallel.zero_stage=2 --set parallel.zero_group_size=2
compare ref sub2x2_mpi 2e-6
run 4 sub2x2_nccl "${NCCL_COMM[@]}" --set parallel.zero_stage=2 --set parallel.zero_group_size=2
compare sub2x2_nccl sub2x2_mpi 0
run 4 pp2dp2_mpi "${MPI_COMM[@]}" --set parallel.pp=2 --set parallel.zero_stage=1
compare ref pp2dp2_mpi 2e-6
# Resume across layouts: ZeRO-3 on 2 ranks to step 2 (its end-of-run checkpoint), then pp 2 x dp 2
# on 4 ranks to step 3 in the same run directory (losses.tsv appends; the lr is constant).
export CUDA_EMU_WORKERS=2
run 2 resume_mpi "${MPI_COMM[@]}" --set parallel.zero_stage=3 --set run.max_steps=2
export CUDA_EMU_WORKERS=1
run 4 resume_mpi "${MPI_COMM[@]}" --set parallel.pp=2 --set parallel.zero_stage=1
[ "$(grep -c $'^1\ttrain\t' "$WORK/resume_mpi/losses.tsv")" = 1 ] ||
    { echo "FAILED: resume_mpi did not resume from step 2"; exit 1; }
compare ref resume_mpi 2e-6
echo "emu_mpi_comm: passed"
