"""Writes PyTorch reference results for tests/parity/parity_test.cc.

For a model (lenet | mlp) it saves, in OUT_DIR/<model>/: the initial parameters, 10 batches of
inputs and labels, the logits and loss on batch 0 with every parameter gradient, the loss of each
of 10 Momentum(lr 0.01, momentum 0.9) steps (one per batch), and the parameters after them.
Every tensor is a raw little-endian file NAME.bin listed in manifest.txt as `NAME DTYPE DIMS`.
"""
import os
import sys

import torch
import torch.nn as nn


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, bias=False)
        self.conv2 = nn.Conv2d(6, 16, 5, bias=False)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2, 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2, 2)
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 512)
        self.fc3 = nn.Linear(512, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(torch.flatten(x, 1)))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def save(out_dir, manifest, name, tensor):
    t = tensor.detach().contiguous()
    dtype = {torch.float32: "Float32", torch.int32: "Int32"}[t.dtype]
    t.numpy().tofile(os.path.join(out_dir, name + ".bin"))
    dims = ",".join(str(d) for d in t.shape) or "scalar"
    manifest.append(f"{name} {dtype} {dims}")


def main(out_root, model_name):
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    if model_name == "lenet":
        net, in_shape = LeNet5(), (32, 1, 32, 32)
    else:
        net, in_shape = Mlp(), (32, 1, 28, 28)
    out_dir = os.path.join(out_root, model_name)
    os.makedirs(out_dir, exist_ok=True)
    manifest = []
    for name, p in net.named_parameters():
        save(out_dir, manifest, "init." + name, p)
    batches = [(torch.randn(in_shape), torch.randint(0, 10, (in_shape[0],), dtype=torch.int32))
               for _ in range(10)]
    for i, (x, y) in enumerate(batches):
        save(out_dir, manifest, f"x.{i}", x)
        save(out_dir, manifest, f"y.{i}", y)

    loss_fn = nn.CrossEntropyLoss(reduction="mean")
    logits = net(batches[0][0])
    loss = loss_fn(logits, batches[0][1].long())
    loss.backward()
    save(out_dir, manifest, "logits", logits)
    save(out_dir, manifest, "loss", loss)
    for name, p in net.named_parameters():
        save(out_dir, manifest, "grad." + name, p.grad)

    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        step_loss = loss_fn(net(x), y.long())
        step_loss.backward()
        opt.step()
        losses.append(step_loss.item())
    save(out_dir, manifest, "losses", torch.tensor(losses, dtype=torch.float32))
    for name, p in net.named_parameters():
        save(out_dir, manifest, "final." + name, p)
    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
