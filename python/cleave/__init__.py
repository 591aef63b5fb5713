"""cleave: distributed training of neural networks, with MindSpore's Python API.

The package follows MindSpore's module layout (cleave.nn, cleave.ops, cleave.dataset,
cleave.train, cleave.communication, ...), so that a MindSpore script runs on cleave with
`mindspore` replaced by `cleave` in its imports. Everything runs in cleave's C++ engine (the
extension module cleave._cleave): a Cell written in Python is traced once into a graph in
GRAPH_MODE, and the compiled training step runs without Python.
"""
import random as _random
import sys as _sys

try:
    import numpy as _np
except ImportError as _e:  # another Python than the one cleave was built for, often
    raise ImportError(
        f"cleave needs NumPy, which {_sys.executable} does not have ({_e}); run cleave with "
        "Debian's /usr/bin/python3 (package python3-numpy), the Python it is built for") from None
try:
    from . import _cleave
except ImportError as _e:
    raise ImportError(
        f"cleave's engine (cleave/_cleave*.so) does not load in {_sys.executable} (Python "
        f"{_sys.version.split()[0]}): {_e}. It is built for Debian's /usr/bin/python3; run it, "
        "or rebuild with -DPython3_EXECUTABLE=<this python>") from None
from ._cleave import Tensor, dtype, GRAPH_MODE, PYNATIVE_MODE, Layout  # noqa: F401
from .context import (set_context, get_context, set_auto_parallel_context,
                      get_auto_parallel_context, reset_auto_parallel_context, ParallelMode)
from . import context

__version__ = _cleave.__version__

float32 = dtype.float32
float64 = dtype.float64
int32 = dtype.int32
int64 = dtype.int64
bool_ = dtype.bool_


class Parameter(Tensor):
    """A trainable tensor of a Cell (MindSpore's Parameter): assigning it to an attribute of a
    Cell registers it under the attribute's name."""

    def __init__(self, default_input, name=None, requires_grad=True):
        if not isinstance(default_input, Tensor):
            default_input = Tensor(default_input)
        Tensor.__init__(self, default_input)
        self.name = name
        self.requires_grad = requires_grad


def set_seed(seed):
    """Seeds cleave's generator (weights, dropout, shuffles) and, as MindSpore does, NumPy's and
    Python's."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"set_seed: seed {seed!r} is not a non-negative int")
    _cleave.set_seed(seed)
    _np.random.seed(seed % (2**32))
    _random.seed(seed)


def shard(fn, in_strategy, out_strategy=None, parameter_plan=None, device="CPU", level=0):
    """MindSpore's ms.shard (PYNATIVE_MODE): `fn` (a Cell, or a function of tensors) as a
    compiled, sharded block; the returned object is called with tensors. in_strategy has one
    tuple (or None: derived) per input; parameter_plan maps parameter names to strategies. The
    cell itself stays eager when called directly; assign the result to another attribute."""
    if isinstance(fn, _cleave.Cell):
        sharded = _cleave._shard_cell(fn, in_strategy, out_strategy, parameter_plan, device, level)
    elif callable(fn):
        sharded = _cleave._shard_function(fn, in_strategy, out_strategy, parameter_plan, device,
                                          level)
    else:
        raise TypeError(f"shard: {fn!r} is neither a Cell nor a function")
    sharded._source = fn  # a Python cell or function lives while its sharded form does
    return sharded


from .train.model import Model  # noqa: E402
from .train.serialization import save_checkpoint, load_checkpoint, load_param_into_net  # noqa: E402
from . import nn, ops, dataset, train, communication, common  # noqa: E402,F401


def _report_uncaught(exc_type, exc, tb):
    """An uncaught exception ends this process: tell the job first, so that the other ranks stop
    at once with this error instead of waiting for this one (as the C++ examples do)."""
    try:
        if _cleave.is_initialized() and not issubclass(exc_type, KeyboardInterrupt):
            _cleave.report_failure(f"{exc_type.__name__}: {exc}")
    finally:
        _previous_excepthook(exc_type, exc, tb)


_previous_excepthook = _sys.excepthook
_sys.excepthook = _report_uncaught
