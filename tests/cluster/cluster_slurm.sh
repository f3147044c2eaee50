#!/usr/bin/env bash
# tests/cluster/cluster_slurm.sh — docs/multinode.md's Slurm batch script on the simulated cluster's
# Slurm (tools/cluster/cluster.sh up --slurm: slurmctld on a head node, a slurmd per node), against
# the same layout under mpirun.
#
# Usage: cluster_slurm.sh <llmtrain> <tiny_data_dir> <work_dir>
# The script is the doc's block itself, with only its sizes and paths changed (2 tasks a node, no
# GPUs, this build's binary, a run.toml here): sbatch, srun --mpi=pmix, 2 nodes x 2 ranks, ZeRO-3 in
# node-local groups. It must complete (COMPLETED 0:0), say "world 4 on 2 nodes", and its run must
# be bitwise equal to mpirun's (tools/job_guard.py + mpirun, as cluster_equivalence runs): every
# train and val loss, every tensor of the final checkpoint's model.h5. The same ranks on the same
# nodes sum in the same order whatever launched them.
set -euo pipefail
BIN=$1 DATA=$2 WORK=$3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER_NAME=slm
PY=${LLMTRAIN_PYTHON:-/usr/bin/python3}
source "$ROOT/tests/cluster/cluster_lib.sh"
source "$ROOT/tests/cluster/slurm_lib.sh"
source "$ROOT/tests/parallel/equivalence_lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
cluster_up 2 --slurm
export OMP_NUM_THREADS=1

run_toml "$WORK/slurm" 6 0 >"$WORK/run.toml"
doc_script "$WORK/run.toml" >"$WORK/job.sbatch"
cd "$WORK"
job=$(slurm sbatch --parsable -o "$WORK/slurm.log" "$WORK/job.sbatch")
end=$(slurm_job_wait "$job" 120)
[[ $end == "COMPLETED 0:0" ]] || { echo "FAILED: job $job ended $end"; cat "$WORK/slurm.log"; exit 1; }
grep -q "nodes: world 4 on 2 nodes (2 ranks each): node 0 (slm-n0) ranks 0,1; node 1 (slm-n1) ranks 2,3" "$WORK/slurm.log" ||
    { echo "FAILED: no node line"; cat "$WORK/slurm.log"; exit 1; }
cmpi -np 4 "$BIN" --config "$WORK/run.toml" --set parallel.zero_group_size=2 --set "run.run_dir=\"$WORK/mpirun\"" \
    >"$WORK/mpirun.log" 2>&1 || { echo "FAILED: mpirun"; cat "$WORK/mpirun.log"; exit 1; }
compare mpirun slurm 0
echo "cluster_slurm: the doc's sbatch script (srun --mpi=pmix, 2 nodes x 2 ranks) bitwise equal to mpirun"
