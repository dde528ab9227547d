"""Linked views: one op of a compiled ``nn.Graph`` seen in every place the framework shows it.

A traced op appears in four places that are usually read apart: the graph picture, the user's source line it
came from, its line in the generated code (``graph.plan.source``) and its OPERATOR line in the debug log
(``graph.debug(3)``). ``flow.viz.linked(graph)`` puts them side by side: pointing at a node of the picture (or
clicking it, which keeps it) shows the op, its attributes and shapes, the source line, and the plan and the
log with that op's lines highlighted and scrolled into view. Without JavaScript (a notebook that is not
trusted) every node still has a tooltip with the same facts.

In Python, ``view.facts("model.0-matmul-1")`` returns them as a dict, and ``view.names()`` lists the ops.

Everything shown is data: names, source lines and code are HTML-escaped, and the table the page script reads
is JSON, never pasted into the script as code.
"""

from __future__ import annotations

import html
import itertools
import json
import re
from typing import Any

from ..nn.graph import Graph as ModuleGraph
from ..nn.graph_print import operator_line
from .rendering import to_svg

#: Graphviz writes a node's tooltip into the SVG as the ``xlink:title`` of the node's link; toynet's static
#: drawings begin each tooltip with ``%<node name> :`` (see draw_static.py), which is how a picture node is
#: tied back to its op.
_TOOLTIP_NAME = re.compile(r"^%(\S+) :")
_view_numbers = itertools.count(1)


def plan_lines_of(source: str, name: str) -> list[int]:
    """Line numbers (0-based) of ``source`` that compute the op ``name``: its comment line ``# name: ...`` (the
    lesson plan) or ``# name    (...)`` (the fast plan) and the code line after it."""
    lines = source.splitlines()
    for k, line in enumerate(lines):
        text = line.strip()
        if text == f"# {name}" or text.startswith((f"# {name}:", f"# {name} ")):
            return [k, k + 1] if k + 1 < len(lines) else [k]
    return []


def check_linkable(graph: Any) -> None:
    """An ``nn.Graph`` that has compiled, or a clear error."""
    if not isinstance(graph, ModuleGraph):
        raise TypeError(f"flow.viz.linked() takes an nn.Graph, got {type(graph).__name__}")
    if not _has_compiled(graph):
        raise ValueError(f"flow.viz.linked(): the graph {graph.name} has not been compiled yet; call it once "
                         "(graph(x)) so that it has a plan to link to")


class LinkedView:
    """The picture, the op's facts, ``plan.source`` and the debug log of one compiled ``nn.Graph``, linked.

    ``drawing``: the picture of ``graph.ir`` (``flow.viz.linked`` draws it with :func:`toynet.viz.draw`)."""

    def __init__(self, graph: ModuleGraph, drawing: Any):
        check_linkable(graph)
        ir, self.plan_source = graph.ir, graph.plan.source
        traced = {n.name: n for n in graph.traced_ir.op_nodes}
        self.log = []
        self._facts: dict[str, dict] = {}
        for node in ir.op_nodes:
            log_node = traced.get(node.name, node)
            self.log.append(operator_line(log_node, log_node.source))
            self._facts[node.name] = {
                "op": node.op.name, "attrs": {k: repr(v) for k, v in node.attrs.items()},
                "shape": list(node.shape), "dtype": repr(node.dtype), "phase": node.phase, "scope": node.scope,
                "inputs": [getattr(x, "name", repr(x)) for x in node.inputs],
                "source": node.source, "plan_lines": plan_lines_of(self.plan_source, node.name),
                "log_line": len(self.log) - 1,
            }
        svg = to_svg(drawing)
        self.svg = svg[svg.find("<svg"):]   # (inline in HTML: without the XML declaration and doctype)

    def names(self) -> list[str]:
        return list(self._facts)

    def facts(self, name: str) -> dict:
        """Everything the view shows for the op ``name``: op, attributes, shape, dtype, phase, scope, inputs,
        the user's source line, its lines in ``plan.source`` (text) and its OPERATOR line of the debug log."""
        if name not in self._facts:
            raise KeyError(f"{name!r} is not an op of this graph's optimised IR; view.names() lists them")
        facts = dict(self._facts[name])
        plan = self.plan_source.splitlines()
        facts["plan"] = [plan[k] for k in facts["plan_lines"]]
        facts["log"] = self.log[facts["log_line"]]
        return facts

    def _repr_html_(self) -> str:
        view_id = f"toynet-linked-{next(_view_numbers)}"   # (several views on one page stay apart)
        table = json.dumps(self._facts).replace("</", "<\\/")   # data for the script, never code
        plan = "".join(f'<div class="pl" data-k="{k}">{html.escape(line) or " "}</div>'
                       for k, line in enumerate(self.plan_source.splitlines()))
        log = "".join(f'<div class="lg" data-k="{k}">{html.escape(line)}</div>' for k, line in enumerate(self.log))
        return _TEMPLATE.format(id=view_id, svg=self.svg, plan=plan, log=log, table=table,
                                pattern=_TOOLTIP_NAME.pattern.replace("\\", "\\\\"))


