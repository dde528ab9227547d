"""The fast path of the dynamic design: skip this folder on a first reading. :mod:`.apply` is the door in one
loop over the inputs; :mod:`.backward` is a backward walk tuned for small models (a chain found without a
walk, leaf gradients adopted instead of copied)."""

from . import apply, backward  # noqa: F401
