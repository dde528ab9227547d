"""ChooseKernels: time the ways an op can be computed, on the real shapes, and keep the fastest.

Some ops can be computed several ways that give the same values: a sum over the leading axes is a NumPy
reduction, or a BLAS product with a vector of ones (four times faster on a 16384 x 96 array); a matrix
product is ``xp.matmul`` or ``xp.dot`` (the same BLAS call behind less dispatch). Which is faster depends
on the shapes, the dtype, the BLAS and the machine, so no fixed rule is right everywhere.

Eager mode meets every shape for the first time when it computes it, so it has to use one rule for all.
A static graph knows every shape before it runs. So this pass does what cuDNN's *benchmark mode* does
for convolutions: for each op whose rule in :data:`toynet.ops.fast.emit.KERNELS` lists candidates, it runs each
candidate on random arrays of the node's shapes and dtypes, checks that it gives the values the usual
code gives, times it, and records the fastest in ``node.kernel`` (the code generator writes that one).
A candidate must beat the usual code by :data:`MARGIN` to be chosen: a near tie would make the choice,
and so the last bits of a result, change from run to run with the machine's noise.

Convolutions have whole algorithms to choose from instead: a channels-last depthwise convolution runs
per kernel tap, over whole padded rows (:mod:`toynet.ops.fast.conv_rows`) or as one matrix per channel
(:mod:`toynet.ops.fast.conv_matrix`). Such an op lists them with an ``algorithms`` rule, its ``forward`` takes
the choice as the ``algorithm`` attribute, and this pass sets that attribute on the node, so the choice is
part of the graph (``graph.ir`` shows it).

Timings are kept for the session, per op, shapes, dtypes and attributes, so compiling again (a new
batch size back to an old one, another graph of the same model) does not time again. The pass's report
gives every timing (``graph.debug(3)``, ``graph.passes``). Turn it off with
``graph.config.enable_pass("ChooseKernels", False)`` for bit-for-bit the same results on every machine.

Kernels are timed on the CPU only: on a GPU, timing needs a device synchronisation per call, so a plan
for CUDA keeps every op's usual code.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable

from .... import backend
from ....ops.fast.emit import KERNELS, bind_ones
from ...ir import OP, Graph, Node, PassReport, graph_pass

#: A candidate replaces the usual code only when it is at least this many times faster.
MARGIN = 1.2
#: Each timing repeats calls until one batch of them takes this long (seconds), then takes the best of
#: REPEATS batches: the minimum is what the code costs without the machine's other work.
BATCH_SECONDS = 2e-4
REPEATS = 5
#: Ops whose usual code takes longer than this once (seconds) are not timed: compiling would take long,
#: and the call overhead a candidate saves is then a small part of the time anyway.
LONGEST = 0.05

#: The array module of the CPU (NumPy), where kernels are timed.
xp = backend.CPU.xp

_TIMINGS: dict[tuple, dict[str, float]] = {}   # (op, inputs, attributes, out) -> kernel -> seconds


@graph_pass("ChooseKernels")
def choose_kernels(graph: Graph, report: PassReport, measure: Callable[[Callable[[], Any]], float] | None = None
                   ) -> Graph:
    """Time the candidate kernels of each op on the real shapes, once, and keep the fastest if it wins by 1.2x,
    as cuDNN's benchmark mode does.

    ``measure(fn)``: seconds per call of ``fn``; the default times it, a test may pass its own."""
    if any(n.device is not backend.CPU and n.device != backend.CPU for n in graph.nodes if n.kind == OP):
        report.notes.append("kernels are timed on the CPU only: kept every op's usual code")
        return graph
    timed_ops = chosen = 0
    for n in graph.nodes:
        if n.kind != OP or (n.op.name not in KERNELS and not hasattr(n.op, "algorithms")):
            continue
        trial = _Trial(n)
        candidates = trial.candidates()
        if len(candidates) < 2:
            continue
        times = trial.times(candidates, measure)
        if times is None:
            continue
        timed_ops += 1
        usual = next(iter(candidates))
        fastest = min(times, key=times.get)
        kept = usual
        if fastest != usual and times[usual] >= MARGIN * times[fastest]:
            kept = fastest
            chosen += 1
            if trial.algorithms:
                n.attrs = dict(n.attrs, algorithm=fastest)
            else:
                n.kernel = fastest
        report.kernels[n.name] = _describe(kept, times)
    report.notes.append(f"timed {timed_ops} ops, chose another kernel for {chosen}")
    return graph


def _describe(kept: str, times: dict[str, float]) -> str:
    others = ", ".join(f"{name} {_us(t)}" for name, t in times.items() if name != kept)
    return f"{kept} {_us(times[kept])}" + (f" ({others})" if others else "")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


class _OutName(str):
    """The name of the output buffer in the trial's code, as ``emit`` rules receive one (``reshaped``)."""

    def __new__(cls, name: str, namespace: dict) -> "_OutName":
        self = super().__new__(cls, name)
        self.namespace = namespace
        return self

    def reshaped(self, shape: tuple) -> str:
        view = f"{self}_as{len(self.namespace)}"
        self.namespace[view] = self.namespace[str(self)].reshape(shape)
        return view


