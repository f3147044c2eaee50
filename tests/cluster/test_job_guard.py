#!/usr/bin/env python3
"""tests/cluster/test_job_guard.py — tools/job_guard.py against fake launchers (no root, no MPI).

A launcher that ends by itself keeps its exit status (0, 3, 128+N for a signal) and its output; one
that prints a rank's "llmtrain: error:" line and then hangs, even ignoring SIGTERM as mpirun does
during an abort, is killed --grace seconds after that line (measured: grace <= t < grace + 3 s) and
the guard exits 1 saying so — or with the code the rank passed to MPI_Abort, where the launcher printed
it (2 for a config error); SIGHUP reaches the launcher; a hang with no error line is left alone (the
guard is no timeout)."""
import os
import subprocess
import sys
import time
import unittest

GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "job_guard.py")


def guard(script, *extra, timeout=20):
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, GUARD, *extra, "bash", "-c", script], capture_output=True, text=True,
                       timeout=timeout)
    return p, time.monotonic() - t0


class JobGuard(unittest.TestCase):
    def test_exit_status_and_output_pass_through(self):
        p, _ = guard("echo out; echo err >&2; exit 3")
        self.assertEqual((p.returncode, p.stdout, p.stderr), (3, "out\n", "err\n"))
        p, _ = guard("exit 0")
        self.assertEqual(p.returncode, 0)
        p, _ = guard("kill -TERM $$")
        self.assertEqual(p.returncode, 128 + 15)

    def test_a_hung_launcher_after_a_rank_error_is_killed(self):
        script = "trap '' TERM; echo 'llmtrain: error: all_reduce_sum ... did not complete' >&2; sleep 60"
        p, took = guard(script, "--grace", "1.5")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("llmtrain: error: all_reduce_sum", p.stderr)
        self.assertIn("job_guard.py: a rank failed and bash had not ended 1.5 s later", p.stderr)
        self.assertGreaterEqual(took, 1.5)
        self.assertLess(took, 4.5)

    def test_an_error_then_a_normal_end_keeps_the_launchers_status(self):
        p, took = guard("echo 'llmtrain: error: bad config' >&2; sleep 0.3; exit 2", "--grace", "5")
        self.assertEqual(p.returncode, 2)
        self.assertLess(took, 4)

    def test_a_killed_launcher_keeps_the_ranks_abort_code(self):
        # A config error (exit 2) whose launcher hangs: the guard exits 2, from OpenMPI's or MPICH's line.
        for line in ("MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\nwith errorcode 2.",
                     "application called MPI_Abort(MPI_COMM_WORLD, 2) - process 0"):
            script = f"trap '' TERM; echo 'llmtrain: error: bad key'; echo '{line}' >&2; sleep 60"
            p, took = guard(script, "--grace", "0.5")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertLess(took, 4)

    def test_sighup_goes_to_the_launcher(self):
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, GUARD, "bash", "-c", "trap 'echo got HUP; exit 7' HUP; sleep 30 & wait"],
                             stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        p.send_signal(subprocess.signal.SIGHUP)
        out, _ = p.communicate(timeout=10)
        self.assertEqual((p.returncode, out), (7, "got HUP\n"))
        self.assertLess(time.monotonic() - t0, 5)

    def test_no_error_line_no_kill(self):
        with self.assertRaises(subprocess.TimeoutExpired):
            guard("sleep 30", "--grace", "0.5", timeout=3)

    def test_bad_grace(self):
        p = subprocess.run([sys.executable, GUARD, "--grace", "soon", "true"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--grace: expected seconds", p.stderr)


if __name__ == "__main__":
    unittest.main()
