"""Seed 004 from Python: shard inside PYNATIVE_MODE code on a job of 4 processes (cleave-run)
gives the single process's numbers; assigning ms.shard's result over a Cell attribute is the
seed's TypeError."""
import os
import subprocess
import sys
import unittest

import numpy as np

from jobs import HERE, env, run_job


def results(text):
    """{name: values} of shard_job.py's lines."""
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name in ("Net1", "Net2"):
            out[name] = np.array([float(v) for v in rest.split()])
        elif name in ("dense_relu", "named"):
            out[name] = np.array([float(v) for v in rest.split(")", 1)[1].split()])
    return out


class ShardTest(unittest.TestCase):
    def test_a_job_of_four_gives_the_single_process_numbers(self):
        single = subprocess.run([sys.executable, os.path.join(HERE, "shard_job.py")], env=env(),
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(single.returncode, 0, single.stderr)
        ranks = run_job(self, "shard_job.py", 4)
        want = results(single.stdout)
        self.assertEqual(sorted(want), ["Net1", "Net2", "dense_relu", "named"])
        for r, text in enumerate(ranks):
            got = results(text)
            for name in want:
                np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7,
                                           err_msg=f"rank {r}: {name}")
            self.assertIn("TypeError: For 'Cell', the type of block1 should be cell, but got "
                          "function.", text)


if __name__ == "__main__":
    unittest.main()
