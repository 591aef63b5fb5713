"""The core suite's training step driven from Python (bench/run.sh python): LeNet-5 (the same
layers as tests/testing/models.h's LeNet5) in a Cell written in Python, one GRAPH_MODE
TrainOneStepCell step per iteration, timed as core_bench times it (warm-up, then the median of 5
trials). Usage: python_core.py ROW [SECONDS], ROW as core_bench's (lenet5_train_b32_t1).
Prints "<row> <samples/s>"."""
import sys
import time

import numpy as np

import cleave as ms
from cleave import nn
from cleave.common.initializer import TruncatedNormal


class LeNet5(nn.Cell):
    def __init__(self, num_class=10, channel=1):
        super().__init__()
        self.conv1 = nn.Conv2d(channel, 6, 5, pad_mode="valid", weight_init=TruncatedNormal(0.02))
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid", weight_init=TruncatedNormal(0.02))
        self.fc1 = nn.Dense(16 * 5 * 5, 120, TruncatedNormal(0.02), TruncatedNormal(0.02))
        self.fc2 = nn.Dense(120, 84, TruncatedNormal(0.02), TruncatedNormal(0.02))
        self.fc3 = nn.Dense(84, num_class, TruncatedNormal(0.02), TruncatedNormal(0.02))
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()

    def construct(self, x):
        h = self.max_pool2d(self.relu(self.conv1(x)))
        h = self.max_pool2d(self.relu(self.conv2(h)))
        h = self.flatten(h)
        h = self.relu(self.fc1(h))
        h = self.relu(self.fc2(h))
        return self.fc3(h)


def main():
    row = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    model, kind, batch, _ = row.split("_")
    if model != "lenet5" or kind != "train":
        sys.exit(f"python_core.py: row {row} is not measured; expected lenet5_train_b<N>_t<T>")
    batch = int(batch[1:])
    ms.set_seed(0)
    net = LeNet5()
    net.set_train(True)
    x = ms.Tensor(np.random.standard_normal((batch, 1, 32, 32)).astype(np.float32))
    y = ms.Tensor(np.random.randint(0, 10, size=(batch,)).astype(np.int32))
    opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    step = nn.TrainOneStepCell(
        nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")), opt)
    warm_end = time.perf_counter() + min(0.5, seconds / 4)
    while time.perf_counter() < warm_end:
        step(x, y)
    rates = []
    for _ in range(5):
        steps, start = 0, time.perf_counter()
        while True:
            step(x, y)
            steps += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds / 5:
                break
        rates.append(steps * batch / elapsed)
    print(f"{row} {sorted(rates)[2]:.1f}")


main()
