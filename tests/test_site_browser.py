"""The docs site as a reader sees it: built, served on localhost and opened in headless Chromium.

tests/test_docs.py reads the built HTML; this test looks at what a browser makes of it, offline. Every request
to anything but the local server is refused (and fails the test), so the site must carry everything it needs.
On the home page, the notebooks' pages, the figures and two API pages it checks that:

* maths is typeset: MathJax drew it, and no raw TeX (``$\\partial``, ``\\frac``...) is left in the visible text;
* no printed line is broken: every ``pre`` keeps its lines (``white-space: pre``), its longest line stays
  on one visual line (``Range.getClientRects``), and a block wider than the column scrolls sideways;
* every picture loaded with a non-zero size, and a shrunk one opens at full size on a click;
* the console shows no error (a font missing offline would be forgiven; the theme uses system fonts).

And that a notebook reads as well as in JupyterLab, on a laptop and on a phone:

* at 1280x800, every notebook page gives its cells a column at least 900 px wide (no table of contents on
  the right: its sections are in the navigation), so that printed graphs and pictures need not shrink;
* at 390x844, a phone, cell output (and code) uses at least 85% of the screen's width: no In/Out gutter;
* no cell tags are shown (the tests' ``numbers-...`` tags, as a row of pills);
* no link leads nowhere: a crawl from the home page, over HTTP, of every page a reader can reach, with every
  link, anchor, picture and script on it;
* the Figures page shows each animation at 90% of its own size or more.

Screenshots of the home page, notebook 2, the nn.Graph API page, notebook 4 at 1280x800 and 390x844 and the
Figures page go to ``$TOYNET_SHOTS`` (default ``/tmp/site-shots``), to be looked at.

Needs Chromium (Debian's ``chromium``, which scripts/setup.sh installs) and Playwright (the test extra). A
missing browser fails the test and says how to install it: the README's test command installs both.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlparse

import pytest
from test_docs import NOTEBOOKS, build_site, crawl

SHOTS = Path(os.environ.get("TOYNET_SHOTS", "/tmp/site-shots"))
#: Pages to read: the home page, the lists, every notebook, and two API pages.
PAGES = ["", "notebooks/", "figures/", *[f"notebooks/{nb.stem}/" for nb in NOTEBOOKS], "api/", "api/graph/",
         "api/distributed/"]
#: The pages photographed, and the file names of their screenshots.
SCREENSHOTS = {"": "home.png", "notebooks/02_autograd_on_arrays/": "notebook-02.png", "api/graph/": "api-graph.png"}
#: Requests off the site (and their console errors) forgiven, as extras a page reads fine without: fonts
#: (none asked for today: theme.font is false), and the stars and forks Material fetches to show beside a
#: GitHub or GitLab repo_url (docs/hooks.py sets one when the clone has an origin remote).
FORGIVEN = ("fonts.googleapis.com", "fonts.gstatic.com", ".woff", ".ttf", "font",
            "https://api.github.com/repos/", "/api/v4/projects/")


def find_chromium() -> str:
    for name in (os.environ.get("TOYNET_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    pytest.fail("Chromium was not found, and this test reads the docs site in it. Install it with "
                "`bash scripts/setup.sh` (which runs `apt-get install -y chromium` when it is missing), or "
                "`sudo apt-get update && sudo apt-get install -y chromium`; or point TOYNET_CHROMIUM at a "
                "Chromium or Chrome executable.")


def test_chromium_and_playwright_are_installed():
    """Said once, as a failure: without them every test below errors with the same message."""
    assert Path(find_chromium()).is_file()
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.fail("Playwright is not installed: pip install -e '.[test]' (scripts/setup.sh does)")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                                                 ".ipynb": "application/json"}

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The built site, served on a free port of 127.0.0.1 for as long as this module's tests run."""
    site = build_site(tmp_path_factory)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=site))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    executable = find_chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright is not installed: pip install -e '.[test]' (scripts/setup.sh does)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, headless=True)
        yield chromium
        chromium.close()


