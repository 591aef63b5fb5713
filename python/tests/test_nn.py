"""Cells written in Python: registration, tracing in GRAPH_MODE, eager PYNATIVE_MODE, errors."""
import json
import os
import subprocess
import sys
import textwrap
import unittest

import numpy as np

import cleave as ms
from cleave import nn, ops


class Mlp(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(6, 8)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(8, 3)
        self.scale = ms.Parameter(ms.Tensor(np.full((3,), 0.5, np.float32)), name="scale")

    def construct(self, x):
        x = x[:, 0:6]  # Python slicing traces into the graph
        return self.fc2(self.relu(self.fc1(x))) * self.scale + 1


def data(seed=0):
    r = np.random.RandomState(seed)
    return (ms.Tensor(r.rand(8, 7).astype(np.float32)),
            ms.Tensor(r.randint(0, 3, size=(8,)).astype(np.int32)))


def train_steps(mode, steps=4):
    ms.set_context(mode=mode)
    ms.set_seed(3)
    net = Mlp()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)
    x, y = data()
    losses = [float(step(x, y)) for _ in range(steps)]
    return losses, {k: v.asnumpy().copy() for k, v in net.parameters_and_names()}


class CellTest(unittest.TestCase):
    def tearDown(self):
        ms.set_context(mode=ms.GRAPH_MODE)

    def test_two_threads_split_the_batch_and_train_as_one_step(self):
        # The threads are read when the process starts: each run is a process of its own, on 2
        # threads, with split_batch_over_threads on and off.
        script = textwrap.dedent("""
            import json, os, sys, tempfile
            import numpy as np
            import cleave as ms
            from cleave import nn

            class Net(nn.Cell):
                def __init__(self):
                    super().__init__()
                    self.fc1 = nn.Dense(256, 512)
                    self.relu = nn.ReLU()
                    self.fc2 = nn.Dense(512, 10)

                def construct(self, x):
                    return self.fc2(self.relu(self.fc1(x)))

            d = tempfile.mkdtemp()
            ms.set_context(mode=ms.GRAPH_MODE, save_graphs=1, save_graphs_path=d,
                           split_batch_over_threads=sys.argv[1] == "on")
            ms.set_seed(5)
            net = Net()
            loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
            step = nn.TrainOneStepCell(nn.WithLossCell(net, loss),
                                       nn.Momentum(net.trainable_params(), 0.05, 0.9))
            r = np.random.RandomState(0)
            x = ms.Tensor(r.rand(32, 256).astype(np.float32))
            y = ms.Tensor(r.randint(0, 10, size=(32,)).astype(np.int32))
            losses = [float(step(x, y)) for _ in range(10)]
            blocks = sorted(f for _, _, files in os.walk(d) for f in files
                            if "execute_block" in f and f.endswith(".ir"))
            print(json.dumps({"losses": losses, "blocks": blocks,
                              "setting": ms.get_context("split_batch_over_threads")}))
        """)
        runs = {}
        for split in ("on", "off"):
            out = subprocess.run([sys.executable, "-c", script, split],
                                 env=dict(os.environ, OMP_NUM_THREADS="2"),
                                 capture_output=True, text=True, timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr)
            runs[split] = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual(len(runs["on"]["blocks"]), 2, runs["on"]["blocks"])
        self.assertEqual(runs["off"]["blocks"], [])
        self.assertEqual((runs["on"]["setting"], runs["off"]["setting"]), (True, False))
        np.testing.assert_allclose(runs["on"]["losses"], runs["off"]["losses"], rtol=1e-5)
        self.assertLess(runs["on"]["losses"][-1], runs["on"]["losses"][0])

    def test_attributes_register_cells_and_parameters_by_name(self):
        net = Mlp()
        names = [k for k, _ in net.parameters_and_names()]
        self.assertEqual(sorted(names),
                         ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "scale"])
        self.assertEqual(len(net.trainable_params()), 5)
        self.assertEqual(net.cls_name, "Mlp")
        self.assertIs(net.fc1.matmul.shard(((2, 1), (1, 1))), net.fc1.matmul)

    def test_a_graph_mode_step_equals_the_eager_step(self):
        graph_losses, graph_params = train_steps(ms.GRAPH_MODE)
        eager_losses, eager_params = train_steps(ms.PYNATIVE_MODE)
        np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)
        self.assertLess(graph_losses[-1], graph_losses[0])
        for k in graph_params:
            np.testing.assert_allclose(graph_params[k], eager_params[k], rtol=1e-5, atol=1e-6,
                                       err_msg=k)

    def test_the_python_cell_equals_the_same_network_computed_in_numpy(self):
        ms.set_context(mode=ms.PYNATIVE_MODE)
        net = Mlp()
        x, _ = data()
        p = {k: v.asnumpy() for k, v in net.parameters_and_names()}
        h = np.maximum(x.asnumpy()[:, :6] @ p["fc1.weight"].T + p["fc1.bias"], 0)
        want = (h @ p["fc2.weight"].T + p["fc2.bias"]) * p["scale"] + 1
        np.testing.assert_allclose(net(x).asnumpy(), want, rtol=1e-5)

    def test_cells_held_only_by_cpp_owners_keep_their_python_construct(self):
        import gc
        ms.set_context(mode=ms.GRAPH_MODE)
        ms.set_seed(3)
        opt_net = Mlp()
        step = nn.TrainOneStepCell(
            nn.WithLossCell(Mlp(), nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                    reduction="mean")),
            nn.SGD(opt_net.trainable_params(), 0.1))
        seq = nn.SequentialCell([Mlp(), nn.ReLU()])
        gc.collect()
        x, y = data()
        self.assertEqual(seq(x).shape, (8, 3))
        self.assertGreater(float(step(x, y)), 0)

    def test_operators_are_named_after_their_attribute_and_keep_their_placement(self):
        import glob
        import os
        import pathlib
        import tempfile

        class Placed(nn.Cell):
            def __init__(self):
                super().__init__()
                self.fc = nn.Dense(7, 3)
                self.scale_op = ops.Mul()
                self.all_reduce = ops.AllReduce().place("MS_WORKER", 0)

            def construct(self, x, y):
                loss = ((self.scale_op(self.fc(x), self.fc(x)) - 1) ** 2).mean()
                return self.all_reduce(loss)

        with tempfile.TemporaryDirectory() as d:
            ms.set_context(mode=ms.GRAPH_MODE, save_graphs=2, save_graphs_path=d)
            try:
                net = Placed()
                x, y = data()
                nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), 0.1))(x, y)
            finally:
                ms.set_context(save_graphs=0)
            text = "".join(pathlib.Path(f).read_text()
                           for f in glob.glob(os.path.join(d, "**", "*.ir"), recursive=True))
        self.assertIn("{instance name: network.scale_op}", text)
        self.assertRegex(text, r"AllReduce\(.*\{instance name: network.all_reduce\}.*"
                               r"\{placement: \(role: MS_WORKER, rank: 0\)\}")
        with self.assertRaisesRegex(ValueError, "rank_id >= 0"):
            ops.AllReduce().place("MS_WORKER", -1)

    def test_a_branch_on_a_traced_value_is_a_clear_error(self):
        class Branchy(nn.Cell):
            def __init__(self):
                super().__init__()
                self.fc = nn.Dense(7, 3)

            def construct(self, x):
                y = self.fc(x)
                if y.sum() > 0:
                    return y
                return -y

        ms.set_context(mode=ms.GRAPH_MODE)
        net = Branchy()
        step = nn.TrainOneStepCell(
            nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
            nn.SGD(net.trainable_params(), 0.1))
        x, y = data()
        with self.assertRaisesRegex(TypeError, "traced tensor has no value yet"):
            step(x, y)
        ms.set_context(mode=ms.PYNATIVE_MODE)
        self.assertEqual(net(x).shape, (8, 3))  # eagerly the branch is a value

    def test_mistakes_in_a_cell_are_named(self):
        class NoInit(nn.Cell):
            def __init__(self):
                self.fc = nn.Dense(2, 2)

        with self.assertRaisesRegex(RuntimeError, "super\\(\\).__init__\\(\\)"):
            NoInit()

        class Pair(nn.Cell):
            def construct(self, x):
                return x, x

        with self.assertRaisesRegex(TypeError, "Pair.construct returned tuple"):
            Pair()(ms.Tensor([1.0]))

        class NoConstruct(nn.Cell):
            pass

        with self.assertRaisesRegex(NotImplementedError, "must define construct"):
            NoConstruct()(ms.Tensor([1.0]))
        with self.assertRaisesRegex(TypeError, "called with 3 inputs"):
            nn.ReLU()(ms.Tensor([1.0]), ms.Tensor([1.0]), ms.Tensor([1.0]))
        with self.assertRaisesRegex(TypeError, "parameter groups"):
            nn.SGD([{"params": Mlp().trainable_params()}], 0.1)


if __name__ == "__main__":
    unittest.main()
