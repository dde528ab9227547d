"""mkdocs hooks: bring the notebooks and the figures, which live outside docs/, into the site.

The notebooks stay in ``notebooks/`` (where Jupyter and the tests find them) and the figures in ``imgs/``
(where ``examples/run_all.py`` regenerates them). Instead of copies or symlinks, these hooks add both
folders to the files mkdocs builds, under the same paths as in the repository (``notebooks/05_....ipynb``,
``imgs/....png``), and write the pages that list them:

* the "Notebooks" section of the navigation, one entry per ``notebooks/*.ipynb``, in file-name order;
* ``notebooks.md``: each notebook's title and first paragraph, where the page says ``<!-- notebooks -->``;
* ``figures.md``: every picture in ``imgs/``, where the page says ``<!-- figures -->``.

So a new notebook or figure appears in the site without touching mkdocs.yml, and a missing one never
leaves a dead link behind (``mkdocs build --strict`` would fail on it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
IMGS = ROOT / "imgs"
FIGURE_SUFFIXES = (".png", ".gif", ".svg", ".jpg", ".jpeg")

#: Captions of the figures the tutorials show (any other picture is listed under its file name).
CAPTIONS = {
    "compute_graph": "The computation graph of the tutorial's example: loss = sum((x @ w + b - y)^2 / 2).",
    "dynamic_graph": "Eager mode builds the graph as the code runs, one op at a time.",
    "static_graph": "Graph mode: the whole graph, traced first, then compiled and run.",
    "01-wxb": "Eager mode after x, w and b exist: three leaves and no ops yet.",
    "02-z": "After z = matmul(x, w) + b: the first ops, recorded as they ran.",
    "poly_fit": "The polynomial fit: sin(x) and the cubic fitted by gradient descent.",
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


def on_config(config):
    """Fill the navigation's "Notebooks" section with every notebook there is, titled by its heading."""
    for item in config["nav"] or []:
        if isinstance(item, dict) and "Notebooks" in item:
            overview = [entry for entry in item["Notebooks"] or [] if entry == "notebooks.md"]
            item["Notebooks"] = overview + [{_title_and_summary(p)[0]: f"notebooks/{p.name}"}
                                            for p in notebook_paths()]
    return config


@event_priority(100)  # before mkdocs-jupyter, which turns the .ipynb files it is given into pages
def on_files(files: Files, config) -> Files:
    for path in notebook_paths() + figure_paths():
        files.append(File(path.relative_to(ROOT).as_posix(), src_dir=str(ROOT), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "<!-- notebooks -->" in markdown:
        markdown = markdown.replace("<!-- notebooks -->", notebook_list())
    if "<!-- figures -->" in markdown:
        markdown = markdown.replace("<!-- figures -->", figure_gallery())
    return markdown


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
    text = re.sub(r"\$([^$]+)\$", r"`\1`", text)  # inline maths as code: this page has no MathJax
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
    for path in figures:
        caption = CAPTIONS.get(path.stem, path.name)
        blocks.append(f"### {path.stem.replace('_', ' ')}\n\n![{caption}](imgs/{path.name})\n\n*{caption}*")
    return "\n\n".join(blocks)
