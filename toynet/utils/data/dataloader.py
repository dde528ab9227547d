"""The :class:`DataLoader`: walk a dataset in (shuffled) batches, stacking samples into tensors.

One epoch is: pick an order of the sample indices (``0..n-1``, or a random permutation when shuffling),
cut it into batches of ``batch_size``, fetch each batch's samples and *collate* them, which stacks the
``i``-th field of every sample into one tensor with a new first (batch) dimension::

    samples   (x0, y0), (x1, y1), (x2, y2)      x: shape (3, 32, 32), y: an int
    batch     (X, Y)                            X: shape (3, 3, 32, 32), Y: int64 tensor of shape (3,)

Shuffling draws from toynet's random generator, so ``toynet.manual_seed(0)`` makes the order
reproducible; every new ``iter(loader)`` (every epoch) draws a new order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ... import backend
from ...dynamic.functional import stack
from ...dynamic.tensor import Tensor
from .dataset import TensorDataset

host = backend.host  # samples are host data (files, images); only the stacked batch becomes a tensor


def default_collate(batch: list) -> Any:
    """Stack a list of samples into a batch, keeping the samples' structure.

    * tensors are stacked (``toynet.stack``), host arrays too (their dtype is kept: uint8 stays uint8);
    * Python ints become an int64 tensor, floats a float32 tensor, bools a bool tensor;
    * strings are left as a list;
    * tuples, lists and dicts are collated field by field: a batch of ``(x, y)`` pairs gives ``(X, Y)``.
    """
    if not batch:
        raise ValueError("default_collate: cannot collate an empty batch")
    first = batch[0]
    if isinstance(first, Tensor):
        _require_all(batch, Tensor, "tensors")
        _require_same_shape(batch)
        return stack(batch)
    if backend.is_array(first) or isinstance(first, (host.number, host.bool_)):
        _require_all(batch, (host.ndarray, host.number, host.bool_), "NumPy arrays")
        if first.dtype.kind not in "biuf":
            raise TypeError(f"default_collate: cannot batch arrays of dtype {first.dtype}; convert them to "
                            f"numbers in the dataset or a transform")
        _require_same_shape(batch)
        return Tensor.from_data(host.stack(batch))
    if isinstance(first, bool):
        _require_all(batch, bool, "bools")
        return Tensor.from_data(batch, dtype=backend.bool_)
    if isinstance(first, (int, float)):
        _require_all(batch, (int, float), "numbers")
        is_float = any(isinstance(x, float) for x in batch)
        return Tensor.from_data(batch, dtype=backend.float32 if is_float else backend.int64)
    if isinstance(first, str):
        _require_all(batch, str, "strings")
        return list(batch)
    if isinstance(first, Mapping):
        keys = list(first)
        for sample in batch:
            if not isinstance(sample, Mapping) or set(sample) != set(keys):
                raise ValueError(f"default_collate: every sample must be a dict with the keys {keys}")
        return {key: default_collate([sample[key] for sample in batch]) for key in keys}
    if isinstance(first, (tuple, list)):
        sizes = {len(sample) if isinstance(sample, (tuple, list)) else -1 for sample in batch}
        if len(sizes) != 1:
            raise ValueError("default_collate: every sample must be a tuple/list with the same number of "
                             "fields")
        fields = [default_collate(list(field)) for field in zip(*batch)]
        if hasattr(first, "_fields"):  # a namedtuple keeps its type
            return type(first)(*fields)
        return tuple(fields) if isinstance(first, tuple) else fields
    raise TypeError(f"default_collate: don't know how to batch a {type(first).__name__}; samples may hold "
                    f"tensors, NumPy arrays, numbers, strings, and tuples/lists/dicts of those. Convert the "
                    f"sample in the dataset (or a transform), or pass DataLoader(collate_fn=...)")


def _require_all(batch: list, kind: Any, what: str) -> None:
    for i, sample in enumerate(batch):
        if not isinstance(sample, kind):
            raise TypeError(f"default_collate: sample 0 holds {what} but sample {i} holds a "
                            f"{type(sample).__name__}; every sample must have the same structure")


def _require_same_shape(batch: list) -> None:
    shape = tuple(batch[0].shape)
    for i, sample in enumerate(batch):
        if tuple(sample.shape) != shape:
            raise ValueError(f"default_collate: sample 0 has shape {shape} but sample {i} has shape "
                             f"{tuple(sample.shape)}; samples must have the same shape to be stacked "
                             f"(resize them in a transform, or pass DataLoader(collate_fn=...))")


class DataLoader:
    """Iterate over ``dataset`` in batches of ``batch_size`` samples.

    ``shuffle=True`` visits the samples in a new random order every epoch; ``drop_last=True`` skips a
    last, smaller batch. ``collate_fn`` turns a list of samples into a batch (default:
    :func:`default_collate`). ``generator`` sets where shuffling draws from: ``None`` uses toynet's
    generator (``toynet.manual_seed``), an int seeds a generator of this loader's own.
    ``num_workers`` and ``pin_memory`` are accepted for compatibility; toynet loads in the main process.

    >>> loader = DataLoader(TensorDataset(toynet.arange(10)), batch_size=4)    # doctest: +SKIP
    >>> [len(x) for (x,) in loader]                                             # doctest: +SKIP
    [4, 4, 2]
    """

    def __init__(self, dataset: Any, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
                 collate_fn: Callable[[list], Any] | None = None, generator: Any = None,
                 num_workers: int = 0, pin_memory: bool = False):
        if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise TypeError(f"DataLoader needs a dataset with __getitem__ and __len__ (a map-style dataset), "
                            f"got a {type(dataset).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer, got {batch_size!r}")
        for name, flag in (("shuffle", shuffle), ("drop_last", drop_last)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} should be True or False, got {flag!r}")
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"collate_fn should be a function of a list of samples, got {collate_fn!r}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers should be a non-negative integer, got {num_workers!r}")
        if isinstance(generator, int) and not isinstance(generator, bool):
            generator = host.random.default_rng(generator)
        elif generator is not None and not hasattr(generator, "permutation"):
            raise TypeError("generator should be None, an int seed, or a NumPy Generator")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.generator = generator
        self.num_workers = num_workers
        self.pin_memory = pin_memory

    def __len__(self) -> int:
        """The number of batches in one epoch."""
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _order(self) -> Any:
        n = len(self.dataset)
        if not self.shuffle:
            return host.arange(n)
        if self.generator is not None:
            return self.generator.permutation(n)
        return backend.random_permutation(n)

    def __iter__(self) -> Iterator[Any]:
        order = self._order()
        # A plain TensorDataset can be indexed by a whole batch at once: one gather per tensor instead of
        # batch_size small slices and a stack (the same result, much faster).
        whole_batches = (self.collate_fn is None and isinstance(self.dataset, TensorDataset)
                         and type(self.dataset).__getitem__ is TensorDataset.__getitem__)
        collate = self.collate_fn or default_collate
        for start in range(0, len(order), self.batch_size):
            indices = order[start:start + self.batch_size]
            if self.drop_last and len(indices) < self.batch_size:
                break
            if whole_batches:
                yield tuple(t[indices] for t in self.dataset.tensors)
            else:
                yield collate([self.dataset[int(i)] for i in indices])

    def __repr__(self) -> str:
        return (f"DataLoader(dataset={type(self.dataset).__name__} of {len(self.dataset)} samples, "
                f"batch_size={self.batch_size}, shuffle={self.shuffle}, drop_last={self.drop_last})")
