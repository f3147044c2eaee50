#!/usr/bin/env bash
# tests/gpu/plan_profile.sh — llmtrain-plan --profile reaches the CUDA backend (issue 18: on the GPU
# it used to exit "this build has no CUDA backend"). Two checks:
#   1. PLAN (the nvcc build's llmtrain-plan, or "-" to skip) with run.backend = "cuda": on a machine
#      with a GPU a plan whose layer times were measured on the cuda backend; without one the CUDA
#      backend's own refusal, "no CUDA device is present" (exit 1), never "this build has no CUDA backend".
#   2. EMU (llmtrain-plan-emu, the planner on the emulated backend, or "-") times CONFIG's layers on
#      the emulated device end to end at a tiny shape (vocab 320, seq_len 64, micro-batch 1, one timed
#      pass) and prints a plan whose times name the cuda backend.
#
# Usage: plan_profile.sh <llmtrain-plan | -> <llmtrain-plan-emu | -> <config.toml> <work dir>
set -euo pipefail
PLAN=$1 EMU=$2 CONFIG=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK"
args=(--config "$CONFIG" --set 'run.backend="cuda"' --world-size 2 --device-memory 1GiB --profile --reps 1)
if [ "$PLAN" != - ]; then
    rc=0
    "$PLAN" "${args[@]}" >"$WORK/plan.txt" 2>&1 || rc=$?
    if [ $rc = 0 ] && grep -q "^times measured on the cuda backend" "$WORK/plan.txt"; then
        echo "llmtrain-plan --profile: layers timed on the GPU"
    elif [ $rc = 1 ] && grep -q "no CUDA device is present" "$WORK/plan.txt"; then
        echo "llmtrain-plan --profile: the CUDA backend is linked (it reports that this machine has no GPU)"
    else
        echo "FAILED: llmtrain-plan --profile with run.backend = \"cuda\" exited $rc:"; cat "$WORK/plan.txt"; exit 1
    fi
fi
if [ "$EMU" != - ]; then
    "$EMU" "${args[@]}" --set model.vocab_size=320 --set model.seq_len=64 --set training.micro_batch_size=1 \
        >"$WORK/plan_emu.txt" 2>&1 || { echo "FAILED: llmtrain-plan-emu exited $?:"; cat "$WORK/plan_emu.txt"; exit 1; }
    if ! grep -q "^times measured on the cuda backend (fp32), micro-batch 1 x 64" "$WORK/plan_emu.txt" ||
        ! grep -q "^best: " "$WORK/plan_emu.txt"; then
        echo "FAILED: llmtrain-plan-emu printed no plan from cuda-measured times:"; cat "$WORK/plan_emu.txt"; exit 1
    fi
    grep "^times\|^best" "$WORK/plan_emu.txt"
fi