class Reader:
    """A tab that refuses every request off the local server and keeps the console's errors."""

    def __init__(self, browser, server: str, width: int = 1280, height: int = 900):
        self.server = server
        self.tab = browser.new_page(viewport={"width": width, "height": height})
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.tab.on("console", self._console)
        self.tab.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.tab.route("**/*", self._only_local)

    def _console(self, message):
        if message.type == "error":  # with its address: "Failed to load resource" says nothing of which
            self.errors.append(f"{message.text} ({message.location.get('url', '')})")

    def _only_local(self, route):
        url = route.request.url
        if url.startswith(self.server) or urlparse(url).scheme in ("data", "blob"):
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def open(self, path: str):
        response = self.tab.goto(self.server + path, wait_until="load")
        assert response is not None and response.ok, f"{path}: HTTP {response and response.status}"
        self.tab.evaluate(WAIT_FOR_PAGE)
        return self.tab

    def problems(self) -> list[str]:
        errors = [e for e in self.errors if not any(f in e for f in FORGIVEN)]
        outside = [u for u in self.outside if not any(f in u for f in FORGIVEN)]
        return [f"console: {e}" for e in errors] + [f"asked the internet for {u}" for u in outside]

    def close(self):
        self.tab.close()


@pytest.fixture
def reader(browser, server):
    r = Reader(browser, server)
    yield r
    r.close()


@pytest.fixture
def laptop(browser, server):
    """A tab of a 1280x800 laptop screen."""
    r = Reader(browser, server, 1280, 800)
    yield r
    r.close()


@pytest.fixture
def phone(browser, server):
    """A tab of a 390x844 phone screen."""
    r = Reader(browser, server, 390, 844)
    yield r
    r.close()


