"""cleave.dataset.vision: image transforms (mindspore.dataset.vision)."""
from .._cleave import Inter, Resize, Rescale, Normalize, HWC2CHW, RandomCrop, RandomHorizontalFlip

__all__ = ["Inter", "Resize", "Rescale", "Normalize", "HWC2CHW", "RandomCrop",
           "RandomHorizontalFlip"]
