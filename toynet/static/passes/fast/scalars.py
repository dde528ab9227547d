"""Reassociate scalar factors: two multiplications by scalars on either side of linear ops become one.

A plain SGD step of a model trained on a sum of squares multiplies twice by a number: backward scales the
difference by 2 (the derivative of the square), and the optimizer scales each gradient by the learning
rate. Between the two lie only ops that are *linear* in the scaled value (a reshape, the weight
gradient's matrix product, the bias gradient's sum), and a linear op lets a scalar factor move through
it: ``lr * (x.T @ (2 * d)) = x.T @ ((2 * lr) * d)``. So this pass multiplies the numbers together once
(a 0-d op) and scales the difference by their product, and the per-parameter multiplications by the
learning rate disappear::

    %g  = mul(%d, 2.0)                          %s  = mul(2.0, %lr)            # 0-d
    %gw = linear_grad_weight(%g, %x)            %g  = mul(%d, %s)
    %gb = sum_to(%g)                   ->       %gw = linear_grad_weight(%g, %x)
    %uw = mul(%lr, %gw)                         %gb = sum_to(%g)
    %ub = mul(%lr, %gb)                         (the updates read %gw and %gb)

On the tutorial's poly fit that is one full-size multiplication fewer for each parameter (a tenth of the
compiled step). It is the algebra XLA's simplifier does for ``dot(s * a, b)``, and it is only done where it
is sure to be exact in algebra: every reader of every value between the two factors is one of those
linear ops or a multiplication by the very same scalar, and none of those values is an output or a
state update, whose numbers would change. In floating point the results differ in the last bits (the
products are rounded in another order), as any reassociation does; ``enable_pass("ReassociateScalars",
False)`` keeps the traced order.
"""

from __future__ import annotations

from ....ops import OPS
from ...ir import OP, Graph, Node, PassReport, graph_pass

#: Ops linear in some of their inputs (by position): scaling such an input by s scales the output by s (a
#: product is linear in each factor while the other stays: the path enters it once, see below).
_LINEAR_IN = {"reshape": (0,), "permute": (0,), "broadcast_to": (0,), "sum_to": (0,), "sum": (0,), "mean": (0,),
              "neg": (0,), "identity": (0,), "matmul": (0, 1), "linear_grad_weight": (0, 1), "mul": (0, 1)}


def _is_scalar(x: object) -> bool:
    """A 0-d value: a number literal or a 0-d floating-point node."""
    if isinstance(x, Node):
        return x.shape == () and x.dtype.is_floating_point
    return type(x) in (int, float)


def _scalar_factor(node: Node) -> tuple[object, Node] | None:
    """``(scalar, other input)`` of a multiplication of a non-scalar value by a scalar; else None."""
    if node.kind != OP or node.op.name != "mul" or len(node.inputs) != 2 or not node.shape:
        return None
    a, b = node.inputs
    if _is_scalar(a) and isinstance(b, Node) and b.shape == node.shape:
        return a, b
    if _is_scalar(b) and isinstance(a, Node) and a.shape == node.shape:
        return b, a
    return None


def _path_to_one_factor(start: Node, users: dict, roots: set) -> tuple[list[Node], Node | None]:
    """From ``start`` (a scaled value), the linear ops that carry it and the multiplications that end each
    path, if they all multiply by one and the same 0-d node: ``(terminal multiplications, that node)``;
    ``([], None)`` if any reader does something else, or a value on the way is an output or state update."""
    terminals: list[Node] = []
    factor = None
    carried = {id(start): start}   # the values scaled along with start
    stack = [start]
    while stack:
        value = stack.pop()
        if id(value) in roots or not users[id(value)]:
            return [], None
        for reader in users[id(value)]:
            if id(reader) in carried or reader in terminals:
                continue
            scaled = _scalar_factor(reader)
            if scaled is not None and scaled[1] is value and isinstance(scaled[0], Node):
                if factor is not None and scaled[0] is not factor:
                    return [], None
                factor = scaled[0]
                terminals.append(reader)
            elif reader.kind == OP and reader.dtype is value.dtype and any(
                    x is value for k, x in enumerate(reader.inputs) if k in _LINEAR_IN.get(reader.op.name, ())):
                carried[id(reader)] = reader
                stack.append(reader)
            else:
                return [], None
    # Linear in the scaled value means reading it once: a product of two carried values (x * reshape(x))
    # would scale by the square.
    for node in [*carried.values(), *terminals]:
        if node is not start and sum(1 for x in node.inputs if isinstance(x, Node) and id(x) in carried) != 1:
            return [], None
    return terminals, factor


@graph_pass("ReassociateScalars")
def reassociate_scalars(graph: Graph, report: PassReport) -> Graph:
    """Move a scalar factor across the ops linear in what it scales to meet another one: plain SGD's learning
    rate joins the loss gradient's factor 2 in one 0-d product (see the module docstring)."""
    users = graph.users()
    roots = {id(n) for n in graph.roots()}
    position = {id(n): k for k, n in enumerate(graph.nodes)}
    insert_before: dict[int, list[Node]] = {}
    replaced: dict[int, Node] = {}
    removed: set[int] = set()
    moved: set[int] = set()   # states, inputs and constants read earlier than where they were listed
    for node in graph.nodes:
        scaled = _scalar_factor(node)
        if scaled is None or id(node) in removed:
            continue
        first, value = scaled
        terminals, factor = _path_to_one_factor(node, users, roots)
        if not terminals or (factor.kind == OP and position[id(factor)] > position[id(node)]):
            continue   # (an op computing the second factor must run before the first multiplication)
        product = Node(graph.unique_name(f"{node.name}-scale"), OP, (), factor.dtype, node.device, op=OPS["mul"],
                       inputs=(first, factor), phase=node.phase, scope=node.scope, source=node.source)
        early = insert_before.setdefault(id(node), [])
        if factor.kind != OP and position[id(factor)] > position[id(node)] and id(factor) not in moved:
            early.append(factor)  # a learning rate, listed when the optimizer read it: it has no inputs
            moved.add(id(factor))
        early.append(product)
        node.inputs = (value, product)
        for t in terminals:
            replaced[id(t)] = t.inputs[0] if t.inputs[1] is factor else t.inputs[1]
            removed.add(id(t))
            report.removed.append(t.name)
        report.notes.append(f"{node.name} scales by {_name(first)} * {factor.name}: "
                            f"{len(terminals)} multiplication(s) by {factor.name} removed")
    if not replaced:
        return graph
    nodes = []
    for node in graph.nodes:
        if id(node) in removed or id(node) in moved:   # (a moved node is listed already)
            continue
        nodes.extend(insert_before.get(id(node), []))
        node.redirect_inputs(replaced)
        nodes.append(node)
    graph.nodes = nodes
    graph.redirect_roots(replaced)
    return graph


def _name(x: object) -> str:
    return x.name if isinstance(x, Node) else repr(x)
