"""What a pass reports (:class:`PassReport`), and :func:`timed`, which runs a pass on a copy and fills
its report. Every pass module imports this; the package imports the passes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

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
    kernels: dict[str, str] = field(default_factory=dict)      # node -> the kernel chosen, and the timings
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
        lines += [f"  kernel   %{k}: {v}" for k, v in self.kernels.items()]
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


def format_bytes(nbytes: int) -> str:
    """A size the way the reports print it: ``1.2 MB``, ``0.3 kB``, ``12 B``."""
    if nbytes >= 1e6:
        return f"{nbytes / 1e6:.1f} MB"
    return f"{nbytes / 1e3:.1f} kB" if nbytes >= 1e3 else f"{nbytes} B"
