"""``convert_to_onnx_and_check``: export, then run the file in ONNX Runtime and compare with toynet.

OneFlow users export with ``oneflow_onnx.oneflow2onnx.util.convert_to_onnx_and_check(graph,
onnx_model_path=...)``; this is the same entry point for toynet graphs. It feeds random inputs of the
traced shapes (in ``input_tensor_range``) to both the toynet graph and an ONNX Runtime session, and fails
when an output differs by more than ``rtol`` / ``atol``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from .. import backend
from ..dynamic.tensor import Tensor
from .export import export, forward_of


def convert_to_onnx_and_check(graph: Any, onnx_model_path: Any = ".", opset: int | None = None,
                              dynamic_batch_size: bool = False, input_tensor_range: tuple = (-1.0, 1.0),
                              rtol: float = 1e-4, atol: float = 1e-5, seed: int = 0) -> Path:
    """Export ``graph`` to ``onnx_model_path`` (a directory gets ``model.onnx``) and check ONNX Runtime's
    outputs against toynet's; returns the file written."""
    try:
        ort = importlib.import_module("onnxruntime")
    except ImportError:
        raise ImportError("convert_to_onnx_and_check runs the model in ONNX Runtime: pip install 'toynet[onnx]' "
                          "(or pip install onnxruntime)") from None
    path = Path(onnx_model_path)
    if path.is_dir():
        path = path / "model.onnx"
    export(graph, path, opset_version=opset, dynamic_batch=dynamic_batch_size)

    forward, _ = forward_of(graph)
    low, high = input_tensor_range
    rng = backend.host.random.default_rng(seed)
    feeds = [(rng.uniform(low, high, n.shape) if n.dtype.is_floating_point
              else rng.integers(0, 2, n.shape)).astype(n.dtype.array_dtype) for n in forward.inputs]
    expected = graph(*[Tensor.wrap(backend.from_host(x, forward.inputs[i].device), forward.inputs[i].device)
                       for i, x in enumerate(feeds)])
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {f"input_{i}": x for i, x in enumerate(feeds)})
    for i, (ours, theirs) in enumerate(zip(expected, got)):
        ours = ours.numpy()
        if ours.shape != theirs.shape or not backend.host.allclose(ours, theirs, rtol=rtol, atol=atol):
            worst = float(backend.host.max(backend.host.abs(ours - theirs))) if ours.shape == theirs.shape else None
            raise AssertionError(f"output {i} of {path}: ONNX Runtime gives {theirs.shape} values, toynet "
                                 f"{ours.shape}; largest difference {worst} (rtol={rtol}, atol={atol})")
    return path
