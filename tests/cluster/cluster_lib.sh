# shellcheck shell=bash
# tests/cluster/cluster_lib.sh — what the simulated-cluster tests share (sourced): make the cluster
# (tools/cluster/cluster.sh) named by the caller, tear it down on every exit, and skip (exit 77)
# where namespaces cannot be made — except under CI (CI=true), where a skip would hide the suite,
# so it fails instead. Needs ROOT (the source tree) and CLUSTER_NAME set by the caller.
# LLMTRAIN_MPI (ctest sets it from the build's CMake option; default openmpi) picks the launcher: with
# mpich, cmpi runs MPICH's hydra (cluster.sh mpiexec) and the cluster's name gets an "m" (eq -> eqm),
# so an MPICH build's run neither waits for nor tears down the OpenMPI build's cluster of that test.
if [[ ${LLMTRAIN_MPI:-openmpi} == mpich ]]; then CLUSTER_NAME+=m; fi
CLUSTER="$ROOT/tools/cluster/cluster.sh"
skip_or_fail() {  # skip_or_fail <why>: exit 77 saying why, or fail under CI
    if [[ ${CI:-} == true ]]; then echo "FAILED: CI must run the cluster tests: $1"; exit 1; fi
    echo "$1"
    exit 77
}
cluster_up() {  # cluster_up <nodes> [--rate R] [--slurm]
    local why
    why=$(bash "$CLUSTER" check) || skip_or_fail "$why"
    if [[ " $* " == *" --slurm "* ]]; then
        why=$(bash -c "source '$ROOT/tools/cluster/slurm.sh' && slurm_check") || skip_or_fail "cluster.sh: skipped: $why"
    fi
    # One run per cluster name at a time on this machine (another build dir's run of the same test
    # would tear this one's cluster down): wait for the name's lock, held until this shell exits.
    mkdir -p "${LLMTRAIN_CLUSTER_DIR:-/run/llmtrain-cluster}"
    exec {CLUSTER_LOCK}>"${LLMTRAIN_CLUSTER_DIR:-/run/llmtrain-cluster}/$CLUSTER_NAME.lock"
    flock -w 900 "$CLUSTER_LOCK" || { echo "FAILED: cluster name $CLUSTER_NAME still in use after 900 s"; exit 1; }
    bash "$CLUSTER" down "$CLUSTER_NAME"  # a leftover of a killed earlier run
    trap 'bash "$CLUSTER" down "$CLUSTER_NAME"' EXIT
    bash "$CLUSTER" up "$CLUSTER_NAME" "$@"
}
# slurm CMD...: a Slurm command on the cluster's head node (--slurm clusters).
slurm() { bash "$CLUSTER" slurm "$CLUSTER_NAME" "$@"; }
# slurm_job_wait <job id> <limit s> [<states>]: wait until the job is in none of the states (squeue's
# -t, default PD,R,CG,CF: it has left the queue), polled every 0.2 s (not sbatch --wait's growing
# interval); prints its state and exit code then ("FAILED 1:0").
slurm_job_wait() {
    local t
    for ((t = 0; t < $2 * 5; t++)); do
        slurm squeue -h -j "$1" -t "${3:-PD,R,CG,CF}" 2>/dev/null | grep -q . || break
        sleep 0.2
    done
    slurm scontrol show job "$1" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p; s/.* ExitCode=\([0-9:]*\).*/\1/p' | paste -sd' '
}
# cmpi MPIRUN-ARGS...: the build's launcher across the cluster, 2 ranks per node, through
# tools/job_guard.py: OpenMPI's mpirun, or MPICH's hydra (which takes mpirun's -np, -x, --oversubscribe
# through tools/mpiexec_mpich.sh).
cmpi() {
    local launcher=mpirun
    [[ ${LLMTRAIN_MPI:-openmpi} == mpich ]] && launcher=mpiexec
    bash "$CLUSTER" "$launcher" "$CLUSTER_NAME" --ranks-per-node 2 -x OMP_NUM_THREADS=1 "$@"
}
