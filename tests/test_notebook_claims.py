"""The words of the teaching notebooks say what their code does: quoted code exists, numbers were printed.

The prose of a notebook is not executed, so it drifts when the engine changes under it (issue 19 found
op counts, a quoted line of source and a fused kernel that the printed outputs no longer showed). This
test reads the *stored* notebooks (fast: nothing is executed here) and checks three things for every
notebook in notebooks/:

(a) **Claims cells are claims.** A claims cell is a code cell tagged ``claims`` (cell metadata
    ``"tags": ["claims"]`` and ``"jupyter": {"source_hidden": true}``), placed right after the markdown it
    backs (or after the one code cell that markdown introduces, when a claim needs that cell's result). It
    recomputes what the prose states, as ``assert`` statements that each carry a message (with the
    assignments and imports they need, see :data:`CLAIM_STATEMENTS`), and prints nothing.
    tests/test_notebooks.py executes every notebook top to bottom, so a claim that is false fails the suite;
    here we check the cells' form and that their stored outputs are empty.
(b) **Quoted code exists.** Every inline code span of the prose that looks like code (it holds one of
    ``( = . [`` or an operator between spaces such as `` - ``, or starts with ``return``, ``import``...; and it
    is not a file path, a URL, a number or a plain dotted name such as ``nn.Graph``) appears,
    whitespace-normalised, in a code cell (claims cells included), a stored output, a code block of the
    notebook's markdown, or a file under toynet/; ``...`` in a span stands for anything. A span that is a
    path into the repository (``toynet/static/serialize.py``) must name a file or folder that exists. The
    question and the hint of an exercise pose rather than claim: their code spans say what to type, and
    only their paths are checked. :data:`ALLOWED_CODE` lists quotes of other things (the OneFlow tutorial's
    printouts, an API's call with placeholder names), each with a reason.
(c) **Numbers were printed.** Every decimal or scientific-notation number of the prose (``1.4e-06``,
    ``0.70x``, ``3.5``, ``5.6 \\cdot 10^5``, ``10^{-7}``) matches, to the precision it is written with, a
    number of a stored output of the same notebook or a number written in one of its claims cells, unless
    :data:`ALLOWED_NUMBERS` lists it with a reason. Not numbers of this kind: a section number of some
    notebook (``3.1``, from the headings) written without a unit after it ("as in 3.1"; but "1.2 times" and
    "0.5 ms" are measurements), the numbers in an exercise's question (what to try), and those inside a
    code span that (b) found (``lr=1e-6``: code).

The ``test_check_*`` tests at the end feed each check a tiny synthetic notebook with a wrong claim, to
show that it fails when it should. Integers (op counts...) are not checked by (c): a claims cell backs
those, as every notebook's claims cells do for the counts their prose states.
"""

from __future__ import annotations

import ast
import json
import re
from decimal import Decimal
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CLAIMS_TAG = "claims"

#: (notebook, number as written in the prose) -> why it needs no printed output or claim behind it. An entry
#: needs a reason, and goes when its number does.
ALLOWED_NUMBERS: dict[tuple[str, str], str] = {
    ("02_autograd_on_arrays.ipynb", "2.3e+01"): "float32 rounding luck at eps=1e-8, printed on the machine that "
                                                "wrote the table; a claim checks only that the error exceeds 1",
}

