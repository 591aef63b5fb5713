"""cleave.dataset: data sources and pipelines (mindspore.dataset)."""
from .._cleave import (Dataset, MnistDataset, Cifar10Dataset, GeneratorDataset as _Generator)
from . import vision, transforms, config  # noqa: F401


def GeneratorDataset(source, column_names=None, column_types=None, schema=None,
                     num_samples=None, num_parallel_workers=1, shuffle=None, sampler=None,
                     num_shards=None, shard_id=None, python_multiprocessing=True,
                     max_rowsize=6):
    """A dataset over a Python source: a generator function (called anew each epoch), an
    iterable, or a random-access object (__getitem__ and __len__); each item is a tuple of NumPy
    arrays, one per name of column_names."""
    if column_names is None:
        raise ValueError("GeneratorDataset: column_names is missing; expected the names of the "
                         "columns the source yields, e.g. ['data', 'label']")
    if sampler is not None:
        raise ValueError("GeneratorDataset: sampler is not supported; use shuffle, num_shards "
                         "and shard_id")
    return _Generator(source, column_names, num_samples, shuffle, num_shards, shard_id)


__all__ = ["Dataset", "MnistDataset", "Cifar10Dataset", "GeneratorDataset", "vision",
           "transforms", "config"]
