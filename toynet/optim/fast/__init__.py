"""The fast path of ``toynet.optim``: skip this folder on a first reading. SGD's update as one fused op."""

from . import sgd  # noqa: F401