# MathJax typesets after the page loads; pictures decode on their own time.
WAIT_FOR_PAGE = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await Promise.all([...document.images].map((img) => img.decode().catch(() => null)));
}"""

# A screenshot of a page with maths below the first screen scrolls to its first formula.
SHOW_FIRST_MATHS = """() => {
  const maths = document.querySelector("mjx-container");
  if (maths && maths.getBoundingClientRect().bottom > innerHeight) maths.scrollIntoView({block: "center"});
}"""


def shoot(tab, name: str):
    SHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SHOTS / name))


# Everything measured in one pass over the page.
MEASURE = r"""() => {
  const article = document.querySelector("article") || document.body;
  // The visible text without code, printed output and MathJax's own markup: where raw TeX would show.
  const prose = article.cloneNode(true);
  prose.querySelectorAll("pre, code, mjx-container, script, style").forEach((n) => n.remove());
  document.body.appendChild(prose);      // innerText needs a rendered element
  prose.style.position = "absolute";
  prose.style.left = "-100000px";
  const text = prose.innerText;
  prose.remove();

  const lines = [];
  for (const pre of article.querySelectorAll("pre")) {
    if (!pre.offsetParent) continue;     // hidden (a closed <details>)
    const style = getComputedStyle(pre);
    const full = pre.textContent;
    let start = 0, longest = [0, 0];
    for (const line of full.split("\n")) {
      if (line.trimEnd().length > longest[1] - longest[0]) longest = [start, start + line.trimEnd().length];
      start += line.length + 1;
    }
    const range = document.createRange();
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    let offset = 0, node, begun = false;
    while ((node = walker.nextNode())) {
      const end = offset + node.length;
      if (!begun && longest[0] < end) { range.setStart(node, longest[0] - offset); begun = true; }
      if (begun && longest[1] <= end) { range.setEnd(node, longest[1] - offset); break; }
      offset = end;
    }
    const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
    const box = pre.getBoundingClientRect();
    lines.push({
      where: (pre.closest(".jp-OutputArea-output") ? "output" : "code") + ": " + full.slice(longest[0], longest[1]).slice(0, 80),
      whiteSpace: style.whiteSpace,
      overflowX: style.overflowX,
      visualLines: tops.size,
      wider: pre.scrollWidth > pre.clientWidth + 1,
      right: box.right,
    });
  }
  const pictures = [...article.querySelectorAll("img")].map((img) => ({
    src: img.src.slice(0, 80),
    natural: [img.naturalWidth, img.naturalHeight],
    shown: img.offsetParent ? [img.getBoundingClientRect().width, img.getBoundingClientRect().height] : null,
    zoomable: img.classList.contains("toynet-zoomable") || !!img.closest("a"),  // or linked to itself
  }));
  return {
    text,
    columnRight: article.getBoundingClientRect().right,
    maths: document.querySelectorAll("mjx-container").length,
    mathErrors: document.querySelectorAll("mjx-merror, [data-mjx-error]").length,
    lines,
    pictures,
  };
}"""

RAW_TEX = [r"$$", "$\\", "\\(", "\\[", "\\frac", "\\partial", "\\sum", "\\theta", "\\text", "\\top", "^{", "_{"]


@pytest.mark.parametrize("path", PAGES)
def test_page_reads_well(reader, path):
    tab = reader.open(path)
    if path in SCREENSHOTS:
        tab.evaluate(SHOW_FIRST_MATHS)
        shoot(tab, SCREENSHOTS[path])
    page = tab.evaluate(MEASURE)
    where = path or "the home page"

    raw = [t for t in RAW_TEX if t in page["text"]]
    assert not raw, f"{where}: raw TeX {raw} in the visible text, around: " + "; ".join(
        page["text"][max(0, page["text"].find(t) - 60):page["text"].find(t) + 60] for t in raw)
    assert page["mathErrors"] == 0, f"{where}: MathJax could not typeset {page['mathErrors']} formulas"

    for line in page["lines"]:
        assert line["whiteSpace"] == "pre", f"{where}: a block wraps its lines ({line['whiteSpace']}): {line['where']}"
        assert line["visualLines"] <= 1, f"{where}: a line is broken over {line['visualLines']} lines: {line['where']}"
        if line["wider"]:
            assert line["overflowX"] in ("auto", "scroll"), f"{where}: a wide block cannot scroll: {line['where']}"
        assert line["right"] <= page["columnRight"] + 1, f"{where}: a block spills out of the column: {line['where']}"

    for picture in page["pictures"]:
        assert min(picture["natural"]) > 0, f"{where}: a picture did not load: {picture['src']}"
        assert picture["shown"] is None or min(picture["shown"]) > 0, f"{where}: a picture shows empty: {picture}"
        assert picture["zoomable"], f"{where}: a picture does not open at full size: {picture['src']}"

    assert not reader.problems(), f"{where}:\n" + "\n".join(reader.problems())


@pytest.mark.parametrize("path, at_least", [
    ("", 2),                                    # docs/index.md: pymdownx.arithmatex, inline and display
    ("notebooks/", 1),                          # notebooks' summaries
    ("notebooks/02_autograd_on_arrays/", 10),   # notebook Markdown: $...$ and $$...$$
])
def test_maths_is_typeset(reader, path, at_least):
    page = reader.open(path).evaluate(MEASURE)
    assert page["maths"] >= at_least, f"{path or 'home'}: {page['maths']} formulas typeset, expected {at_least}+"


def test_wide_output_scrolls_with_its_lines_intact(reader):
    """Some notebook prints lines wider than the column (graphs, debug logs): they must scroll, not wrap."""
    wide = []
    for notebook in NOTEBOOKS:
        tab = reader.open(f"notebooks/{notebook.stem}/")
        page = tab.evaluate(MEASURE)
        wide += [line for line in page["lines"] if line["wider"] and line["where"].startswith("output")]
        if wide and not (SHOTS / "wide-output.png").exists():
            tab.evaluate("""() => [...document.querySelectorAll(".jp-OutputArea-output pre")]
                .find((pre) => pre.scrollWidth > pre.clientWidth + 1).scrollIntoView({block: "center"})""")
            shoot(tab, "wide-output.png")
    assert wide, "no printed line is wider than the column: this test no longer checks what it should"
    assert all(line["visualLines"] == 1 and line["overflowX"] == "auto" for line in wide)


def test_a_shrunk_picture_opens_at_full_size(reader):
    tab = reader.open("notebooks/05_compiler_passes/")
    shrunk = tab.evaluate("""() => [...document.querySelectorAll("article img")].findIndex(
        (img) => img.naturalWidth > img.getBoundingClientRect().width * 1.05)""")
    assert shrunk >= 0, "notebook 5 shows no picture wider than the column"
    picture = tab.locator("article img").nth(shrunk)
    assert "full size" in tab.locator(".toynet-zoom-hint").first.inner_text()
    picture.scroll_into_view_if_needed()
    picture.click()
    big = tab.locator(".toynet-lightbox img")
    natural, shown = big.evaluate("(img) => [img.naturalWidth, img.getBoundingClientRect().width]")
    assert natural > 0 and abs(shown - natural) <= 1, f"opened at {shown} px, the picture is {natural} px wide"
    shoot(tab, "picture-full-size.png")
    tab.keyboard.press("Escape")
    assert tab.locator(".toynet-lightbox").count() == 0
    assert not reader.problems(), "\n".join(reader.problems())


def test_a_notebook_downloads_from_its_page(reader):
    tab = reader.open("notebooks/02_autograd_on_arrays/")
    link = tab.locator(".toynet-notebook-bar a[download]")
    assert link.get_attribute("download") == "02_autograd_on_arrays.ipynb"
    response = tab.request.get(link.evaluate("(a) => a.href"))
    assert response.ok and "cells" in json.loads(response.body())
    tab.locator(".toynet-notebook-bar").get_by_text("Run it locally").click()
    tab.wait_for_url("**/notebooks/#run-it-locally")
    assert "jupyter lab notebooks/" in tab.locator("article").inner_text()


# ------------------------------------------------------------------------- reading notebooks: laptop and phone

# The widths a reader gets: the cells' column, each output and code block against the screen, and any cell
# tag left visible.
MEASURE_CELLS = r"""() => {
  const shown = (el) => !!el.offsetParent && el.getBoundingClientRect().width > 0;
  const width = (el) => el.getBoundingClientRect().width;
  const cells = [...document.querySelectorAll("article .jp-Cell")].filter(shown);
  const blocks = [...document.querySelectorAll("article .jp-OutputArea-output, article .jp-InputArea-editor")]
    .filter(shown);
  const narrowest = blocks.reduce((a, b) => (width(a) <= width(b) ? a : b), blocks[0]);
  return {
    screen: innerWidth,
    cells: cells.length,
    column: cells.length ? Math.min(...cells.map(width)) : 0,
    narrowest: narrowest ? width(narrowest) : 0,
    narrowestText: narrowest ? narrowest.textContent.trim().slice(0, 60) : "",
    tags: [...document.querySelectorAll(".celltoolbar, .cell-tag, .tags_button_container")].filter(shown).length,
  };
}"""

#: What the checks below measured, page by page (printed with -s, for the record).
MEASURED: dict[str, dict] = {}


@pytest.mark.parametrize("notebook", [nb.stem for nb in NOTEBOOKS])
def test_a_notebook_gets_a_wide_column_on_a_laptop(laptop, notebook):
    """At 1280x800 the cells get 900 px or more (748 px when the table of contents took a column of its own),
    and no tag is shown."""
    tab = laptop.open(f"notebooks/{notebook}/")
    if notebook == "04_inside_nn_graph":
        shoot(tab, "notebook-04-1280x800.png")
    page = tab.evaluate(MEASURE_CELLS)
    MEASURED[f"{notebook} at 1280x800"] = page
    print(f"{notebook} at 1280x800: the cells' column is {page['column']:.0f} px")
    assert page["cells"] > 0, f"{notebook}: no cell found"
    assert page["column"] >= 900, f"{notebook}: the cells' column is {page['column']:.0f} px wide at 1280 px, under 900"
    assert page["tags"] == 0, f"{notebook}: {page['tags']} cell tags are shown"
    assert not laptop.problems(), "\n".join(laptop.problems())


@pytest.mark.parametrize("notebook", [nb.stem for nb in NOTEBOOKS])
def test_a_notebook_uses_a_phones_width(phone, notebook):
    """At 390x844 every output and code block is at least 85% of the screen's width (the In/Out gutter left
    them 62%), and no tag is shown."""
    tab = phone.open(f"notebooks/{notebook}/")
    if notebook == "04_inside_nn_graph":
        tab.evaluate("""() => document.querySelectorAll("article .jp-OutputArea-output")[3]
            .scrollIntoView({block: "center"})""")
        shoot(tab, "notebook-04-390x844.png")
    page = tab.evaluate(MEASURE_CELLS)
    share = page["narrowest"] / page["screen"]
    MEASURED[f"{notebook} at 390x844"] = page
    print(f"{notebook} at 390x844: the narrowest output or code block is {page['narrowest']:.0f} px, {share:.0%}")
    assert page["cells"] > 0, f"{notebook}: no cell found"
    assert share >= 0.85, (f"{notebook}: a block is {page['narrowest']:.0f} px wide on a {page['screen']} px screen "
                           f"({share:.0%}, under 85%): {page['narrowestText']!r}")
    assert page["tags"] == 0, f"{notebook}: {page['tags']} cell tags are shown"


def http_fetch(url: str) -> tuple[int, str, str]:
    """``crawl``'s fetch over HTTP, from the local server."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            kind = response.headers.get("Content-Type", "")
            body = response.read()
            return response.status, kind, body.decode("utf-8", "replace") if "html" in kind else ""
    except urllib.error.HTTPError as error:
        return error.code, "", ""