_03, _04, _07 = "03_poly_fit_eager_vs_graph.ipynb", "04_inside_nn_graph.ipynb", "07_save_resume_deploy.ipynb"
#: (notebook, quoted code, whitespace-normalised) -> why it needs to be in no cell, output or toynet source.
ALLOWED_CODE: dict[tuple[str, str], str] = {
    (_03, "import oneflow as flow"): "the tutorial's import line, which toynet's replaces",
    (_03, "1999 9.040091"): "the OneFlow tutorial's last printed line, quoted",
    (_03, "linear_graph.debug()"): "the tutorial's call, quoted (notebook 4 runs it, at debug(1))",
    (_04, "%name : type = op(inputs)"): "the form of an IR line, with placeholders",
    (_04, "device='cuda:0'"): "what the OneFlow tutorial's GPU printout shows",
    (_04, "dtype=oneflow.float32"): "what the OneFlow tutorial's printout shows",
    (_04, "start building forward graph."): "the older OneFlow wording, quoted",
    (_04, "Note that nn.Graph.debug() only print debug info on rank 0."): "OneFlow's note, which toynet omits",
    (_07, "flow.save(graph.state_dict(), path)"): "the API's call, with placeholder names",
    (_07, "flow.save(graph, path)"): "the API's call, with placeholder names",
}

# Statements a claims cell may hold besides asserts. An assignment lets a claim compute a value once and
# check several sentences against it (an op count, a pass report) without repeating a long expression;
# an import brings in what a claim needs (inspect, a module of toynet). Neither can print, and the stored
# outputs are checked to be empty anyway. Anything else (a call on its own line, a loop, a def) could do
# work that is not a claim, and is refused.
CLAIM_STATEMENTS = (ast.Assert, ast.Assign, ast.AnnAssign, ast.Import, ast.ImportFrom)

# ----------------------------------------------------------------------------------------- reading


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def is_claims(cell: dict) -> bool:
    return cell["cell_type"] == "code" and CLAIMS_TAG in cell.get("metadata", {}).get("tags", [])


def outputs_text(cell: dict) -> str:
    """What a code cell printed or displayed, as text (streams and the text/plain of displays)."""
    texts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            texts.append(source({"source": out["text"]}))
        elif out["output_type"] in ("display_data", "execute_result"):
            plain = out.get("data", {}).get("text/plain")
            if plain is not None:
                texts.append(source({"source": plain}))
    return "\n".join(texts)


def normalise(text: str) -> str:
    return " ".join(text.split())


FENCE = re.compile(r"^\s*(```|~~~).*?^\s*\1\s*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"(?<!`)`(?!`)((?:[^`\n]|\n(?![ \t]*\n))+?)`(?!`)")


def prose(markdown: str) -> str:
    """A markdown cell without its fenced code blocks (code shown, not words)."""
    return FENCE.sub("\n", markdown)


@cache
def toynet_sources() -> str:
    return "\n".join(normalise(p.read_text(encoding="utf-8")) for p in sorted((ROOT / "toynet").rglob("*.py")))


@cache
def section_numbers() -> frozenset[str]:
    """The section numbers of every notebook (``3.1`` from ``## 3.1 Eager mode``)."""
    found = set()
    for path in NOTEBOOKS:
        for cell in load(path)["cells"]:
            if cell["cell_type"] == "markdown":
                found.update(re.findall(r"^#{1,6}\s+(\d+\.\d+)\b", source(cell), flags=re.MULTILINE))
    return frozenset(found)


# --------------------------------------------------------------------------------- (a) claims cells


def follows_its_prose(cells: list, i: int) -> bool:
    """Claims cell ``i`` comes right after markdown (or after other claims cells that do), or after the one
    code cell that markdown introduces, when a claim needs what that cell computed."""
    k = i - 1
    while k >= 0 and is_claims(cells[k]):
        k -= 1
    if k < 0:
        return False
    return cells[k]["cell_type"] == "markdown" or (k > 0 and cells[k - 1]["cell_type"] == "markdown")


