#!/usr/bin/env bash
# tools/slurm_requeue.sh — carry a Slurm batch job on after a node is lost: called by the batch script
# when its srun failed, it finds the job's nodes that no longer answer, sets them DOWN, and requeues the
# job, which Slurm then starts again on the nodes left (docs/multinode.md "Carrying on").
#
# Usage (in the batch script, after srun): srun ... || tools/slurm_requeue.sh [MAX_RESTARTS]
# Each node of the job is probed by a one-task step (`srun --overlap -w NODE true`, 10 s at most);
# one that does not answer is set DOWN ("scontrol update state=down"), so the scheduler leaves it out
# and the job's old allocation is released at once. If a node was lost and the job has restarted fewer than MAX_RESTARTS times (default 3;
# SLURM_RESTART_COUNT, which Slurm sets in a requeued job), the job is requeued: with
# `#SBATCH --nodes=MIN-MAX --requeue` it restarts on the nodes left, with the world size they give,
# and checkpoint.resume = "auto" goes on from the last committed checkpoint. Otherwise (every node
# answers: the failure was not a lost node, e.g. a config error; or too many restarts) it exits 1 and
# the job fails as usual. Prints one line saying which.
set -uo pipefail
max=${1:-3}
[[ $max =~ ^[0-9]+$ ]] || { echo "slurm_requeue.sh: MAX_RESTARTS: expected a count, got '$max'" >&2; exit 2; }
[[ -n ${SLURM_JOB_ID:-} ]] || { echo "slurm_requeue.sh: not inside a Slurm job (no SLURM_JOB_ID)" >&2; exit 2; }
restarts=${SLURM_RESTART_COUNT:-0}
lost=()
for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
    timeout -k 1 10 srun --overlap -w "$node" -N1 -n1 --mpi=none true >/dev/null 2>&1 || lost+=("$node")
done
if ((${#lost[@]} == 0)); then
    echo "slurm_requeue.sh: job $SLURM_JOB_ID: every node answers; not a lost node: no requeue" >&2
    exit 1
fi
# DOWN, not drain: a drained node still holds the job in COMPLETING until Slurm gives up on it
# (SlurmdTimeout, 300 s by default), and the requeued job cannot start before; DOWN releases it now.
# Setting a node's state needs an operator (root, SlurmUser or AdminLevel=Operator).
for node in "${lost[@]}"; do
    scontrol update nodename="$node" state=down reason="lost by job $SLURM_JOB_ID (tools/slurm_requeue.sh)" ||
        echo "slurm_requeue.sh: cannot set $node DOWN (needs an operator): the restart waits until Slurm marks it DOWN itself (SlurmdTimeout)" >&2
done
if ((restarts >= max)); then
    echo "slurm_requeue.sh: job $SLURM_JOB_ID: lost ${lost[*]} (set DOWN); $restarts restarts already, the limit: no requeue" >&2
    exit 1
fi
echo "slurm_requeue.sh: job $SLURM_JOB_ID: lost ${lost[*]} (set DOWN); requeued, restart $((restarts + 1)) of $max" >&2
scontrol requeue "$SLURM_JOB_ID"
