"""mkdocs hooks: bring the notebooks and the figures, which live outside docs/, into the site.

The notebooks stay in ``notebooks/`` (where Jupyter and the tests find them) and the figures in ``imgs/``
(where ``examples/run_all.py`` regenerates them). Instead of copies or symlinks, these hooks add both
folders to the files mkdocs builds, under the same paths as in the repository (``notebooks/05_....ipynb``,
``imgs/....png``), and write the pages that list them:

* the "Notebooks" section of the navigation, one entry per ``notebooks/*.ipynb``, in file-name order;
* ``notebooks.md``: each notebook's title and first paragraph, where the page says ``<!-- notebooks -->``;
* ``figures.md``: every picture in ``imgs/``, where the page says ``<!-- figures -->``;
* ``how-it-works.md``: the passes of each path, read from the pipeline itself, where the page says
  ``<!-- passes -->``, and what one training step runs (``scripts/lesson_path.py``), where it says
  ``<!-- lesson-path -->``: numbers measured when the site is built, never typed in.

They also make the site read well offline, with nothing fetched from the internet:

* maths: MathJax 3 (the ``mathjax`` folder of the PyPI package ``django-static-mathjax``, in the ``docs``
  extra) is copied into the site as ``assets/mathjax/``, and every notebook page loses the MathJax 2 loader
  that nbconvert writes with an empty address (``<script src="">``, so maths stayed raw TeX);
  ``docs/assets/js/mathjax-config.js`` then typesets notebook Markdown and ``pymdownx.arithmatex`` maths;
* widgets: a stored ipywidgets view needs a Python kernel and a renderer fetched from a CDN, so notebook
  pages show a note in its place instead of an empty box and a failed download;
* getting a notebook: each notebook page starts with a bar that downloads its ``.ipynb`` (copied next to
  the page by mkdocs-jupyter's ``include_source``), links "Run it locally" and the repository, whose
  address (``repo_url``) is read from the clone's ``origin`` remote when mkdocs.yml does not give one.

And they make a notebook read as well on the site as in JupyterLab:

* a wide column: a notebook page has no table of contents on the right (``hide: [toc]``, set here), which
  would take a fifth of the screen from the printed graphs and pictures; its sections are listed in the
  navigation on the left instead, under the notebook's own entry (Material's ``toc.integrate``, for these
  pages only). A Markdown page that says ``hide: [toc]`` in its front matter (figures.md) gets the same;
* the table of contents links to the headings as nbconvert named them (mkdocs-jupyter derives other names,
  without the code in a heading: ``#the-tutorials-block-is-level-1`` for the heading
  ``the-tutorials-debug-block-is-level-1``), and shows their whole titles;
* links between notebooks: ``[notebook 5](05_compiler_passes.ipynb)``, right in JupyterLab and on GitHub,
  becomes a link to that notebook's page (``../05_compiler_passes/``) on the site;
* no cell tags: the tags the tests use to find cells (``numbers-...``) are not shown as a row of pills.

And the API reference lists the public API: a module documented whole (``::: toynet.viz``) that has an
``__all__`` lists exactly those names (mkdocstrings' own filters know only the underscore).

So a new notebook or figure appears in the site without touching mkdocs.yml, and a missing one never
leaves a dead link behind (``mkdocs build --strict`` would fail on it).
"""

from __future__ import annotations

import html
import json
import os
import posixpath
import re
import subprocess
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
IMGS = ROOT / "imgs"
FIGURE_SUFFIXES = (".png", ".gif", ".svg", ".jpg", ".jpeg")

#: Captions of the figures the tutorials show (any other picture is listed under its file name).
CAPTIONS = {
    "compute_graph": "The computation graph of the tutorial's example: loss = sum((x @ w + b - y)^2 / 2).",
    "dynamic_graph": "Eager mode builds the graph as the code runs, one op at a time.",
    "static_graph": "Graph mode: the whole graph, traced first, then compiled and run.",
    "graph_build": "Graph mode's first call, step by step: the trace adds each module's ops, beside what "
                   "graph.debug(1) prints for them.",
    "01-wxb": "Eager mode after x, w and b exist: three leaves and no ops yet.",
    "02-z": "After z = matmul(x, w) + b: the first ops, recorded as they ran.",
    "poly_fit": "The polynomial fit: sin(x) and the cubic fitted by gradient descent.",
    "passes_scalars": "A pass before and after: the learning rate meets the loss gradient's factor 2 across "
                      "linear ops, and each update is one subtraction.",
    "passes_fusion": "A pass before and after: elementwise fusion merges chains into one kernel.",
    "layers": "toynet's own floors, read from its imports (scripts/layers.py): every import runs down.",
    "mobilenetv2_graph": "MobileNetV2 as an nn.Graph, modules folded to boxes so the picture stays readable.",
}


