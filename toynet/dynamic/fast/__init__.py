"""The fast path of the dynamic design: skip this folder on a first reading. :mod:`.backward` is a backward
walk tuned for small models (a chain found without a walk, leaf gradients adopted instead of copied)."""

from . import backward  # noqa: F401
