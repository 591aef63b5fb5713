"""cleave.ops: operator classes (ops.MatMul(), ops.ReLU(), ops.AllReduce(), ...) with .shard()
and .place(), and the functional operators (ops.matmul, ops.relu, ...) (mindspore.ops)."""
from .._cleave import Primitive, Tensor
from .._cleave import ops as _f
from .._cleave import WORLD_COMM_GROUP
from .._cleave.ops import (add, sub, mul, div, pow, maximum, minimum, neg, exp, log, sqrt, rsqrt,
                           abs, square, relu, gelu, sigmoid, tanh, cast, zeros_like, ones_like,
                           select, matmul, bias_add, softmax, log_softmax, reshape, transpose,
                           expand_dims, squeeze, flatten, concat, split, tile, broadcast_to,
                           gather, reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod,
                           argmax, argmin)
from .._cleave.ops import slice as _slice


def slice(x, begin, size):  # noqa: A001 - MindSpore's name
    return _slice(x, list(begin), list(size))


def _primitive(op_name, doc, **defaults):
    """A class for the registered operator `op_name` whose constructor takes `defaults` as
    keyword attributes."""

    def __init__(self, *args, **kwargs):
        names = list(defaults)
        if len(args) > len(names):
            raise TypeError(f"{op_name}() takes at most {len(names)} arguments ({len(args)} given)")
        attrs = dict(defaults)
        attrs.update(zip(names, args))
        for k, v in kwargs.items():
            if k not in attrs:
                raise TypeError(f"{op_name}() got an unexpected keyword argument '{k}'; "
                                f"expected {', '.join(names) or 'none'}")
            attrs[k] = v
        # Attributes left at their defaults are not written, as a C++ Primitive{"MatMul"} has
        # none: the traced graph is the C++ program's.
        Primitive.__init__(self, op_name,
                           {k: v for k, v in attrs.items() if v is not None and v != defaults[k]})

    return type(op_name, (Primitive,), {"__init__": __init__, "__doc__": doc})


MatMul = _primitive("MatMul", "Matrix product, optionally transposing either input.",
                    transpose_a=False, transpose_b=False)
BatchMatMul = _primitive("BatchMatMul", "Batched matrix product.", transpose_a=False,
                         transpose_b=False)
BiasAdd = _primitive("BiasAdd", "Adds a bias along the channel axis.")
Add = _primitive("Add", "Elementwise sum.")
Sub = _primitive("Sub", "Elementwise difference.")
Mul = _primitive("Mul", "Elementwise product.")
Div = _primitive("Div", "Elementwise quotient.")
RealDiv = _primitive("Div", "Elementwise quotient.")
Maximum = _primitive("Maximum", "Elementwise maximum.")
Minimum = _primitive("Minimum", "Elementwise minimum.")
ReLU = _primitive("ReLU", "max(x, 0).")
GeLU = _primitive("GeLU", "GELU activation.")
Sigmoid = _primitive("Sigmoid", "Logistic sigmoid.")
Tanh = _primitive("Tanh", "Hyperbolic tangent.")
Exp = _primitive("Exp", "e**x.")
Log = _primitive("Log", "Natural logarithm.")
Sqrt = _primitive("Sqrt", "Square root.")
Square = _primitive("Square", "x*x.")
Neg = _primitive("Neg", "-x.")
Abs = _primitive("Abs", "|x|.")
Softmax = _primitive("Softmax", "Softmax over `axis`.", axis=-1)
LogSoftmax = _primitive("LogSoftmax", "Log-softmax over `axis`.", axis=-1)
Transpose = _primitive("Transpose", "Permutes the axes.", perm=None)
Reshape = _primitive("Reshape", "Gives a new shape.", shape=None)
Flatten = _primitive("Flatten", "Keeps dim 0, flattens the rest.")
ReduceSum = _primitive("ReduceSum", "Sum over axes.", keep_dims=False)
ReduceMean = _primitive("ReduceMean", "Mean over axes.", keep_dims=False)
ReduceMax = _primitive("ReduceMax", "Maximum over axes.", keep_dims=False)
Gather = _primitive("Gather", "Gathers slices along an axis.")
Tile = _primitive("Tile", "Repeats the tensor.", multiples=None)
Concat = _primitive("Concat", "Concatenates along `axis`.", axis=0)
SoftmaxCrossEntropyWithLogits = _primitive(
    "SoftmaxCrossEntropyWithLogits", "Cross entropy of logits and one-hot labels.")
