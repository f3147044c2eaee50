#!/usr/bin/env bash
# tools/mpiexec_mpich.sh — MPICH's launcher (hydra's mpiexec) behind the OpenMPI command line the
# tests write, for a build against MPICH (cmake -DLLMTRAIN_MPI=mpich: docs/multinode.md "OpenMPI and
# MPICH"). Translates what the tests use and refuses the rest:
#   --oversubscribe   dropped (hydra runs any number of processes on a host)
#   -x VAR=VALUE      -genv VAR VALUE
#   -x VAR            dropped (hydra passes the whole environment: -genvall is its default)
#   --mca ...         an error: OpenMPI's parameters mean nothing to MPICH
#   -f FILE, -launcher L, -launcher-exec X, -iface IF, -ppn N   hydra's own: passed as they are
#                     (tools/cluster/cluster.sh mpiexec: hydra across the simulated cluster's nodes)
# Everything else (-np N, the program and its arguments) is passed as it is.
set -euo pipefail
args=()
while (($#)); do
    case $1 in
        --oversubscribe) shift ;;
        -x)
            [[ $# -ge 2 ]] || { echo "mpiexec_mpich.sh: -x needs VAR or VAR=VALUE" >&2; exit 2; }
            if [[ $2 == *=* ]]; then args+=(-genv "${2%%=*}" "${2#*=}"); fi
            shift 2 ;;
        --mca) echo "mpiexec_mpich.sh: '--mca $2 ...' is OpenMPI's; MPICH has no equivalent here" >&2; exit 2 ;;
        -np | -n | -f | -launcher | -launcher-exec | -iface | -ppn)
            [[ $# -ge 2 ]] || { echo "mpiexec_mpich.sh: $1 needs a value" >&2; exit 2; }
            args+=("$1" "$2"); shift 2 ;;
        *) args+=("$@"); break ;;
    esac
done
exec mpiexec.hydra "${args[@]}"