def claims_problems(notebook: dict, name: str) -> list[str]:
    """What is wrong with the notebook's claims cells (nothing: an empty list)."""
    problems = []
    cells = notebook["cells"]
    for i, cell in enumerate(cells):
        if not is_claims(cell):
            continue
        where = f"{name} cell {i} (claims)"
        if cell.get("metadata", {}).get("jupyter", {}).get("source_hidden") is not True:
            problems.append(f"{where}: not hidden (metadata jupyter.source_hidden must be true)")
        if not follows_its_prose(cells, i):
            problems.append(f"{where}: must come right after the markdown it backs (or the one code cell that "
                            "markdown introduces)")
        try:
            tree = ast.parse(source(cell))
        except SyntaxError as error:
            problems.append(f"{where}: does not parse: {error}")
            continue
        asserts = 0
        for node in tree.body:
            if not isinstance(node, CLAIM_STATEMENTS):
                problems.append(f"{where}, line {node.lineno}: a {type(node).__name__} statement; a claims cell "
                                "holds asserts (and the assignments and imports they need) only")
            elif isinstance(node, ast.Assert):
                asserts += 1
                if node.msg is None:
                    problems.append(f"{where}, line {node.lineno}: an assert without a message (say what the "
                                    "prose claims, so that a failure explains itself)")
        if not asserts:
            problems.append(f"{where}: claims nothing (no assert)")
        if cell.get("outputs"):
            problems.append(f"{where}: stores outputs ({outputs_text(cell)[:200]!r}); a claims cell prints "
                            "nothing")
    return problems


# ----------------------------------------------------------------------------- (b) quoted code

PATH_LIKE = re.compile(r"^[\w.\-]+(/[\w.\-]+)*/?$")
FILE_NAME = re.compile(r"^[\w.\-]+\.(py|ipynb|json|npz|npy|onnx|md|txt|gif|png|svg|yml|yaml|toml|sh|cfg)$")
DOTTED_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
NUMBER_LITERAL = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
CODE_MARKS = re.compile(r"[(=.\[]|\s(?:[-+*/@<>]|\*\*|//)\s|^(?:return|import|from|lambda|assert|del|yield)\s")


def looks_like_code(span: str) -> bool:
    """A call, an assignment, an attribute, an index, an operator between operands, or a statement."""
    span = span.strip()
    if not CODE_MARKS.search(span):
        return False
    if "://" in span or span.startswith("www."):
        return False
    if DOTTED_NAME.match(span) or NUMBER_LITERAL.match(span):
        return False
    return not is_path(span)


def is_path(span: str) -> bool:
    """A path into the repository or a file name (``toynet/static/serialize.py``, ``structure.json``)."""
    return bool(PATH_LIKE.match(span) and ("/" in span or FILE_NAME.match(span)))


def generated_folders() -> set[str]:
    """Folders the repository declares as made at run time (anchored entries of .gitignore such as `/data/`):
    a fresh clone has none of them, yet prose may name them as where data or outputs go."""
    lines = (ROOT / ".gitignore").read_text().splitlines()
    return {line.strip("/") + "/" for line in lines if line.startswith("/") and line.endswith("/")}


def path_exists(span: str) -> bool:
    if span in generated_folders() or span.split("/")[0] + "/" in generated_folders():
        return True
    return any((base / span).exists() for base in (ROOT, NOTEBOOK_DIR))


def code_corpus(notebook: dict) -> str:
    """Where quoted code may be found: the notebook's code cells (claims cells too) and stored outputs, the code
    blocks its markdown shows (a worked answer's code, which the prose then quotes), and toynet's sources."""
    cells = notebook["cells"]
    parts = [normalise(source(c)) for c in cells if c["cell_type"] == "code"]
    parts += [normalise(outputs_text(c)) for c in cells if c["cell_type"] == "code"]
    parts += [normalise(m.group(0)) for c in cells if c["cell_type"] == "markdown"
              for m in FENCE.finditer(source(c))]
    return "\n".join(parts) + "\n" + toynet_sources()


def found_in(span: str, corpus: str) -> bool:
    """``span`` (whitespace-normalised) is in ``corpus``; ``...`` in a span stands for anything on one line."""
    if "..." not in span:
        return normalise(span) in corpus
    pieces = [re.escape(piece.strip()) for piece in normalise(span).split("...") if piece.strip()]
    return re.search(r"[^\n]*?".join(pieces), corpus) is not None


