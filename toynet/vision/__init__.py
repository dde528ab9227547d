"""Computer-vision helpers, as ``flowvision`` / ``torchvision`` offer them.

* :mod:`toynet.vision.datasets`: ``CIFAR10``, ``MNIST`` and ``FashionMNIST`` read from their standard
  local files (``download=True`` fetches them, each checked against a pinned checksum).
* :mod:`toynet.vision.transforms`: ``ToTensor``, ``Normalize``, ``Compose``, ``Lambda``, ``RandomCrop``,
  ``RandomHorizontalFlip``.
* :mod:`toynet.vision.models`: model definitions such as ``mobilenet_v2``.

``import toynet.vision.transforms as transforms`` and ``from toynet import vision`` both work.
"""

from __future__ import annotations

from . import datasets, models, transforms  # noqa: F401
