"""PyTorch's side of bench/run.sh dp: the models of bench/dp_bench.cc trained with
DistributedDataParallel (gloo backend, one thread per process) on a fixed random batch.

  python3 torch_dp.py MODEL BATCH SECONDS NP

Prints the same row as dp_bench: "dp_<MODEL>_b<BATCH>_np<NP> samples_per_s=... step_ms=...".
NP 1 trains the model alone (no DDP), as dp_bench does alone.
"""
import datetime
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, bias=False)
        self.conv2 = nn.Conv2d(6, 16, 5, bias=False)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Bottleneck(nn.Module):
    """examples/common/resnet.h's ResidualBlock: 1x1 -> 3x3 (stride) -> 1x1, BatchNorm after each."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        mid = cout // 4
        self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    def __init__(self, blocks, channels, stem):
        super().__init__()
        self.conv1 = nn.Conv2d(3, stem, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        layers, cin = [], stem
        for s, (n, cout) in enumerate(zip(blocks, channels)):
            for b in range(n):
                layers.append(Bottleneck(cin, cout, 2 if b == 0 and s > 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        x = self.layers(x)
        return self.fc(x.mean(dim=(2, 3)))


def make(model):
    if model == "lenet":
        return LeNet(), 1
    if model == "resnet_small":
        return ResNet([1, 1, 1, 1], [64, 128, 256, 512], 16), 3
    return ResNet([3, 4, 6, 3], [256, 512, 1024, 2048], 64), 3


def worker(rank, model_name, batch, seconds, nprocs, port):
    torch.set_num_threads(1)
    if nprocs > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=nprocs, timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(1)
    model, channels = make(model_name)
    net = nn.parallel.DistributedDataParallel(model) if nprocs > 1 else model
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, channels, 32, 32)
    y = torch.arange(batch) % 10

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    go = torch.ones(1)
    steps = 0
    start = time.perf_counter()
    while True:
        step()
        steps += 1
        if nprocs > 1:
            if steps % 4 == 0:
                go[0] = 0.0 if rank == 0 and time.perf_counter() - start >= seconds else 1.0
                dist.broadcast(go, 0)
                if go[0] == 0.0:
                    break
        elif time.perf_counter() - start >= seconds:
            break
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(f"dp_{model_name}_b{batch}_np{nprocs} samples_per_s={nprocs * batch * steps / elapsed:.1f} "
              f"step_ms={elapsed * 1000 / steps:.3f}", flush=True)
    if nprocs > 1:
        dist.barrier()
        dist.destroy_process_group()


def main():
    model, batch, seconds, nprocs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if nprocs == 1:
        worker(0, model, batch, seconds, 1, port)
    else:
        mp.spawn(worker, args=(model, batch, seconds, nprocs, port), nprocs=nprocs)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