def _has_compiled(graph: ModuleGraph) -> bool:
    try:
        graph.plan
    except RuntimeError:   # "has not been compiled yet" (nn.Graph._require_compiled); anything else is a bug
        return False
    return True


_TEMPLATE = """<div id="{id}" class="toynet-linked" style="display:flex;gap:12px;align-items:flex-start;
font-family:Helvetica,Arial,sans-serif;font-size:12px">
<style>#{id} .pic svg {{ max-width: 100%; height: auto; }}</style>
<div class="pic" style="flex:1 1 55%;max-height:640px;overflow:auto;border:1px solid #ddd">{svg}</div>
<div style="flex:1 1 45%;min-width:280px">
<div class="facts" style="border:1px solid #ddd;padding:6px;min-height:4em;white-space:pre-wrap">Point at an op
of the picture (click to keep it).</div>
<div style="margin-top:6px;font-weight:bold">plan.source</div>
<div class="plan" style="max-height:220px;overflow:auto;font-family:monospace;font-size:11px;white-space:pre;
border:1px solid #ddd">{plan}</div>
<div style="margin-top:6px;font-weight:bold">debug log: the OPERATOR lines graph.debug(3) prints</div>
<div class="log" style="max-height:160px;overflow:auto;font-family:monospace;font-size:11px;white-space:pre;
border:1px solid #ddd">{log}</div>
</div>
<script type="application/json" class="table">{table}</script>
<script>
(function () {{
  var root = document.getElementById("{id}");
  if (!root) return;
  var table = JSON.parse(root.querySelector("script.table").textContent);
  var pattern = new RegExp("{pattern}");
  var kept = null;
  function text(s) {{ var d = document.createElement("div"); d.textContent = s; return d.innerHTML; }}
  function mark(selector, keys) {{
    root.querySelectorAll(selector).forEach(function (el) {{
      var on = keys.indexOf(Number(el.dataset.k)) >= 0;
      el.style.background = on ? "#fff3bf" : "";
      if (on && keys[0] === Number(el.dataset.k)) el.parentNode.scrollTop = el.offsetTop - el.parentNode.offsetTop - 30;
    }});
  }}
  function show(name) {{
    var f = table[name];
    if (!f) return;
    var attrs = Object.keys(f.attrs).map(function (k) {{ return k + "=" + f.attrs[k]; }}).join(", ");
    root.querySelector(".facts").innerHTML = "<b>" + text(name) + "</b>: " + text(f.op) +
      (attrs ? "[" + text(attrs) + "]" : "") + "\\n" + text(f.dtype + " " + JSON.stringify(f.shape)) +
      "  (" + text(f.phase) + (f.scope ? ", in " + text(f.scope) : "") + ")\\ninputs: " + text(f.inputs.join(", ")) +
      "\\nsource: " + text(f.source || "(made by the compiler)");
    mark(".pl", f.plan_lines);
    mark(".lg", [f.log_line]);
  }}
  root.querySelectorAll("g.node").forEach(function (g) {{
    var link = g.querySelector("a");
    var title = link && (link.getAttribute("xlink:title") || link.getAttribute("title"));
    var match = title && title.match(pattern);
    if (!match || !table[match[1]]) return;
    g.style.cursor = "pointer";
    g.addEventListener("mouseenter", function () {{ if (!kept) show(match[1]); }});
    g.addEventListener("click", function (event) {{ event.preventDefault(); kept = match[1]; show(kept); }});
  }});
}})();
</script>
</div>"""
