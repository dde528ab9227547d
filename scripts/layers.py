"""The floors of toynet and the imports between its modules, read from the code itself.

    python scripts/layers.py                  # the report: floors, imports that run up, circles, sizes
    python scripts/layers.py --svg docs/img/layers.svg   # the picture on docs/how-it-works.md

Every module of ``toynet/`` belongs to one floor (:data:`FLOORS`, ground first). A module may import
modules of its own floor and of the floors below; an import that runs *up* a floor, or a circle of
imports, means the layers no longer show. ``tests/test_layers.py`` checks the same rules on every run,
so this picture cannot drift from the code.

Only toynet's own imports count. Importing ``toynet.ops.shape`` also runs ``toynet/__init__.py`` and
``toynet/ops/__init__.py``; those implicit parent imports are not arrows (every module would then
import the whole package).
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "toynet"

#: Ground floor first. A module belongs to the first floor with a prefix that matches its dotted name.
FLOORS: list[tuple[str, tuple[str, ...], str]] = [
    ("mode", ("toynet.mode",), "grad mode, the active tracer, observers"),
    ("backend", ("toynet.backend",), "NumPy / CuPy: devices, dtypes, transfers, random numbers"),
    ("ops", ("toynet.ops", "toynet.dynamic.printing"), "every op once: forward, vjp, shape rule; printing arrays"),
    ("autograd", ("toynet.dynamic.autograd", "toynet.dynamic.autograd_errors"), "reverse-mode differentiation of recorded ops, version counters"),
    ("tensor", ("toynet.dynamic", "toynet.serialization"),
     "Tensor and apply(): Eager mode"),
    ("static", ("toynet.static",), "Graph mode: IR, tracer, passes, compiler"),
    ("distributed", ("toynet.distributed",), "processes and collectives (MPI), placements, SBP, global tensors"),
    ("nn / optim", ("toynet.nn", "toynet.optim", "toynet.utils", "toynet.dynamic.amp"), "modules, nn.Graph, optimizers, data"),
    ("vision / text", ("toynet.vision", "toynet.text"), "CIFAR-10, transforms, MobileNetV2; a text corpus, a tiny GPT"),
    ("onnx", ("toynet.onnx",), "ONNX export and import (optional onnx package)"),
    ("viz", ("toynet.viz",), "pictures of both designs; notebook display"),
    ("package", ("toynet",), "import toynet as flow"),
]
#: Modules that stand apart: they import nothing of the framework and nothing imports them.
APART = ("toynet.toy",)
#: A module a reader takes in at one sitting. (Issue 19 budgets the engines, not the files: one whole file
#: beats a file split only to stay under a line count, so the cap is a guard against giant files, not a
#: target; scripts/lesson_path.py measures what one training step makes a learner read.)
MAX_LINES = 500


@dataclass
class Import:
    source: str       # the importing module
    target: str       # the imported toynet module
    line: int
    in_function: bool
    reason: str = ""  # the comment on the import's line or the line above (for imports inside functions)


@dataclass
class House:
    modules: dict[str, Path] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)

    def floor_of(self, module: str) -> int:
        best, best_len = -1, -1
        for index, (_, prefixes, _) in enumerate(FLOORS):
            for prefix in prefixes:
                if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                    best, best_len = index, len(prefix)
        return best

    def is_apart(self, module: str) -> bool:
        return any(module == p or module.startswith(p + ".") for p in APART)

    def upward(self) -> list[Import]:
        """Imports from a module to one on a higher floor."""
        return [i for i in self.imports
                if not self.is_apart(i.source) and self.floor_of(i.target) > self.floor_of(i.source)]

    def circles(self) -> list[list[str]]:
        """Groups of modules that import each other, directly or around a loop (Tarjan's algorithm)."""
        edges: dict[str, set[str]] = {m: set() for m in self.modules}
        for i in self.imports:
            edges[i.source].add(i.target)
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[list[str]] = []

        def visit(v: str) -> None:  # recursion depth is bounded by the number of modules (~100)
            index[v] = low[v] = len(index)
            stack.append(v)
            on_stack.add(v)
            for w in sorted(edges[v]):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1 or v in edges[v]:
                    found.append(sorted(group))

        for v in sorted(edges):
            if v not in index:
                visit(v)
        return found

    def long_modules(self) -> list[tuple[str, int]]:
        sizes = [(m, len(p.read_text().splitlines())) for m, p in self.modules.items()]
        return sorted([(m, n) for m, n in sizes if n > MAX_LINES], key=lambda x: -x[1])

    def function_imports(self) -> list[Import]:
        return [i for i in self.imports if i.in_function]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_house() -> House:
    house = House()
    for path in sorted(PACKAGE.rglob("*.py")):
        house.modules[module_name(path)] = path
    for name, path in house.modules.items():
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        is_package = path.name == "__init__.py"
        for node, in_function in _imports(tree):
            for target in _targets(node, name, is_package, house.modules):
                if target != name:
                    house.imports.append(Import(name, target, node.lineno, in_function,
                                                _reason(lines, node.lineno) if in_function else ""))
    return house


def _imports(tree: ast.AST):
    """Every import statement with whether it runs inside a function (skipping ``if TYPE_CHECKING:``)."""
    def walk(node: ast.AST, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            else:
                yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                             ast.Lambda)))
    yield from walk(tree, False)


