"""Model.train from Python: GeneratorDataset over Python, Python map operations on 2 workers,
Python callbacks (their exceptions, request_stop), Ctrl-C, checkpoints."""
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import numpy as np

import cleave as ms
import cleave.dataset as ds
from cleave import nn
from cleave.train import Model, Callback, LossMonitor


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(4, 16)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(16, 3)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


def samples(n=64, seed=0):
    r = np.random.RandomState(seed)
    x = r.rand(n, 4).astype(np.float32)
    y = (x.sum(axis=1) * 3 / 4).astype(np.int32).clip(0, 2)
    return x, y


def generator_dataset(batch=8, workers=1, python_map=False):
    x, y = samples()

    def source():
        for i in range(len(x)):
            yield x[i], y[i]

    d = ds.GeneratorDataset(source, column_names=["data", "label"], shuffle=False)
    if python_map:
        d = d.map(lambda a: (a * 2.0 - 1.0).astype(np.float32), "data",
                  num_parallel_workers=workers)
    return d.batch(batch, drop_remainder=True)


class Record(Callback):
    def __init__(self, fail_at=None, stop_at=None):
        super().__init__()
        self.losses, self.fail_at, self.stop_at = [], fail_at, stop_at

    def step_end(self, run_context):
        cb = run_context.original_args()
        self.losses.append(float(cb.net_outputs))
        if cb.cur_step_num == self.fail_at:
            raise KeyError(f"raised by the callback at step {cb.cur_step_num}")
        if cb.cur_step_num == self.stop_at:
            run_context.request_stop()


def fit(mode, callbacks, **data_args):
    ms.set_context(mode=mode)
    ms.set_seed(5)
    net = Net()
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), 0.1, 0.9), metrics={"acc"})
    model.train(2, generator_dataset(**data_args), callbacks=callbacks)
    return model, net


