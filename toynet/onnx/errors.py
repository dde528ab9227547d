"""The errors of the ONNX importer, in a module of their own so that every importer module can raise them
(:mod:`toynet.onnx.load` imports the importers, so the importers cannot import from it).

Whatever an ONNX file holds, :func:`toynet.onnx.load` either returns a graph or raises
:class:`ONNXImportError` (or its subclass :class:`ONNXUnsupportedError`); the message names the node, its
op, the attribute or input at fault and what was expected."""

from __future__ import annotations


class ONNXImportError(ValueError):
    """An ONNX file toynet cannot import as it is: malformed (a cycle, an undefined value, an attribute of the
    wrong type, a size that does not fit), or using what toynet does not implement (the subclass
    :class:`ONNXUnsupportedError`). The message names the node, its op, the attribute or input at fault and what
    was expected."""


class ONNXUnsupportedError(ONNXImportError, NotImplementedError):
    """A well-formed ONNX model that needs what toynet does not have: an op with no importer, an attribute value
    it does not implement (``auto_pad="SAME_LOWER"`` with uneven padding), a dtype (``uint16``), a 3-d
    convolution, optional and sequence types. Also a ``NotImplementedError``, so code written for toynet's
    earlier releases, which raised that, still catches it."""