# An exercise's question (a numbered item) and its hint tell the reader what to try and type; they pose, the
# worked answer and the prose claim. Their code spans are not quotes (paths in them are still checked).
QUESTION = re.compile(r"^\d+\.\s.*?(?=\n[ \t]*\n|<details>|\Z)", re.MULTILINE | re.DOTALL)
HINT = re.compile(r"<details>\s*<summary>\s*Hint\s*</summary>.*?</details>", re.DOTALL)


def without_questions(markdown: str) -> str:
    """The prose of a markdown cell without the exercises' questions (see QUESTION)."""
    return QUESTION.sub("\n", prose(markdown)) if "<summary>" in markdown else prose(markdown)


def code_spans(notebook: dict) -> list[tuple[int, str, bool]]:
    """(cell index, span, whether it poses rather than claims) of every inline code span of the prose."""
    spans = []
    for i, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = prose(source(cell))
        posing = [m.span() for pattern in (QUESTION, HINT) if "<summary>" in text for m in pattern.finditer(text)]
        for m in INLINE_CODE.finditer(text):
            spans.append((i, m.group(1), any(a <= m.start() < b for a, b in posing)))
    return spans


def quoted_code_problems(notebook: dict, name: str) -> list[str]:
    corpus = code_corpus(notebook)
    problems = []
    for i, span, posing in code_spans(notebook):
        if is_path(span.strip()) and "/" in span:
            if not path_exists(span.strip()):
                problems.append(f"{name} cell {i}: the path `{span}` does not exist in the repository")
        elif (not posing and looks_like_code(span) and not found_in(span, corpus)
              and (name, normalise(span)) not in ALLOWED_CODE):
            problems.append(f"{name} cell {i}: `{normalise(span)}` is in no code cell, stored output or "
                            "toynet source")
    return problems


# ---------------------------------------------------------------------------------- (c) numbers

# A decimal (3.5, 0.70 of 0.70x), a number in scientific notation (1.4e-06, 1e-5), or one written in LaTeX
# (5.6 \cdot 10^5, or a power of ten alone, 10^{-7}: "near 10^{-7}" beside a printed 1.4e-06 is wrong).
PROSE_NUMBER = re.compile(
    r"(?<![\w.])(?:(?P<mantissa>\d+\.\d+|\d+(?=[eE][-+]?\d))(?:[eE](?P<exp>[-+]?\d+)"
    r"|\s*\\(?:cdot|times)\s*10\^\{?(?P<tex>[-+]?\d+)\}?)?|(?<!\\cdot )(?<!\\times )10\^\{?(?P<power>[-+]?\d+)\}?)"
    r"(?![\d.]\d)")
ANY_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def prose_numbers(text: str) -> list[tuple[str, Decimal, Decimal, int]]:
    """(as written, value, half a unit of its last digit, where it ends) of each decimal number in ``text``."""
    found = []
    for m in PROSE_NUMBER.finditer(text):
        if m.group("power") is not None:  # 10^{-7}: one significant digit, 1
            mantissa, exponent = "1", int(m.group("power"))
        else:
            mantissa, exponent = m.group("mantissa"), int(m.group("exp") or m.group("tex") or 0)
            if "." not in mantissa and m.group("exp") is None:
                continue
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        value = Decimal(mantissa).scaleb(exponent)
        found.append((m.group(0), value, Decimal(5).scaleb(exponent - decimals - 1), m.end()))
    return found


UNIT = re.compile(r"\s*(?:x\b|×|%|times\b|[mµk]?s\b|[kMG]?B\b|bytes\b)")


def section_reference(written: str, after: str) -> bool:
    """``3.1`` in "as in 3.1" or "Contents: 3.1 Eager mode" is a section; ``1.2`` in "1.2 times" is a number."""
    return written in section_numbers() and not UNIT.match(after)


