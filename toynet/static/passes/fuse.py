"""Elementwise fusion: a chain of elementwise ops becomes one kernel that works in one buffer.

``loss = ((pred - y) * 2).sum()``: unfused, ``pred - y`` and ``* 2`` each allocate an array the size of
the batch and make a pass over memory. Fused, the chain is one node, and its kernel runs the steps
in place in a single buffer: no temporaries, and (on a GPU, where a fused kernel is one CUDA kernel)
one pass over memory instead of two.

A node joins its producer's chain when the producer is elementwise, has no other reader, is not an
output, and has the same shape and dtype (so every step can write into the same buffer). The fused
node keeps the tail's name, so outputs and updates still find it.

A chain is a *program*: a list of steps ``{"op": name, "args": [...], "attrs": {...}}`` where each arg is
``["in", k]`` (the fused node's k-th input), ``["prev"]`` (the previous step's result) or ``["lit", x]``.
It is plain data, so a fused graph saves to JSON like any other. :func:`_fuse` writes programs;
:func:`step_args` is the one reader of their arguments (for the kernel, its shape rule and the compiler).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from ... import backend
from ...ops import OPS, Op, register
from ..ir import OP, Graph, Node, PassReport, graph_pass


@register
class FusedElementwise(Op):
    """Several elementwise ops run as one kernel, each step in place in the output buffer."""

    name = "fused_elementwise"
    elementwise = True

    def forward(self, xp, *inputs, program=(), out=None, scratch=None):
        """Run the steps, each writing into one buffer: ``out`` (before the last step ``scratch``, if given), or
        without it the array the first step made (every step has the same shape). A 0-d result of NumPy is a
        scalar, which no step could write into: ``asarray`` makes it an array."""
        prev = None
        for index, step in enumerate(program):
            target = out if index == len(program) - 1 or scratch is None else scratch
            target = prev if target is None else target
            prev = xp.asarray(OPS[step["op"]].forward(xp, *step_args(step, inputs, prev), out=target, **step["attrs"]))
        return prev

    def infer(self, *inputs, program=()):
        prev = None
        for step in program:
            op = OPS[step["op"]]
            args = step_args(step, inputs, prev)
            shape, dtype = op.infer(*args, **step["attrs"])
            prev = _Meta(shape, dtype)
        return prev.shape, prev.dtype

    def describe(self, program=(), **attrs):
        return "fused[" + " > ".join(step["op"] for step in program) + "]"

    def vjp(self, grad, inputs, output, **attrs):
        raise NotImplementedError("fused kernels are made after differentiation and have no vjp")


class _Meta:
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype


def step_args(step: dict, inputs: Sequence, prev: Any, literal: Callable[[Any], Any] = lambda value: value) -> list:
    """One step's arguments, decoded: ``["in", k]`` is ``inputs[k]``, ``["prev"]`` is ``prev`` (the previous
    step's result) and ``["lit", x]`` is ``literal(x)``.

    The one reader of the format: the kernel passes arrays, the shape rule shapes, and the compiler
    the names in its generated code (with ``literal`` turning a number into source).
    """
    return [prev if arg[0] == "prev" else inputs[arg[1]] if arg[0] == "in" else literal(arg[1]) for arg in step["args"]]


def reads_of_input(program: list, k: int) -> list[int]:
    """The steps of ``program`` that read the fused node's input ``k``."""
    return [i for i, step in enumerate(program) if any(a[0] == "in" and a[1] == k for a in step["args"])]


def _fusable(node: Node) -> bool:
    return node.kind == OP and node.op.elementwise and node.op is not FusedElementwise and node.dtype.is_floating_point


def _chains(graph: Graph) -> dict[int, list[Node]]:
    """The chains to fuse, by id of their tail: walking in order, a node joins its producer's chain when
    the producer is fusable, has the same shape and dtype, is no output or update, and has no other
    reader (its value is then never needed outside the kernel)."""
    users = graph.users()
    roots = {id(n) for n in graph.roots()}
    chain_of: dict[int, list[Node]] = {}
    for node in graph.nodes:
        if not _fusable(node):
            continue
        for producer in dict.fromkeys(node.input_nodes):  # unique, in order
            if (_fusable(producer) and (producer.shape, producer.dtype) == (node.shape, node.dtype)
                    and id(producer) not in roots and all(u is node for u in users[id(producer)])):
                chain = chain_of.pop(id(producer), [producer])
                chain_of[id(node)] = chain + [node]
                break
    return chain_of


@graph_pass("FuseElementwise")
def fuse_elementwise(graph: Graph, report: PassReport) -> Graph:
    """Chains of elementwise ops become single :class:`FusedElementwise` nodes, each at its tail's place."""
    chain_of = _chains(graph)
    members = {id(n) for chain in chain_of.values() for n in chain[:-1]}

    def fuse(node: Node) -> Node | None:
        if id(node) in members:
            return None  # read only by the next member of its chain: it lives on inside the kernel
        chain = chain_of.get(id(node))
        if chain is None:
            return node
        fused = _fuse(chain)
        report.fused[fused.name] = [n.name for n in chain]
        return fused
    graph.rewrite(fuse)
    return graph


def _fuse(chain: list[Node]) -> Node:
    """One node that runs ``chain`` (each node reads the previous one, its only reader) as a program: its inputs
    are what the chain reads from outside it, in order."""
    members = {id(n) for n in chain}   # a member is read by the next one only: as "prev"
    outside = {id(x): x for n in chain for x in n.input_nodes if id(x) not in members}   # (in order, once each)
    inputs, index = list(outside.values()), {key: k for k, key in enumerate(outside)}

    def arg(x: Any) -> list:
        if not isinstance(x, Node):
            return ["lit", backend.host_scalar(x)]
        return ["prev"] if id(x) in members else ["in", index[id(x)]]

    program = [{"op": n.op.name, "args": [arg(x) for x in n.inputs], "attrs": dict(n.attrs)} for n in chain]
    return replace(chain[-1], op=FusedElementwise, inputs=tuple(inputs), attrs={"program": program}, kernel="")
