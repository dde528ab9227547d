"""Graph-to-graph optimisation passes, each a small function you can run, test and watch on its own.

Every pass takes a :class:`~toynet.static.ir.Graph` and returns ``(new_graph, report)``; the input graph
is never modified, so a learner can print or draw the graph before and after any pass. The pipeline
:func:`optimize` runs them in order:

1. :func:`~.dce.eliminate_dead_code`       drop ops nothing needs (values no output/update depends on)
2. :func:`~.fold.fold_constants`            compute at compile time what depends only on constants
3. :func:`~.cse.eliminate_common_subexpressions`  compute identical expressions once
4. :func:`~.dce.eliminate_dead_code`       again: folding and merging leave unused nodes behind
5. :func:`~.scalars.reassociate_scalars`    two scalar factors across linear ops become one (2 * lr)
6. :func:`~.fold_batch_norm.fold_batch_norm`  conv -> BatchNorm (eval) -> relu6 becomes one conv
7. :func:`~.recompute.recompute_activations`  backward recomputes relu6(batch_norm(x)) instead of keeping it
8. :func:`~.layout.plan_layout`             1x1/depthwise convs, BatchNorm and what lies between run NHWC
9. :func:`~.fuse.fuse_elementwise`          chains of elementwise ops become one kernel
10. :func:`~.kernels.choose_kernels`        time the ways some ops can run, on the real shapes; keep the fastest
11. :func:`~.memory.plan_memory`            place values in one arena, sharing memory when lifetimes don't overlap

Two passes run only when asked for (they change how a step computes, not only how fast): with
``amp=True`` :func:`~.amp.auto_mixed_precision` first (float16 matrix products), and with checkpointed
module paths :func:`~.checkpoint.checkpoint_activations` after step 4 (recompute their activations in
backward instead of keeping them).
"""

from __future__ import annotations

from typing import Callable, Iterable

from ..ir import Graph
from .amp import auto_mixed_precision
from .checkpoint import checkpoint_activations
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .fold import fold_constants
from .fold_batch_norm import fold_batch_norm
from .fuse import fuse_elementwise
from .kernels import choose_kernels
from .layout import plan_layout
from .memory import plan_memory
from .recompute import recompute_activations
from .report import Pass, PassReport, timed
from .scalars import reassociate_scalars

__all__ = ["PASS_NAMES", "Pass", "PassReport", "default_pipeline", "optimize", "timed"]


def default_pipeline(amp: bool = False, checkpoint: tuple[str, ...] = ()) -> list[tuple[str, Pass]]:
    """The passes :func:`optimize` runs, in order, each with its name (``amp`` and ``checkpoint``: the
    optional passes, see the module's docstring)."""
    return ([("AutoMixedPrecision", auto_mixed_precision)] if amp else []) + [
        ("EliminateDeadCode", eliminate_dead_code),
        ("FoldConstants", fold_constants),
        ("EliminateCommonSubexpressions", eliminate_common_subexpressions),
        ("EliminateDeadCode", eliminate_dead_code),
    ] + ([("CheckpointActivations", checkpoint_activations(checkpoint))] if checkpoint else []) + [
        ("ReassociateScalars", reassociate_scalars),
        ("FoldBatchNorm", fold_batch_norm),
        ("RecomputeActivations", recompute_activations),
        ("ChannelsLast", plan_layout),
        ("FuseElementwise", fuse_elementwise),
        ("ChooseKernels", choose_kernels),
        ("PlanMemory", plan_memory),
    ]


PASS_NAMES = ("EliminateDeadCode", "FoldConstants", "EliminateCommonSubexpressions", "ReassociateScalars",
              "FoldBatchNorm", "RecomputeActivations", "ChannelsLast", "FuseElementwise", "ChooseKernels",
              "PlanMemory")


def optimize(graph: Graph, disabled: Iterable[str] = (), on_pass: Callable | None = None, *, amp: bool = False,
             checkpoint: tuple[str, ...] = ()) -> tuple[Graph, list[PassReport]]:
    """Run the pipeline, skipping the passes named in ``disabled``; return the result and the reports.
    ``amp``: float16 matrix products; ``checkpoint``: module paths whose activations backward recomputes."""
    disabled = set(disabled)
    unknown = disabled - set(PASS_NAMES)
    if unknown:
        raise ValueError(f"unknown pass name(s) {sorted(unknown)}; the passes are {', '.join(PASS_NAMES)}")
    reports = []
    for index, (name, run) in enumerate(default_pipeline(amp, tuple(checkpoint))):
        if name in disabled:
            continue
        if on_pass is not None:
            on_pass("start", index, name, graph)
        graph, report = run(graph)
        reports.append(report)
        if on_pass is not None:
            on_pass("end", index, name, report)
    return graph, reports
