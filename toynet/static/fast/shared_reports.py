"""Pass reports that share what a pass left unchanged.

Each pass rewrites a copy of the graph and its report keeps both, so that a learner can print or draw any pass's
before and after (``graph.passes``, ``flow.viz.draw_pass``). A transformer's step has about two thousand nodes
and a dozen passes, several of which find nothing to do on it (no BatchNorm to fold, no convolution to lay out):
keeping a copy for each is megabytes of Python objects that hold nothing new. Here a pass that changed nothing
gives back the graph it was handed, and its report shows the same graph before and after.
"""

from __future__ import annotations

import time
from typing import Callable

from ...mode import fast_replacement
from .. import ir
from ..ir import Graph, Node, PassReport


def same_graph(a: Graph, b: Graph) -> bool:
    """Whether ``b`` (a pass's rewritten copy of ``a``) is ``a`` again: the same nodes, in the same order, with the
    same ops, inputs, attributes, shapes and kernels, and the same outputs and updates."""
    if len(a.nodes) != len(b.nodes) or len(a.outputs) != len(b.outputs) or a.updates.keys() != b.updates.keys():
        return False
    position = {id(n): k for k, n in enumerate(a.nodes)}
    position.update({id(n): k for k, n in enumerate(b.nodes)})

    def where(x: object) -> object:
        return ("node", position.get(id(x))) if isinstance(x, Node) else ("value", type(x), x)
    for x, y in zip(a.nodes, b.nodes):
        if (x.name, x.kind, x.op, x.shape, x.dtype, x.device, x.kernel, x.phase) != \
                (y.name, y.kind, y.op, y.shape, y.dtype, y.device, y.kernel, y.phase) or x.value is not y.value or \
                x.attrs is not y.attrs and x.attrs != y.attrs or \
                [where(i) for i in x.inputs] != [where(i) for i in y.inputs]:
            return False
    return [position[id(n)] for n in a.outputs] == [position[id(n)] for n in b.outputs] and \
        [position[id(n)] for n in a.inputs] == [position[id(n)] for n in b.inputs] and \
        a.output_structure == b.output_structure and \
        all(position[id(a.updates[k])] == position[id(b.updates[k])] for k in a.updates) and \
        a.memory is b.memory


@fast_replacement(ir, "timed")
def timed(name: str, fn: Callable[[Graph, PassReport], Graph], graph: Graph) -> tuple[Graph, PassReport]:
    """The lesson's ``timed``, keeping the graph it was given when the pass changed nothing."""
    start, report = time.perf_counter(), PassReport(name, before=graph, after=graph)
    after = fn(graph.copy(), report)
    report.after = graph if same_graph(graph, after) else after
    report.seconds = time.perf_counter() - start
    return report.after, report
