#!/usr/bin/env python3
"""tools/job_guard.py — run a job launcher (mpirun, srun) and make sure the JOB ends when a rank fails.

Usage: tools/job_guard.py [--grace S] LAUNCHER ARGS...
       e.g. tools/job_guard.py mpirun --hostfile hosts -np 16 llmtrain --config run.toml

Why: a rank that gives up (parallel.timeout_s) prints "llmtrain: error: ..." and calls MPI_Abort,
and mpirun then asks every node's daemon to kill its ranks and waits for each to confirm. A node whose
link is cut, or whose processes are stopped, never confirms, so mpirun waits on (OpenMPI 4: until
TCP gives up, many minutes). This guard passes the launcher's output through unchanged, and once a
line containing "llmtrain: error:" has gone by it gives the launcher --grace seconds (default 5) to
end by itself (a healthy abort takes it 2-4 s); then it kills the launcher's process group (SIGTERM,
again 1 s later since mpirun takes the first as "abort already in progress", SIGKILL 1 s after that)
and says so.

Exit status: the launcher's when it ended by itself (its signal as 128+N); when the guard had to kill
it after a rank failed, the code that rank passed to MPI_Abort as the launcher printed it (OpenMPI's
"with errorcode N", MPICH's "MPI_Abort(comm, N)": 2 for a config error, as llmtrain exits), else 1;
2 for a bad command line. SIGINT, SIGTERM and SIGHUP to the guard go to the launcher.
Details: docs/multinode.md "When a node fails".
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

MARK = b"llmtrain: error:"
# The abort code as the launchers print it: OpenMPI "with errorcode 2.", MPICH "MPI_Abort(..., 2)".
ABORT_CODE = re.compile(rb"with errorcode (\d+)|MPI_Abort\([^,()]*, (\d+)\)")


def main(argv):
    grace = 5.0
    if len(argv) >= 2 and argv[0] == "--grace":
        try:
            grace = float(argv[1])
        except ValueError:
            print(f"job_guard.py: --grace: expected seconds, got {argv[1]!r}", file=sys.stderr)
            return 2
        argv = argv[2:]
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        print(f"job_guard.py: cannot start {argv[0]!r}: {e}", file=sys.stderr)
        return 2
    failed_at = []  # time of the first rank error seen
    abort_codes = []  # codes passed to MPI_Abort, as the launcher reported them
    lock = threading.Lock()

    def pump(src, dst):
        for line in iter(src.readline, b""):
            dst.write(line)
            dst.flush()
            m = ABORT_CODE.search(line)
            with lock:
                if MARK in line and not failed_at:
                    failed_at.append(time.monotonic())
                if m:
                    abort_codes.append(int(m.group(1) or m.group(2)))

    threads = [threading.Thread(target=pump, args=(proc.stdout, sys.stdout.buffer), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, sys.stderr.buffer), daemon=True)]
    for t in threads:
        t.start()

    def forward(sig, _frame):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)

    killed = False
    while proc.poll() is None:
        time.sleep(0.1)
        with lock:
            late = failed_at and time.monotonic() - failed_at[0] > grace
        if late:
            print(f"job_guard.py: a rank failed and {argv[0]} had not ended {grace:g} s later "
                  "(a node it waits for is unreachable or stopped): killing it", file=sys.stderr, flush=True)
            for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGKILL):
                forward(sig, None)
                try:
                    proc.wait(1)
                    break
                except subprocess.TimeoutExpired:
                    pass
            proc.wait()
            killed = True
            break
    for t in threads:
        t.join(1)
    if killed:
        with lock:
            return abort_codes[0] if abort_codes and 0 < abort_codes[0] < 256 else 1
    rc = proc.returncode
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
