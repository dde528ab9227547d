"""``toynet.Size``: the shape of a tensor, a tuple of ints that prints as one (``toynet.Size([64, 1, 28,
28])``), as OneFlow's and PyTorch's shapes do.

It *is* a tuple (a subclass), so everything that reads shapes as tuples (``x.shape == (2, 3)``, unpacking,
``x.shape[1:]``, NumPy calls) keeps working. toynet's own code turns it back into a plain tuple
(``tuple(shape)``) wherever a shape becomes an op attribute, because attributes are written into the
code that Graph mode compiles with ``repr``.
"""

from __future__ import annotations

from typing import Any


class Size(tuple):
    """A tensor's shape: ``Size([2, 3])``; ``numel()`` is the number of elements it holds."""

    __slots__ = ()

    def __new__(cls, sizes: Any = ()) -> "Size":
        values = tuple(sizes)
        for d in values:
            if isinstance(d, bool) or not hasattr(d, "__index__"):
                raise TypeError(f"toynet.Size takes ints (one per dimension), got {d!r} in {values!r}")
        return super().__new__(cls, (d.__index__() for d in values))

    @classmethod
    def of(cls, shape: tuple) -> "Size":
        """A Size around a shape known to be a tuple of ints (an array's, a node's): no checks, because
        ``tensor.shape`` is read on every op and a check per read costs more than the rest of it."""
        return tuple.__new__(cls, shape)

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n

    def __getitem__(self, index: Any) -> Any:
        got = tuple.__getitem__(self, index)
        return Size(got) if isinstance(index, slice) else got  # a slice of a shape is a shape

    def __repr__(self) -> str:
        return f"toynet.Size([{', '.join(str(d) for d in self)}])"

    __str__ = __repr__
