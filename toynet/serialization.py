"""``toynet.save`` and ``toynet.load``: checkpoints as a directory of JSON and ``.npz``, never pickle.

Pickle runs code while loading, so a pickled checkpoint from a stranger can do anything to your machine.
toynet's checkpoints hold only data: a description of the saved object in JSON, and the tensors' numbers
in NumPy's ``.npz`` archive, read back with ``allow_pickle=False``.

Format (version 1)
------------------
``toynet.save(obj, "ckpt")`` writes a *directory* (as OneFlow's ``flow.save`` does)::

    ckpt/structure.json    what the object looks like
    ckpt/arrays.npz        one array per tensor, named "t0", "t1", ...

``structure.json`` is ``{"format": "toynet-checkpoint", "version": 1, "kind": "state_dict", "root": NODE}``,
where a NODE describes one value:

======================================  =========================================================
``{"type": "tensor", "array": "t0",``   a tensor: its array's name in ``arrays.npz``, its dtype,
``"dtype": "float32", "shape": [3],``   shape and device, and whether it requires grad or is an
``"device": "cpu", "requires_grad":``   ``nn.Parameter``. The same tensor object saved twice is
``false, "parameter": false}``          stored once and loads as one object again.
``{"type": "ndarray", "array": ...}``   a NumPy array (dtype and shape as above; dtype names are NumPy's,
                                        which toynet's dtypes share)
``{"type": "dict", "items": [...]}``    each item ``{"key": k, "key_type": "str"|"int", "value": NODE}``;
                                        ``"ordered_dict"`` for an ``OrderedDict``
``{"type": "list", "items": [...]}``    a list (``"tuple"`` for a tuple) of NODEs
``{"type": "int", "value": 3}``         also ``"float"`` (``"nan"``, ``"inf"``, ``"-inf"`` as strings),
                                        ``"bool"``, ``"str"``; and ``{"type": "none"}``
======================================  =========================================================

Other kinds of object (an ``nn.Graph`` exported for deployment) plug in from outside: ``save`` hands any
object with a ``_toynet_save_(path)`` method to that method (which writes with :func:`write_checkpoint`
and its own ``kind``), and ``load`` finds the reader of each ``kind`` in a registry filled by
:func:`register_loader`.

Saving is atomic: everything is written into a temporary sibling directory and flushed to disk, and only
then swapped in with renames. A save that fails half-way (an unsupported object deep in the dict, a full
disk) leaves the previous checkpoint at ``path`` untouched.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import backend
from .tensor import Tensor

host = backend.host  # checkpoints are host data

FORMAT = "toynet-checkpoint"
VERSION = 1
STRUCTURE_FILE = "structure.json"
ARRAYS_FILE = "arrays.npz"


class CheckpointError(ValueError):
    """A checkpoint directory that is damaged, incomplete or not toynet's; the message says what is wrong."""


@dataclass
class Checkpoint:
    """A checkpoint read from disk: where it is, its parsed ``structure.json`` and its arrays by name."""

    path: Path
    structure: dict
    arrays: dict[str, Any]


# ------------------------------------------------------------------------------------- public API


