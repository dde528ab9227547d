"""Graph-to-graph optimisation passes, each a small function you can run, test and watch on its own.

Every pass takes a :class:`~toynet.static.ir.Graph` and returns ``(new_graph, report)``; the input graph
is never modified, so a learner can print or draw the graph before and after any pass. The pipeline
:func:`optimize` runs them in order:

1. :func:`~.simplify.eliminate_dead_code`     drop ops nothing needs (values no output or update depends on)
2. :func:`~.simplify.fold_constants`          compute at compile time what depends only on constants
3. :func:`~.simplify.eliminate_common_subexpressions`  compute identical expressions once
4. :func:`~.simplify.eliminate_dead_code`     again: folding and merging leave unused nodes behind
5. :func:`~.fuse.fuse_elementwise`            chains of elementwise ops become one kernel
6. :func:`~.memory.plan_memory`               place values in one arena, sharing memory when lifetimes don't overlap

Two passes run only when asked for (they change how a step computes, not only how fast): with
``amp=True`` :func:`~.amp.auto_mixed_precision` first (float16 matrix products), and with checkpointed
module paths :func:`~.checkpoint.checkpoint_activations` after step 4 (recompute their activations in
backward instead of keeping them). The fast path adds its speed passes (:mod:`.fast`).

A pass's name is given once, where it is defined (``@graph_pass("EliminateDeadCode")``); :data:`PASSES` has
them all.
"""

from __future__ import annotations

from typing import Callable, Iterable

from ..ir import PASSES, Graph, Pass, PassReport, graph_pass, timed
from .amp import auto_mixed_precision
from .checkpoint import checkpoint_activations
from .fuse import fuse_elementwise
from .memory import plan_memory
from .simplify import eliminate_common_subexpressions, eliminate_dead_code, fold_constants

__all__ = ["PASSES", "Pass", "PassReport", "default_pipeline", "graph_pass", "optimize", "timed"]


def default_pipeline(amp: bool = False, checkpoint: tuple[str, ...] = ()) -> list[Pass]:
    """The passes :func:`optimize` runs, in order (``amp`` and ``checkpoint``: the optional passes, see the
    module's docstring)."""
    return ([auto_mixed_precision] if amp else []) + [
        eliminate_dead_code, fold_constants, eliminate_common_subexpressions, eliminate_dead_code,
    ] + ([checkpoint_activations(checkpoint)] if checkpoint else []) + [fuse_elementwise, plan_memory]


def optimize(graph: Graph, disabled: Iterable[str] = (), on_pass: Callable | None = None, *, amp: bool = False,
             checkpoint: tuple[str, ...] = ()) -> tuple[Graph, list[PassReport]]:
    """Run the pipeline, skipping the passes named in ``disabled``; return the result and the reports.
    ``on_pass(event, index, name, graph or report)`` is told as each pass starts and ends."""
    if set(disabled) - set(PASSES):
        raise ValueError(f"unknown pass name(s) {sorted(set(disabled) - set(PASSES))}; the passes are "
                         f"{', '.join(PASSES)}")
    on_pass, reports = on_pass or (lambda *event: None), []
    for index, run in enumerate(p for p in default_pipeline(amp, tuple(checkpoint)) if p.name not in disabled):
        on_pass("start", index, run.name, graph)
        graph, report = run(graph)
        reports.append(report)
        on_pass("end", index, run.name, report)
    return graph, reports

