"""The house keeps its layers: no circles, no import up a floor, no module too long to read in one sitting.

The rules and the floors are in scripts/layers.py, which also draws the picture on docs/how-it-works.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def layers():
    spec = importlib.util.spec_from_file_location("toynet_layers", ROOT / "scripts" / "layers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def house(layers):
    return layers.read_house()


def test_every_module_is_on_a_floor(layers, house):
    lost = [m for m in house.modules if house.floor_of(m) < 0 and not house.is_apart(m)]
    assert not lost
    # A new top-level module lands on the package floor unless FLOORS names it: say where it belongs.
    top = len(layers.FLOORS) - 1
    assert [m for m in house.modules if house.floor_of(m) == top and not house.is_apart(m)] == ["toynet"]


def test_no_import_runs_up_a_floor(house):
    up = [f"{i.source}:{i.line} -> {i.target}" for i in house.upward()]
    assert up == [], "lower floors must not import higher ones"


def test_no_circles(house):
    assert house.circles() == []


def test_no_module_over_the_line_cap(layers, house):
    assert house.long_modules() == [], f"split modules over {layers.MAX_LINES} lines"


def test_few_imports_inside_functions_each_with_a_reason(house):
    inner = house.function_imports()
    assert len(inner) <= 8
    assert [f"{i.source}:{i.line}" for i in inner if not i.reason] == []


def test_no_importlib_for_toynet_modules():
    offenders = []
    for path in (ROOT / "toynet").rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if "import_module(" in line and "toynet" in line or "import_module(f\"{__name__}" in line:
                offenders.append(f"{path.relative_to(ROOT)}:{n}")
    assert offenders == []


def test_the_checker_sees_what_it_must(layers, tmp_path, monkeypatch):
    """The rules could fail: a circle, an upward import and a reasonless import inside a function are found."""
    package = tmp_path / "toynet"
    (package / "ops").mkdir(parents=True)
    (package / "__init__.py").write_text("from . import backend\n")
    (package / "backend.py").write_text("from .ops import thing\n")                 # up a floor, and a circle
    (package / "ops" / "__init__.py").write_text("from .thing import X\n")
    (package / "ops" / "thing.py").write_text("from .. import backend\nX = 1\n"
                                              "def f():\n    from .. import mode\n")
    (package / "mode.py").write_text("")
    monkeypatch.setattr(layers, "ROOT", tmp_path)
    monkeypatch.setattr(layers, "PACKAGE", package)
    house = layers.read_house()
    assert [(i.source, i.target) for i in house.upward()] == [("toynet.backend", "toynet.ops.thing")]
    assert house.circles() == [["toynet.backend", "toynet.ops.thing"]]
    assert [(i.source, i.reason) for i in house.function_imports()] == [("toynet.ops.thing", "")]
