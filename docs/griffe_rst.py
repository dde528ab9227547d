"""A Griffe extension for the API reference: read toynet's reStructuredText habits as Markdown.

toynet's docstrings are written to be read in the source and with ``help()``, so they use a few
reStructuredText forms that Markdown does not know. Before mkdocstrings renders a docstring, this turns

* cross-reference roles, ``:class:`~toynet.static.ir.Graph``` (also ``:func:``, ``:meth:``, ``:mod:``,
  ``:data:``, ``:attr:``, ``:exc:``), into links to the API pages when the target is documented
  (plain code when it is not, without a warning);
* doctest examples (lines starting with ``>>>``) into fenced ``pycon`` code blocks, which Markdown would
  otherwise read as nested quotes;
* a literal block (the indented lines after a paragraph ending in ``::``) into a fenced code block, so
  that an example is highlighted: ``python`` when the block is Python (it parses, and is more than one
  name), ``pycon`` when it starts with ``>>>``, ``text`` for anything else (a printout, a diagram);
* a paragraph ending in ``::`` into one ending in ``:`` (a lone ``::`` line disappears);
* a "simple table" (columns under ``=====  =====`` borders) into a preformatted block, which keeps its
  columns lined up (Markdown would run its lines together into one paragraph).

It also drops the instance attributes that have no docstring of their own (``self.name = name`` in an
``__init__``): the site lists every public function and class even without a docstring, so that the
reference is complete, but an entry per ``self.x = ...`` would bury the methods; classes describe
their attributes in their own docstring.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`(~?)([\w.]+)`")
TABLE_BORDER = re.compile(r"^\s*=+( +=+)+\s*$")


class RstToMarkdown(griffe.Extension):
    """Rewrite every docstring of the loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in list(_walk(pkg)):
            if obj.docstring is not None:
                obj.docstring.value = convert(obj.docstring.value, _package_of(obj))
            if obj.is_class:
                for name, member in list(obj.members.items()):
                    if (not member.is_alias and member.is_attribute and "instance-attribute" in member.labels
                            and member.docstring is None):
                        del obj.members[name]


def _walk(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)


def _package_of(obj: griffe.Object) -> tuple[str, str]:
    """The docstring's module, and the package its relative references (``.dce.run``) start from."""
    module = obj if obj.is_module else obj.module
    # (an __init__ module is its package, at any depth: griffe's is_package is true for the top one only)
    package = module.path if module.is_package or module.is_subpackage else module.path.rsplit(".", 1)[0]
    return module.path, package


def convert(text: str, where: tuple[str, str]) -> str:
    text = ROLE.sub(lambda m: _reference(m.group(2), m.group(1) == "~", *where), text)
    return _literal_markers(_doctests(_literal_blocks(_simple_tables(text))))


def _fenced(lines: list[str]) -> list[bool]:
    """For each line, whether it belongs to a fenced code block (its fences included)."""
    inside, marks = False, []
    for line in lines:
        fence = line.lstrip().startswith("```")
        marks.append(inside or fence)
        if fence:
            inside = not inside
    return marks


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _literal_blocks(text: str) -> str:
    """Fence the indented block after each paragraph ending in ``::``, in the block's language."""
    lines = text.split("\n")
    fenced = _fenced(lines)
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not fenced[i] and line.rstrip().endswith("::"):
            start = i + 1
            while start < len(lines) and not lines[start].strip():
                start += 1
            if start < len(lines) and not fenced[start] and _indent(lines[start]) > _indent(line):
                end = start
                while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > _indent(line)):
                    end += 1
                while not lines[end - 1].strip():
                    end -= 1
                block = textwrap.dedent("\n".join(lines[start:end])).split("\n")
                pad = " " * _indent(line)
                marker = line.rstrip()[:-2].rstrip()
                if marker.strip():
                    out += [marker if marker.endswith(":") else marker + ":", ""]
                out += [f"{pad}```{_language(block)}", *[pad + b if b.strip() else "" for b in block], f"{pad}```"]
                i = end
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _language(block: list[str]) -> str:
    """``pycon`` for a doctest, ``python`` for Python code (not a lone name or value), else ``text``."""
    if block[0].lstrip().startswith(">>>"):
        return "pycon"
    try:
        tree = ast.parse("\n".join(block))
    except SyntaxError:
        return "text"
    lone = (len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr)
            and isinstance(tree.body[0].value, (ast.Name, ast.Attribute, ast.Constant)))
    return "text" if not tree.body or lone else "python"


def _reference(target: str, short: bool, module: str, package: str) -> str:
    """An optional autorefs link: rendered as a link if the target is documented, else as code."""
    if target.startswith("."):
        dots = len(target) - len(target.lstrip("."))
        base = package.rsplit(".", dots - 1)[0] if dots > 1 else package
        target = f"{base}.{target.lstrip('.')}"
    elif "." not in target:
        target = f"{module}.{target}"
    shown = target.rsplit(".", 1)[-1] if short else target
    return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'


def _doctests(text: str) -> str:
    """Fence each run of doctest lines (``>>>``, ``...`` and the output after them)."""
    out: list[str] = []
    lines = text.split("\n")
    fenced = _fenced(lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>") and not fenced[i]:
            indent = line[: len(line) - len(line.lstrip())]
            block = []
            while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
                block.append(lines[i][len(indent):])
                i += 1
            out += [f"{indent}```pycon", *[indent + b for b in block], f"{indent}```"]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _literal_markers(text: str) -> str:
    """``text::`` before an indented block becomes ``text:`` (a lone ``::`` line disappears)."""
    lines = text.split("\n")
    fenced = _fenced(lines)
    for i, line in enumerate(lines):
        if line.rstrip().endswith("::") and not fenced[i]:
            stripped = line.rstrip()[:-2].rstrip()
            lines[i] = stripped + ":" if stripped and not stripped.endswith(":") else stripped
    return "\n".join(lines)


def _simple_tables(text: str) -> str:
    """Fence each reST simple table, from its top border to its bottom one, as preformatted text.

    The bottom border is the first border line followed by a blank line (or the end of the docstring); a
    header's border, in between, is followed by table rows.
    """
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if TABLE_BORDER.match(lines[i]):
            end = i + 1
            while end < len(lines) and not (TABLE_BORDER.match(lines[end])
                                            and (end + 1 == len(lines) or not lines[end + 1].strip())):
                end += 1
            if end < len(lines):
                out += ["```text", *(line.replace("``", "") for line in lines[i:end + 1]), "```"]
                i = end + 1
                continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)