def number_values(text: str) -> set[Decimal]:
    return {abs(Decimal(n)) for n in ANY_NUMBER.findall(text)}


def backing_numbers(notebook: dict) -> set[Decimal]:
    """The numbers a prose number may match: the stored outputs' and those written in claims cells."""
    values: set[Decimal] = set()
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            values |= number_values(outputs_text(cell))
            if is_claims(cell):
                values |= number_values(source(cell))
    return values


def backed(value: Decimal, half_unit: Decimal, numbers: set[Decimal]) -> bool:
    """Some number, rounded to the precision ``value`` is written with, is ``value``."""
    return any(abs(n - value) <= half_unit * Decimal("1.000001") for n in numbers)


def number_problems(notebook: dict, name: str) -> list[str]:
    numbers = backing_numbers(notebook)
    corpus = code_corpus(notebook)
    problems = []
    for i, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        # Numbers inside quoted code that (b) found are code (lr=1e-6): drop those spans first.
        text = INLINE_CODE.sub(lambda m: " " if looks_like_code(m.group(1)) and found_in(m.group(1), corpus)
                               else m.group(0), without_questions(source(cell)))
        for written, value, half_unit, end in prose_numbers(text):
            if (name, written) in ALLOWED_NUMBERS or section_reference(written, text[end:]):
                continue
            if not backed(value, half_unit, numbers):
                problems.append(f"{name} cell {i}: the number {written} is in no stored output and no claims "
                                "cell (print it, back it with a claims cell, or allow it with a reason)")
    return problems


# ------------------------------------------------------------------------------------ the notebooks


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name[:2] for p in NOTEBOOKS])
def test_claims_cells_only_assert_and_print_nothing(path):
    problems = claims_problems(load(path), path.name)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name[:2] for p in NOTEBOOKS])
def test_quoted_code_is_real(path):
    problems = quoted_code_problems(load(path), path.name)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name[:2] for p in NOTEBOOKS])
def test_numbers_in_prose_were_printed_or_claimed(path):
    problems = number_problems(load(path), path.name)
    assert not problems, "\n".join(problems)


def test_allow_lists_are_still_needed():
    """An allow-list entry whose number or quote left the prose is stale: remove it."""
    for (name, written), reason in ALLOWED_NUMBERS.items():
        assert reason, f"{name} {written}: say why it is allowed"
        text = "\n".join(prose(source(c)) for c in load(NOTEBOOK_DIR / name)["cells"] if c["cell_type"] == "markdown")
        assert written in [n[0] for n in prose_numbers(text)], f"{name}: {written} is no longer in the prose"
    for (name, quoted), reason in ALLOWED_CODE.items():
        assert reason, f"{name} `{quoted}`: say why it is allowed"
        spans = {normalise(span) for _, span, _ in code_spans(load(NOTEBOOK_DIR / name))}
        assert quoted in spans, f"{name}: `{quoted}` is no longer quoted in the prose"


# ---------------------------------------------------------------- each check fails when it should