def notebook_paths() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def figure_paths() -> list[Path]:
    if not IMGS.is_dir():
        return []
    return sorted(p for p in IMGS.iterdir() if p.suffix.lower() in FIGURE_SUFFIXES)


def mathjax_dir() -> Path:
    """The folder of MathJax 3's combined components (``tex-svg-full.js``...), from the ``mathjax`` package."""
    try:
        import mathjax  # the PyPI package django-static-mathjax: MathJax's files, no Django needed
    except ImportError:
        raise PluginError("MathJax is not installed, so the site's maths could not be typeset offline: "
                          "pip install -e '.[docs]' (it brings django-static-mathjax)") from None
    folder = Path(mathjax.__file__).parent / "static" / "mathjax"
    if not (folder / "es5" / MATHJAX_BUNDLE).is_file():
        raise PluginError(f"{folder / 'es5' / MATHJAX_BUNDLE} is missing: reinstall django-static-mathjax")
    return folder


#: One file holds all of MathJax for TeX input and SVG output (glyphs included): no fonts or extensions to
#: fetch, so maths works from a site opened without internet.
MATHJAX_BUNDLE = "tex-svg-full.js"


def origin_url(root: Path = ROOT) -> str | None:
    """The clone's ``origin`` remote as a web address (``git@host:o/r.git`` -> ``https://host/o/r``), if any."""
    try:
        url = subprocess.run(["git", "-C", str(root), "remote", "get-url", "origin"], capture_output=True,
                             text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return web_address(url)


def web_address(url: str) -> str | None:
    """A remote's address as a browser can open it, or None for a local path or an unknown form."""
    url = url.strip()
    if m := re.fullmatch(r"(?:ssh://)?git@([^:/]+)[:/](.+?)(?:\.git)?/?", url):
        return f"https://{m[1]}/{m[2]}"
    if m := re.fullmatch(r"(https?://)(?:[^@/]+@)?(.+?)(?:\.git)?/?", url):  # drop any credentials
        return m[1] + m[2]
    return None


def on_config(config):
    """Fill the navigation's "Notebooks" section with every notebook there is, titled by its heading;
    take the repository's address from the ``origin`` remote when mkdocs.yml gives none."""
    for item in config["nav"] or []:
        if isinstance(item, dict) and "Notebooks" in item:
            overview = [entry for entry in item["Notebooks"] or [] if entry == "notebooks.md"]
            item["Notebooks"] = overview + [{_title_and_summary(p)[0]: f"notebooks/{p.name}"}
                                            for p in notebook_paths()]
    if not config.get("repo_url") and (url := origin_url()):
        config["repo_url"] = url
        config["repo_name"] = "/".join(url.rstrip("/").split("/")[-2:])
    return config


@event_priority(100)  # before mkdocs-jupyter, which turns the .ipynb files it is given into pages
def on_files(files: Files, config) -> Files:
    for path in notebook_paths() + figure_paths():
        files.append(File(path.relative_to(ROOT).as_posix(), src_dir=str(ROOT), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    mathjax = mathjax_dir()
    for src, dest in [(mathjax / "es5" / MATHJAX_BUNDLE, MATHJAX_BUNDLE), (mathjax / "LICENSE", "LICENSE")]:
        files.append(File.generated(config, f"assets/mathjax/{dest}", abs_src_path=str(src)))
    return files


# nbconvert's MathJax 2 loader (an empty ``<script src="">`` when mkdocs-jupyter is given no address, and a
# ``text/x-mathjax-config`` block only MathJax 2 reads): the site loads MathJax 3 itself, on every page.
_MATHJAX2 = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL)
# The script that fetches the ipywidgets renderer from a CDN, and the stored widget state it would read.
_WIDGET_LOADER = re.compile(r"<script>\s*\(function\(\) \{\s*function addWidgetsRenderer\(\).*?</script>", re.DOTALL)
_WIDGET_STATE = re.compile(r'<script type="application/vnd\.jupyter\.widget-state\+json">.*?</script>', re.DOTALL)
_WIDGET_VIEW = re.compile(r'<script type="application/vnd\.jupyter\.widget-view\+json">.*?</script>', re.DOTALL)
WIDGET_NOTE = ('<div class="admonition note toynet-widget-note"><p class="admonition-title">Interactive widget</p>'
               "<p>This output is an interactive widget: it needs the notebook's Python kernel, so it shows only "
               'when you <a href="{run}">run the notebook yourself</a>. The pictures around it show the same '
               "steps.</p></div>")


def is_notebook(page) -> bool:
    return page.file.src_uri.endswith(".ipynb")


def on_page_content(html_text: str, page, config, files) -> str:
    """Notebook pages: no MathJax 2 loader, no CDN widget renderer, no cell tags, links to other notebooks
    that work on the site, a table of contents in the navigation that finds its headings, and a bar to
    download or run them."""
    if not is_notebook(page):
        return html_text
    page.meta.setdefault("hide", [])
    if "toc" not in page.meta["hide"]:
        page.meta["hide"].append("toc")
    run = get_relative_url("notebooks/", page.url) + "#run-it-locally"
    html_text = _MATHJAX2.sub("", html_text)
    html_text = _WIDGET_LOADER.sub("", html_text)
    html_text = _WIDGET_STATE.sub("", html_text)
    html_text = _WIDGET_VIEW.sub(WIDGET_NOTE.format(run=run), html_text)
    html_text = _CELL_TAGS.sub("", html_text)
    html_text = link_notebooks(html_text, page, files)
    match_toc_to_headings(page.toc, html_text)
    bar = notebook_bar(page, config, run)
    if "</h1>" in html_text:  # under the notebook's title
        return html_text.replace("</h1>", "</h1>\n" + bar, 1)
    return bar + html_text


# The row of tags mkdocs-jupyter's template writes above a tagged code cell (one pill per tag).
_CELL_TAGS = re.compile(r'<div class="celltoolbar">\s*(?:<div class="button_container tags_button_container">'
                        r'.*?</div>\s*)*</div>', re.DOTALL)
_HREF = re.compile(r'(<a\s[^>]*?href=")([^"#?:]+\.(?:ipynb|md))((?:#[^"]*)?")')


def link_notebooks(html_text: str, page, files: Files) -> str:
    """A link to another notebook or page written as its file (``05_compiler_passes.ipynb``, what JupyterLab
    and GitHub open) becomes a link to that file's page on the site (``../05_compiler_passes/``).

    mkdocs does this for Markdown pages, but a notebook's HTML comes from nbconvert, past mkdocs' link
    checks. A link to a file that is not part of the site is left as it is (the link check of
    tests/test_docs.py then names it)."""
    base = posixpath.dirname(page.file.src_uri)

    def to_page(m: re.Match) -> str:
        target = files.get_file_from_path(posixpath.normpath(posixpath.join(base, html.unescape(m[2]))))
        if target is None or not target.is_documentation_page():
            return m[0]
        return m[1] + html.escape(get_relative_url(target.url, page.url)) + m[3]

    return _HREF.sub(to_page, html_text)


_HEADING = re.compile(r'<h([1-6])\s[^>]*?id="([^"]+)"[^>]*>(.*?)</h\1>', re.DOTALL)


def match_toc_to_headings(toc, html_text: str) -> None:
    """Point each entry of a notebook's table of contents at its heading, and give it the heading's whole title.

    mkdocs-jupyter reads the table of contents from the notebook exported to Markdown, where Python-Markdown
    names a heading without its code spans ("The tutorial's `debug()` block" -> ``the-tutorials-block``),
    while nbconvert's HTML names it with them (``the-tutorials-debug-block``). The entries and the headings
    come in the same order: each entry takes the next heading of its level whose words include its own."""
    headings = [(int(level), ident, _plain(inner)) for level, ident, inner in _HEADING.findall(html_text)]
    position = 0

    def words(text: str) -> list[str]:
        return re.findall(r"\w+", text.lower())

    def contains(long: list[str], short: list[str]) -> bool:  # short's words, in order, within long's
        rest = iter(long)
        return all(word in rest for word in short)

    def walk(entries) -> None:
        nonlocal position
        for entry in entries:
            for i in range(position, len(headings)):
                level, ident, title = headings[i]
                if level == entry.level and contains(words(title), words(entry.title)):
                    entry.id, entry.title, position = ident, html.escape(title, quote=False), i + 1
                    break
            walk(entry.children)

    walk(toc)


def _plain(inner_html: str) -> str:
    """A heading's text: no tags, no pilcrow of its anchor link, entities read."""
    text = re.sub(r'<a class="anchor-link".*?</a>', "", inner_html, flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", text)).split())


#: The primary navigation, as Material's partials/nav.html writes it.
_PRIMARY_NAV = '<nav class="md-nav md-nav--primary"'


def on_post_page(output: str, page, config) -> str:
    """A page without the table of contents on the right (``hide: [toc]``: every notebook, the figures)
    lists its sections in the navigation on the left, under its own entry: Material's ``toc.integrate``
    for this page alone, so that nothing is lost by the wider column."""
    if "toc" in (page.meta.get("hide") or []) and "md-nav--integrated" not in output:
        output = output.replace(_PRIMARY_NAV, _PRIMARY_NAV[:-1] + ' md-nav--integrated"', 1)
    return output


def notebook_bar(page, config, run: str) -> str:
    """Download this ``.ipynb`` (mkdocs-jupyter copies it beside the page), run it locally, the repository."""
    name = posixpath.basename(page.file.src_uri)
    ipynb = get_relative_url(posixpath.join(posixpath.dirname(page.file.dest_uri), name), page.url)
    links = [(f'<a href="{html.escape(ipynb)}" download="{html.escape(name)}">Download the notebook '
              f"<code>{html.escape(name)}</code></a>"),
             f'<a href="{run}">Run it locally</a>']
    if config.get("repo_url"):
        links.append(f'<a href="{html.escape(config["repo_url"])}">Source repository</a>')
    else:
        links.append(f"source: <code>{html.escape(page.file.src_uri)}</code> in the toynet repository")
    return f'<p class="toynet-notebook-bar">{" · ".join(links)}</p>\n'


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "\n::: " in "\n" + markdown:
        markdown = public_members(markdown)
    if "<!-- notebooks -->" in markdown:
        markdown = markdown.replace("<!-- notebooks -->", notebook_list())
    if "<!-- figures -->" in markdown:
        markdown = markdown.replace("<!-- figures -->", figure_gallery())
    if "<!-- passes -->" in markdown:
        markdown = markdown.replace("<!-- passes -->", pass_table())
    if "<!-- lesson-path -->" in markdown:
        markdown = markdown.replace("<!-- lesson-path -->", lesson_path_table())
    return markdown


# An mkdocstrings directive (``::: toynet.viz``) and the indented options under it.
_DIRECTIVE = re.compile(r"^::: (?P<target>[\w.]+)[ \t]*\n(?P<options>(?:[ \t]+\S.*\n?)*)", re.MULTILINE)


def public_members(markdown: str) -> str:
    """A module documented whole (``::: toynet.viz``, no ``members:``) lists the names of its ``__all__``
    when it has one: what the module says is its public API, not every name without an underscore (the
    ``filters`` of mkdocs.yml, which know nothing of ``__all__``). ``members:`` on the page still decides."""
    import importlib

    def expand(m: re.Match) -> str:
        options = m["options"]
        if re.search(r"^\s+members:", options, re.MULTILINE):
            return m[0]
        try:
            exported = getattr(importlib.import_module(m["target"]), "__all__", None)
        except ImportError:  # not a module (a class, a function): its members are its own
            return m[0]
        if not exported:
            return m[0]
        members = json.dumps(list(exported))
        if re.search(r"^(\s+)options:[ \t]*$", options, re.MULTILINE):
            indent = re.search(r"^(\s+)options:", options, re.MULTILINE)[1]
            options = re.sub(r"^(\s+options:[ \t]*)$", rf"\1\n{indent}  members: {members}", options, count=1,
                             flags=re.MULTILINE)
        else:
            options = f"    options:\n      members: {members}\n" + options
        return f"::: {m['target']}\n{options}"

    return _DIRECTIVE.sub(expand, markdown)


def pass_table() -> str:
    """The passes of the lesson pipeline, then what the fast path adds or replaces, in the order they run: each
    pass's name, its module, and the first sentence of its docstring (what it does)."""
    import toynet
    from toynet.static import passes

    def pipeline(fast: bool) -> list:
        with toynet.set_fast_path(fast):
            return passes.default_pipeline()

    def what(run) -> str:
        text = " ".join((run.__doc__ or "").split("\n\n")[0].split())
        text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")
        return text

    lesson, fast = pipeline(False), pipeline(True)
    rows = ["| pass | path | module | what it does |", "|---|---|---|---|"]
    for run in (p for p in fast if p.name != "ChooseKernels"):   # (listed after fusion, as opt-in)
        same = [p for p in lesson if p.name == run.name]
        where = "lesson" if same and same[0] is run else "fast, in the lesson's place" if same else "fast"
        if same and same[0] is not run:
            rows.append(f"| `{run.name}` | lesson | `{same[0].__module__}` | {what(same[0])} |")
        rows.append(f"| `{run.name}` | {where} | `{run.__module__}` | {what(run)} |")
        if run.name == "FuseElementwise":
            timing = passes.PASSES["ChooseKernels"]
            rows.append(f"| `ChooseKernels` | fast, opt-in | `{timing.__module__}` | {what(timing)} |")
    return "\n".join(rows) + ("\n\nThe lesson path runs the rows marked *lesson*, in this order; the fast path runs "
                              "every row but the lesson's own where it has its own. `ChooseKernels` runs only in a "
                              "graph that asks for it: `graph.config.enable_pass(\"ChooseKernels\")`.")


def lesson_path_table() -> str:
    """What one poly-fit training step runs, on each path: ``scripts/lesson_path.py --json``, run now."""
    rows = ["| one poly-fit step | lesson path: lines | files | fast path: lines | files |", "|---|---|---|---|---|"]
    runs = {}
    for fast in ("0", "1"):
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "lesson_path.py"), "--json"], cwd=ROOT,
                              capture_output=True, text=True, check=False, env={**os.environ, "TOYNET_FAST": fast})
        if done.returncode != 0:
            raise PluginError(f"scripts/lesson_path.py failed:\n{done.stderr[-2000:]}")
        runs[fast] = json.loads(done.stdout)
    for key, label in (("eager_step", "Eager step"), ("graph_first_call", ("first Graph call (trace, optimise, "
                                                      "compile, run)")), ("graph_later_call", "later Graph call")):
        a, b = runs["0"][key], runs["1"][key]
        rows.append(f"| {label} | {a['lines']} | {a['files']} | {b['lines']} | {b['files']} |")
    a, b = runs["0"]["files_that_run"], runs["1"]["files_that_run"]
    rows.append(f"| the files that run hold | {a['lines_in_them']} lines | {a['files']} | {b['lines_in_them']} lines "
                f"| {b['files']} |")
    rows.append(f"| lines run under a `fast/` folder | {runs['0']['fast_lines_run']} | | {runs['1']['fast_lines_run']} | |")
    return "\n".join(rows)


