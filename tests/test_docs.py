"""The documentation site builds without a single warning, and holds what it promises.

``mkdocs build --strict`` (mkdocs.yml at the top of the repository) runs once, into a temporary folder, in
a child process exactly as a user would run it; any warning (a broken link, a docstring that does not
match its signature, a page missing from the navigation...) fails the build and so this test. The
other tests read the built site: every notebook is a page with its stored outputs, no link of any page
(notebooks included, whose links mkdocs does not check) leads nowhere, the API reference documents what it
should and only the public API, and the docstrings' reStructuredText was turned into Markdown
(docs/griffe_rst.py, tested directly at the end).

Needs the ``docs`` extra (``pip install -e ".[docs]"``, which scripts/setup.sh installs); without
mkdocs the tests skip and say so.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import types
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

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


# ------------------------------------------------------------------------- links (shared with the browser test)


class PageLinks(HTMLParser):
    """What one HTML page links to (``a``/``link`` href, ``img``/``script``/``source``/``iframe`` src) and
    the anchors it offers (every ``id``, and ``a name``)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str]] = []   # (tag, address as written)
        self.anchors: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.anchors.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.anchors.add(attrs["name"])
        key = {"a": "href", "link": "href", "img": "src", "script": "src", "source": "src", "iframe": "src"}.get(tag)
        if key and attrs.get(key):
            self.links.append((tag, attrs[key]))


def crawl(start: str, fetch: Callable[[str], tuple[int, str, str]]) -> tuple[list[str], list[str]]:
    """Follow every link of the site from ``start`` (an absolute ``http://`` or ``file:`` address of its
    home page, ending in ``/``), as a reader could, and check each one: the file exists, and the anchor
    (``#...``) is on the page it names. ``fetch(url)`` returns (HTTP status, content type, text).

    Returns (the pages read, the problems: "page: <tag> address -> what is wrong"). Addresses outside the
    site (another host, ``mailto:``, ``data:``) are not followed."""
    pages: dict[str, PageLinks | None] = {}
    statuses: dict[str, int] = {}
    queue, problems = [start], []

    def read(url: str) -> PageLinks | None:
        if url not in statuses:
            status, kind, text = fetch(url)
            statuses[url] = status
            if status == 200 and "html" in kind:
                parsed = PageLinks()
                parsed.feed(text)
                pages[url] = parsed
                queue.append(url)
        return pages.get(url)

    read(start)
    seen = set()
    while queue:
        page = queue.pop()
        if page in seen:
            continue
        seen.add(page)
        for tag, address in pages[page].links:
            if address.startswith(("mailto:", "data:", "javascript:", "blob:")):
                continue
            url = urljoin(page, address)
            if not url.startswith(start):
                continue                                  # off the site (the repository, MkDocs...)
            parts = urlsplit(url)
            target = parts._replace(fragment="", query="").geturl()
            if start.startswith("file:") and target.endswith("/"):
                target += "index.html"                    # what a web server answers for a folder
            linked = read(target)
            where = f"{page[len(start):] or 'index'}: <{tag}> {address}"
            if statuses[target] != 200:
                problems.append(f"{where} -> HTTP {statuses[target]}")
            elif parts.fragment and linked is not None and unquote(parts.fragment) not in linked.anchors:
                problems.append(f"{where} -> no #{unquote(parts.fragment)} on that page")
    return sorted(seen), problems


def file_fetch(url: str) -> tuple[int, str, str]:
    """``crawl``'s fetch for a site on disk (``file:`` addresses): 404 for a missing file."""
    path = Path(unquote(urlsplit(url).path))
    if path.is_dir():
        path = path / "index.html"
    if not path.is_file():
        return 404, "", ""
    kind = "text/html" if path.suffix == ".html" else "other"
    return 200, kind, path.read_text(encoding="utf-8") if kind == "text/html" else ""


def test_no_link_of_the_site_leads_nowhere(site):
    """Every page a reader can reach from the home page, and every link, picture and script on it: the file
    is in the site and the anchor is on its page. mkdocs --strict checks the links of Markdown pages; this
    also checks what it does not see: the notebooks' own links (``[notebook 5](05_compiler_passes.ipynb)``
    becomes ``../05_compiler_passes/`` in docs/hooks.py), the navigation's table of contents of a notebook
    (which names its headings as nbconvert does), and the links the theme and mkdocstrings write."""
    pages, problems = crawl(site.as_uri() + "/", file_fetch)
    assert not problems, f"{len(problems)} broken links:\n" + "\n".join(problems)
    notebook_pages = [p for p in pages if "/notebooks/" in p and p.endswith("/index.html") and
                      not p.endswith("/notebooks/index.html")]
    assert len(notebook_pages) == len(NOTEBOOKS), "the crawl did not reach every notebook's page"
    assert any("/api/graph/" in p for p in pages) and any("/figures/" in p for p in pages)


