"""Seed 002's manual data parallelism in Python (examples/manual_parallel/main.cc is the same
program in C++): every rank reads the same global batches of 32, its network slices its rows
[rank*32/N, (rank+1)*32/N) out of the batch inside construct, and the loss (mean over the local
rows) is AllReduce'd and divided by the device count. Every rank prints the same lines:

    epoch: 1 step: 20, loss is 2.24...

Started by run.sh (cleave-run, 8 workers) or run_mpirun.sh (mpirun -n 8); started alone, init()
gives world size 1 and the slice is the whole batch. As in the C++ example, GRAPH_MODE averages
the gradients over the ranks (DATA_PARALLEL with gradients_mean), so that every rank keeps the
parameters a single process training on whole batches has; --no-grad-mean turns that off.
"""
import argparse
import os
import sys

import cleave as ms
import cleave.dataset as ds
from cleave import nn, ops, train
from cleave.communication import init, get_rank, get_group_size

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--data-path", default=os.getenv("DATA_PATH"),
                    help="the MNIST_Data folder (default: $DATA_PATH)")
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--num-samples", type=int, default=0,
                    help="train on the first this many images only (0: all)")
parser.add_argument("--per-print-times", type=int, default=20)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--no-grad-mean", action="store_true")
args = parser.parse_args()
if not args.data_path:
    sys.exit("train.py: no data: set DATA_PATH or --data-path to an MNIST_Data folder")

ms.set_context(mode=ms.GRAPH_MODE)
init()
cur_rank = get_rank()
batch_size = 32
device_num = get_group_size()
shard_size = batch_size // device_num
if batch_size % device_num != 0:
    sys.exit(f"train.py: the batch of {batch_size} does not split over {device_num} devices")
ms.set_seed(args.seed)


class Network(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.layer1 = nn.Dense(28 * 28, 512)
        self.relu1 = nn.ReLU()
        self.layer2 = nn.Dense(512, 512)
        self.relu2 = nn.ReLU()
        self.layer3 = nn.Dense(512, 10)

    def construct(self, x):
        x = x[cur_rank * shard_size:cur_rank * shard_size + shard_size]
        x = self.flatten(x)
        x = self.layer1(x)
        x = self.relu1(x)
        x = self.layer2(x)
        x = self.relu2(x)
        logits = self.layer3(x)
        return logits


net = Network()


def create_dataset():
    options = {"num_samples": args.num_samples} if args.num_samples else {}
    dataset = ds.MnistDataset(os.path.join(args.data_path, "train"), usage="train", **options)
    image_transforms = [
        ds.vision.Rescale(1.0 / 255.0, 0),
        ds.vision.Normalize(mean=(0.1307,), std=(0.3081,)),
        ds.vision.HWC2CHW()
    ]
    label_transform = ds.transforms.TypeCast(ms.int32)
    dataset = dataset.map(image_transforms, 'image')
    dataset = dataset.map(label_transform, 'label')
    dataset = dataset.batch(batch_size)
    return dataset


data_set = create_dataset()


class ReduceLoss(nn.Cell):
    def __init__(self):
        super().__init__()
        self.loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.all_reduce = ops.AllReduce()

    def construct(self, data, label):
        label = label[cur_rank * shard_size:cur_rank * shard_size + shard_size]
        loss_value = self.loss(data, label)
        loss_value = self.all_reduce(loss_value) / device_num
        return loss_value


loss_fn = ReduceLoss()

if not args.no_grad_mean and device_num > 1:
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
optimizer = nn.SGD(net.trainable_params(), 1e-2)
loss_cb = train.LossMonitor(args.per_print_times)
model = ms.Model(net, loss_fn=loss_fn, optimizer=optimizer)
model.train(args.epochs, data_set, callbacks=[loss_cb])

# A fingerprint of the trained parameters, so that runs, ranks and the C++ example compare.
total = total_sq = 0.0
for p in net.trainable_params():
    v = p.asnumpy().astype("float64")
    total += float(v.sum())
    total_sq += float((v * v).sum())
print(f"rank {cur_rank} of {device_num}: parameters sum {total:.10e} sum of squares {total_sq:.10e}",
      flush=True)