SparseSoftmaxCrossEntropyWithLogits = _primitive(
    "SparseSoftmaxCrossEntropyWithLogits", "Cross entropy of logits and class ids.")


class ReduceOp:
    """The reductions of the collectives (mindspore.ops.ReduceOp)."""
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PROD = "prod"


class _Collective:
    """A collective operator: called with a tensor, in GRAPH_MODE a node of the traced graph.
    .place(role, rank_id) puts it on a worker of a placed job, as a Primitive's does; assigned
    to a Cell's attribute it is named after it."""

    _placement = ("", -1)
    name = ""

    def shard(self, in_strategy):
        raise ValueError(f"{type(self).__name__}: a collective cannot be sharded; it moves the "
                         "data its strategy-sharded neighbours need")

    def place(self, role, rank_id):
        if not isinstance(role, str) or not role or not isinstance(rank_id, int) or rank_id < 0:
            raise ValueError(f"{type(self).__name__}.place: expected a role such as "
                             f"'MS_WORKER' and a rank_id >= 0, got {role!r}, {rank_id!r}")
        self._placement = (role, rank_id)
        return self

    def set_name(self, name):
        self.name = name
        return self

    def __call__(self, *args):
        role, rank_id = self._placement
        if role or self.name:
            return _f._annotated(role, rank_id, self.name, self._run, *args)
        return self._run(*args)

    def __repr__(self):
        return f"{type(self).__name__}({self.__dict__})"


class AllReduce(_Collective):
    def __init__(self, op=ReduceOp.SUM, group=WORLD_COMM_GROUP):
        self.op, self.group = op, group

    def _run(self, x):
        return _f.all_reduce(x, self.op, self.group)


class AllGather(_Collective):
    def __init__(self, group=WORLD_COMM_GROUP):
        self.group = group

    def _run(self, x):
        return _f.all_gather(x, self.group)


class ReduceScatter(_Collective):
    def __init__(self, op=ReduceOp.SUM, group=WORLD_COMM_GROUP):
        self.op, self.group = op, group

    def _run(self, x):
        return _f.reduce_scatter(x, self.op, self.group)


class Broadcast(_Collective):
    def __init__(self, root_rank, group=WORLD_COMM_GROUP):
        self.root_rank, self.group = root_rank, group

    def _run(self, x):
        if isinstance(x, (tuple, list)):
            return tuple(_f.broadcast(t, self.root_rank, self.group) for t in x)
        return _f.broadcast(x, self.root_rank, self.group)


class AlltoAll(_Collective):
    def __init__(self, split_count, split_dim, concat_dim, group=WORLD_COMM_GROUP):
        self.split_count, self.split_dim, self.concat_dim = split_count, split_dim, concat_dim
        self.group = group

    def _run(self, x):
        return _f.all_to_all(x, self.split_count, self.split_dim, self.concat_dim, self.group)


class NeighborExchangeV2(_Collective):
    """The 2-D halo exchange of an (N, C, H, W) tensor: send_rank_ids and recv_rank_ids name the
    eight neighbours clockwise from the top (-1: none), send_lens and recv_lens the strip widths
    [top, bottom, left, right]; the result is x padded with the received halos."""

    def __init__(self, send_rank_ids, send_lens, recv_rank_ids, recv_lens, data_format="NCHW",
                 group=WORLD_COMM_GROUP):
        self.send_rank_ids, self.send_lens = list(send_rank_ids), list(send_lens)
        self.recv_rank_ids, self.recv_lens = list(recv_rank_ids), list(recv_lens)
        self.data_format, self.group = data_format, group

    def _run(self, x):
        return _f.neighbor_exchange_v2(x, self.send_rank_ids, self.send_lens, self.recv_rank_ids,
                                       self.recv_lens, self.data_format, self.group)


class NeighborExchange(_Collective):
    """Sends the k-th input to send_rank_ids[k] and returns, for each k, the tensor of
    recv_shapes[k] received from recv_rank_ids[k]."""

    def __init__(self, send_rank_ids, recv_rank_ids, recv_shapes, send_shapes, recv_type,
                 group=WORLD_COMM_GROUP):
        self.send_rank_ids, self.recv_rank_ids = list(send_rank_ids), list(recv_rank_ids)
        self.recv_shapes = [list(s) for s in recv_shapes]
        self.send_shapes, self.recv_type, self.group = send_shapes, recv_type, group

    def _run(self, xs):
        return tuple(_f.neighbor_exchange(list(xs), self.send_rank_ids, self.recv_rank_ids,
                                          self.recv_shapes, self.recv_type, self.group))
