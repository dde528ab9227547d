"""Utilities around training: ``toynet.utils.data`` (datasets and the DataLoader)."""

from . import data  # noqa: F401
from . import global_view  # noqa: F401,E402  (to_global / to_local of whole state dicts)