def markdown_cell(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def code_cell(text: str, printed: str = "", tags: tuple = (), hidden: bool = False) -> dict:
    metadata: dict = {"tags": list(tags)} if tags else {}
    if hidden:
        metadata["jupyter"] = {"source_hidden": True}
    outputs = [{"output_type": "stream", "name": "stdout", "text": printed}] if printed else []
    return {"cell_type": "code", "metadata": metadata, "source": text, "outputs": outputs, "execution_count": 1}


def claims_cell(text: str, printed: str = "") -> dict:
    return code_cell(text, printed, tags=(CLAIMS_TAG,), hidden=True)


def synthetic(*cells: dict) -> dict:
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_check_a_accepts_a_proper_claims_cell():
    notebook = synthetic(code_cell("ops = 11"), markdown_cell("It has 11 ops."),
                         claims_cell('count = ops\nassert count == 11, "the prose says 11 ops"'))
    assert claims_problems(notebook, "nb") == []


@pytest.mark.parametrize(("claims", "expected"), [
    (claims_cell('print(ops)\nassert ops == 11, "11 ops"'), "a Expr statement"),
    (claims_cell("assert ops == 11"), "without a message"),
    (claims_cell('for _ in range(2):\n    assert ops == 11, "11 ops"'), "a For statement"),
    (claims_cell('assert ops == 11, "11 ops"', printed="11\n"), "stores outputs"),
    (claims_cell("n = ops"), "claims nothing"),
    (code_cell('assert ops == 11, "11 ops"', tags=(CLAIMS_TAG,)), "not hidden"),
])
def test_check_a_refuses_claims_cells_that_do_more_than_assert(claims, expected):
    notebook = synthetic(code_cell("ops = 11"), markdown_cell("It has 11 ops."), claims)
    problems = claims_problems(notebook, "nb")
    assert any(expected in p for p in problems), problems


def test_check_a_wants_the_claims_right_after_their_prose():
    after_its_cell = synthetic(markdown_cell("It has 11 ops:"), code_cell("ops = 11"),
                               claims_cell('assert ops == 11, "11 ops"'))
    assert claims_problems(after_its_cell, "nb") == []
    astray = synthetic(markdown_cell("It has 11 ops."), code_cell("ops = 11"), code_cell("print(ops)"),
                       claims_cell('assert ops == 11, "11 ops"'))
    assert any("right after the markdown" in p for p in claims_problems(astray, "nb"))


def test_check_b_finds_quoted_code_and_misses_invented_code():
    notebook = synthetic(code_cell("loss = graph(x, y)\nprint(graph.ir)", printed="%add-10 : f32[1] = add(%a, %b)"),
                         markdown_cell("`loss = graph(x, y)` runs a step; its IR has "
                                       "`%add-10 : f32[1] = add(%a, %b)`; `SGD.update` is a name, "
                                       "`toynet/static/compile.py` a path, and `inspect.getsource(flow.Tensor)` "
                                       "was never run."))
    problems = quoted_code_problems(notebook, "nb")
    assert len(problems) == 1 and "inspect.getsource(flow.Tensor)" in problems[0], problems
    wrong = synthetic(code_cell("print(graph.ir)", printed="%add-10 : f32[1] = add(%a, %b)"),
                      markdown_cell("The IR has\n`%add-9 = add(%mul-7, %mul-8)`."))
    problems = quoted_code_problems(wrong, "nb")
    assert len(problems) == 1 and "cell 1" in problems[0] and "%add-9 = add(%mul-7, %mul-8)" in problems[0]


def test_check_b_finds_quoted_toynet_source_and_paths_that_moved():
    notebook = synthetic(markdown_cell("Every module starts with `from __future__ import annotations`."))
    assert quoted_code_problems(notebook, "nb") == []
    stale = synthetic(markdown_cell("The rule is `return param - lr * no_such_name, state`, in "
                                    "`toynet/no_such_module.py`."))
    problems = quoted_code_problems(stale, "nb")
    assert len(problems) == 2, problems
    assert "no_such_name" in problems[0] and "toynet/no_such_module.py" in problems[1]


def test_check_c_matches_numbers_to_their_written_precision():
    notebook = synthetic(code_cell("print(d)", printed="largest difference: 1.4e-06\nGraph is 6.04x faster"),
                         markdown_cell("The difference, 1.4e-06 (about 1.4 \\cdot 10^{-6}), is tiny; 6.0x faster."))
    assert number_problems(notebook, "nb") == []
    wrong = synthetic(code_cell("print(d)", printed="largest difference: 1.4e-06"),
                      markdown_cell("The difference is zero, or near 1.0e-7."))
    problems = number_problems(wrong, "nb")
    assert len(problems) == 1 and "1.0e-7" in problems[0], problems
    # issue 19's case: "at most a rounding difference near $10^{-7}$" beside a printed 1.4e-06
    wrong_tex = synthetic(code_cell("print(d)", printed="largest difference: 1.4e-06"),
                          markdown_cell("It is zero, or a difference near $10^{-7}$ (not $2 \\cdot 10^{-7}$)."))
    problems = number_problems(wrong_tex, "nb")
    assert len(problems) == 1 and "10^{-7}" in problems[0], problems
    right_tex = synthetic(code_cell("print(d)", printed="largest difference: 1.4e-06"),
                          markdown_cell("It is below $10^{-5}$ and near $10^{-6}$."))
    assert len(number_problems(right_tex, "nb")) == 1  # 1e-5 is no printed number; 1.4e-06 is 10^{-6} to 1 digit


def test_check_c_accepts_numbers_written_in_claims_cells_and_code():
    notebook = synthetic(code_cell("opt = SGD(lr=1e-6)"),
                         markdown_cell("With `lr=1e-6` the loss ends 1.1% above the tutorial's, within 0.005."),
                         claims_cell('assert abs(b - tb) < 0.005, "within 0.005"\n'
                                     'assert 1.1 == round(100 * ratio, 1), "1.1% above"'))
    assert number_problems(notebook, "nb") == []
    unbacked = synthetic(code_cell("opt = SGD(lr=1e-6)"), markdown_cell("It ends 2.3% above, with `lr=1e-5`."))
    problems = number_problems(unbacked, "nb")
    assert [p.split("number ")[1].split(" ")[0] for p in problems] == ["2.3", "1e-5"], problems


def test_prose_numbers_read_what_is_written():
    numbers = [(w, float(v)) for w, v, _, _ in prose_numbers(
        "0.70x, 1.4e-06, 3.5 steps, $5.6 \\cdot 10^5$, 1e-5, model.0.weight, x^2, 13 ops, v1.2.3")]
    assert numbers == [("0.70", 0.70), ("1.4e-06", 1.4e-06), ("3.5", 3.5), ("5.6 \\cdot 10^5", 5.6e5),
                       ("1e-5", 1e-5)]


def test_check_b_reads_an_ellipsis_as_anything():
    printing = code_cell("print(graph.traced_ir)", printed="  update model.0.weight <- %model.0.weight-sub-18")
    assert quoted_code_problems(synthetic(printing, markdown_cell("`update model.0.weight <- ...`")), "nb") == []
    assert quoted_code_problems(synthetic(printing, markdown_cell("`update model.0.bias <- ...`")), "nb") != []


def test_exercise_questions_and_hints_pose_and_answers_claim():
    exercise = markdown_cell("""1. Try `graph.config.enable_pass("Nothing", False)` with `lr=1e-5`.

<details><summary>Hint</summary>

Call `graph.debug(2)` first, and read `toynet/no_such_hint.py`.
</details>

<details><summary>Worked answer</summary>

It prints `graph.ir.count_ops()`, 1.5 times more.
</details>""")
    notebook = synthetic(code_cell("print(graph.ir.count_ops())", printed="12"), exercise)
    problems = quoted_code_problems(notebook, "nb")
    assert len(problems) == 1 and "toynet/no_such_hint.py" in problems[0], problems  # the hint's path
    numbers = number_problems(notebook, "nb")
    assert len(numbers) == 1 and "1.5" in numbers[0], numbers  # the answer's number, not the question's 1e-5


def test_section_numbers_are_references_unless_a_unit_follows():
    assert "3.1" in section_numbers() and "2.3" in section_numbers()
    assert section_reference("3.1", " Eager mode") and section_reference("2.3", ", and")
    assert not section_reference("2.3", "% above") and not section_reference("1.2", " times faster")
    assert not section_reference("0.46", " of it")  # not a section number at all