def test_no_link_leads_nowhere_on_the_served_site(server):
    """Every page reachable from the home page, and every link, anchor, picture and script on it, as served."""
    pages, problems = crawl(server, http_fetch)
    assert not problems, f"{len(problems)} broken links:\n" + "\n".join(problems)
    assert sum(1 for p in pages if "/notebooks/" in p and not p.endswith("/notebooks/")) >= len(NOTEBOOKS)
    print(f"{len(pages)} pages crawled, no broken link")


# Every animation of a page (a GIF) and the size it is shown at, beside its own.
MEASURE_ANIMATIONS = r"""() => [...document.querySelectorAll("article img")]
  .filter((img) => /\.gif($|\?)/i.test(img.getAttribute("src") || ""))
  .map((img) => ({src: img.getAttribute("src"), natural: img.naturalWidth, shown: img.getBoundingClientRect().width,
                  column: img.parentElement.getBoundingClientRect().width}))"""


def test_figures_page_shows_animations_near_their_own_size(laptop):
    """An animation shrunk to fit the column loses its text: at 1280x800 the Figures page (as wide as a notebook
    page) shows every GIF at 90% of its own width or more. (The text it draws is at least
    toynet.viz.rendering.MIN_TEXT_PX = 11 px tall at the GIF's own size; it is shown at that size times the
    share measured here.)"""
    tab = laptop.open("figures/")
    shoot(tab, "figures-1280x800.png")
    animations = tab.evaluate(MEASURE_ANIMATIONS)
    MEASURED["figures at 1280x800"] = {"animations": animations}
    assert animations, "the Figures page shows no animation"
    for gif in animations:
        print(f"figures: {gif['src']} shown {gif['shown']:.0f} px of its {gif['natural']} px "
              f"({gif['shown'] / gif['natural']:.0%}), in a {gif['column']:.0f} px column")
    small = [g for g in animations if g["shown"] < 0.9 * g["natural"]]
    assert not small, "animations shown under 90% of their own size (their text shrinks with them): " + "; ".join(
        f"{g['src']} at {g['shown']:.0f} of {g['natural']} px ({g['shown'] / g['natural']:.0%}), the column is "
        f"{g['column']:.0f} px" for g in small)
