#!/usr/bin/env bash
# tests/cluster/cluster_faults.sh — network faults on 2 simulated nodes x 2 ranks, the job launched
# as docs/multinode.md says (tools/job_guard.py around mpirun), parallel.timeout_s = 6, the inter-node
# link at 40 Mbit/s so a step takes ~0.1 s and a fault lands mid-run.
#
# Usage: cluster_faults.sh <llmtrain> <mpiexec> <tiny_data_dir> <work_dir>
# Faults, each after the run's first checkpoint is committed:
#   cut   node 1's link taken down mid-step;
#   stop  every process of node 1 stopped (SIGSTOP), daemon included;
#   kill  every process of node 1 killed (SIGKILL) while an asynchronous checkpoint is being written
#         (its writers held back 3 s by LLMTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS).
# Each time the launch line must return non-zero within timeout_s + 10 s of the fault (the 1.2 s
# liveness probe, the guard's 5 s grace, 2 s from SIGTERM to SIGKILL); for cut and stop the ranks'
# error names the operation and "ranks 2, 3 on node 1 (<its host>)" as the ones that did not answer;
# `latest` names a complete checkpoint and no later step was committed. Then, the link back, the last
# committed checkpoint resumes and the run finishes bitwise equal (every train loss after the resumed
# step, every tensor of the final model.h5) to an unbroken run: on the same layout (cut, kill) and on
# another one (stop: ZeRO-1 on 4 ranks of one node, which sums in DP's order at grad_clip 0).
# Last, shared storage: node 1 gets a private tmpfs over the run dir's parent; the job must exit 2
# naming node 1's host, and leave nothing in the run dir's place.
set -euo pipefail
BIN=$1 LOCAL_MPI=$2 DATA=$3 WORK=$4
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER_NAME=flt
PY=${LLMTRAIN_PYTHON:-/usr/bin/python3}
VOCAB=$(cat "$DATA/vocab_size.txt")
TIMEOUT=6
M=60
source "$ROOT/tests/cluster/cluster_lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
cluster_up 2 --rate 40mbit
export OMP_NUM_THREADS=1

args() {  # args <name>: the model and run settings of every run here
    echo --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=36 --set model.seq_len=16 \
        --set "model.vocab_size=$VOCAB" --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\"" \
        --set "run.run_dir=\"$WORK/$1\"" --set metrics.enabled=false --set training.micro_batch_size=2 \
        --set run.log_interval=1 --set run.eval_interval=0 --set run.sample_interval=0 --set run.max_steps=$M \
        --set checkpoint.interval=10 --set checkpoint.keep_last=0 --set parallel.timeout_s=$TIMEOUT \
        --set training.grad_clip=0
}
clean_nodes() { for n in 0 1; do bash "$CLUSTER" signal "$CLUSTER_NAME" $n KILL; done; sleep 0.5; }

# fault <name> <what>: start the run, wait for its first committed checkpoint (and, for kill, for the
# next one's writing to begin), inject the fault, check how the job ended.
fault() {
    local name=$1 what=$2 extra=()
    [[ $what == kill ]] && extra=(-x LLMTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS=3000)
    # MPICH: UCX over TCP on eth0 only, so the fault cuts ranks off (by default UCX takes shared memory
    # between the namespaces, which share the boot id); a run that ends by a fault never reaches
    # MPI_Finalize, where MPICH 4.0.2 over UCX's TCP can hang (pmodels/mpich#6596).
    [[ ${LLMTRAIN_MPI:-openmpi} == mpich ]] && extra+=(-x UCX_TLS=tcp,self -x UCX_NET_DEVICES=eth0)
    # shellcheck disable=SC2046
    cmpi "${extra[@]}" -np 4 "$BIN" $(args "$name") >"$WORK/$name.log" 2>&1 &
    local job=$! i ck="$WORK/$name/checkpoints"
    for ((i = 0; i < 600; i++)); do
        if [[ -f $ck/latest ]] && { [[ $what != kill ]] || compgen -G "$ck/.tmp_step_*" >/dev/null; }; then break; fi
        kill -0 $job 2>/dev/null || { echo "FAILED: $name ended before the fault"; cat "$WORK/$name.log"; exit 1; }
        sleep 0.1
    done
    local before
    before=$(cat "$ck/latest")
    case $what in
        cut) bash "$CLUSTER" cut "$CLUSTER_NAME" 1 ;;
        stop) bash "$CLUSTER" signal "$CLUSTER_NAME" 1 STOP ;;
        kill) bash "$CLUSTER" signal "$CLUSTER_NAME" 1 KILL ;;
    esac
    local t0=$SECONDS rc=0
    wait $job || rc=$?
    local took=$((SECONDS - t0))
    bash "$CLUSTER" heal "$CLUSTER_NAME" 1
    clean_nodes
    echo "$name: $what at $before; the job exited $rc after $took s"
    ((rc != 0)) || { echo "FAILED: $name: the job exited 0 after the fault"; cat "$WORK/$name.log"; exit 1; }
    ((took <= TIMEOUT + 10)) || { echo "FAILED: $name: the job took $took s to end (limit $((TIMEOUT + 10)))"; tail -30 "$WORK/$name.log"; exit 1; }
    if [[ $what != kill ]]; then
        local host
        host=$(bash "$CLUSTER" host "$CLUSTER_NAME" 1)
        grep -q "llmtrain: error: .* did not complete within parallel.timeout_s = $TIMEOUT s.*no answer to a liveness ping within .* from ranks 2, 3 on node 1 ($host)" "$WORK/$name.log" ||
            { echo "FAILED: $name: no error naming the operation and ranks 2, 3 on node 1 ($host)"; tail -30 "$WORK/$name.log"; exit 1; }
    fi
    # Nothing half-written committed: latest is complete and no step after it exists as step_N.
    "$PY" "$ROOT/tests/cluster/nothing_half_committed.py" "$ck"
}

