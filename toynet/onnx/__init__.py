"""ONNX both ways: :func:`export` an inference graph, :func:`load` an ONNX model as a toynet graph.

``onnx`` (and ``onnxruntime`` for :func:`convert_to_onnx_and_check`) are an optional extra,
``pip install 'toynet[onnx]'``, imported only when these functions run.
"""

from .check import convert_to_onnx_and_check  # noqa: F401
from .errors import ONNXImportError, ONNXUnsupportedError  # noqa: F401
from .export import export  # noqa: F401
from .load import OnnxGraph, load  # noqa: F401
