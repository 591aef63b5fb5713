"""cleave.common (mindspore.common)."""
from . import initializer  # noqa: F401
from .. import dtype  # noqa: F401
