"""Datasets: anything with ``len(dataset)`` and ``dataset[i]`` (one sample).

A dataset only knows how to fetch *one* sample; the :class:`~toynet.utils.data.DataLoader` decides the
order, groups samples into batches and stacks them into tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...dynamic.tensor import Tensor


class Dataset:
    """Base class of map-style datasets: subclasses define ``__getitem__(i)`` and ``__len__()``.

    >>> class Squares(Dataset):
    ...     def __len__(self): return 10
    ...     def __getitem__(self, i): return float(i), float(i * i)
    >>> Squares()[3]
    (3.0, 9.0)
    """

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__(index)")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__()")


class TensorDataset(Dataset):
    """Samples are rows of tensors: ``TensorDataset(x, y)[i] == (x[i], y[i])``.

    All tensors must have the same first dimension (the number of samples).
    """

    def __init__(self, *tensors: Tensor):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(f"TensorDataset: argument {i} is a {type(t).__name__}, not a tensor; convert it "
                                f"with toynet.tensor(...)")
            if t.ndim == 0:
                raise ValueError(f"TensorDataset: argument {i} is a 0-d tensor; each tensor needs a first "
                                 f"dimension that indexes the samples")
        sizes = [t.shape[0] for t in tensors]
        if len(set(sizes)) != 1:
            raise ValueError(f"TensorDataset: all tensors must have the same number of samples (first "
                             f"dimension), got {sizes}")
        self.tensors = tuple(tensors)

    def __getitem__(self, index: int) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order (e.g. a quick run on 1,000 images)."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]):
        self.dataset = dataset
        self.indices = [int(i) for i in indices]

    def __getitem__(self, index: int) -> Any:
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)
