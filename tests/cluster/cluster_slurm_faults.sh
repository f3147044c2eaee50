#!/usr/bin/env bash
# tests/cluster/cluster_slurm_faults.sh — node faults under Slurm on the simulated cluster (2 nodes x 2
# ranks, the inter-node link at 40 Mbit/s), the job submitted as docs/multinode.md's batch script,
# parallel.timeout_s = 6, ZeRO-3 in node-local groups, a checkpoint every 10 steps.
#
# Usage: cluster_slurm_faults.sh <llmtrain> <mpiexec> <tiny_data_dir> <work_dir>
# Each fault comes after the first committed checkpoint: node 1's processes stopped (SIGSTOP, slurmd
# included), killed (SIGKILL, while the next checkpoint is being written: its writers held back 3 s),
# and its link cut. Each time the job step (srun, after the ranks on node 0) must end within
# timeout_s + 10 s of the fault (the 1.2 s probe; srun's KillWait + 2 s wait for the lost node's
# tasks), with an error line naming node 1's host, and `latest` must name a complete checkpoint with
# nothing later committed. Measured: 11-13 s (docs/multinode.md "Faults under Slurm").
# Which checkpoint that is depends on when the fault lands (on a loaded machine 10-20 steps after the
# commit it waited for), so the checks take it from the run dir once the step has ended (the first
# attempt's rank 0, the only committer, has exited with it; the requeued job starts seconds later,
# after slurm_requeue.sh's probes), not from a read before the fault.
# The cut is then left to the script's carrying on: Slurm (or tools/slurm_requeue.sh) requeues the
# job, it restarts on node 0 alone (world 2, grad_accum_steps 2 for the same global batch) from the
# last checkpoint the first attempt committed (no step lost beyond it), and reaches max_steps; its
# log says "restart 1"; its losses after the resumed step and its final model.h5 must be bitwise
# those of 2 ranks on one machine resumed from a copy of the same checkpoint (mpirun -np 2 here).
set -euo pipefail
BIN=$1 LOCAL_MPI=$2 DATA=$3 WORK=$4
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER_NAME=slf
PY=${LLMTRAIN_PYTHON:-/usr/bin/python3}
TIMEOUT=6
# max_steps: room for a fault that lands late (under load 10-20 steps after the first commit, step 10)
M=60
source "$ROOT/tests/cluster/cluster_lib.sh"
source "$ROOT/tests/cluster/slurm_lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
cluster_up 2 --slurm --rate 40mbit
export OMP_NUM_THREADS=1
cd "$WORK"
HOST1=$(bash "$CLUSTER" host "$CLUSTER_NAME" 1)

# restore_node1: the job cancelled, every process of node 1 gone, the node set DOWN, its link up,
# its slurmd started, resumed; waits until the queue is empty and both nodes are idle and responding.
restore_node1() {
    slurm scancel "$JOB"
    bash "$CLUSTER" signal "$CLUSTER_NAME" 1 KILL
    # DOWN ends what Slurm still counts as completing there (a step of a killed slurmd), at once.
    slurm scontrol update nodename="$HOST1" state=down reason="test: node 1 restored"
    bash "$CLUSTER" heal "$CLUSTER_NAME" 1
    local t
    for ((t = 0; t < 300; t++)); do
        slurm scontrol update nodename="$HOST1" state=resume >/dev/null 2>&1 || true
        [[ -z $(slurm squeue -h) && $(slurm sinfo -h -N -o %t | sort | uniq -c | awk '{print $1, $2}') == "2 idle" ]] && return 0
        sleep 0.2
    done
    echo "FAILED: node 1 not back after 60 s"; slurm sinfo -N; exit 1
}

