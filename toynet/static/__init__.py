"""The static (define-and-run) design: a traced graph of Nodes, differentiated, optimised, compiled."""

from .ir import Graph, Node  # noqa: F401
