"""A state dict as JSON nodes and back: :func:`encode` describes an object, :func:`decode` rebuilds it.

:func:`decode` reads a file that may be damaged or hostile, so it first checks the whole description
(:func:`check`: every node's type and fields, nesting at most :data:`MAX_DEPTH` deep, names, dtypes,
shapes and devices, and that an array referred to twice is described the same way both times) and
collects the arrays it refers to with their expected dtype and shape. Only then does it read those
arrays (each checked before its data is read) and build the object. Whatever is wrong raises
:class:`CheckpointError` naming the file, the entry and what was expected there.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from typing import Any

from .. import backend
from ..dynamic.tensor import Tensor
from .errors import MAX_DEPTH, CheckpointError, DeviceUnavailableError, is_name, shape_error, short

host = backend.host  # checkpoints are host data

#: Tensor subclasses that round-trip, by the flag that marks them in a tensor's node: ``nn.Parameter``
#: registers itself as ``"parameter"`` (this package sits below ``nn``, so it cannot import it).
TENSOR_CLASSES: dict[str, type] = {}

#: dtypes a tensor node may have (toynet's), and those a NumPy array node may have (numbers and bools).
TENSOR_DTYPES = {d.name for d in backend.ALL_DTYPES}
NDARRAY_DTYPES = TENSOR_DTYPES | {"int16", "uint16", "uint32", "uint64"}
_DEVICE = re.compile(r"[a-z]{1,20}(:[0-9]{1,4})?")
_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


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

    def visit(value: Any, where: str, depth: int) -> dict:
        if depth > MAX_DEPTH:
            raise ValueError(f"cannot save {where}: containers nested more than {MAX_DEPTH} deep")
        if isinstance(value, Tensor):
            if value.is_lazy:
                raise TypeError(f"cannot save {where}: it is a lazy tensor from inside nn.Graph.build(), "
                                f"which has no data yet")
            node = array_node("tensor", value.numpy(), value)
            node.update(device=str(value.device), requires_grad=bool(value.requires_grad))
            for flag, cls in TENSOR_CLASSES.items():
                node[flag] = isinstance(value, cls)
            return node
        if isinstance(value, host.ndarray):
            if not value.dtype.isnative:
                value = value.astype(value.dtype.newbyteorder("="))
            if value.dtype.name not in NDARRAY_DTYPES:
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
                            "items": [item(k, v, where, depth) for k, v in value.items()]}
                return {"type": "tuple" if isinstance(value, tuple) else "list",
                        "items": [visit(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]}
            finally:
                open_containers.discard(id(value))
        raise TypeError(f"cannot save {where}: a {type(value).__name__}. toynet.save stores tensors, NumPy "
                        f"arrays, numbers, strings, bools, None, and dicts/lists/tuples of those")

    def item(key: Any, value: Any, where: str, depth: int) -> dict:
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise TypeError(f"cannot save {where}: its key {key!r} is a {type(key).__name__}; dict keys "
                            f"must be strings or ints")
        return {"key": key, "key_type": "str" if isinstance(key, str) else "int",
                "value": visit(value, f"{where}[{key!r}]", depth + 1)}

    return visit(obj, "obj", 0), arrays


# ------------------------------------------------------------------------------------- checking


_FIELDS = {"tensor": {"type", "array", "dtype", "shape", "device", "requires_grad"},
           "ndarray": {"type", "array", "dtype", "shape"},
           "none": {"type"}, "bool": {"type", "value"}, "int": {"type", "value"}, "float": {"type", "value"},
           "str": {"type", "value"}, "list": {"type", "items"}, "tuple": {"type", "items"},
           "dict": {"type", "items"}, "ordered_dict": {"type", "items"}}
_REQUIRED = {kind: fields - {"device", "requires_grad"} for kind, fields in _FIELDS.items()}


def check(node: Any, source: str = "structure.json") -> dict[str, tuple]:
    """Check a whole description from :func:`encode` without building anything; return the arrays it
    refers to: name -> (dtype, shape, where). ``source`` names the file in error messages."""
    wanted: dict[str, tuple] = {}
    described: dict[str, tuple] = {}
    # An explicit stack, not recursion: a hostile file's nesting never reaches Python's recursion limit.
    stack = [(node, "obj", 0)]
    while stack:
        node, where, depth = stack.pop()

        def fail(expected: str, got: Any = node) -> CheckpointError:
            return CheckpointError(f"{source}: {where}: expected {expected}, got {short(got)}")

        kind = node.get("type") if isinstance(node, dict) else None
        if not (isinstance(kind, str) and kind in _FIELDS):
            raise fail(f"a node whose type is one of {', '.join(_FIELDS)}", kind if isinstance(node, dict) else node)
        fields = _FIELDS[kind] | (set(TENSOR_CLASSES) if kind == "tensor" else set())
        if not _REQUIRED[kind] <= set(node) <= fields:
            raise fail(f"a node of type {kind!r} with the fields {', '.join(sorted(fields))}")
        if depth > MAX_DEPTH:
            raise fail(f"containers nested at most {MAX_DEPTH} deep", "deeper")
        value = node.get("value")
        if kind in ("tensor", "ndarray"):
            name, dtype, shape = node["array"], node["dtype"], node["shape"]
            if not is_name(name):
                raise fail("an array name of letters, digits, '_', '.' and '-'", name)
            if not (isinstance(dtype, str) and dtype in (TENSOR_DTYPES if kind == "tensor" else NDARRAY_DTYPES)):
                raise fail(f"a dtype of a {kind} ({', '.join(sorted(TENSOR_DTYPES))})", dtype)
            if shape_error(shape):
                raise fail(shape_error(shape), shape)
            device = node.get("device", "cpu")
            if not (isinstance(device, str) and _DEVICE.fullmatch(device)):
                raise fail("a device such as 'cpu' or 'cuda:0'", device)
            flags = {k: node[k] for k in node if k in TENSOR_CLASSES or k == "requires_grad"}
            if any(type(v) is not bool for v in flags.values()):
                raise fail(f"true or false for {', '.join(flags)}", flags)
            description = (kind, dtype, tuple(shape), device, tuple(sorted(flags.items())))
            if described.setdefault(name, description) != description:
                raise fail(f"array {name!r} described as elsewhere ({described[name]})", description)
            wanted[name] = (host.dtype(dtype), tuple(shape), f"{source} at {where}")
        elif kind in ("bool", "int", "str"):
            if type(value).__name__ != kind:
                raise fail(f"a {kind}", value)
        elif kind == "float":
            if type(value) not in (int, float) and not (isinstance(value, str) and value in _FLOATS):
                raise fail("a number, or 'nan', 'inf', '-inf'", value)
        elif kind in ("list", "tuple"):
            items = node["items"]
            if not isinstance(items, list):
                raise fail("a list of items", items)
            stack += [(v, f"{where}[{i}]", depth + 1) for i, v in reversed(list(enumerate(items)))]
        elif kind in ("dict", "ordered_dict"):
            items = node["items"]
            if not isinstance(items, list):
                raise fail("a list of items", items)
            keys = set()
            for entry in reversed(items):
                if not (isinstance(entry, dict) and set(entry) == {"key", "key_type", "value"}
                        and entry["key_type"] in ("str", "int") and type(entry["key"]).__name__ == entry["key_type"]):
                    raise fail("items {'key': k, 'key_type': 'str' or 'int', 'value': node}", entry)
                if entry["key"] in keys:
                    raise fail("each key once", entry["key"])
                keys.add(entry["key"])
                stack.append((entry["value"], f"{where}[{entry['key']!r}]", depth + 1))
    return wanted


# ------------------------------------------------------------------------------------- building


def decode(node: Any, arrays: Any, map_location: Any = None, source: str = "structure.json") -> Any:
    """Rebuild the object a node from :func:`encode` describes. ``arrays`` is a checkpoint opened by
    ``read_checkpoint`` (only the arrays the node refers to are read from it), or a dict name -> host
    array. Everything is checked before anything is built."""
    wanted = check(node, source)
    if hasattr(arrays, "read_arrays"):
        arrays = arrays.read_arrays(wanted)
    else:
        for name, (dtype, shape, where) in wanted.items():
            array = arrays.get(name)
            if array is None:
                raise CheckpointError(f"{where}: there is no array {name!r}; the checkpoint is incomplete")
            if array.dtype != dtype or tuple(array.shape) != shape:
                raise CheckpointError(f"{where}: array {name!r} is {array.dtype} {list(array.shape)} but "
                                      f"{source} says {dtype.name} {list(shape)}")
    loaded: dict[str, Any] = {}   # array name -> object, so a tensor saved twice loads as one object

    def build(node: dict, where: str) -> Any:
        kind = node["type"]
        if kind in ("tensor", "ndarray"):
            name = node["array"]
            if name not in loaded:
                array = arrays[name]
                loaded[name] = array if kind == "ndarray" else _tensor(array, node, where, map_location)
            return loaded[name]
        if kind == "none":
            return None
        if kind == "float":
            return _FLOATS[node["value"]] if isinstance(node["value"], str) else float(node["value"])
        if kind in ("bool", "int", "str"):
            return node["value"]
        if kind in ("list", "tuple"):
            items = [build(v, f"{where}[{i}]") for i, v in enumerate(node["items"])]
            return tuple(items) if kind == "tuple" else items
        out = OrderedDict() if kind == "ordered_dict" else {}
        for entry in node["items"]:
            out[entry["key"]] = build(entry["value"], f"{where}[{entry['key']!r}]")
        return out

    return build(node, "obj")   # checked: at most MAX_DEPTH deep


def _mapped(saved: str, map_location: dict) -> Any:
    """Where ``map_location`` sends a tensor saved on ``saved``: its keys name devices in either spelling
    (``"cpu"`` matches a tensor saved on ``"cpu:0"``; a device type alone means index 0)."""
    def canonical(name: Any) -> Any:
        if isinstance(name, backend.Device):
            return str(name)
        return name if not isinstance(name, str) or ":" in name else f"{name}:0"
    for key, target in map_location.items():
        if canonical(key) == canonical(saved):
            return target
    return saved


def _tensor(array: Any, node: dict, where: str, map_location: Any) -> Tensor:
    saved = node.get("device", "cpu")
    target = _mapped(saved, map_location) if isinstance(map_location, dict) else (map_location or saved)
    try:
        device = backend.to_device_obj(target)
        data = backend.from_host(array, device)
    except (RuntimeError, ValueError, TypeError, ImportError) as error:
        raise DeviceUnavailableError(f"cannot load {where} onto device {target!r} ({error}); pass "
                                     f"map_location='cpu' to toynet.load to load it elsewhere") from error
    tensor = Tensor.wrap(data, device)
    for flag, cls in TENSOR_CLASSES.items():
        if node.get(flag):
            return cls(tensor, requires_grad=bool(node.get("requires_grad", True)))
    if node.get("requires_grad") and tensor.dtype.is_floating_point:
        tensor.requires_grad_(True)
    return tensor
