# shellcheck shell=bash
# tests/cluster/cluster_lib.sh — what the simulated-cluster tests share (sourced): make the cluster
# (tools/cluster/cluster.sh) named by the caller, tear it down on every exit, and skip (exit 77)
# where namespaces cannot be made — except under CI (CI=true), where a skip would hide the suite,
# so it fails instead. Needs ROOT (the source tree) and CLUSTER_NAME set by the caller.
CLUSTER="$ROOT/tools/cluster/cluster.sh"
cluster_up() {  # cluster_up <nodes> [--rate R]
    local why
    if ! why=$(bash "$CLUSTER" check); then
        if [[ ${CI:-} == true ]]; then echo "FAILED: CI must run the cluster tests: $why"; exit 1; fi
        echo "$why"
        exit 77
    fi
    bash "$CLUSTER" down "$CLUSTER_NAME"  # a leftover of a killed earlier run
    trap 'bash "$CLUSTER" down "$CLUSTER_NAME"' EXIT
    bash "$CLUSTER" up "$CLUSTER_NAME" "$@"
}
# cmpi MPIRUN-ARGS...: mpirun across the cluster, 2 ranks per node, through tools/job_guard.py.
cmpi() { bash "$CLUSTER" mpirun "$CLUSTER_NAME" --ranks-per-node 2 -x OMP_NUM_THREADS=1 "$@"; }
