"""toynet/printing.py's array formatting on its own (how whole tensors print is in test_tensor.py)."""

from __future__ import annotations

import numpy as np

from toynet.dynamic import printing


def test_format_array():
    assert printing.format_array(np.array([0.5, -1.25], np.float32), 7) == "[ 0.5000, -1.2500]"
    assert printing.format_array(np.array([1.0, 2.0]), 7) == "[1., 2.]"
    assert printing.format_array(np.array([1e-8, 1.0]), 7) == "[1.0000e-08, 1.0000e+00]"
    assert printing.format_array(np.array([[1, 2], [3, 4]]), 7) == "[[1, 2],\n        [3, 4]]"
    assert printing.format_array(np.array([np.nan, np.inf, 1.0]), 7) == "[nan, inf,  1.]"
