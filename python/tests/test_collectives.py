"""cleave.ops' collectives from Python on 4 processes (collectives_job.py under cleave-run):
AllReduce (sum, max, on a created group), AllGather, ReduceScatter, Broadcast and
NeighborExchangeV2 against NumPy, and AllReduce traced inside a Python Cell in GRAPH_MODE."""
import unittest

from jobs import run_job


class CollectivesTest(unittest.TestCase):
    def test_collectives_on_four_processes(self):
        for r, text in enumerate(run_job(self, "collectives_job.py", 4)):
            self.assertIn("collectives ok", text, f"rank {r}")


if __name__ == "__main__":
    unittest.main()
