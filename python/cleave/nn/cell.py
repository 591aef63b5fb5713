"""Cell written in Python (mindspore.nn.Cell)."""
from .. import _cleave
from ..ops import _Collective


class Cell(_cleave.Cell):
    """The unit of a model. Subclasses call super().__init__() first, assign their layers and
    Parameters to attributes (which registers them under the attribute's name, in order), and
    define construct(self, x) or construct(self, data, label).

    In GRAPH_MODE, construct runs once under cleave's tracer: Python control flow is decided then
    (a branch on a tensor's value is a TypeError saying so), and the compiled step
    runs in C++. In PYNATIVE_MODE, construct runs at every call."""

    def __init__(self, auto_prefix=True, flags=None):
        _cleave.Cell.__init__(self, type(self).__name__)
        object.__setattr__(self, "_cell_initialized", True)

    def __setattr__(self, name, value):
        if not name.startswith("_"):
            from .. import Parameter
            held = self.__dict__.get(name)
            if isinstance(held, _cleave.Cell) and not isinstance(value, _cleave.Cell):
                # MindSpore's error, e.g. for self.block1 = ms.shard(self.block1, ...): the
                # sharded function goes to another attribute.
                what = "function" if callable(value) else type(value).__name__
                raise TypeError(f"For 'Cell', the type of {name} should be cell, but got {what}.")
            if isinstance(value, _cleave.Cell):
                self._check_init(name)
                self._register_module(name, value)
            elif isinstance(value, Parameter):
                # Under the Parameter's own name when it has one (Parameter(..., "w")), as
                # MindSpore does: checkpoints and strategy files say "w".
                self._check_init(name)
                self._register_parameter(value.name or name, value, value.requires_grad)
            elif isinstance(value, (_cleave.Primitive, _Collective)) and not value.name:
                # An operator is named after its attribute (self.matmul2: "matmul2") in dumps,
                # errors and strategy files.
                value.set_name(name)
        object.__setattr__(self, name, value)

    def _check_init(self, name):
        if not self.__dict__.get("_cell_initialized", False):
            raise RuntimeError(
                f"{type(self).__name__}: self.{name} was assigned before "
                "super().__init__() was called; call it first in __init__")

    def construct(self, *inputs):
        raise NotImplementedError(
            f"{type(self).__name__}: a subclass of nn.Cell must define construct")


class TrainOneStepCell:
    """One training step of `network` (a network with its loss) and `optimizer`: calling it with
    (data, label) runs the forward, the backward and the update, and returns the loss. Compiled
    once in GRAPH_MODE, eager in PYNATIVE_MODE."""

    def __init__(self, network, optimizer, sens=1.0):
        if sens != 1.0:
            raise ValueError("TrainOneStepCell: sens must be 1.0")
        self.network = network
        self.optimizer = optimizer
        self._step = _cleave.TrainOneStep(network, optimizer)

    def set_train(self, mode=True):
        self.network.set_train(mode)
        return self

    def __call__(self, data, label):
        return self._step(data, label)