def save(obj: Any, path: str | os.PathLike) -> None:
    """Save a state dict (nested dicts/lists/tuples of tensors, numbers, strings, bools, None) to the
    directory ``path``, replacing an earlier checkpoint there.

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


def load(path: str | os.PathLike, map_location: Any = None) -> Any:
    """Read what :func:`save` wrote. Tensors go back to the device they were saved from, or to
    ``map_location`` (a device such as ``"cpu"``, or a dict ``{"cuda:0": "cpu"}``)."""
    checkpoint = read_checkpoint(path)
    kind = checkpoint.structure.get("kind", "state_dict")
    loader = _LOADERS.get(kind)
    if loader is None:
        raise CheckpointError(f"{checkpoint.path} holds a checkpoint of kind {kind!r}, which no loader is "
                              f"registered for (known kinds: {', '.join(sorted(_LOADERS))}); import the "
                              f"module that saves that kind first")
    return loader(checkpoint, map_location)


_LOADERS: dict[str, Callable[[Checkpoint, Any], Any]] = {}


def register_loader(kind: str, loader: Callable[[Checkpoint, Any], Any]) -> None:
    """Teach :func:`load` to read checkpoints whose ``structure.json`` says ``"kind": kind``;
    ``loader(checkpoint, map_location)`` returns the loaded object."""
    _LOADERS[kind] = loader


register_loader("state_dict", lambda checkpoint, map_location: decode(
    _field(checkpoint.structure, "root", "structure.json"), checkpoint.arrays, map_location))


#: Tensor subclasses that round-trip, by the flag that marks them in a tensor's node: ``nn.Parameter``
#: registers itself as ``"parameter"`` (this module sits below ``nn``, so it cannot import it).
_TENSOR_CLASSES: dict[str, type] = {}


def register_tensor_class(flag: str, cls: type) -> None:
    """Save tensors of the subclass ``cls`` with ``flag: true`` in their node, and load such a node as
    ``cls(tensor, requires_grad=...)``."""
    _TENSOR_CLASSES[flag] = cls


# ------------------------------------------------------------------------------ object <-> JSON


def encode(obj: Any) -> tuple[dict, dict[str, Any]]:
    """Describe ``obj`` as a JSON-able node; return it and the host arrays it refers to, by name."""
    arrays: dict[str, Any] = {}
    names: dict[int, str] = {}    # id(tensor) -> array name: a tensor saved twice is stored once
    keep_alive: list[Any] = []    # ...so no saved tensor may be freed (and its id reused) meanwhile
    open_containers: set[int] = set()

    def array_node(kind: str, array: Any, obj: Any) -> dict:
        if id(obj) not in names:
            names[id(obj)] = f"t{len(arrays)}"
            arrays[names[id(obj)]] = array
            keep_alive.append(obj)
        return {"type": kind, "array": names[id(obj)], "dtype": array.dtype.name,
                "shape": list(array.shape)}

    def visit(value: Any, where: str) -> dict:
        if isinstance(value, Tensor):
            if value.is_lazy:
                raise TypeError(f"cannot save {where}: it is a lazy tensor from inside nn.Graph.build(), "
                                f"which has no data yet")
            node = array_node("tensor", value.numpy(), value)
            node.update(device=str(value.device), requires_grad=bool(value.requires_grad))
            for flag, cls in _TENSOR_CLASSES.items():
                node[flag] = isinstance(value, cls)
            return node
        if isinstance(value, host.ndarray):
            if value.dtype.kind not in "biuf":
                raise TypeError(f"cannot save {where}: a NumPy array of dtype {value.dtype} (only numbers "
                                f"and bools can be saved without pickle)")
            return array_node("ndarray", value, value)
        if value is None:
            return {"type": "none"}
        if isinstance(value, (bool, host.bool_)):
            return {"type": "bool", "value": bool(value)}
        if isinstance(value, (int, host.integer)):
            return {"type": "int", "value": int(value)}
        if isinstance(value, (float, host.floating)):
            value = float(value)
            return {"type": "float", "value": value if math.isfinite(value) else repr(value)}
        if isinstance(value, str):
            return {"type": "str", "value": value}
        if isinstance(value, (dict, list, tuple)):
            if id(value) in open_containers:
                raise ValueError(f"cannot save {where}: it contains itself")
            open_containers.add(id(value))
            try:
                if isinstance(value, dict):
                    return {"type": "ordered_dict" if isinstance(value, OrderedDict) else "dict",
                            "items": [item(k, v, where) for k, v in value.items()]}
                return {"type": "tuple" if isinstance(value, tuple) else "list",
                        "items": [visit(v, f"{where}[{i}]") for i, v in enumerate(value)]}
            finally:
                open_containers.discard(id(value))
        raise TypeError(f"cannot save {where}: a {type(value).__name__}. toynet.save stores tensors, NumPy "
                        f"arrays, numbers, strings, bools, None, and dicts/lists/tuples of those")

    def item(key: Any, value: Any, where: str) -> dict:
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise TypeError(f"cannot save {where}: its key {key!r} is a {type(key).__name__}; dict keys "
                            f"must be strings or ints")
        return {"key": key, "key_type": "str" if isinstance(key, str) else "int",
                "value": visit(value, f"{where}[{key!r}]")}

    return visit(obj, "obj"), arrays


def decode(node: Any, arrays: dict[str, Any], map_location: Any = None) -> Any:
    """Rebuild the object a node from :func:`encode` describes; ``arrays`` maps names to host arrays."""
    loaded: dict[str, Any] = {}   # array name -> object, so a tensor saved twice loads as one object

    def visit(node: Any, where: str) -> Any:
        kind = _field(node, "type", where)
        if kind in ("tensor", "ndarray"):
            name = _field(node, "array", where)
            if name in loaded:
                return loaded[name]
            array = arrays.get(name)
            if array is None:
                raise CheckpointError(f"{where}: {ARRAYS_FILE} has no array {name!r}, which structure.json "
                                      f"refers to; the checkpoint is incomplete")
            if array.dtype.name != node.get("dtype") or list(array.shape) != node.get("shape"):
                raise CheckpointError(f"{where}: array {name!r} is {array.dtype} {tuple(array.shape)} but "
                                      f"structure.json says {node.get('dtype')} {node.get('shape')}")
            loaded[name] = array if kind == "ndarray" else _tensor(array, node, where, map_location)
            return loaded[name]
        if kind == "none":
            return None
        if kind in ("bool", "int", "str"):
            value = _field(node, "value", where)
            if type(value).__name__ != kind:
                raise CheckpointError(f"{where}: a {kind} node holds {value!r}")
            return value
        if kind == "float":
            return float(_field(node, "value", where))
        if kind in ("list", "tuple"):
            items = [visit(v, f"{where}[{i}]") for i, v in enumerate(_field(node, "items", where))]
            return tuple(items) if kind == "tuple" else items
        if kind in ("dict", "ordered_dict"):
            out = OrderedDict() if kind == "ordered_dict" else {}
            for entry in _field(node, "items", where):
                key, key_type = _field(entry, "key", where), _field(entry, "key_type", where)
                if key_type not in ("str", "int") or type(key).__name__ != key_type:
                    raise CheckpointError(f"{where}: key {key!r} does not match its key_type {key_type!r}")
                out[key] = visit(_field(entry, "value", where), f"{where}[{key!r}]")
            return out
        raise CheckpointError(f"{where}: unknown node type {kind!r} in structure.json")

    return visit(node, "obj")


def _field(node: Any, key: str, where: str) -> Any:
    if not isinstance(node, dict) or key not in node:
        raise CheckpointError(f"structure.json is malformed at {where}: expected an object with a {key!r} "
                              f"entry, got {str(node)[:80]}")
    return node[key]


def _tensor(array: Any, node: dict, where: str, map_location: Any) -> Tensor:
    try:
        backend.dtype_of(array)
    except TypeError as error:
        raise CheckpointError(f"{where}: {error}") from error
    saved = str(node.get("device", "cpu"))
    target = map_location.get(saved, saved) if isinstance(map_location, dict) else (map_location or saved)
    try:
        device = backend.to_device_obj(target)
        data = backend.from_host(array, device)
    except (RuntimeError, ValueError) as error:
        raise RuntimeError(f"cannot load {where} onto device {target!r} ({error}); pass map_location='cpu' "
                           f"to toynet.load to load it elsewhere") from error
    tensor = Tensor.wrap(data, device)
    for flag, cls in _TENSOR_CLASSES.items():
        if node.get(flag):
            return cls(tensor, requires_grad=bool(node.get("requires_grad", True)))
    if node.get("requires_grad") and tensor.dtype.is_floating_point:
        tensor.requires_grad_(True)
    return tensor


# ---------------------------------------------------------------------------------- the directory


def write_checkpoint(path: str | os.PathLike, structure: dict, arrays: dict[str, Any],
                     files: dict[str, bytes] | None = None) -> None:
    """Atomically write a checkpoint directory: ``structure.json`` (``structure`` plus the format name and
    version), ``arrays.npz`` (``arrays``: name -> host array) and any extra ``files`` (name -> bytes).

    The old directory at ``path`` (if any) is replaced only once the new one is complete on disk.
    """
    target = Path(os.fspath(path)).absolute()
    _check_replaceable(target)
    # Serialise before touching the disk, so an unsavable value fails with nothing written.
    text = json.dumps({"format": FORMAT, "version": VERSION, **structure}, indent=1, allow_nan=False)
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".saving", dir=parent))
    backup = None
    try:
        _write_synced(staging / ARRAYS_FILE, lambda f: host.savez(f, allow_pickle=False, **arrays))
        for name, data in (files or {}).items():
            _write_synced(staging / name, lambda f, data=data: f.write(data))
        # structure.json goes last: a directory that has it is complete.
        _write_synced(staging / STRUCTURE_FILE, lambda f: f.write(text.encode("utf-8")))
        _sync_directory(staging)
        if target.exists():
            backup = staging.with_suffix(".old")
            os.rename(target, backup)
        os.rename(staging, target)
        _sync_directory(parent)
    except BaseException:
        if backup is not None and not target.exists():
            os.rename(backup, target)  # put the old checkpoint back
            backup = None
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)


def read_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read and check a checkpoint directory: its structure and every array (without pickle)."""
    root = Path(os.fspath(path))
    if not root.exists():
        raise FileNotFoundError(f"no checkpoint at {root}")
    if not root.is_dir():
        raise CheckpointError(f"{root} is a file, not a toynet checkpoint: toynet.save writes a directory "
                              f"holding {STRUCTURE_FILE} and {ARRAYS_FILE}. (toynet never reads pickle files "
                              f"such as PyTorch's .pt or OneFlow's pickled state dicts.)")
    structure_file = root / STRUCTURE_FILE
    if not structure_file.is_file():
        contents = sorted(p.name for p in root.iterdir())[:10]
        raise CheckpointError(f"{root} has no {STRUCTURE_FILE}, so it is not a complete toynet checkpoint "
                              f"(it holds: {', '.join(contents) or 'nothing'})")
    try:
        structure = json.loads(structure_file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{structure_file} is not valid JSON ({error}); the checkpoint is damaged") \
            from error
    if not isinstance(structure, dict) or structure.get("format") != FORMAT:
        found = structure.get("format") if isinstance(structure, dict) else type(structure).__name__
        raise CheckpointError(f"{structure_file} does not describe a toynet checkpoint (format {found!r}, "
                              f"expected {FORMAT!r})")
    version = structure.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= VERSION:
        raise CheckpointError(f"{root} uses checkpoint format version {version!r}, but this toynet reads "
                              f"versions 1 to {VERSION}" + ("; upgrade toynet" if isinstance(version, int)
                                                            and version > VERSION else ""))
    arrays_file = root / ARRAYS_FILE
    if not arrays_file.is_file():
        raise CheckpointError(f"{root} has no {ARRAYS_FILE}; the checkpoint is incomplete")
    try:
        with host.load(arrays_file, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
        raise CheckpointError(f"{arrays_file} is truncated or corrupt ({type(error).__name__}: {error})") \
            from error
    return Checkpoint(root, structure, arrays)


def _check_replaceable(target: Path) -> None:
    """Refuse to overwrite anything but an empty directory or an earlier toynet checkpoint."""
    if not target.exists():
        return
    if not target.is_dir():
        raise FileExistsError(f"{target} is a file; toynet.save writes a directory, so pick another path")
    if not any(target.iterdir()):
        return
    try:
        is_checkpoint = json.loads((target / STRUCTURE_FILE).read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        is_checkpoint = False
    if not is_checkpoint:
        raise FileExistsError(f"{target} exists and is not a toynet checkpoint; toynet.save replaces a "
                              f"checkpoint directory whole, so it will not overwrite other files. Pick a new "
                              f"path or remove that directory first")


def _write_synced(file: Path, write: Callable[[Any], Any]) -> None:
    with open(file, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def _sync_directory(directory: Path) -> None:
    """Flush a directory's entries (new files, renames) to disk; not every platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