# same_as_reference <run> <resumed step>: train losses after that step and the final weights, bitwise.
same_as_reference() {
    "$PY" "$ROOT/tests/cluster/same_after.py" "$WORK/ref" "$WORK/$1" "$2" "$M" "the unbroken run"
}
resumed_step() { sed -n 's/^resume: from .* at step \([0-9]*\).*/\1/p' "$WORK/$1.log" | head -1; }

# shellcheck disable=SC2046
cmpi -np 4 "$BIN" $(args ref) >"$WORK/ref.log" 2>&1 || { echo "FAILED: reference run"; cat "$WORK/ref.log"; exit 1; }

fault cut cut
# shellcheck disable=SC2046
cmpi -np 4 "$BIN" $(args cut) >"$WORK/cut.resume.log" 2>&1 || { echo "FAILED: resume after cut"; cat "$WORK/cut.resume.log"; exit 1; }
same_as_reference cut "$(resumed_step cut.resume)"

fault stop stop
# shellcheck disable=SC2046
"$LOCAL_MPI" --oversubscribe -x OMP_NUM_THREADS=1 -np 4 "$BIN" $(args stop) --set parallel.zero_stage=1 \
    >"$WORK/stop.resume.log" 2>&1 || { echo "FAILED: resume after stop"; cat "$WORK/stop.resume.log"; exit 1; }
same_as_reference stop "$(resumed_step stop.resume)"

fault kill kill
# shellcheck disable=SC2046
cmpi -np 4 "$BIN" $(args kill) >"$WORK/kill.resume.log" 2>&1 || { echo "FAILED: resume after kill"; cat "$WORK/kill.resume.log"; exit 1; }
same_as_reference kill "$(resumed_step kill.resume)"

# Shared storage: node 1 sees an empty file system where the run dir's parent is.
mkdir -p "$WORK/shared"
bash "$CLUSTER" private "$CLUSTER_NAME" 1 "$WORK/shared"
rc=0
# shellcheck disable=SC2046
cmpi -np 4 "$BIN" $(args shared/run) >"$WORK/storage.log" 2>&1 || rc=$?
host=$(bash "$CLUSTER" host "$CLUSTER_NAME" 1)
((rc == 2)) || { echo "FAILED: storage: exit $rc, expected 2"; cat "$WORK/storage.log"; exit 1; }
grep -q "run.run_dir = '$WORK/shared/run': .*ranks 2, 3 on node 1 ($host) do not see it" "$WORK/storage.log" ||
    { echo "FAILED: storage: no error naming node 1 ($host)"; cat "$WORK/storage.log"; exit 1; }
[[ ! -e $WORK/shared/run ]] || { echo "FAILED: storage: $WORK/shared/run was left behind"; ls -la "$WORK/shared/run"; exit 1; }
echo "storage: exit 2 naming node 1 ($host); nothing left in $WORK/shared"
echo "cluster_faults: all faults ended the job and resumed bitwise"
