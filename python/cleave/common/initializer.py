"""cleave.common.initializer: weight initializers (mindspore.common.initializer)."""
from .._cleave import (Initializer, Normal, TruncatedNormal, Uniform, HeUniform, HeNormal,
                       XavierUniform)


def initializer(init, shape, dtype=None):
    """A tensor of `shape` drawn by `init` (an Initializer, or a name such as "normal")."""
    from .. import float32
    if isinstance(init, str):
        init = Initializer(init)
    return init(list(shape), float32 if dtype is None else dtype)


__all__ = ["Initializer", "Normal", "TruncatedNormal", "Uniform", "HeUniform", "HeNormal",
           "XavierUniform", "initializer"]