def test_a_link_between_notebooks_opens_the_other_notebooks_page(site):
    html = page(site, "notebooks/08_nn_graph_advanced")
    article = html[html.index("<article"):]
    assert 'href="../05_compiler_passes/"' in article          # written 05_compiler_passes.ipynb in the notebook
    assert 'href="05_compiler_passes.ipynb"' not in article


def test_notebook_pages_show_no_cell_tags_and_no_table_of_contents_on_the_right(site):
    for notebook in NOTEBOOKS:
        html = page(site, f"notebooks/{notebook.stem}")
        assert "celltoolbar" not in html.split("</style>")[-1], f"{notebook.name}: a row of cell tags is shown"
        assert re.search(r'data-md-type="toc"\s+hidden', html), f"{notebook.name}: the table of contents takes a column"
        assert "md-nav--integrated" in html, f"{notebook.name}: its sections are not listed in the navigation"
    assert "md-nav--integrated" in page(site, "figures") and "md-nav--integrated" not in page(site, "")


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
    ("api/viz", ["toynet.viz.draw", "toynet.viz.to_svg", "toynet.viz.record"]),
    ("api/serialization", ["toynet.serialization.save", "toynet.serialization.load"]),
])
def test_api_reference_documents(site, path, objects):
    html = page(site, path)
    for name in objects:
        assert f'id="{name}"' in html, f"{path} does not document {name}"


#: The public namespaces of toynet: what ``import toynet as flow`` reaches as ``flow.<name>``, ``flow.nn.<name>``...
PUBLIC_NAMESPACES = ("toynet", "toynet.nn", "toynet.nn.functional", "toynet.nn.init", "toynet.nn.utils",
                     "toynet.nn.graph", "toynet.optim", "toynet.optim.lr_scheduler", "toynet.amp", "toynet.autograd",
                     "toynet.utils.data", "toynet.vision", "toynet.vision.datasets", "toynet.vision.transforms",
                     "toynet.vision.models", "toynet.text", "toynet.viz", "toynet.serialization")
#: Public too, though no namespace names them: what a user holds or subclasses without importing it.
ALSO_PUBLIC = {
    "toynet.nn.graph_config.GraphConfig": "graph.config, whose methods a graph's __init__ calls",
    "toynet.dynamic.tensor_methods.TensorMethods": "methods of Tensor (x.reshape...), attached on import",
    "toynet.dynamic.tensor_data.TensorDataMethods": "methods of Tensor (x.numpy...), attached on import",
    "toynet.dynamic.tensor_maths.TensorMaths": "methods of Tensor (x.sin...), attached on import",
    "toynet.optim.lr_scheduler_base.LRScheduler": "the base class of every scheduler, to subclass",
    "toynet.vision.fake_cifar.find_or_make_cifar10": "the stand-in CIFAR-10 of notebook 6 and the examples",
    "toynet.vision.fake_cifar.make_cifar10": "the stand-in CIFAR-10 of notebook 6 and the examples",
    "toynet.vision.mnist_fake.find_or_make_mnist": "the stand-in MNIST of the examples",
    "toynet.vision.mnist_fake.make_mnist": "the stand-in MNIST of the examples",
}
#: The API pages of the user API (static.md and ops.md document the design underneath, internals included).
USER_API_PAGES = ("api/toynet", "api/autograd", "api/nn", "api/graph", "api/optim", "api/data", "api/serialization",
                  "api/viz")


