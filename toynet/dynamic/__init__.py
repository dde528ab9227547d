"""The dynamic (define-by-run) design, Eager mode: :class:`~toynet.dynamic.tensor.Tensor` and ``apply``, the
reverse-mode autodiff that walks what Eager mode records, and the functions that make and combine tensors.

Beside it, :mod:`toynet.static` is the static (define-and-run) design; both run the op table of
:mod:`toynet.ops`, the floor under them.
"""

from . import fast  # noqa: E402,F401  (the fast path's replacements, swapped in by TOYNET_FAST=1)
