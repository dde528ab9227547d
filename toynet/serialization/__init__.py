"""``toynet.save`` and ``toynet.load``: checkpoints as a directory of JSON and ``.npz``, never pickle.

Pickle runs code while loading, so a pickled checkpoint from a stranger can do anything to your machine.
toynet's checkpoints hold only data: a description of the saved object in JSON, and the tensors' numbers
in NumPy's ``.npz`` archive, read back without pickle. ``docs/trust.md`` ("What toynet trusts") says what
each loader reads and what it refuses.

Format (version 2)
------------------
``toynet.save(obj, "ckpt")`` writes a *directory* (as OneFlow's ``flow.save`` does)::

    ckpt/structure.json    what the object looks like
    ckpt/arrays.npz        one array per tensor, named "t0", "t1", ...
    ckpt/manifest.json     the size and SHA-256 digest of each other file

``structure.json`` is ``{"format": "toynet-checkpoint", "version": 2, "kind": "state_dict", "root": NODE}``,
where a NODE describes one value:

======================================  =========================================================
``{"type": "tensor", "array": "t0",``   a tensor: its array's name in ``arrays.npz``, its dtype,
``"dtype": "float32", "shape": [3],``   shape and device, and whether it requires grad or is an
``"device": "cpu:0", "requires_grad":`` ``nn.Parameter``. The same tensor object saved twice is
``false, "parameter": false}``          stored once and loads as one object again.
``{"type": "ndarray", "array": ...}``   a NumPy array (dtype and shape as above; dtype names are NumPy's,
                                        which toynet's dtypes share)
``{"type": "dict", "items": [...]}``    each item ``{"key": k, "key_type": "str"|"int", "value": NODE}``;
                                        ``"ordered_dict"`` for an ``OrderedDict``
``{"type": "list", "items": [...]}``    a list (``"tuple"`` for a tuple) of NODEs
``{"type": "int", "value": 3}``         also ``"float"`` (``"nan"``, ``"inf"``, ``"-inf"`` as strings),
                                        ``"bool"``, ``"str"``; and ``{"type": "none"}``
======================================  =========================================================

Version 1 (toynet before the manifest) is the same without ``manifest.json``, and is still read.

Other kinds of object (an ``nn.Graph`` exported for deployment, kind ``"graph"``) plug in from outside:
``save`` hands any object with a ``_toynet_save_(path)`` method to that method (which writes with
:func:`write_checkpoint` and its own ``kind``), and ``load`` finds the reader of each ``kind`` in a
registry filled by :func:`register_loader`. ``load(path, kind="state_dict")`` refuses any other kind.

Saving is crash-consistent (:mod:`toynet.serialization.directory`): at every moment ``path`` holds the
old checkpoint or the new one, whole; a save that fails or is killed half-way leaves the old one.
Loading checks everything before building anything, and reads only the arrays the structure refers to,
each checked against its declared dtype and shape before its data is read
(:mod:`toynet.serialization.npz`). A file that is damaged, incomplete or hostile raises
:class:`CheckpointError`, which names the file, the entry and what was expected.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .directory import FORMAT, VERSION, Checkpoint, read_checkpoint, write_checkpoint
from .errors import CheckpointError, DeviceUnavailableError
from .tree import TENSOR_CLASSES, check, decode, encode

__all__ = ["save", "load", "register_loader", "register_tensor_class", "CheckpointError", "DeviceUnavailableError",
           "Checkpoint", "read_checkpoint", "write_checkpoint", "encode", "decode", "check", "FORMAT", "VERSION"]


def save(obj: Any, path: str | os.PathLike) -> None:
    """Save a state dict (nested dicts/lists/tuples of tensors, numbers, strings, bools, None) to the
    directory ``path``, replacing an earlier checkpoint there. If ``path`` is a symbolic link, the
    directory it points to is replaced and the link stays.

    >>> toynet.save(model.state_dict(), "model_ckpt")                     # doctest: +SKIP
    >>> model.load_state_dict(toynet.load("model_ckpt"))                  # doctest: +SKIP
    """
    if hasattr(obj, "_toynet_save_"):
        obj._toynet_save_(path)
        return
    if hasattr(obj, "state_dict") and hasattr(obj, "parameters"):
        raise TypeError(f"toynet.save saves state dicts, not {type(obj).__name__} objects (that would need "
                        f"pickle): save obj.state_dict() and load it into a new model with load_state_dict")
    root, arrays = encode(obj)
    write_checkpoint(path, {"kind": "state_dict", "root": root}, arrays)


def load(path: str | os.PathLike, map_location: Any = None, *, kind: str | None = None) -> Any:
    """Read what :func:`save` wrote. Tensors go back to the device they were saved from, or to
    ``map_location`` (a device such as ``"cpu"``, or a dict ``{"cuda:0": "cpu"}``).

    The checkpoint says what it holds (its ``kind``): a state dict, or a graph saved for deployment
    (``toynet.save(graph, dir)``), which loads as a runnable ``DeployedGraph``. Pass ``kind="state_dict"``
    (or ``"graph"``) to accept only that kind: anything else raises :class:`CheckpointError` before
    anything is built from it. Every kind's loader checks the whole file first (see docs/trust.md).
    """
    with read_checkpoint(path) as checkpoint:
        found = checkpoint.structure["kind"]
        if kind is not None and found != kind:
            raise CheckpointError(f"{checkpoint.path} holds a checkpoint of kind {found!r}, not {kind!r} as "
                                  f"asked (load it with kind={found!r} if you trust it to be one)")
        loader = _LOADERS.get(found)
        if loader is None:
            raise CheckpointError(f"{checkpoint.path} holds a checkpoint of kind {found!r}, which no loader is "
                                  f"registered for (known kinds: {', '.join(sorted(_LOADERS))}); import the "
                                  f"module that saves that kind first")
        return loader(checkpoint, map_location)


_LOADERS: dict[str, Callable[[Checkpoint, Any], Any]] = {}


def register_loader(kind: str, loader: Callable[[Checkpoint, Any], Any]) -> None:
    """Teach :func:`load` to read checkpoints whose ``structure.json`` says ``"kind": kind``;
    ``loader(checkpoint, map_location)`` returns the loaded object. It gets the checkpoint open, its
    files checked against the manifest; it must check the structure before using it (see
    :func:`decode`, which does so for state-dict nodes) and read arrays with ``checkpoint.read_arrays``."""
    _LOADERS[kind] = loader


def _load_state_dict(checkpoint: Checkpoint, map_location: Any) -> Any:
    structure = checkpoint.structure
    source = str(checkpoint.path / "structure.json")
    if "root" not in structure:
        raise CheckpointError(f"{source}: expected a 'root' entry describing the saved object")
    return decode(structure["root"], checkpoint, map_location, source=source)


register_loader("state_dict", _load_state_dict)


def register_tensor_class(flag: str, cls: type) -> None:
    """Save tensors of the subclass ``cls`` with ``flag: true`` in their node, and load such a node as
    ``cls(tensor, requires_grad=...)``."""
    TENSOR_CLASSES[flag] = cls