class _Trial:
    """One op node's candidate kernels, run on random arrays of its inputs' shapes and dtypes."""

    def __init__(self, node: Node):
        self.node = node
        self.namespace: dict[str, Any] = {"xp": xp}
        self.args: list[str] = []
        for k, x in enumerate(node.inputs):
            self.args.append(f"a{k}")
            self.namespace[f"a{k}"] = _random(x.shape, x.dtype, k) if isinstance(x, Node) else x
        self.out = None
        if node.op.supports_out:
            self.namespace["out"] = xp.empty(node.shape, dtype=node.dtype.array_dtype)
            self.out = _OutName("out", self.namespace)
        #: The op chooses among whole algorithms (an attribute of its forward), not among expressions.
        self.algorithms = hasattr(node.op, "algorithms")  # (the convolutions of toynet.ops.fast.conv_fused)

    def candidates(self) -> dict[str, str]:
        if self.algorithms:
            return self._algorithm_calls()
        found = KERNELS[self.node.op.name](self.args, self.node.inputs, self.out, **self.node.attrs)
        found = {name: code for name, code in found.items() if code is not None}
        for code in found.values():
            bind_ones(code, self.namespace, xp)
        return found

    def _algorithm_calls(self) -> dict[str, str]:
        """A call of the op's forward per algorithm it can use, the usual one first."""
        node = self.node
        names = node.op.algorithms(*node.inputs, **node.attrs)
        attrs = {k: v for k, v in node.attrs.items() if k != "algorithm"}
        self.namespace["forward"] = functools.partial(node.op.forward, **attrs)
        out = ", out=out" if self.out is not None else ""
        return {name: f"forward(xp, {', '.join(self.args)}, algorithm={name!r}{out})" for name in names}

    def key(self) -> tuple:
        inputs = tuple((x.shape, x.dtype.name) if isinstance(x, Node) else x for x in self.node.inputs)
        return (self.node.op.name, inputs, repr(sorted(self.node.attrs.items())), self.out is not None)

    def times(self, candidates: dict[str, str], measure: Callable | None) -> dict[str, float] | None:
        """Seconds per call of each candidate that gives the usual code's values (None: not timed)."""
        key = self.key()
        if measure is None and key in _TIMINGS:
            return _TIMINGS[key]
        calls = {name: eval(f"lambda: {code}", self.namespace) for name, code in candidates.items()}  # noqa: S307
        expected = None
        start = time.perf_counter()
        for name, call in list(calls.items()):
            value = xp.array(call())   # (a copy: the next candidate writes the same buffer)
            if expected is None:
                expected = value
                if time.perf_counter() - start > LONGEST:
                    return None
            elif not _agrees(value, expected):
                del calls[name]   # a candidate that does not fit these inputs after all: never chosen
        if len(calls) < 2:
            return None           # nothing left to choose from
        times = (_measure_interleaved(calls) if measure is None else
                 {name: measure(call) for name, call in calls.items()})
        if measure is None:
            if len(_TIMINGS) >= 4096:
                _TIMINGS.clear()
            _TIMINGS[key] = times
        return times


def _random(shape: tuple, dtype: backend.DType, seed: int) -> Any:
    """Data to time on: floats from 0.5 to 1.5 (the values do not change the time; NaNs and denormals would,
    and a BatchNorm variance must be positive)."""
    array_dtype = dtype.array_dtype
    if dtype.is_floating_point:
        return (xp.random.default_rng(seed).random(shape) + 0.5).astype(array_dtype)
    return xp.zeros(shape, dtype=array_dtype)


def _agrees(value: Any, expected: Any) -> bool:
    if value.shape != expected.shape or value.dtype != expected.dtype:
        return False
    scale = float(xp.max(xp.abs(expected))) if expected.size else 0.0
    return bool(xp.all(xp.abs(value.astype(xp.float64) - expected) <= 1e-4 * max(scale, 1e-30)))


def _measure_interleaved(calls: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Seconds per call of each: batches grown until one takes BATCH_SECONDS, then REPEATS rounds in which
    every candidate runs one batch (side by side, so a busy moment of the machine hits them all), the best
    batch of each."""
    numbers = {}
    for name, call in calls.items():
        number = 1
        while True:
            start = time.perf_counter()
            for _ in range(number):
                call()
            if time.perf_counter() - start >= BATCH_SECONDS or number >= 1 << 14:
                break
            number *= 4
        numbers[name] = number
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(REPEATS):
        for name, call in calls.items():
            number = numbers[name]
            start = time.perf_counter()
            for _ in range(number):
                call()
            best[name] = min(best[name], (time.perf_counter() - start) / number)
    return best
