# shellcheck shell=bash
# tests/cluster/slurm_lib.sh — what the Slurm tests share (sourced after cluster_lib.sh): the run's
# config and docs/multinode.md's batch script with its sizes and paths made this cluster's.
# Needs ROOT, BIN, DATA.

# run_toml <run_dir> <max_steps> <checkpoint interval>: the small GPT-2 of tests/parallel's
# equivalence runs (equivalence_lib.sh run()), ZeRO-3, a global batch of 8 sequences, as a config file.
run_toml() {
    cat <<EOF
[run]
run_dir = "$1"
max_steps = $2
log_interval = 1
eval_interval = 3
eval_steps = 2
sample_interval = 3
sample_tokens = 4
[model]
n_layer = 2
n_head = 2
n_embd = 36
seq_len = 16
vocab_size = $(cat "$DATA/vocab_size.txt")
[data]
train = "$DATA/train.h5"
val = "$DATA/val.h5"
[training]
micro_batch_size = 2
global_batch_size = 8
grad_clip = 0
[optimizer]
lr = 0.01
[lr_schedule]
warmup_steps = 2
min_lr = 0.001
[checkpoint]
interval = $3
keep_last = 0
[metrics]
enabled = false
[parallel]
zero_stage = 3
timeout_s = ${TIMEOUT:-600}
EOF
}

# doc_script <config>: the first bash block of docs/multinode.md's "## Slurm" section (the batch
# script) with 2 tasks a node instead of 8, no GPUs, this build's binary, this tree's
# tools/job_guard.py and tools/slurm_requeue.sh, and <config>; fails if the
# doc no longer has what it replaces.
doc_script() {
    local s
    s=$(awk '/^## Slurm$/ {on = 1} on && /^```bash$/ {in_ = 1; next} in_ && /^```$/ {exit} in_' "$ROOT/docs/multinode.md")
    local want
    for want in "--ntasks-per-node=8" " --gpus-per-node=8" "build/app/llmtrain" "--config run.toml" "zero_group_size=8" "tools/job_guard.py" "tools/slurm_requeue.sh"; do
        [[ $s == *"$want"* ]] || { echo "FAILED: docs/multinode.md's Slurm script has no '$want'" >&2; return 1; }
    done
    s=${s//--ntasks-per-node=8/--ntasks-per-node=2}
    s=${s// --gpus-per-node=8/}
    s=${s//build\/app\/llmtrain/$BIN}
    s=${s//--config run.toml/--config $1}
    s=${s//zero_group_size=8/zero_group_size=2}
    s=${s//tools\/slurm_requeue.sh/$ROOT\/tools\/slurm_requeue.sh}
    s=${s//tools\/job_guard.py/$ROOT\/tools\/job_guard.py}
    printf '%s\n' "$s"
}
