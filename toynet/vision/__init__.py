"""Computer-vision helpers, as ``flowvision`` / ``torchvision`` offer them.

* :mod:`toynet.vision.datasets`: ``CIFAR10`` read from the standard local archive (never downloaded).
* :mod:`toynet.vision.transforms`: ``ToTensor``, ``Normalize``, ``Compose``, ``RandomCrop``,
  ``RandomHorizontalFlip``.
* :mod:`toynet.vision.models`: model definitions such as ``mobilenet_v2`` (loaded on first use).

``import toynet.vision.transforms as transforms`` and ``from toynet import vision`` both work.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import datasets, transforms  # noqa: F401


def __getattr__(name: str) -> Any:
    # Load `vision.models` only when asked for: model code is larger and not needed to read data.
    if name == "models":
        try:
            return importlib.import_module(f"{__name__}.models")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.models":
                raise
            raise AttributeError(f"{__name__}.models is not part of this toynet installation") from e
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