def _exported(module: types.ModuleType) -> list[str]:
    """A namespace's public names: its ``__all__``; else, for a package, every name it imports or defines
    without an underscore; else the names it defines and those it imports to re-export (``# noqa: F401``)."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    names = [n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)]
    if hasattr(module, "__path__"):
        return names
    source = inspect.getsource(module)
    lines, kept = source.splitlines(), set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            kept.add(node.name)
        elif isinstance(node, ast.Assign):
            kept |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            kept.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and "F401" in "\n".join(lines[node.lineno - 1:node.end_lineno]):
            kept |= {alias.asname or alias.name for alias in node.names}
    return [n for n in names if n in kept]


def public_api() -> set[str]:
    """Every dotted name of toynet's public API, under each name it has: the namespace's (``toynet.viz.draw``)
    and where it is defined (``toynet.dynamic.creation.randn`` for ``toynet.randn``); also every name a
    module lists in its own ``__all__``, and ALSO_PUBLIC."""
    public, objects = set(ALSO_PUBLIC), []
    for namespace in PUBLIC_NAMESPACES:
        module = importlib.import_module(namespace)
        public |= {namespace, module.__name__}
        for name in _exported(module):
            obj = getattr(module, name, None)
            public |= {f"{namespace}.{name}", f"{module.__name__}.{name}"}
            if getattr(obj, "__module__", None) and getattr(obj, "__qualname__", None):
                public.add(f"{obj.__module__}.{obj.__qualname__}")
            if not isinstance(obj, (types.ModuleType, int, float, str, bool, type(None), tuple)):
                objects.append(obj)
    modules = {name: m for name, m in list(sys.modules.items()) if name.startswith("toynet.") and m is not None}
    for name, module in modules.items():
        public |= {f"{name}.{n}" for n in getattr(module, "__all__", None) or ()}
        for attr, value in list(vars(module).items()):   # a constant or an instance, where it was defined
            if not attr.startswith("_") and any(value is obj for obj in objects):
                public.add(f"{name}.{attr}")
    return public


_API_HEADING = re.compile(r'<h[1-6] id="(toynet[^"]*)" class="doc doc-heading">\s*'
                          r'<code class="doc-symbol doc-symbol-heading doc-symbol-(\w+)">')


@pytest.mark.parametrize("path", USER_API_PAGES)
def test_api_pages_list_the_public_api_only(site, path):
    """A class, function or constant the page lists is public: a namespace of toynet offers it, or its module's
    ``__all__`` names it (docs/hooks.py lists a module's ``__all__`` when it has one). Internal modules may
    stay as their docstring alone (``members: false``), to say what they do; a public class lists its
    methods and attributes (never ``_private`` ones: mkdocs.yml's filters)."""
    kinds = dict(_API_HEADING.findall(page(site, path)))
    assert kinds, f"{path}: no documented object found (has mkdocstrings' HTML changed?)"
    public = public_api()
    listed = [name for name, kind in kinds.items() if kind != "module" and kinds.get(name.rsplit(".", 1)[0]) != "class"]
    internal = [name for name in listed if name not in public]
    assert not internal, f"{path} lists internals: {internal}"
    private = [name for name in kinds if name.rsplit(".", 1)[-1].startswith("_")]
    assert not private, f"{path} lists private or special names: {private}"


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


def test_a_subpackage_init_resolves_relative_roles_from_itself():
    """``:mod:`.world``` in toynet/distributed/__init__.py means toynet.distributed.world (griffe marks only the
    top package's __init__ as a package; a subpackage's is a subpackage)."""
    import griffe  # (docs/griffe_rst.py, imported above, needs it too)
    toynet = griffe.load("toynet", search_paths=[str(ROOT)])
    assert griffe_rst._package_of(toynet["distributed"]) == ("toynet.distributed", "toynet.distributed")
    assert griffe_rst._package_of(toynet["distributed.world"]) == ("toynet.distributed.world", "toynet.distributed")


def test_doctests_and_literal_blocks_are_fenced_for_highlighting():
    out = griffe_rst.convert("Example::\n\n    x = 1\n\n>>> 1 + 1\n2\n\nafter", ("m", "m"))
    assert out.split("\n") == ["Example:", "", "```python", "x = 1", "```", "", "```pycon", ">>> 1 + 1", "2", "```",
                                "", "after"]
    printout = griffe_rst.convert("It prints::\n\n    (GRAPH:g): (\n      (MODULE:m))\n\nthen", ("m", "m"))
    assert printout.split("\n") == ["It prints:", "", "```text", "(GRAPH:g): (", "  (MODULE:m))", "```", "", "then"]
    nested = griffe_rst.convert("Args:\n    x: say::\n\n            >>> f(1)\n            2\n", ("m", "m"))
    assert nested.split("\n")[1:5] == ["    x: say:", "", "    ```pycon", "    >>> f(1)"]


def test_api_examples_are_highlighted(site):
    """nn.Graph's module docstring shows its example as a literal block (``::``): highlighted Python."""
    html = page(site, "api/graph")
    example = html[html.index("call the object"):][:3000]
    assert '<span class="k">class</span>' in example and '<span class="nc">LinearTrainGraph</span>' in example


def test_simple_tables_are_preformatted():
    table = "====  ====\n``a``   b\n====  ====\nc     d\n====  ====\n\ntext"
    out = griffe_rst.convert(table, ("m", "m")).split("\n")
    assert out[0] == "```text" and out[6] == "```" and out[2] == "a   b" and out[-1] == "text"
