# shellcheck shell=bash
# tests/cuda/emu_train_lib.sh — what emu_train.sh and emu_llama_train.sh share: one llmtrain process
# (the CPU binary or llmtrain-emu) trained on a config with the tiny dataset at micro-batch 2, and its
# train losses and final weights compared with a reference run's. Sourced after the script has set
# CONFIG, DATA and VOCAB; the functions exit 1 with what differed. (emu_lib.sh is the mpirun
# scripts' counterpart: emu_zero.sh, emu_tp.sh.)

# run <binary> <run_dir> <backend> <precision> <max_steps> [--set overrides...]: log in <run_dir>.log.
# The overrides come last, so they win over the settings here (checkpoint.interval=0: only the final
# checkpoint, unless one is asked for).
run() {
    local bin=$1 rd=$2 backend=$3 prec=$4 steps=$5
    shift 5
    "$bin" --config "$CONFIG" \
        --set "run.run_dir=\"$rd\"" --set "run.backend=\"$backend\"" --set "training.precision=\"$prec\"" \
        --set "run.max_steps=$steps" --set "model.vocab_size=$VOCAB" \
        --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\"" \
        --set training.micro_batch_size=2 --set training.grad_accum_steps=1 --set run.log_interval=1 \
        --set run.eval_interval=0 --set run.sample_interval=0 --set metrics.enabled=false \
        --set checkpoint.interval=0 --set lr_schedule.warmup_steps=2 "$@" >"$rd.log" 2>&1 ||
        { echo "FAILED: $bin ($backend $prec) exited $?; log:"; cat "$rd.log"; exit 1; }
}

# resume_dir <run dir> <step> <new run dir>: a run directory holding only <run dir>'s checkpoint of
# step <step> (no losses.tsv, so the resumed run's losses are the only ones there)
resume_dir() {
    rm -rf "$3" && mkdir -p "$3/checkpoints"
    cp -r "$1/checkpoints/step_$2" "$3/checkpoints/"
    echo "step_$2" >"$3/checkpoints/latest"
}

# compare <name> <reference run dir> <run dir> <relative tolerance> [first step, default every step]:
# train losses per step
compare() {
    awk -F'\t' -v tol="$4" -v first="${5:-0}" -v name="$1" '
        FNR == 1 { next }
        $2 != "train" { next }
        NR == FNR { ref[$1] = $3; next }
        $1 >= first { n++; d = $3 - ref[$1]; if (d < 0) d = -d; r = d / (ref[$1] < 0 ? -ref[$1] : ref[$1]);
                      printf "%s step %d: loss %s (reference %s, rel diff %.2e)\n", name, $1, $3, ref[$1], r;
                      if (r > tol) bad++ }
        END { if (n == 0) { print name ": no losses compared"; exit 1 }
              if (bad) { print name ": " bad " steps beyond " tol; exit 1 } }' \
        "$2/losses.tsv" "$3/losses.tsv"
}

# compare_weights <name> <reference run dir> <run dir>: the newest checkpoints, tensor by tensor,
# within the tolerances stated (and derived) in compare_weights.py.
compare_weights() {
    "${LLMTRAIN_PYTHON:-/usr/bin/python3}" "$(dirname "${BASH_SOURCE[0]}")/compare_weights.py" "$@"
}