def notebook_list() -> str:
    """A Markdown list of the notebooks: linked title, then the first paragraph of the first cell."""
    items = []
    for path in notebook_paths():
        title, summary = _title_and_summary(path)
        items.append(f"- **[{title}](notebooks/{path.name})**: {summary}")
    return "\n".join(items) if items else "*(No notebooks yet.)*"


def _title_and_summary(path: Path) -> tuple[str, str]:
    """The notebook's ``# heading`` (as plain text) and the first two complete sentences after it."""
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    markdown = next(("".join(c["source"]) for c in cells if c.get("cell_type") == "markdown"), "")
    paragraphs = [p.strip() for p in markdown.split("\n\n") if p.strip()]
    title = path.stem
    if paragraphs and paragraphs[0].startswith("# "):
        title = paragraphs.pop(0)[2:].strip().replace("`", "")
    text = " ".join(paragraphs[0].split()) if paragraphs else ""
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z`*(])", text)
    complete = [s for s in sentences if re.search(r"[.!?][)*_`]*$", s)]
    summary = " ".join(complete[:2]) if complete else text.rstrip(":")
    return title, summary


def figure_gallery() -> str:
    figures = figure_paths()
    if not figures:
        return ("*No figures yet: `bash scripts/main.sh` (or `python examples/run_all.py`) draws them into "
                "`imgs/`; build the site again afterwards.*")
    blocks = []
    stems = [path.stem for path in figures]
    for path in figures:
        caption = CAPTIONS.get(path.stem, path.name)
        title = path.stem.replace("_", " ")
        if stems.count(path.stem) > 1:  # the same picture in two formats: say which
            title += f" ({path.suffix[1:].upper()})"
        blocks.append(f"### {title}\n\n![{caption}](imgs/{path.name})\n\n*{caption}*")
    return "\n\n".join(blocks)
