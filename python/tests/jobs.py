"""Runs a script of this folder as a job of N processes under cleave-run (for the tests that need
several ranks); CLEAVE_BIN_DIR names the folder of cleave-run (CTest sets it)."""
import os
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def env():
    return dict(os.environ, OMP_NUM_THREADS="1", CLEAVE_COMM_TIMEOUT_MS="60000")


def run_job(test, script, workers):
    """The output of each rank of `script` run by cleave-run with `workers` processes; fails
    `test` (a unittest.TestCase) with the job's output when the job fails, skips it without
    CLEAVE_BIN_DIR."""
    bin_dir = os.environ.get("CLEAVE_BIN_DIR")
    if not bin_dir:
        test.skipTest("CLEAVE_BIN_DIR (the folder of cleave-run) is not set")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as logs:
        job = subprocess.run(
            [os.path.join(bin_dir, "cleave-run"), "--worker_num", str(workers), "--master_port",
             str(port), "--log_dir", logs, "--", sys.executable, os.path.join(HERE, script)],
            env=env(), capture_output=True, text=True, timeout=240)
        test.assertEqual(job.returncode, 0, job.stdout + job.stderr)
        ranks = []
        for r in range(workers):
            with open(os.path.join(logs, f"worker_{r}.log")) as f:
                ranks.append(f.read())
        return ranks
