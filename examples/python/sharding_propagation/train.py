"""Seed 003 in Python (examples/sharding_propagation/main.cc is the same program in C++):
AUTO_PARALLEL with sharding propagation. One MatMul has a strategy given by hand, ((2, 4), (4, 1));
the ReLU, the second MatMul and the loss get theirs from propagation. Every rank prints the seed's
LossMonitor lines ("epoch: 1 step: 1, loss is ...") and saves its checkpoints into
<ckpt-dir>/<rank>; rank R's graphs go to <graphs>/rank_R (save_graphs=2).

Started by run.sh (cleave-run, 8 workers) or run_with_mpi.sh (mpirun -n 8); alone it trains the
same rows on one device, and its losses are the job's. The data is the seed's get_dataset (NumPy,
seed 1); --cleave-data draws the rows with cleave's generator instead, as the C++ program does,
so that both print the same numbers.
"""
import argparse

import numpy as np

import cleave as ms
import cleave.dataset as ds
from cleave import ops, Parameter
from cleave.common.initializer import initializer
from cleave.communication import init, get_rank, get_group_size
from cleave.nn import Cell, Momentum, MSELoss
from cleave.train import LossMonitor, Model, ModelCheckpoint

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--steps-per-epoch", type=int, default=4)
parser.add_argument("--batch", type=int, default=2, help="rows per rank")
parser.add_argument("--graphs", default="saved_graph")
parser.add_argument("--ckpt-dir", default=".")
parser.add_argument("--cleave-data", action="store_true",
                    help="draw the rows as the C++ example does (cleave's generator, seed 1)")
args = parser.parse_args()


def get_dataset(batch_size, in_dim, out_dim, step_per_epoch):
    np.random.seed(1)
    input_data = np.random.rand(batch_size, in_dim).astype(np.float32)
    label_data = np.random.rand(batch_size, out_dim).astype(np.float32)
    if args.cleave_data:
        ms.set_seed(1)
        input_data = ms._cleave.uniform([batch_size, in_dim]).asnumpy()
        label_data = ms._cleave.uniform([batch_size, out_dim]).asnumpy()

    def generate():
        for _ in range(step_per_epoch):
            yield (input_data, label_data)
    return generate


class Net(Cell):
    """define net"""
    def __init__(self, in_dim, hidden_dim, out_dim):
        super().__init__()
        self.in_dim = in_dim
        self.hidden_dim = hidden_dim
        self.out_dim = out_dim
        self.weight = Parameter(initializer("normal", [self.in_dim, self.hidden_dim]), "w")
        self.weight2 = Parameter(initializer("normal", [self.hidden_dim, self.out_dim]), "w2")
        # (2, 4): the input split in two in the batch and in four in the width; (4, 1): the
        # weight split in four in the height.
        self.matmul = ops.MatMul().shard(((2, 4), (4, 1)))
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul()

    def construct(self, x):
        out = self.matmul(x, self.weight)
        out = self.relu(out)
        out = self.matmul2(out, self.weight2)
        return out


var_step_per_epoch = args.steps_per_epoch
var_single_batch_size = args.batch
var_in_dim = 32
var_hidden_dim = 16
var_out_dim = 16

init()
rank_id = get_rank()
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU", save_graphs=2,
               save_graphs_path=f"{args.graphs}/rank_{rank_id}")
if get_group_size() > 1:
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.AUTO_PARALLEL,
                                 search_mode="sharding_propagation",
                                 dataset_strategy="data_parallel")

fake_dataset = get_dataset(var_single_batch_size, var_in_dim, var_out_dim, var_step_per_epoch)
dataset = ds.GeneratorDataset(fake_dataset, ["input", "label"])

ms.set_seed(2)
net = Net(var_in_dim, var_hidden_dim, var_out_dim)
loss = MSELoss()
callback = [LossMonitor(), ModelCheckpoint(directory="{}/{}".format(args.ckpt_dir, rank_id))]
learning_rate = 0.2
momentum = 0.1
opt = Momentum(net.trainable_params(), learning_rate, momentum)
model = Model(net, loss_fn=loss, optimizer=opt)
model.train(args.epochs, dataset, callbacks=callback, dataset_sink_mode=False)
