"""How a compiled plan's code reads (:mod:`toynet.static.compile`): what each kind of name in it means, the
phase titles, and the comment text above each op, made safe to put in a comment whatever a name holds."""

from __future__ import annotations

from .ir import BACKWARD, FORWARD, OPTIMIZER, Node

#: What the generated code's names mean, for the header of ``plan.source``: (pattern, explanation).
NAMES = [
    (r"v_in\d+", "v_in0, v_in1...  the arrays passed to this call (inputs[k])"),
    (r"s\d+", "s0, s1...        the state arrays (parameters, buffers, optimizer slots, train step) from\n"
              "                 states[k]; only the commit at the end writes them"),
    (r"c\d+", "c0, c1...        constants: values fixed when compiling (folded, or eager tensors the build read)"),
    (r"lit\d+", "lit0...          numbers made once: 0-d arrays of the dtype an op computes in (NumPy converts\n"
                "                 a Python number on every call), or what Python source cannot spell (inf, nan)"),
    (r"b\d+_\d+", "b2_5...          buffer 2 of the memory plan seen with one shape and dtype: allocated once,\n"
                  "                 reused by every call (b2_5_as9: the same memory seen with another shape)"),
    (r"k_\w+", "k_4, k_v9_1...   an op's forward with its attributes bound, for ops with no one-line form"),
    (r"v\d+", "v0, v1...        the value of op 0, 1...; `del` drops one not in a buffer after its last reader"),
    (r"v\d+_t", "v9_t             a fused kernel's intermediate result, between its steps"),
]

PHASE_TITLES = {
    FORWARD: "forward: what build() computes from the inputs",
    BACKWARD: "backward: the gradients, each op's vjp rule",
    OPTIMIZER: "optimizer: the update of each parameter and its optimizer state",
}


def as_comment(text: str) -> str:
    """Names and source lines as comment text: one printable line, whatever they hold (a saved graph's
    names come from a file). Lines are joined with spaces, and any other character that is not printable
    (NUL, a form feed) is escaped as ``repr`` escapes it, so nothing can end the comment and become code."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(text.splitlines()))


def origin_comment(n: Node) -> str:
    """Where op ``n`` came from. In the optimizer phase that is the update rule of one parameter (the
    node's scope): the user's line would only be the call of the graph, the same for every update op."""
    if n.phase == OPTIMIZER and n.scope:
        return f"{n.source} of {n.scope}"
    return n.source
