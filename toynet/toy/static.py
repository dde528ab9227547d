"""A scalar static graph (define-and-run) in about a hundred lines: the second design to read.

Here building and running are two separate steps. ``Add(Mul(w, x), b)`` computes nothing: it only
creates :class:`Node` objects, links each to its parents *and* children, and registers them in a
:class:`Graph`. Values appear when the graph is run (``node.forward()``), gradients when it is run
backwards (``graph.backward()``). Because the whole graph exists before any number is computed, a real
framework can optimise it first (fold constants, fuse ops); the price is that you cannot look at a
value while you describe the computation.

Fitting ``y = w * x + b``::

    x, y = Variable(1, requires_grad=False), Variable(2, requires_grad=False)
    w, b = Variable(2), Variable(3)
    y_hat = Add(Mul(w, x), b)
    loss = Mul(Sub(y_hat, y), Sub(y_hat, y))   # nothing computed yet
    optimizer = SGD(default_graph, loss, 0.01)
    for _ in range(100):
        optimizer.zero_grad()
        optimizer.get_grad()                   # run forward, then backward
        optimizer.step()

Each node's backward waits until all of its children have run theirs, so a node used twice (``y_hat``
above) passes on its gradient once, complete: the static walk does not double-count.

Limitation kept on purpose: every node joins the one module-level ``default_graph``, so two models
built in one session share a graph, and an optimiser on one of them sees the other's variables (which
get no gradient: :meth:`SGD.step` stops with an error). Pass ``graph=Graph()`` to a node (its
children inherit it) to keep models apart.
"""

from __future__ import annotations


class Graph:
    """The list of every node built, in the order they were created."""

    def __init__(self):
        self.nodes: list[Node] = []

    def add_nodes(self, node: Node) -> None:
        self.nodes.append(node)

    def zero_grad(self) -> None:
        """Clear gradients and mark every node as not yet run, ready for the next step."""
        for node in self.nodes:
            node.zero_grad()

    def backward(self) -> None:
        """Run backward on every node; each node first makes sure its children have run theirs."""
        for node in self.nodes:
            node.backward()


default_graph = Graph()


class Node:
    """One value of the computation. Subclasses say how to compute it and how to differentiate it."""

    def __init__(self, *parents: Node, graph: Graph | None = None):
        self.value = None
        self.grad = None
        self.parents = parents
        self.children: list[Node] = []
        # An explicit graph wins; otherwise join the parents' graph; a node without parents joins the default.
        self.graph = graph or (parents[0].graph if parents else default_graph)
        if any(p.graph is not self.graph for p in parents):
            raise ValueError(f"{type(self).__name__}: all parents must belong to the same Graph as this node")
        self.is_end_node = False           # True for the loss: its gradient is d(loss)/d(loss) = 1
        self.waiting_for_forward = True    # value not computed since the last zero_grad
        self.waiting_for_backward = True   # gradient not yet passed on since the last zero_grad
        for p in parents:
            p.children.append(self)
        self.graph.add_nodes(self)

    def forward(self) -> None:
        """Compute this node's value, first computing any parent that has not been computed yet."""
        for p in self.parents:
            if p.waiting_for_forward:
                p.forward()
        if self.waiting_for_forward:
            self.forward_single()
            self.waiting_for_forward = False

    def backward(self) -> None:
        """Pass this node's gradient to its parents, after every child has passed its share to us."""
        for c in self.children:
            if c.waiting_for_backward:
                c.backward()
        if self.waiting_for_backward:
            if self.is_end_node:
                self.grad = 1
            if self.grad is not None:      # None: this node does not lead to the end node
                self.backward_single()
            self.waiting_for_backward = False

    def forward_single(self) -> None:
        """Compute ``self.value`` from the parents' values (they are ready)."""

    def backward_single(self) -> None:
        """Add ``self.grad * d(self)/d(parent)`` to each parent's gradient (``self.grad`` is complete)."""

    def _give(self, parent: Node, share: float) -> None:
        parent.grad = (parent.grad or 0) + share

    def zero_grad(self) -> None:
        self.grad = None
        self.waiting_for_forward = True
        self.waiting_for_backward = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(value={self.value}, grad={self.grad})"


class Variable(Node):
    """A leaf: an input (``requires_grad=False``) or a weight the optimiser updates."""

    def __init__(self, data: float, requires_grad: bool = True, graph: Graph | None = None):
        super().__init__(graph=graph)
        self.value = data
        self.requires_grad = requires_grad


class Add(Node):
    def forward_single(self) -> None:
        self.value = self.parents[0].value + self.parents[1].value

    def backward_single(self) -> None:    # d(a+b)/da = 1, d(a+b)/db = 1
        self._give(self.parents[0], self.grad)
        self._give(self.parents[1], self.grad)


class Sub(Node):
    def forward_single(self) -> None:
        self.value = self.parents[0].value - self.parents[1].value

    def backward_single(self) -> None:    # d(a-b)/da = 1, d(a-b)/db = -1
        self._give(self.parents[0], self.grad)
        self._give(self.parents[1], -self.grad)


class Mul(Node):
    def forward_single(self) -> None:
        self.value = self.parents[0].value * self.parents[1].value

    def backward_single(self) -> None:    # d(a*b)/da = b, d(a*b)/db = a
        self._give(self.parents[0], self.grad * self.parents[1].value)
        self._give(self.parents[1], self.grad * self.parents[0].value)


class SGD:
    """Plain gradient descent on every trainable :class:`Variable` of ``graph``, minimising ``target``."""

    def __init__(self, graph: Graph, target: Node, learning_rate: float):
        self.graph = graph
        self.target = target
        self.lr = learning_rate
        target.is_end_node = True

    def zero_grad(self) -> None:
        self.graph.zero_grad()

    def get_grad(self) -> None:
        """Run the graph forward (computing ``target``), then backward (filling every gradient)."""
        self.target.forward()
        self.graph.backward()

    def step(self) -> None:
        # Only trainable variables move. (The seed article also subtracted lr * grad from every op
        # node, loss included; harmless for training since forward recomputes them, but the printed
        # loss then was not the loss.)
        for node in self.graph.nodes:
            if isinstance(node, Variable) and node.requires_grad:
                if node.grad is None:
                    raise RuntimeError(
                        f"{node!r} got no gradient: it does not lead to the target. Probably it belongs to "
                        "another model built in the same Graph; build each model in its own Graph(graph=...)")
                node.value -= self.lr * node.grad
