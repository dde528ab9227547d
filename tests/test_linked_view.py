"""flow.viz.linked(graph): a compiled nn.Graph's picture linked to each op's source line, plan lines and debug
line; the facts are right, the HTML holds user text only as escaped data, and pointing at a node in a real
browser shows its facts and highlights its lines."""

from __future__ import annotations

import contextlib
import io

import pytest

import toynet as flow
from toynet import nn


def train_graph(debug_level=None):
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

        def build(self, x):
            loss = self.model(x).square().mean()  # </script><b>not markup</b>
            loss.backward()
            return loss
    graph = Step()
    if debug_level is not None:
        graph.debug(debug_level)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        graph(flow.randn(5, 3))
    return graph, out.getvalue()


def products(view):
    """The forward ops that multiply by a layer's weight: ``matmul`` on the lesson path, ``linear`` on the fast."""
    return [name for name in view.names() if view.facts(name)["op"] in ("matmul", "linear")
            and view.facts(name)["phase"] == "forward"]


def test_an_uncompiled_graph_is_refused_with_what_to_do():
    graph = train_graph()[0].__class__()
    with pytest.raises(ValueError, match="call it once"):
        flow.viz.linked(graph)
    with pytest.raises(TypeError, match="takes an nn.Graph"):
        flow.viz.linked(flow.randn(2))


def test_each_op_links_its_source_plan_lines_and_the_debug_line_debug3_prints():
    graph, log = train_graph(debug_level=3)
    view = flow.viz.linked(graph)
    assert set(view.names()) == {n.name for n in graph.ir.op_nodes}
    first = products(view)[0]
    matmul = view.facts(first)
    assert first.startswith("model.0-") and matmul["shape"] == [5, 4]
    assert "loss = self.model(x).square().mean()" in matmul["source"]
    comment, code = matmul["plan"]
    assert comment.strip().startswith(f"# {first}") and code.strip().startswith("v") and " = " in code  # its value
    assert matmul["log"] in log.splitlines()          # the very line the debug log printed
    for name in view.names():                          # every op of the plan is found in it
        assert len(view.facts(name)["plan"]) == 2, name
    with pytest.raises(KeyError, match="view.names"):
        view.facts("no-such-op")


def test_user_text_reaches_the_page_only_escaped():
    graph, _ = train_graph()
    page = flow.viz.linked(graph)._repr_html_()
    assert "<b>not markup</b>" not in page
    assert "&lt;/script&gt;&lt;b&gt;not markup" in page          # the plan pane, escaped
    assert page.count("</script>") == 2                           # only the view's own two scripts end
    assert page.count("<script") == 2


def test_two_views_on_one_page_keep_their_own_ids():
    graph, _ = train_graph()
    first, second = flow.viz.linked(graph)._repr_html_(), flow.viz.linked(graph)._repr_html_()
    assert first.split('"', 2)[1] != second.split('"', 2)[1]


def test_pointing_at_a_node_in_a_browser_shows_its_facts_and_lines(tmp_path):
    from test_site_browser import find_chromium
    from playwright.sync_api import sync_playwright
    graph, _ = train_graph()
    view = flow.viz.linked(graph, forward_only=True)
    page_file = tmp_path / "linked.html"
    page_file.write_text("<!doctype html><html><body>" + view._repr_html_() + "</body></html>")
    second = products(view)[1]
    facts = view.facts(second)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(), headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(page_file.as_uri())
            page.locator("g.node", has=page.locator(f"a[*|title^='%{second} ']")).first.hover()
            shown = page.locator(".facts").inner_text()
            lit = [k for k in range(page.locator(".pl").count())
                   if page.locator(".pl").nth(k).evaluate("e => e.style.background") != ""]
            lit_log = [k for k in range(page.locator(".lg").count())
                       if page.locator(".lg").nth(k).evaluate("e => e.style.background") != ""]
        finally:
            browser.close()
    assert errors == []
    assert second in shown and facts["op"] in shown and "[5,2]" in shown.replace(" ", "")
    assert lit == facts["plan_lines"] and lit_log == [facts["log_line"]]
