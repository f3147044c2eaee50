#!/usr/bin/env bash
# tests/cuda/emu_hung.sh — a hung collective in training ends the job (docs/design.md "Host waits
# and the watchdog"): llmtrain-emu trains on 2 emulated ranks under mpirun with
# parallel.timeout_s = 1 while rank 1 never posts an NCCL call (CUDA_EMU_NCCL_MUTE=1, see
# docs/cuda_emu.md). Rank 0's first host wait must fail within the timeout plus start-up, naming
# the operation and the group, and the job must exit non-zero. Cases: ZeRO-1 (the zero group [0, 1]
# hangs at start-up, in the all-gather of the parameters each rank initialised for its own shard:
# docs/checkpoints.md "By shard") and plain DP (the gradient-norm read after the replica group's
# all-reduce). And a pipeline (pp 2, 3 micro-batches a step): stage 0's first host wait is
# the backend's own, its encoder backward's wait for a bucket buffer whose previous kernels sit behind
# the gradient receive from the muted stage 1; it polls under the links' watchdog
# (Ops::set_host_waiter) and must name the wait and the link. A wait without a deadline hangs
# instead: ctest's TIMEOUT then fails the test.
# Usage: emu_hung.sh <llmtrain-emu> <mpiexec> <tiny_data_dir> <work_dir>
set -uo pipefail
EMU=$1 MPI=$2 DATA=$3 WORK=$4
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

hung() {  # hung <name> <the timed-out wait> <expected text> [--set ...]
    local name=$1 wait=$2 want=$3
    shift 3
    local t0=$SECONDS
    CUDA_EMU_NCCL_MUTE=1 "$MPI" --oversubscribe -np 2 "$EMU" --set 'run.backend="cuda"' --set model.n_layer=2 \
        --set model.n_head=2 --set model.n_embd=32 --set model.seq_len=16 --set "model.vocab_size=$VOCAB" \
        --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\"" --set "run.run_dir=\"$WORK/$name\"" \
        --set metrics.enabled=false --set training.micro_batch_size=2 --set run.max_steps=3 \
        --set checkpoint.interval=0 --set run.eval_interval=0 --set run.sample_interval=0 \
        --set parallel.timeout_s=1 "$@" >"$WORK/$name.log" 2>&1
    local rc=$? took=$((SECONDS - t0))
    if [ "$rc" -eq 0 ]; then echo "FAILED: $name exited 0 although rank 1 never posted"; cat "$WORK/$name.log"; exit 1; fi
    for text in "$wait: timed out after 1 s" "$want" "ncclCommAbort"; do
        grep -qF "$text" "$WORK/$name.log" || { echo "FAILED: $name: no \"$text\" in the log"; cat "$WORK/$name.log"; exit 1; }
    done
    echo "$name: exit $rc after ${took} s: $(grep -m1 -F 'timed out' "$WORK/$name.log")"
}

hung zero1 "gathering the loaded parameters" "zero group (NcclComm on world ranks [0, 1], newest operation all_gather" --set parallel.zero_stage=1
hung dp "reading the gradient norm" "replica group (NcclComm on world ranks [0, 1], newest operation all_reduce" --set parallel.zero_stage=0
hung pp "pipeline stage 0: the encoder backward's bucket buffer" "pipeline stage 1->0 gradients (NcclComm on world ranks [0, 1]" \
    --set parallel.pp=2 --set training.global_batch_size=6
echo "emu_hung: passed"
