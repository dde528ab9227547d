"""Utilities around training: ``toynet.utils.data`` (datasets and the DataLoader)."""

from . import data  # noqa: F401
