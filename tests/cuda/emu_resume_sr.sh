#!/usr/bin/env bash
# tests/cuda/emu_resume_sr.sh — exact resume with training.stochastic_rounding on the emulated CUDA
# backend (llmtrain-emu): bf16 params rounded stochastically from the fp32 master weights by a hash
# of (step, flat index). A checkpoint holds the master weights and the step; the resume re-rounds
# them with the last step's bits (docs/checkpoints.md "Checkpoints"), so a resumed run is the unbroken
# run, bit for bit (tolerance 0: same data, same kernels, same order of every sum).
# Cases, each 20 steps unbroken vs a resume at step 10 from the unbroken run's own checkpoint:
#   1. one rank: train losses, lr and grad norms of steps 11-20, and the step-20 checkpoint's
#      weights (model.h5) and optimizer state (optim_0.h5), every bit;
#   2. 2 ranks ZeRO-1 checkpointing, resumed on 2 ranks as ZeRO-2 with half of each shard's optimizer
#      state offloaded to the host (the host part re-rounded too): losses and model.h5. (ZeRO-0 would
#      add the gradient norm's squares in another order: its last bits differ, the losses do not.)
# Without the re-rounding the resumed params are the master weights rounded to nearest and step 11
# differs already. Usage: emu_resume_sr.sh <llmtrain-emu> <mpiexec> <tiny_data_dir> <work_dir>
set -euo pipefail
EMU=$1 MPI=$2 DATA=$3 WORK=$4
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

run() {  # run <np> <name> [--set ...]: a tiny model (2 layers, width 32, 16 tokens), bf16 with SR
    local np=$1 name=$2
    shift 2
    "$MPI" --oversubscribe -np "$np" "$EMU" --set 'run.backend="cuda"' --set 'training.precision="bf16"' \
        --set training.stochastic_rounding=true --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 \
        --set model.seq_len=16 --set "model.vocab_size=$VOCAB" --set "data.train=\"$DATA/train.h5\"" \
        --set "data.val=\"$DATA/val.h5\"" --set "run.run_dir=\"$WORK/$name\"" --set metrics.enabled=false \
        --set training.micro_batch_size=2 --set run.log_interval=1 --set run.eval_interval=0 \
        --set run.sample_interval=0 --set run.max_steps=20 --set checkpoint.interval=10 --set checkpoint.keep_last=0 \
        --set lr_schedule.warmup_steps=2 "$@" >"$WORK/$name.log" 2>&1 ||
        { echo "FAILED: $name exited $?"; cat "$WORK/$name.log"; exit 1; }
}

# same_losses <unbroken> <resumed>: the train lines of steps 11-20 (loss, lr, grad norm), as text.
same_losses() {
    local a b
    a=$(awk -F'\t' '$2 == "train" && $1 > 10' "$WORK/$1/losses.tsv")
    b=$(awk -F'\t' '$2 == "train" && $1 > 10' "$WORK/$2/losses.tsv")
    if [[ $(wc -l <<<"$a") -ne 10 || "$a" != "$b" ]]; then
        echo "$2: steps 11-20 differ from $1's:"
        diff <(echo "$a") <(echo "$b") || true
        exit 1
    fi
    echo "$2: train losses, lr and grad norms of steps 11-20 equal $1's bit for bit"
}

# same_files <unbroken> <resumed> <file>...: every dataset of the step-20 checkpoints' files, bitwise.
same_files() {
    "${LLMTRAIN_PYTHON:-/usr/bin/python3}" - "$WORK/$1/checkpoints/step_20" "$WORK/$2/checkpoints/step_20" "${@:3}" <<'EOF'
import sys, h5py, numpy as np
a_dir, b_dir, files = sys.argv[1], sys.argv[2], sys.argv[3:]
bad, count = [], 0
for name in files:
    def read(d):
        out = {}
        with h5py.File(f"{d}/{name}", "r") as f:
            f.visititems(lambda k, v: out.__setitem__(k, v[()]) if isinstance(v, h5py.Dataset) else None)
        return out
    a, b = read(a_dir), read(b_dir)
    if sorted(a) != sorted(b):
        bad.append(f"{name}: datasets differ")
    for k in sorted(set(a) & set(b)):
        count += 1
        x, y = np.ascontiguousarray(a[k]), np.ascontiguousarray(b[k])
        if x.shape != y.shape or x.tobytes() != y.tobytes():
            bad.append(f"{name}/{k}: {np.count_nonzero(x != y) if x.shape == y.shape else 'shape'} elements differ")
if bad or count == 0:
    print("\n".join(bad) or "no datasets compared"); sys.exit(1)
print(f"{b_dir}: {count} datasets of {', '.join(files)} equal the unbroken run's bit for bit")
EOF
}

run 1 straight
run 1 resumed --set "checkpoint.resume=\"$WORK/straight/checkpoints/step_10\""
grep -q "resume: from $WORK/straight/checkpoints/step_10" "$WORK/resumed.log" || { echo "resumed: no resume line"; exit 1; }
same_losses straight resumed
same_files straight resumed model.h5 optim_0.h5

run 2 z1_straight --set parallel.zero_stage=1
run 2 z1_resumed_z2_offload --set parallel.zero_stage=2 --set 'optimizer.offload="cpu"' \
    --set optimizer.offload_fraction=0.5 --set optimizer.offload_chunk_mb=0.01 \
    --set "checkpoint.resume=\"$WORK/z1_straight/checkpoints/step_10\""
same_losses z1_straight z1_resumed_z2_offload
same_files z1_straight z1_resumed_z2_offload model.h5