# fault <name> <what>: submit, wait for the first commit (for kill, the next one's writing too),
# inject, wait for the step to end; checks the time, the error line and the checkpoints. Leaves the
# job (requeued or failed) in place; JOB is its id, BEFORE the commit waited for, COMMITTED the last
# commit of the step (read once it has ended).
fault() {
    local name=$1 what=$2
    run_toml "$WORK/$name" $M 10 >"$WORK/$name.toml"
    doc_script "$WORK/$name.toml" >"$WORK/$name.sbatch"
    if [[ $what == kill ]]; then export LLMTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS=3000; fi
    JOB=$(TIMEOUT=$TIMEOUT slurm sbatch --parsable -o "$WORK/$name.log" "$WORK/$name.sbatch")
    unset LLMTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS
    local i ck="$WORK/$name/checkpoints"
    for ((i = 0; i < 900; i++)); do
        if [[ -f $ck/latest ]] && { [[ $what != kill ]] || compgen -G "$ck/.tmp_step_*" >/dev/null; }; then break; fi
        sleep 0.1
    done
    [[ -f $ck/latest ]] || { echo "FAILED: $name: no checkpoint after 90 s"; cat "$WORK/$name.log"; exit 1; }
    BEFORE=$(cat "$ck/latest")
    local srun_pids at
    srun_pids=$(pgrep -f "srun --mpi=pmix .*$WORK/$name.toml" | paste -sd' ')
    [[ -n $srun_pids ]] || { echo "FAILED: $name: no srun running"; tail -20 "$WORK/$name.log"; exit 1; }
    at=$(grep -o "^step [0-9]*" "$WORK/$name.log" | tail -1) || true  # the last step logged (diagnostic)
    case $what in
        cut) bash "$CLUSTER" cut "$CLUSTER_NAME" 1 ;;
        stop) bash "$CLUSTER" signal "$CLUSTER_NAME" 1 STOP ;;
        kill) bash "$CLUSTER" signal "$CLUSTER_NAME" 1 KILL ;;
    esac
    # Timed in ms (EPOCHREALTIME), not whole SECONDS, whose truncation at both ends adds up to 1 s.
    local t0=${EPOCHREALTIME/./}
    # The step has ended when its srun has (on node 0, after its tasks there; node 1's may be stuck).
    # shellcheck disable=SC2086
    while kill -0 $srun_pids 2>/dev/null; do
        ((${EPOCHREALTIME/./} - t0 <= 60000000)) || { echo "FAILED: $name: the step still runs 60 s after the fault"; tail -20 "$WORK/$name.log"; exit 1; }
        sleep 0.2
    done
    local took_ms=$(((${EPOCHREALTIME/./} - t0) / 1000)) took
    took=$((took_ms / 1000)).$((took_ms % 1000 / 100))
    COMMITTED=$(cat "$ck/latest")
    echo "$name: $what after $BEFORE (at $at); the job step ended after $took s, $COMMITTED committed"
    ((took_ms <= (TIMEOUT + 10) * 1000)) || { echo "FAILED: $name: the step took $took s to end (limit $((TIMEOUT + 10)))"; tail -30 "$WORK/$name.log"; exit 1; }
    grep -q "^slurm: job $JOB on $CLUSTER_NAME-n\[0-1\], restart 0$" "$WORK/$name.log" ||
        { echo "FAILED: $name: the job did not start on both nodes"; head -3 "$WORK/$name.log"; exit 1; }
    grep -E "error: .*($HOST1|node 1 \($HOST1\))" "$WORK/$name.log" | head -2 | cut -c1-300 || true
    grep -qE "error: .*($HOST1|node 1 \($HOST1\))" "$WORK/$name.log" ||
        { echo "FAILED: $name: no error line naming node 1 ($HOST1)"; tail -30 "$WORK/$name.log"; exit 1; }
    if [[ $what != kill ]]; then
        grep -q "did not complete within parallel.timeout_s = $TIMEOUT s.*no answer to a liveness ping .* on node 1 ($HOST1)" "$WORK/$name.log" ||
            { echo "FAILED: $name: no rank error naming node 1 ($HOST1)"; tail -30 "$WORK/$name.log"; exit 1; }
    fi
    "$PY" "$ROOT/tests/cluster/nothing_half_committed.py" "$ck"
}

fault stop stop
restore_node1
fault kill kill
restore_node1

# The cut, carried on: the requeued job finishes on node 0 alone.
fault cut cut
end=$(slurm_job_wait "$JOB" 150)
[[ $end == "COMPLETED 0:0" ]] || { echo "FAILED: cut: the job ended $end"; tail -30 "$WORK/cut.log"; exit 1; }
grep -q "^slurm: job $JOB on .*, restart 1$" "$WORK/cut.log" || { echo "FAILED: cut: no 'restart 1' line"; cat "$WORK/cut.log"; exit 1; }
grep -q "nodes: world 2 on 1 node" "$WORK/cut.log" || { echo "FAILED: cut: the restart was not on one node"; cat "$WORK/cut.log"; exit 1; }
grep -q "micro_batch_size 2 x grad_accum_steps 2 x dp 2 = global_batch_size 8" "$WORK/cut.log" ||
    { echo "FAILED: cut: the global batch was not kept by grad accumulation"; grep '^batch:' "$WORK/cut.log"; exit 1; }
since=$(sed -n 's/^resume: from .* at step \([0-9]*\).*dp changed from 4 to 2.*/\1/p' "$WORK/cut.log" | head -1)
[[ $since == "${COMMITTED#step_}" ]] || { echo "FAILED: cut: resumed at step '$since', the first attempt's last commit was $COMMITTED"; grep '^resume' "$WORK/cut.log"; exit 1; }
grep -q "^resume: from .*, restart 1 of this run" "$WORK/cut.log" || { echo "FAILED: cut: the resume line does not count restart 1"; grep '^resume' "$WORK/cut.log"; exit 1; }
grep -h "^slurm\(_requeue.sh\)\?:" "$WORK/cut.log"
# The reference: 2 ranks on one machine resumed from a copy of the same checkpoint.
mkdir -p "$WORK/ref/checkpoints"
cp -a "$WORK/cut/checkpoints/$COMMITTED" "$WORK/ref/checkpoints/"
echo "$COMMITTED" >"$WORK/ref/checkpoints/latest"
"$LOCAL_MPI" --oversubscribe -x OMP_NUM_THREADS=1 -np 2 "$BIN" --config "$WORK/cut.toml" --set parallel.zero_group_size=2 \
    --set "run.run_dir=\"$WORK/ref\"" --set parallel.timeout_s=600 >"$WORK/ref.log" 2>&1 || { echo "FAILED: reference"; cat "$WORK/ref.log"; exit 1; }
"$PY" "$ROOT/tests/cluster/same_after.py" "$WORK/ref" "$WORK/cut" "$since" "$M" "2 ranks resumed from the same checkpoint (carried on by Slurm on one node)"
echo "cluster_slurm_faults: stop, kill and cut ended the step in time naming node 1; the cut job carried on to step $M"
