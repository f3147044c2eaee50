#!/usr/bin/env bash
# tests/parallel/liveness_killed.sh — a rank SIGKILLed while another is busy ends the job in time
# (docs/multinode.md "While one rank works alone"): test_liveness's AKilledRankEndsTheJobWhileAnotherIsBusy
# under `mpirun -np 3`, parallel.timeout_s = 1, rank 0 busy for 20 s, rank 2 killed after 0.5 s. The
# job must exit non-zero within timeout_s + 5 s of the start (it would last 20 s if the busy phase
# held it).
# Usage: liveness_killed.sh <mpiexec> <test_liveness>
set -uo pipefail
MPI=$1 BIN=$2
start=$SECONDS
LLMTRAIN_TEST_KILL=1 "$MPI" --oversubscribe -np 3 -x LLMTRAIN_TEST_KILL "$BIN" \
    --gtest_filter=BusyWait.AKilledRankEndsTheJobWhileAnotherIsBusy >/tmp/liveness_killed.$$.log 2>&1
rc=$?
took=$((SECONDS - start))
echo "the job exited $rc after $took s"
if ((rc == 0)); then echo "FAILED: the job exited 0"; cat /tmp/liveness_killed.$$.log; exit 1; fi
if ((took > 6)); then echo "FAILED: the job took $took s (limit 6)"; cat /tmp/liveness_killed.$$.log; exit 1; fi
rm -f /tmp/liveness_killed.$$.log
