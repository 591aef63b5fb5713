"""cleave.ops' collectives from Python on 4 processes (collectives_job.py under cleave-run):
AllReduce (sum, max, on a created group), AllGather, ReduceScatter, Broadcast and
NeighborExchangeV2 against NumPy, and AllReduce traced inside a Python Cell in GRAPH_MODE."""
import os
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


class CollectivesTest(unittest.TestCase):
    def test_collectives_on_four_processes(self):
        bin_dir = os.environ.get("CLEAVE_BIN_DIR")
        if not bin_dir:
            self.skipTest("CLEAVE_BIN_DIR (the folder of cleave-run) is not set")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, OMP_NUM_THREADS="1", CLEAVE_COMM_TIMEOUT_MS="60000")
        with tempfile.TemporaryDirectory() as logs:
            job = subprocess.run(
                [os.path.join(bin_dir, "cleave-run"), "--worker_num", "4", "--master_port",
                 str(port), "--log_dir", logs, "--", sys.executable,
                 os.path.join(HERE, "collectives_job.py")],
                env=env, capture_output=True, text=True, timeout=240)
            self.assertEqual(job.returncode, 0, job.stdout + job.stderr)
            for r in range(4):
                with open(os.path.join(logs, f"worker_{r}.log")) as f:
                    self.assertIn("collectives ok", f.read(), f"rank {r}")


if __name__ == "__main__":
    unittest.main()