def _targets(node: ast.AST, module: str, is_package: bool, modules: dict[str, Path]) -> list[str]:
    """The toynet modules an import statement loads (a ``from X import name`` that names a submodule
    loads that submodule)."""
    if isinstance(node, ast.Import):
        return [_owner(a.name, modules) for a in node.names if a.name.split(".")[0] == "toynet"]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        where = ".".join(base + ([node.module] if node.module else []))
    else:
        where = node.module or ""
    if where.split(".")[0] != "toynet":
        return []
    found = []
    for alias in node.names:
        sub = f"{where}.{alias.name}"
        found.append(sub if sub in modules else _owner(where, modules))
    return found


def _owner(name: str, modules: dict[str, Path]) -> str:
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _reason(lines: list[str], lineno: int) -> str:
    here = lines[lineno - 1]
    if "#" in here:
        return here.split("#", 1)[1].strip()
    above = lines[lineno - 2].strip() if lineno >= 2 else ""
    return above[1:].strip() if above.startswith("#") else ""


# ------------------------------------------------------------------------------------------ report


def report(house: House) -> str:
    out = [f"{len(house.modules)} modules on {len(FLOORS)} floors, {len(house.imports)} imports of toynet modules"]
    for index in reversed(range(len(FLOORS))):
        name, _, what = FLOORS[index]
        members = [m for m in house.modules if house.floor_of(m) == index and not house.is_apart(m)]
        out.append(f"  floor {index} {name:<11} {len(members):>3} modules  ({what})")
    up = house.upward()
    out.append(f"imports that run up a floor: {len(up)}")
    out += [f"  {i.source} -> {i.target} (line {i.line})" for i in up]
    circles = house.circles()
    out.append(f"circles: {len(circles)}")
    out += ["  " + " <-> ".join(c) for c in circles]
    long = house.long_modules()
    out.append(f"modules over {MAX_LINES} lines: {len(long)}")
    out += [f"  {m}: {n}" for m, n in long]
    inner = house.function_imports()
    out.append(f"imports inside functions: {len(inner)}")
    out += [f"  {i.source}:{i.line} -> {i.target}  # {i.reason or '(no reason given)'}" for i in inner]
    return "\n".join(out)


def dot_source(house: House) -> str:
    """The floors as a stack, ground at the bottom: each floor names its modules and, for each floor
    below, how many module-to-module import links it has there. Downward imports are only counted
    (hundreds of arrows would hide the layers); an import that runs *up* a floor is drawn as a red
    arrow, so a broken layer shows at a glance."""
    lines = ["digraph layers {",
             '  graph [rankdir=TB, nodesep=0.3, ranksep=0.18, fontname="Helvetica", fontsize=12];',
             '  node [shape=plain, fontname="Helvetica", fontsize=12];',
             '  edge [color="#c0392b", fontcolor="#c0392b", fontname="Helvetica", fontsize=11, penwidth=1.6];']
    uses: dict[int, dict[int, int]] = {}   # floor -> floor below -> how many module-to-module links
    for source, target in sorted({(i.source, i.target) for i in house.imports if not house.is_apart(i.source)}):
        a, b = house.floor_of(source), house.floor_of(target)
        if b < a:
            uses.setdefault(a, {})[b] = uses.setdefault(a, {}).get(b, 0) + 1
    for index in reversed(range(len(FLOORS))):
        name, _, what = FLOORS[index]
        members = sorted(m for m in house.modules if house.floor_of(m) == index and not house.is_apart(m))
        used = ", ".join(f"{FLOORS[b][0]} {n}" for b, n in sorted(uses.get(index, {}).items(), reverse=True))
        header = f"<b>{index}. {_html(name)}</b>  {_html(what)}"
        rows = [f'<tr><td align="left" width="560" bgcolor="#dbe6f6">{header}</td></tr>',
                f'<tr><td align="left">{_html(", ".join(_short_names(members)))}</td></tr>']
        if used:
            rows.append(f'<tr><td align="left"><font color="#555555">imports: {_html(used)}</font></td></tr>')
        lines.append(f'  f{index} [label=<<table border="1" cellborder="0" cellspacing="0" cellpadding="5" '
                     f'color="#5b7db1" bgcolor="#f4f7fc" width="560">{"".join(rows)}</table>>];')
    for index in reversed(range(1, len(FLOORS))):
        lines.append(f"  f{index} -> f{index - 1} [style=invis, weight=10];")
    for i in house.upward():
        lines.append(f'  f{house.floor_of(i.source)} -> f{house.floor_of(i.target)} '
                     f'[label=" {_html(i.source)} -> {_html(i.target)}", constraint=false];')
    lines.append("}")
    return "\n".join(lines)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _short_names(members: list[str]) -> list[str]:
    """Packages shown once (``ops/*``), top-level modules by file name."""
    shown: list[str] = []
    for m in members:
        parts = m.split(".")
        label = "toynet/__init__" if m == "toynet" else (f"{parts[1]}/" if len(parts) > 2 or _is_package(m)
                                                         else f"{parts[1]}.py")
        if label not in shown:
            shown.append(label)
    return shown


def _is_package(module: str) -> bool:
    return (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--svg", help="also draw the floors with Graphviz's dot into this SVG file")
    args = parser.parse_args(argv)
    house = read_house()
    print(report(house))
    if args.svg:
        svg = subprocess.run(["dot", "-Tsvg"], input=dot_source(house), capture_output=True, text=True, check=True)
        Path(args.svg).parent.mkdir(parents=True, exist_ok=True)
        Path(args.svg).write_text(svg.stdout)
        print(f"drew {args.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
