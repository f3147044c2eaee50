# shellcheck shell=bash
# tests/cuda/emu_lib.sh — what emu_zero.sh and emu_tp.sh share: a tiny model (2 layers, width 32,
# 16 tokens, micro-batch 2) trained 3 steps at lr 1e-3 under mpirun, its losses compared with a
# reference run's, and its step-3 weights compared (compare_weights.py). Sourced after the script
# has set CPU, EMU, MPI, DATA, WORK and VOCAB; the functions exit 1 with what differed. (The
# single-process scripts emu_train.sh and emu_llama_train.sh share emu_train_lib.sh.)
run() {  # run <binary> <np> <name> [--set ...]
    local bin=$1 np=$2 name=$3
    shift 3
    "$MPI" --oversubscribe -np "$np" "$bin" --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 \
        --set model.seq_len=16 --set "model.vocab_size=$VOCAB" --set "data.train=\"$DATA/train.h5\"" \
        --set "data.val=\"$DATA/val.h5\"" --set "run.run_dir=\"$WORK/$name\"" --set metrics.enabled=false \
        --set training.micro_batch_size=2 --set run.log_interval=1 --set run.eval_interval=2 --set run.eval_steps=1 \
        --set run.sample_interval=2 --set run.sample_tokens=3 --set run.max_steps=3 --set checkpoint.interval=0 \
        --set optimizer.lr=1e-3 --set lr_schedule.warmup_steps=0 --set training.grad_clip=0 "$@" >"$WORK/$name.log" 2>&1 ||
        { echo "FAILED: $name exited $?"; cat "$WORK/$name.log"; exit 1; }
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

weights() {  # weights <reference> <run> [--bitwise]: the step-3 checkpoints (compare_weights.py)
    "${LLMTRAIN_PYTHON:-/usr/bin/python3}" "$(dirname "${BASH_SOURCE[0]}")/compare_weights.py" "$2 vs $1" "$WORK/$1" "$WORK/$2" "${@:3}"
}
