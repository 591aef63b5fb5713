"""Seed 004's networks with shard in PYNATIVE_MODE (run by test_shard.py alone and as a job):
Net1 (block1.shard), Net2 (ms.shard of a Cell beside Cell.shard), NetError, and ms.shard of a
function. Prints one line per result; alone, nothing is sharded and the lines are the reference."""
import numpy as np

import cleave as ms
import cleave.nn as nn
import cleave.ops as ops
from cleave import Tensor
from cleave.communication import init, get_group_size

ms.set_context(mode=ms.PYNATIVE_MODE)
init()
n = get_group_size()
if n > 1:
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.AUTO_PARALLEL,
                                 search_mode="sharding_propagation", device_num=n)


class BasicBlock(nn.Cell):
    def __init__(self):
        super(BasicBlock, self).__init__()
        self.dense1 = nn.Dense(32, 32, weight_init="he_uniform")
        self.gelu = nn.GELU()
        self.dense2 = nn.Dense(32, 32, weight_init="he_uniform")

    def construct(self, x):
        return self.dense2(self.gelu(self.dense1(x)))


class Net(nn.Cell):
    def __init__(self):
        super(Net, self).__init__()
        self.block1 = BasicBlock()
        self.block2 = BasicBlock()
        self.block3 = BasicBlock()

    def construct(self, x):
        return self.block3(self.block2(self.block1(x)))


class Net1(Net):
    def __init__(self):
        super(Net1, self).__init__()
        if n > 1:
            self.block1.shard(in_strategy=((1, n),),
                              parameter_plan={'self.block1.dense2.weight': (n, 1)})


class Net2(Net):
    def __init__(self):
        super(Net2, self).__init__()
        if n > 1:
            self.block1_graph = ms.shard(self.block1, in_strategy=((n, 1),),
                                         parameter_plan={'self.block1.dense2.weight': (n, 1)})
            self.block2.shard(in_strategy=((1, n),))
        else:
            self._block1_graph = self.block1  # alone: the block itself, eager

    def construct(self, x):
        block1 = self.block1_graph if n > 1 else self._block1_graph
        return self.block3(self.block2(block1(x)))


class NetError(Net):
    def __init__(self):
        super(NetError, self).__init__()
        self.block1 = ms.shard(self.block1, in_strategy=((n, 1),),
                               parameter_plan={'self.block1.dense2.weight': (n, 1)})


def dense_relu(x, weight, bias):
    return ops.relu(ops.bias_add(ops.matmul(x, weight), bias))


np.random.seed(0)
x = Tensor(np.random.uniform(0, 1, (32, 32)), ms.float32)
for cls in (Net1, Net2):
    ms.set_seed(1)
    out = cls()(x).asnumpy()
    print(cls.__name__, " ".join(f"{v:.8e}" for v in out[::7, ::5].ravel()), flush=True)
if n > 1:
    try:
        NetError()
    except TypeError as e:
        print("TypeError:", e, flush=True)
ms.set_auto_parallel_context(dataset_strategy="full_batch")
xx = Tensor(np.random.uniform(0, 1, (32, 128)), ms.float32)
weight = Tensor(np.random.uniform(0, 1, (128, 10)), ms.float32)
bias = Tensor(np.random.uniform(0, 1, (10,)), ms.float32)
f = ms.shard(dense_relu, in_strategy=((2, 2), None, None)) if n == 4 else dense_relu
result = f(xx, weight, bias)
print("dense_relu", result.shape, " ".join(f"{v:.8e}" for v in result.asnumpy()[::5].ravel()),
      flush=True)
# Named layouts (MindSpore 2.x): the reduction dimension over both axes, out of device order,
# and an out_strategy scattering the pending sums over the rows.
layout = ms.Layout((2, 2), ("dp", "mp"))


def matmul(a, b):
    return ops.matmul(a, b)


if n == 4:
    g = ms.shard(matmul,
                 in_strategy=(layout("None", ("mp", "dp")), None),
                 out_strategy=(layout(("mp", "dp"), "None"),))
else:
    g = ops.matmul
named = g(xx, weight)
print("named", named.shape, " ".join(f"{v:.8e}" for v in named.asnumpy()[::5].ravel()), flush=True)
