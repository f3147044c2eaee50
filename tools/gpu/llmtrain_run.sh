# shellcheck shell=bash
# tools/gpu/llmtrain_run.sh — sourced (bash): llmtrain_run LOG LIMIT_S LAST_STEP CMD... runs one
# training command (llmtrain, or mpirun ... llmtrain) with its output in LOG, time-boxed, and
# optionally stopped once its last step is logged. Used by tools/gpu/run.sh and
# tools/bench/gpu_bench.sh.
#
# LAST_STEP > 0: the command is killed as soon as LOG holds "step LAST_STEP/LAST_STEP |". llmtrain
# always writes a checkpoint after its last step (GPT-2 1.5B: 19 GB and ~60 s on an H100), which a
# throughput or repeatability run does not need; the step's losses.tsv row is written before its
# log line. LAST_STEP = 0: the command runs to its end (checkpoint included).
# Returns the command's exit status; 0 when it was stopped after its last step; 124 when LIMIT_S
# seconds passed (then it was killed). A kill also ends the command's children (mpirun's ranks).
# The command stays in the caller's process group, so a time box around the caller (run.sh's
# `timeout` per step) reaches it too.
llmtrain_run() {
    local log=$1 limit=$2 last=$3
    shift 3
    "$@" >"$log" 2>&1 &
    local pid=$! t0=$SECONDS
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$last" -gt 0 ] && grep -q "^step $last/$last |" "$log"; then
            llmtrain_run_kill "$pid"
            echo "(llmtrain_run: stopped after step $last, before the end-of-run checkpoint)" >>"$log"
            return 0
        fi
        if [ $((SECONDS - t0)) -ge "$limit" ]; then
            llmtrain_run_kill "$pid"
            echo "(llmtrain_run: killed after ${limit} s)" >>"$log"
            return 124
        fi
        sleep 0.2
    done
    wait "$pid"
}

# llmtrain_run_kill PID: stops PID, SIGKILLs its children, then PID, and reaps it.
llmtrain_run_kill() {
    # Stopped first, so it forks no child between the two kills (one that did outlived the run and
    # wrote into its run directory while the caller removed it: gpu_run_sh's stand-in, once).
    kill -STOP "$1" 2>/dev/null
    command -v pkill >/dev/null && pkill -KILL -P "$1"
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}
