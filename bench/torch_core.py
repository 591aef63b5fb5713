"""PyTorch side of `bench/run.sh core`: the same rows, models and steps as core_bench.cc.

  python3 torch_core.py ROW [SECONDS]   prints "ROW <samples/s>"
"""
import statistics
import sys
import time

import torch
import torch.nn as nn


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, bias=False)
        self.conv2 = nn.Conv2d(6, 16, 5, bias=False)
        self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2, 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2, 2)
        x = torch.flatten(x, 1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc3(torch.relu(self.fc2(x)))


class TwoMatMul(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(32, 16) * 0.1)
        self.w2 = nn.Parameter(torch.randn(16, 16) * 0.1)

    def forward(self, x):
        return torch.relu(x @ self.w1) @ self.w2


def main(row, seconds):
    model, mode, batch, threads = row.split("_")
    batch, threads = int(batch[1:]), int(threads[1:])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if model == "lenet5":
        net, x = LeNet5(), torch.randn(batch, 1, 32, 32)
        y, loss_fn = torch.randint(0, 10, (batch,)), nn.CrossEntropyLoss()
    elif model == "mlp":
        net, x = Mlp(), torch.randn(batch, 1, 28, 28)
        y, loss_fn = torch.randint(0, 10, (batch,)), nn.CrossEntropyLoss()
    else:
        net, x = TwoMatMul(), torch.randn(batch, 32)
        y, loss_fn = torch.randn(batch, 16), nn.MSELoss()
    net.train(mode == "train")
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    def step():
        if mode == "train":
            opt.zero_grad()
            loss_fn(net(x), y).backward()
            opt.step()
        else:
            with torch.no_grad():
                net(x)

    end = time.perf_counter() + min(0.5, seconds / 4)
    while time.perf_counter() < end:
        step()
    rates = []
    for _ in range(5):
        steps, start = 0, time.perf_counter()
        while True:
            step()
            steps += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds / 5:
                break
        rates.append(steps * batch / elapsed)
    print(f"{row} {statistics.median(rates):.1f}")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 2.0)
