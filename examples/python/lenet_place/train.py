"""Seed 000's distributed graph partition in Python (examples/lenet_place/main.cc is the same
program in C++): LeNet on MNIST with fc1, fc2, fc3, conv1 and conv2 placed on workers 0..4. The
same script runs as the scheduler and as every worker (run.sh starts them as the seed's run.sh
does, or `cleave-run --worker_num 8 -- python3 train.py`); init() joins the job. Worker 0 prints
the seed's lines:

    epoch: 1 step: 1, loss is 2.30...
    Accuracy is: {'Accuracy': 0.98...}

Started alone, init() gives a world of one and place() has no effect: LeNet on one process.
"""
import argparse
import os

import cleave as ms
import cleave.dataset as ds
import cleave.dataset.transforms as C
import cleave.dataset.vision as CV
import cleave.nn as nn
from cleave import dtype as mstype
from cleave.dataset.vision import Inter
from cleave.common.initializer import TruncatedNormal
from cleave.train import Accuracy, Model, LossMonitor, TimeMonitor
from cleave.communication import init, get_rank

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--data-path", default=os.getenv("DATA_PATH"),
                    help="the MNIST_Data folder (default: $DATA_PATH)")
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--per-print-times", type=int, default=1)
parser.add_argument("--seed", type=int, default=1)
args = parser.parse_args()


def create_dataset(data_path, batch_size=32, repeat_size=1, num_parallel_workers=1):
    """create dataset for train or test"""
    mnist_ds = ds.MnistDataset(data_path)
    resize_height, resize_width = 32, 32
    rescale = 1.0 / 255.0
    shift = 0.0
    rescale_nml = 1 / 0.3081
    shift_nml = -1 * 0.1307 / 0.3081
    resize_op = CV.Resize((resize_height, resize_width), interpolation=Inter.LINEAR)
    rescale_nml_op = CV.Rescale(rescale_nml, shift_nml)
    rescale_op = CV.Rescale(rescale, shift)
    hwc2chw_op = CV.HWC2CHW()
    type_cast_op = C.TypeCast(mstype.int32)
    mnist_ds = mnist_ds.map(operations=type_cast_op, input_columns="label",
                            num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.map(operations=resize_op, input_columns="image",
                            num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.map(operations=rescale_op, input_columns="image",
                            num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.map(operations=rescale_nml_op, input_columns="image",
                            num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.map(operations=hwc2chw_op, input_columns="image",
                            num_parallel_workers=num_parallel_workers)
    buffer_size = 10000
    mnist_ds = mnist_ds.shuffle(buffer_size=buffer_size)
    mnist_ds = mnist_ds.batch(batch_size, drop_remainder=True)
    mnist_ds = mnist_ds.repeat(repeat_size)
    return mnist_ds


def conv(in_channels, out_channels, kernel_size, stride=1, padding=0):
    """weight initial for conv layer"""
    weight = weight_variable()
    return nn.Conv2d(in_channels, out_channels, kernel_size=kernel_size, stride=stride,
                     padding=padding, weight_init=weight, has_bias=False, pad_mode="valid")


def fc_with_initialize(input_channels, out_channels):
    """weight initial for fc layer"""
    weight = weight_variable()
    bias = weight_variable()
    return nn.Dense(input_channels, out_channels, weight, bias)


def weight_variable():
    """weight initial"""
    return TruncatedNormal(0.02)


class LeNet(nn.Cell):
    def __init__(self, num_class=10, channel=1):
        super(LeNet, self).__init__()
        self.num_class = num_class
        self.conv1 = conv(channel, 6, 5)
        self.conv2 = conv(6, 16, 5)
        self.fc1 = fc_with_initialize(16 * 5 * 5, 120)
        self.fc2 = fc_with_initialize(120, 84)
        self.fc3 = fc_with_initialize(84, self.num_class)
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()

    def construct(self, x):
        x = self.conv1(x)
        x = self.relu(x)
        x = self.max_pool2d(x)
        x = self.conv2(x)
        x = self.relu(x)
        x = self.max_pool2d(x)
        x = self.flatten(x)
        x = self.fc1(x)
        x = self.relu(x)
        x = self.fc2(x)
        x = self.relu(x)
        x = self.fc3(x)
        return x


def get_optimizer(net, lr=0.01):
    momentum = 0.9
    mom_optimizer = nn.Momentum(filter(lambda x: x.requires_grad, net.get_parameters()), lr,
                                momentum)
    return mom_optimizer


def get_loss():
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')


ms.set_context(mode=ms.GRAPH_MODE)
init()  # the scheduler's process serves the job here and exits
if not args.data_path:
    raise SystemExit("train.py: no data: set DATA_PATH or --data-path to an MNIST_Data folder")
ms.set_seed(args.seed)
net = LeNet()
net.fc1.place("MS_WORKER", 0)
net.fc2.place("MS_WORKER", 1)
net.fc3.place("MS_WORKER", 2)
net.conv1.place("MS_WORKER", 3)
net.conv2.place("MS_WORKER", 4)

opt = get_optimizer(net)
criterion = get_loss()
model = Model(net, criterion, opt, metrics={"Accuracy": Accuracy()})

print("================= Start training =================", flush=True)
ds_train = create_dataset(os.path.join(args.data_path, 'train'))
model.train(args.epochs, ds_train, callbacks=[LossMonitor(args.per_print_times), TimeMonitor()],
            dataset_sink_mode=False)

print("================= Start testing =================", flush=True)
ds_eval = create_dataset(os.path.join(args.data_path, 'test'))
acc = model.eval(ds_eval, dataset_sink_mode=False)

if get_rank() == 0:
    print("Accuracy is:", acc, flush=True)
