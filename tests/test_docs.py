"""The documentation site builds without a single warning, and holds what it promises.

``mkdocs build --strict`` (mkdocs.yml at the top of the repository) runs once, into a temporary folder, in
a child process exactly as a user would run it; any warning (a broken link, a docstring that does not
match its signature, a page missing from the navigation...) fails the build and so this test. The
other tests read the built site: every notebook is a page with its stored outputs, the API reference
documents what it should, and the docstrings' reStructuredText was turned into Markdown
(docs/griffe_rst.py, tested directly at the end).

Needs the ``docs`` extra (``pip install -e ".[docs]"``, which scripts/setup.sh installs); without
mkdocs the tests skip and say so.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

pytest.importorskip("mkdocs", reason="the docs tools are not installed: pip install -e '.[docs]'")
pytest.importorskip("mkdocs_jupyter", reason="the docs tools are not installed: pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings_handlers.python", reason="the docs tools are not installed: pip install -e '.[docs]'")

sys.path.insert(0, str(ROOT / "docs"))
import griffe_rst  # docs/griffe_rst.py, the Griffe extension the API pages use
import hooks  # docs/hooks.py, the mkdocs hooks

_BUILT: dict[str, Path] = {}


def build_site(tmp_path_factory) -> Path:
    """Build the site with ``mkdocs build --strict``; fail with mkdocs' own messages on any warning.

    Built once per test process and shared with tests/test_site_browser.py, which opens it in Chromium."""
    if "site" not in _BUILT:
        out = tmp_path_factory.mktemp("site")
        env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # Material's notice about its future, not ours
        proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
        log = proc.stdout + proc.stderr
        problems = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
        assert proc.returncode == 0 and not problems, "mkdocs build --strict failed:\n" + "\n".join(problems or [log])
        _BUILT["site"] = out
    return _BUILT["site"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return build_site(tmp_path_factory)


def page(site: Path, path: str) -> str:
    return (site / path / "index.html").read_text(encoding="utf-8")


def test_site_has_its_pages(site):
    for path in ["", "how-it-works", "notebooks", "figures", "api"]:
        assert (site / path / "index.html").is_file(), f"no page {path or 'index'}"


def test_every_notebook_is_a_page_with_its_stored_outputs(site):
    assert NOTEBOOKS
    overview = page(site, "notebooks")
    for notebook in NOTEBOOKS:
        html = page(site, f"notebooks/{notebook.stem}")
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        printed = [out["text"] for c in cells if c["cell_type"] == "code" for out in c.get("outputs", [])
                   if out.get("output_type") == "stream"]
        for text in printed[:3]:  # the stored outputs are shown, not re-run or dropped
            first_line = "".join(text).strip().splitlines()[0] if "".join(text).strip() else ""
            if first_line:
                words = re.findall(r"[A-Za-z]{4,}", first_line)[:3]
                assert all(w in html for w in words), f"{notebook.name}: output {first_line!r} is not on its page"
        assert f'href="{notebook.stem}/"' in overview, f"{notebook.name} is missing from notebooks.md's list"
        assert (site / "notebooks" / notebook.stem / notebook.name).is_file(), "no download of the .ipynb"


def test_every_page_loads_maths_from_the_site_itself(site):
    """MathJax comes with the site (docs/hooks.py copies it), and no page loads a script from elsewhere:
    the empty ``<script src="">`` nbconvert wrote for MathJax 2 and the CDN widget renderer are gone."""
    assert (site / "assets" / "mathjax" / hooks.MATHJAX_BUNDLE).stat().st_size > 1_000_000
    assert (site / "assets" / "mathjax" / "LICENSE").is_file()
    for html_file in site.rglob("*.html"):
        text = html_file.read_text(encoding="utf-8")
        scripts = re.findall(r'<script[^>]*\ssrc="([^"]*)"', text)
        assert "" not in scripts, f"an empty <script src> in {html_file}"
        assert not [s for s in scripts if re.match(r"(https?:)?//", s)], f"a script from elsewhere in {html_file}"
        if "</article>" in text:  # a page of the site, not a redirect
            assert any(s.endswith("assets/mathjax/" + hooks.MATHJAX_BUNDLE) for s in scripts), html_file
        assert "addWidgetsRenderer" not in text and "text/x-mathjax-config" not in text, html_file


def test_markdown_maths_is_left_for_mathjax(site):
    html = page(site, "")
    assert '<span class="arithmatex">\\(\\theta\\)</span>' in html  # docs/index.md's $\theta$
    assert '<div class="arithmatex">\\[' in html


def test_every_notebook_page_offers_its_download_and_how_to_run_it(site):
    for notebook in NOTEBOOKS:
        html = page(site, f"notebooks/{notebook.stem}")
        bar = re.search(r'<p class="toynet-notebook-bar">(.*?)</p>', html)
        assert bar, f"{notebook.name}: no download bar"
        assert f'href="{notebook.name}" download="{notebook.name}"' in bar[1]
        assert 'href="../#run-it-locally"' in bar[1]
        assert html.index("toynet-notebook-bar") > html.index("</h1>"), "the bar goes under the title"
    overview = page(site, "notebooks")
    assert 'id="run-it-locally"' in overview
    for command in ["bash scripts/main.sh", "bash scripts/test.sh", "jupyter lab notebooks/"]:
        assert command in re.sub(r"<[^>]+>", "", overview), f"notebooks.md does not say {command!r}"


def test_a_stored_widget_becomes_a_note(site):
    for notebook in NOTEBOOKS:
        if "application/vnd.jupyter.widget-view+json" in notebook.read_text(encoding="utf-8"):
            html = page(site, f"notebooks/{notebook.stem}")
            assert "toynet-widget-note" in html and "widget-view+json" not in html


@pytest.mark.parametrize("remote, address", [
    ("git@github.com:someone/toynet.git", "https://github.com/someone/toynet"),
    ("ssh://git@gitlab.com/someone/toynet.git", "https://gitlab.com/someone/toynet"),
    ("https://user:token@github.com/someone/toynet.git", "https://github.com/someone/toynet"),
    ("https://example.org/git/toynet/", "https://example.org/git/toynet"),
    ("/srv/git/toynet.git", None),
    ("", None),
])
def test_repository_address_from_the_origin_remote(remote, address):
    assert hooks.web_address(remote) == address


def test_compiler_notebook_shows_its_pictures(site):
    html = page(site, "notebooks/05_compiler_passes")
    assert html.count("<svg") >= 4  # draw_pass pictures of DCE, folding, CSE and fusion


def test_navigation_lists_every_notebook_in_order(site):
    nav = page(site, "")
    positions = [nav.find(f"notebooks/{nb.stem}/") for nb in NOTEBOOKS]
    assert all(p >= 0 for p in positions), "a notebook is missing from the navigation"
    assert positions == sorted(positions)


def test_figures_page_shows_every_figure(site):
    html = page(site, "figures")
    figures = [p for p in (ROOT / "imgs").glob("*") if p.suffix in (".png", ".gif", ".svg")]
    for figure in figures:
        assert f"imgs/{figure.name}" in html
        assert (site / "imgs" / figure.name).is_file()
    if not figures:
        assert "scripts/main.sh" in html  # says how to make them


@pytest.mark.parametrize("path, objects", [
    ("api/toynet", ["toynet.dynamic.tensor.Tensor", "toynet.dynamic.creation.randn", "toynet.dynamic.functional.matmul"]),
    ("api/graph", ["toynet.nn.graph.Graph", "toynet.nn.graph.Graph.state_dict", "toynet.nn.graph_config.GraphConfig"]),
    ("api/static", ["toynet.static.ir.Graph", "toynet.static.passes.PassReport", "toynet.static.compile.Plan", "toynet.static.fast.compile.FastPlan",
                    "toynet.static.passes.memory.MemoryPlan"]),
    ("api/optim", ["toynet.optim.sgd.SGD", "toynet.optim.adam.Adam", "toynet.optim.lr_scheduler.StepLR"]),
    ("api/nn", ["toynet.nn.module.Module", "toynet.nn.modules.layers.Linear",
                "toynet.nn.modules.layers.CrossEntropyLoss"]),
    ("api/viz", ["toynet.viz.draw", "toynet.viz.rendering.to_svg", "toynet.viz.recording.record"]),
    ("api/serialization", ["toynet.serialization.save", "toynet.serialization.load"]),
])
def test_api_reference_documents(site, path, objects):
    html = page(site, path)
    for name in objects:
        assert f'id="{name}"' in html, f"{path} does not document {name}"


def test_api_pages_hold_no_raw_restructuredtext(site):
    for html_file in (site / "api").rglob("index.html"):
        text = html_file.read_text(encoding="utf-8")
        assert not re.search(r":(class|func|meth|mod|data|attr):<code>", text), f"a raw role in {html_file}"
        assert "<blockquote>\n<blockquote>" not in text, f"doctest prompts read as quotes in {html_file}"


def test_cross_references_become_links(site):
    html = page(site, "api/static")
    # toynet/static/passes/__init__.py refers to :class:`~toynet.static.ir.Graph`, which the page documents
    assert re.search(r'<a class="autorefs autorefs-internal"[^>]*href="[^"]*#toynet\.static\.ir\.Graph"', html)


# ------------------------------------------------------------------------- docs/griffe_rst.py directly


def test_roles_become_optional_references():
    out = griffe_rst.convert("see :class:`~toynet.static.ir.Graph` and :func:`load`", ("toynet.io", "toynet"))
    assert '<autoref identifier="toynet.static.ir.Graph" optional><code>Graph</code></autoref>' in out
    assert '<autoref identifier="toynet.io.load" optional><code>toynet.io.load</code></autoref>' in out


def test_relative_roles_resolve_from_the_package():
    out = griffe_rst.convert(":func:`~.dce.run`", ("toynet.static.passes", "toynet.static.passes"))
    assert 'identifier="toynet.static.passes.dce.run"' in out
    out = griffe_rst.convert(":func:`~..ir.Graph`", ("toynet.static.passes.fold", "toynet.static.passes"))
    assert 'identifier="toynet.static.ir.Graph"' in out


def test_doctests_are_fenced_and_literal_markers_dropped():
    out = griffe_rst.convert("Example::\n\n    x = 1\n\n>>> 1 + 1\n2\n\nafter", ("m", "m"))
    assert out.split("\n") == ["Example:", "", "    x = 1", "", "```pycon", ">>> 1 + 1", "2", "```", "", "after"]


def test_simple_tables_are_preformatted():
    table = "====  ====\n``a``   b\n====  ====\nc     d\n====  ====\n\ntext"
    out = griffe_rst.convert(table, ("m", "m")).split("\n")
    assert out[0] == "```text" and out[6] == "```" and out[2] == "a   b" and out[-1] == "text"