class TrainTest(unittest.TestCase):
    def tearDown(self):
        ms.set_context(mode=ms.GRAPH_MODE)

    def test_a_python_source_and_map_on_two_workers_train_as_one_worker_does(self):
        one, two = Record(), Record()
        fit(ms.GRAPH_MODE, [one], workers=1, python_map=True)
        fit(ms.GRAPH_MODE, [two], workers=2, python_map=True)  # no deadlock on the GIL
        self.assertEqual(len(one.losses), 16)
        np.testing.assert_array_equal(one.losses, two.losses)
        eager = Record()
        fit(ms.PYNATIVE_MODE, [eager], workers=2, python_map=True)
        np.testing.assert_allclose(one.losses, eager.losses, rtol=1e-5)
        self.assertLess(np.mean(one.losses[-4:]), np.mean(one.losses[:4]))

    def test_a_callbacks_exception_stops_training_with_that_exception(self):
        rec = Record(fail_at=3)
        with self.assertRaisesRegex(KeyError, "raised by the callback at step 3"):
            fit(ms.GRAPH_MODE, [rec])
        self.assertEqual(len(rec.losses), 3)

    def test_request_stop_ends_training_after_that_step(self):
        rec = Record(stop_at=5)
        fit(ms.GRAPH_MODE, [rec, LossMonitor(100)])
        self.assertEqual(len(rec.losses), 5)

    def test_leaving_a_loop_over_a_pipeline_with_python_workers_does_not_hang(self):
        def source():
            for i in range(1000):
                yield (np.full((4,), i, np.float32),)

        d = ds.GeneratorDataset(source, ["x"]).map(lambda a: a * 2, "x", num_parallel_workers=2)
        for k, row in enumerate(d.batch(2).create_tuple_iterator()):
            if k == 3:
                break  # the iterator is dropped while its workers call the lambda
        it = d.create_dict_iterator(output_numpy=True)
        np.testing.assert_array_equal(next(it)["x"], np.zeros(4, np.float32))
        del it

    def test_a_python_map_operations_exception_is_reported(self):
        d = ds.GeneratorDataset(lambda: iter([(np.zeros(2, np.float32),)]), ["x"])
        d = d.map(lambda a: 1 / 0, "x")
        with self.assertRaisesRegex(Exception, "division by zero"):
            list(d.create_tuple_iterator())

    def test_bad_arguments_are_named(self):
        net = Net()
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      nn.SGD(net.trainable_params(), 0.1))
        with self.assertRaisesRegex(TypeError, "is not a Callback"):
            model.train(1, generator_dataset(), callbacks=[print])
        with self.assertRaisesRegex(ValueError, "row of 2 values, but column_names names 1"):
            list(ds.GeneratorDataset(lambda: iter([(1.0, 2.0)]), ["x"]).create_tuple_iterator())
        with self.assertRaisesRegex(ValueError, "'accuracy2' is not a metric name"):
            Model(net, metrics={"accuracy2"})
        with self.assertRaisesRegex(ValueError, "'parallel_mod' is not a setting"):
            ms.set_auto_parallel_context(parallel_mod="data_parallel")
        with self.assertRaisesRegex(TypeError, "mode is 'graph'; expected GRAPH_MODE"):
            ms.set_context(mode="graph")
        with self.assertRaisesRegex(TypeError, "device_num is '8'; expected an int"):
            ms.set_auto_parallel_context(device_num="8")
        with self.assertRaisesRegex(ValueError, "'semi' is not a mode"):
            ms.set_auto_parallel_context(parallel_mode="semi")
        with self.assertRaisesRegex(ValueError, "has no folder|not a folder|no such|does not exist"):
            ds.MnistDataset("/nonexistent/mnist")

    def test_eval_and_checkpoints_round_trip(self):
        model, net = fit(ms.GRAPH_MODE, [])
        acc = model.eval(generator_dataset())
        self.assertIn("acc", acc)
        self.assertGreater(acc["acc"], 0.3)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "net.ckpt")
            ms.save_checkpoint(net, path)
            params = ms.load_checkpoint(path)
            other = Net()
            self.assertEqual(ms.load_param_into_net(other, params), [])
            for (k, a), (_, b) in zip(net.parameters_and_names(), other.parameters_and_names()):
                np.testing.assert_array_equal(a.asnumpy(), b.asnumpy(), err_msg=k)

    def test_a_built_model_resumes_from_its_checkpoint_folder(self):
        # Model.build compiles the step first; load_distributed_checkpoint then continues the
        # uninterrupted run's losses, reading the one file the folder's one rank saved.
        whole = Record()
        fit(ms.GRAPH_MODE, [whole])
        from cleave.train import ModelCheckpoint, CheckpointConfig
        with tempfile.TemporaryDirectory() as d:
            first = Record()
            fit(ms.GRAPH_MODE, [first, ModelCheckpoint("CKP", os.path.join(d, "0"),
                                                       CheckpointConfig(8, 1))])
            ms.set_seed(5)
            net = Net()
            model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                          nn.Momentum(net.trainable_params(), 0.1, 0.9))
            with self.assertRaisesRegex(ValueError, "valid_dataset is not supported"):
                model.build(generator_dataset(), generator_dataset())
            model.build(generator_dataset())
            model.load_distributed_checkpoint(d, "")
            self.assertEqual(model.loaded_files, [os.path.join(d, "0", "CKP-2_8.ckpt")])
            rest = Record()
            model.train(3, generator_dataset(), callbacks=[rest])
        np.testing.assert_allclose(first.losses, whole.losses, rtol=1e-6)
        self.assertEqual(len(rest.losses), 8)
        fit3 = Record()
        ms.set_seed(5)
        net = Net()
        Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
              nn.Momentum(net.trainable_params(), 0.1, 0.9)).train(
                  3, generator_dataset(), callbacks=[fit3])
        np.testing.assert_allclose(rest.losses, fit3.losses[16:], rtol=1e-5)

    def test_ctrl_c_stops_a_training_loop(self):
        script = textwrap.dedent("""
            import sys, numpy as np, cleave as ms, cleave.dataset as ds
            from cleave import nn
            from cleave.train import Model, Callback
            class Started(Callback):
                def step_end(self, rc):
                    if rc.original_args().cur_step_num == 1:
                        print("started", flush=True)
            class Source:  # random access: the size is known without reading it
                def __len__(self):
                    return 10**8
                def __getitem__(self, i):
                    return np.zeros(4, np.float32), np.int32(0)
            net = nn.Dense(4, 3)
            model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                          nn.SGD(net.trainable_params(), 0.1))
            data = ds.GeneratorDataset(Source(), ["data", "label"]).batch(2)
            model.train(1, data, callbacks=[Started()])
        """)
        p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(p.stdout.readline().strip(), "started")
            p.send_signal(signal.SIGINT)
            start = time.monotonic()
            _, err = p.communicate(timeout=30)
        finally:
            p.kill()
        self.assertLess(time.monotonic() - start, 10)
        self.assertIn("KeyboardInterrupt", err)
        self.assertNotEqual(p.returncode, 0)


if __name__ == "__main__":
    unittest.main()
