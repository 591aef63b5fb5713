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

    def test_named_layouts_and_their_mistakes(self):
        import cleave as ms
        import cleave.ops as ops
        layout = ms.Layout((2, 2, 2), ("dp", "sp", "mp"))
        x = layout("dp", ("sp", "mp"))
        self.assertEqual(repr(x), "layout(dev=(2, 2, 2), alias=(dp, sp, mp), map=(dp, (sp, mp)))")
        self.assertEqual(x.splits, [2, 4])
        matmul = ops.MatMul()
        matmul.shard((x, layout(("sp", "mp"), "None")))
        self.assertEqual(matmul.in_strategy, [[2, 4], [4, 1]])
        matmul.shard(((2, 4), (4, 1)), ((8, 1),))
        with self.assertRaisesRegex(ValueError, "has 2 axes but 1 names are given"):
            ms.Layout((2, 2), ("dp",))
        with self.assertRaisesRegex(ValueError, "'xx' is not an axis of the device matrix"):
            layout("dp", "xx")
        with self.assertRaisesRegex(TypeError, "mixes layouts and tuples"):
            matmul.shard((layout("dp", "sp"), (1, 1)))


if __name__ == "__main__":
    unittest.main()
