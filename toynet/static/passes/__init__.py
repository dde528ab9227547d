"""Graph-to-graph optimisation passes, each a small function you can run, test and watch on its own.

Every pass takes a :class:`~toynet.static.ir.Graph` and returns ``(new_graph, report)``; the input graph
is never modified, so a learner can print or draw the graph before and after any pass. The pipeline
:func:`optimize` runs them in order:

1. :func:`~.dce.eliminate_dead_code`       drop ops nothing needs (values no output/update depends on)
2. :func:`~.fold.fold_constants`            compute at compile time what depends only on constants
3. :func:`~.cse.eliminate_common_subexpressions`  compute identical expressions once
4. :func:`~.dce.eliminate_dead_code`       again: folding and merging leave unused nodes behind
5. :func:`~.fuse.fuse_elementwise`          chains of elementwise ops become one kernel
6. :func:`~.memory.plan_memory`             give values buffers, reused once their last reader ran
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..ir import Graph


@dataclass
class PassReport:
    """What one pass did: the graphs before and after, and which nodes it removed, folded, merged or fused."""

    name: str
    before: Graph
    after: Graph
    removed: list[str] = field(default_factory=list)
    folded: list[str] = field(default_factory=list)
    merged: dict[str, str] = field(default_factory=dict)       # removed duplicate -> the node kept
    fused: dict[str, list[str]] = field(default_factory=dict)  # new fused node -> the nodes it replaced
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ops_before(self) -> int:
        return self.before.count_ops()

    @property
    def ops_after(self) -> int:
        return self.after.count_ops()

    def summary(self) -> str:
        parts = [f"{self.name}: {self.ops_before} -> {self.ops_after} ops"]
        if self.removed:
            parts.append(f"removed {len(self.removed)}")
        if self.folded:
            parts.append(f"folded {len(self.folded)}")
        if self.merged:
            parts.append(f"merged {len(self.merged)}")
        if self.fused:
            parts.append(f"fused {sum(len(v) for v in self.fused.values())} ops into {len(self.fused)} kernels")
        parts.extend(self.notes)
        return ", ".join(parts) + f" ({self.seconds * 1000:.1f} ms)"

    def details(self) -> str:
        """Every change, one a line (what ``graph.debug(3)`` prints with the before/after texts)."""
        lines = [self.summary()]
        lines += [f"  removed  %{n}" for n in self.removed]
        lines += [f"  folded   %{n} into a constant" for n in self.folded]
        lines += [f"  merged   %{a} into %{b}" for a, b in self.merged.items()]
        lines += [f"  fused    %{k} <- " + ", ".join(f"%{n}" for n in v) for k, v in self.fused.items()]
        return "\n".join(lines)


Pass = Callable[[Graph], "tuple[Graph, PassReport]"]


def timed(name: str, fn: Callable[[Graph, PassReport], Graph], graph: Graph) -> tuple[Graph, PassReport]:
    """Run ``fn`` on a copy of ``graph``, filling and timing a report."""
    start = time.perf_counter()
    report = PassReport(name, before=graph, after=graph)
    after = fn(graph.copy(), report)
    report.after = after
    report.seconds = time.perf_counter() - start
    return after, report


def default_pipeline() -> list[tuple[str, Pass]]:
    from .cse import eliminate_common_subexpressions
    from .dce import eliminate_dead_code
    from .fold import fold_constants
    from .fuse import fuse_elementwise
    from .memory import plan_memory
    return [
        ("EliminateDeadCode", eliminate_dead_code),
        ("FoldConstants", fold_constants),
        ("EliminateCommonSubexpressions", eliminate_common_subexpressions),
        ("EliminateDeadCode", eliminate_dead_code),
        ("FuseElementwise", fuse_elementwise),
        ("PlanMemory", plan_memory),
    ]


PASS_NAMES = ("EliminateDeadCode", "FoldConstants", "EliminateCommonSubexpressions", "FuseElementwise",
              "PlanMemory")


def optimize(graph: Graph, disabled: Iterable[str] = (), on_pass: Callable | None = None
             ) -> tuple[Graph, list[PassReport]]:
    """Run the pipeline, skipping the passes named in ``disabled``; return the result and the reports."""
    disabled = set(disabled)
    unknown = disabled - set(PASS_NAMES)
    if unknown:
        raise ValueError(f"unknown pass name(s) {sorted(unknown)}; the passes are {', '.join(PASS_NAMES)}")
    reports = []
    for index, (name, run) in enumerate(default_pipeline()):
        if name in disabled:
            continue
        if on_pass is not None:
            on_pass("start", index, name, graph)
        graph, report = run(graph)
        reports.append(report)
        if on_pass is not None:
            on_pass("end", index, name, report)
    return graph, reports
