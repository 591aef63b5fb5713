"""The collectives of cleave.ops from Python on a job of 4 ranks (run by test_collectives.py under
cleave-run): each checks its result against NumPy and the script prints "collectives ok"."""
import numpy as np

import cleave as ms
from cleave import nn, ops
from cleave.communication import init, get_rank, get_group_size, create_group

ms.set_context(mode=ms.PYNATIVE_MODE)
init()
rank, n = get_rank(), get_group_size()
assert n == 4, n
base = np.arange(8, dtype=np.float32).reshape(4, 2)
x = ms.Tensor(base + rank)
everyone = [base + r for r in range(n)]

np.testing.assert_allclose(ops.AllReduce()(x).asnumpy(), sum(everyone))
np.testing.assert_allclose(ops.AllReduce(ops.ReduceOp.MAX)(x).asnumpy(), everyone[-1])
np.testing.assert_allclose(ops.AllGather()(x).asnumpy(), np.concatenate(everyone))
np.testing.assert_allclose(ops.ReduceScatter()(x).asnumpy(), sum(everyone)[rank:rank + 1])
np.testing.assert_allclose(ops.Broadcast(2)((x,))[0].asnumpy(), everyone[2])
pair = f"pair{rank // 2}"  # ranks 0 and 1, ranks 2 and 3
create_group(pair, [rank - rank % 2, rank - rank % 2 + 1])
np.testing.assert_allclose(ops.AllReduce(group=pair)(x).asnumpy(),
                           everyone[rank - rank % 2] + everyone[rank - rank % 2 + 1])

# NeighborExchangeV2 on a 2 x 2 grid of ranks: rank = row * 2 + col.
row, col = divmod(rank, 2)
directions = [(-1, 0), (-1, 1), (0, 1), (1, 1), (1, 0), (1, -1), (0, -1), (-1, -1)]
neighbours = [(row + dr) * 2 + (col + dc) if 0 <= row + dr < 2 and 0 <= col + dc < 2 else -1
              for dr, dc in directions]
halo = ops.NeighborExchangeV2(neighbours, [1, 1, 1, 1], neighbours, [1, 1, 1, 1])
out = halo(ms.Tensor(np.full((1, 1, 2, 2), rank, np.float32))).asnumpy()
want = np.zeros((1, 1, 4, 4), np.float32)
want[0, 0, 1:3, 1:3] = rank
for (dr, dc), r in zip(directions, neighbours):
    if r >= 0:
        rows = {-1: slice(0, 1), 0: slice(1, 3), 1: slice(3, 4)}[dr]
        cols = {-1: slice(0, 1), 0: slice(1, 3), 1: slice(3, 4)}[dc]
        want[0, 0, rows, cols] = r
np.testing.assert_array_equal(out, want)


# AllReduce inside a Cell written in Python, traced in GRAPH_MODE and trained: every rank's loss
# is the mean over the ranks.
class Mean(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(2, 1)
        self.all_reduce = ops.AllReduce()

    def construct(self, x, y):
        return self.all_reduce(((self.fc(x) - y) ** 2).mean()) / n


ms.set_context(mode=ms.GRAPH_MODE)
ms.set_seed(3)
net = Mean()
step = nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), 0.0))
loss = float(step(x, ms.Tensor(np.ones((4, 1), np.float32))))
p = {k: v.asnumpy() for k, v in net.parameters_and_names()}
mine = [float((((e @ p["fc.weight"].T + p["fc.bias"]) - 1) ** 2).mean()) for e in everyone]
np.testing.assert_allclose(loss, np.mean(mine), rtol=1e-5)
print("collectives ok", flush=True)
