"""``toynet.onnx.backend``: toynet as an ONNX backend, so ONNX's own conformance tests can run on it.

ONNX defines what a backend is (``onnx.backend.base.Backend``: ``prepare(model)`` gives a rep,
``rep.run(inputs)`` gives the outputs as arrays) and ships test cases for every op: small models with
inputs and the outputs they must give. ``onnx.backend.test.BackendTest(ToynetBackend)`` turns those into
unittest cases; ``tests/test_onnx_backend.py`` runs the ones for the ops toynet imports.

Every model goes through :func:`toynet.onnx.load` and runs as a compiled toynet graph. One thing differs
from a deployment: toynet graphs have static shapes, so a graph input that decides a shape (the
``shape`` input of ``Reshape``, the ``axes`` of ``ReduceSum``) is taken as a constant with the value of
the call, and the graph is built for those values.
"""

from __future__ import annotations

import importlib
from typing import Any

from .. import backend as arrays
from ..dynamic.tensor import Tensor
from .export import require_onnx
from .load import NeedsConstant, load

_onnx = require_onnx()
_base = importlib.import_module("onnx.backend.base")


class ToynetRep(_base.BackendRep):
    """A prepared model: the toynet graph is built on the first run with each input's shape, and again
    when the shapes (or the values of inputs used as shapes) change."""

    def __init__(self, model: Any, device: str):
        self.model, self.device = model, device
        self.as_constants: set[str] = set()  # graph inputs that fix shapes: baked in as constants
        self._built: dict[tuple, Any] = {}

    def _input_names(self) -> list[str]:
        initializers = {i.name for i in self.model.graph.initializer}
        return [i.name for i in self.model.graph.input if i.name not in initializers]

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        if isinstance(inputs, dict):
            inputs = [inputs[name] for name in self._input_names()]
        values = dict(zip(self._input_names(), [arrays.host.asarray(x) for x in inputs]))
        graph = self._graph(values)
        feeds = [Tensor.wrap(arrays.from_host(v, graph.plan.device), graph.plan.device)
                 for name, v in values.items() if name not in self.as_constants]
        result = graph(*feeds)
        outputs = result if isinstance(result, tuple) else (result,)
        return tuple(t.numpy() for t in outputs)

    def _graph(self, values: dict[str, Any]) -> Any:
        while True:
            key = tuple((name, v.shape, v.dtype.str, v.tobytes() if name in self.as_constants else b"")
                        for name, v in values.items())
            if key in self._built:
                return self._built[key]
            known = {name: v for name, v in values.items() if name in self.as_constants}
            shapes = {name: v.shape for name, v in values.items()}
            try:
                graph = load(self.model, input_shapes=shapes, known_inputs=known)
            except NeedsConstant as error:
                if not error.origins or not error.origins <= set(values) or error.origins <= self.as_constants:
                    raise
                self.as_constants |= error.origins
                continue
            self._built[key] = graph
            return graph


class ToynetBackend(_base.Backend):
    """ONNX's Backend interface over :func:`toynet.onnx.load` (CPU only)."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> ToynetRep:
        _onnx.checker.check_model(model)
        return ToynetRep(model, device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


prepare = ToynetBackend.prepare
run_model = ToynetBackend.run_model
supports_device = ToynetBackend.supports_device
