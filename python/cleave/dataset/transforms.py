"""cleave.dataset.transforms: general transforms (mindspore.dataset.transforms)."""
from .._cleave import TypeCast

__all__ = ["TypeCast"]
