"""Activation checkpointing: trade compute for memory by recomputing a block's activations in backward.

A training step keeps every forward value that backward reads (a ReLU's output, a Linear's input)
alive from the moment it is made until its gradient op runs, so at the turn from forward to backward
nearly every activation of the model is held at once: that moment sets the step's peak memory.

For a *checkpointed* block (a module path such as ``"model.block"``, chosen with
``module.to(nn.graph.GraphModule).activation_checkpointing = True``) this pass rewrites the graph so
that the block's own backward ops no longer read its forward values. Instead, right before the first
of them runs, a copy of the block's forward ops is inserted (phase ``backward``, named ``...-recompute``)
and the backward ops read the copies. The original forward values then have no reader after forward,
so memory planning (which runs later) frees their buffers straight away; the copies live only while
the block's gradients are computed. The block's inputs and the values other modules read stay as they
were: only what the block made and only its own backward are touched.

Two kinds of ops are never recomputed: random ones (a dropout mask drawn again would differ, and the
gradient would no longer match the forward that ran) and those outside the block. Their values are
read from the forward pass as before. Everything else is pure, so the recomputed values are the very
numbers forward computed, and the step's results do not change: only where memory is spent.

The pass runs after common-subexpression elimination, which would otherwise merge each copy back
into its original.
"""

from __future__ import annotations

from typing import Iterable

from ..ir import BACKWARD, FORWARD, OP, Graph, Node, PassReport, graph_pass


def in_block(scope: str, block: str) -> bool:
    """Was a node with this ``scope`` traced inside module path ``block`` (or one of its submodules)?"""
    return scope == block or scope.startswith(block + ".")


def _recompute_block(graph: Graph, block: str, report: PassReport) -> None:
    forward = {id(n): n for n in graph.nodes if n.kind == OP and n.phase == FORWARD and in_block(n.scope, block)}
    readers = [(i, n) for i, n in enumerate(graph.nodes) if n.kind == OP and n.phase == BACKWARD
               and in_block(n.scope, block) and any(id(x) in forward for x in n.input_nodes)]
    if not readers:
        report.notes.append(f"{block}: no activation read by backward, nothing to recompute")
        return
    # Which forward values the copies must recompute: those the block's backward reads, and the values of
    # the block that those are made from. A random op stops the walk: its value is read, never drawn again.
    needed: set[int] = set()
    stack = [x for _, n in readers for x in n.input_nodes if id(x) in forward]
    while stack:
        node = stack.pop()
        if id(node) in needed or node.op.random:
            continue
        needed.add(id(node))
        stack.extend(x for x in node.input_nodes if id(x) in forward)
    copies: dict[int, Node] = {}
    made: list[Node] = []
    for n in graph.nodes:  # in graph order, so each copy comes after the copies it reads
        if id(n) not in needed:
            continue
        copy = Node(graph.unique_name(f"{n.name}-recompute"), OP, n.shape, n.dtype, n.device, op=n.op,
                    inputs=tuple(copies.get(id(x), x) if isinstance(x, Node) else x for x in n.inputs),
                    attrs=n.attrs, phase=BACKWARD, scope=n.scope, source=f"recompute of {n.name}")
        copies[id(n)] = copy
        made.append(copy)
    for _, n in readers:
        n.redirect_inputs(copies)
    first = readers[0][0]
    graph.nodes[first:first] = made
    kept = sorted({x.name for _, n in readers for x in n.input_nodes if id(x) in forward})
    report.notes.append(f"{block}: {len(made)} ops recomputed in backward"
                        + (f", {len(kept)} random value{'s' if len(kept) > 1 else ''} kept" if kept else "")
                        + f" ({', '.join('%' + c.name for c in made)})")


def live_bytes(graph: Graph) -> list[int]:
    """The bytes of op results alive while each op runs (from the op that makes a value to its last
    reader; outputs and state updates to the end): what a step needs at least, whatever the memory
    planner makes of it. Its maximum is the step's peak, which checkpointing lowers."""
    ops = [n for n in graph.nodes if n.kind == OP]
    position = {id(n): i for i, n in enumerate(ops)}
    last = {id(n): i for i, n in enumerate(ops)}
    for i, n in enumerate(ops):
        for x in n.input_nodes:
            if id(x) in position:
                last[id(x)] = i
    for root in graph.roots():
        last[id(root)] = len(ops) - 1
    change = [0] * (len(ops) + 1)
    for n in ops:
        size = n.dtype.array_dtype.itemsize
        for d in n.shape:
            size *= d
        change[position[id(n)]] += size
        change[last[id(n)] + 1] -= size
    total, profile = 0, []
    for delta in change[:-1]:
        total += delta
        profile.append(total)
    return profile


def checkpoint_activations(blocks: Iterable[str]):
    """The pass for these checkpointed module paths: ``graph -> (graph, report)``."""
    blocks = tuple(blocks)

    @graph_pass("CheckpointActivations")
    def checkpoint_activations(graph: Graph, report: PassReport) -> Graph:
        before = max(live_bytes(graph), default=0)
        for block in blocks:
            _recompute_block(graph, block, report)
        after = max(live_bytes(graph), default=0)
        report.notes.append(f"peak of live values {before / 1e6:.3f} MB -> {after / 1e6:.3f} MB")
        return graph
    return checkpoint_activations
