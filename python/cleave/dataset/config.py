"""cleave.dataset.config: pipeline settings (mindspore.dataset.config)."""
from .._cleave import set_prefetch_size, get_prefetch_size
from .._cleave import set_seed as _set_seed


def set_seed(seed):
    """Seeds the random transforms (RandomCrop, RandomHorizontalFlip)."""
    _set_seed(seed)
