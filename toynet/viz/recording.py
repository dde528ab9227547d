"""Recording a graph while the user's code builds it: one frame per step, for a GIF or a notebook player.

::

    with flow.viz.record() as rec:
        x = flow.ones(1, 5)
        w = flow.randn(5, 3, requires_grad=True)
        b = flow.randn(1, 3, requires_grad=True)
        z = flow.matmul(x, w) + b          # one statement, two ops: one step
        y = flow.zeros(1, 3)
        l = flow.sum(1/2 * (z - y) ** 2)
    rec.to_gif("build.gif")                # or, in a notebook: rec.player(), rec.gif(), rec.still(i)

How it watches, in Eager mode:

* **ops**: the recorder is an observer in ``toynet.mode.op_observers``; :func:`toynet.dynamic.tensor.apply`
  calls ``observer(op, inputs, attrs, result)`` after every eager op.
* **new tensors** that are not op results (``flow.ones``, ``flow.randn``) and **variable names**: at
  each new statement of the ``with`` block (a line-trace function set on that one frame only, not on
  the functions it calls) the recorder looks at the frame's variables.

Steps: ``group="statement"`` (default) makes one step per statement that changed the graph, with
consecutive tensor-creating statements (``x``, ``w``, ``b``) merged into one step unless
``merge_creations=False``; ``group="op"`` makes one step per op. ``rec.step("label")`` merges every
step since the previous ``rec.step`` into one step with that label (to group as a tutorial does).

Graph mode: while a recording is active, :meth:`Recorder.on_node` is in
``toynet.mode.node_observers``, which the tracer calls with every :class:`~toynet.static.Node`
it adds (``on_node(node)``; a tracer may pass ``graph=`` too), and every line ``graph.debug(level)``
prints reaches the recording through ``toynet.mode.log_observers``. :mod:`toynet.viz.traced_steps`
cuts both into steps: each frame carries the tagged lines (``frame.log``) printed while its nodes
appeared, and the debug level chooses how many. If any node was reported, the frames show the static
graph only: by module, as ``print(graph)`` nests it, when the ``nn.Graph`` is found after the block in
the block's variables (``by_module=False``: the plain static picture, in phase clusters).

Every frame is the *final* picture with the nodes that did not exist yet drawn invisibly
(``style=invis``): dot then places every node at the same spot in every frame, so nothing jumps.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Mapping
from typing import Any

from ..dynamic import autograd
from .. import mode
from ..static.ir import Graph, Node
from ..dynamic.tensor import Tensor
from .display import Image
from .dot import to_digraph
from .draw_eager import Application, eager_picture
from .frames import Frame, Step, build_frames
from .gif import FRAME_HEIGHT, FRAME_WIDTH, still, to_gif
from .model import Picture
from .names import Namer, find_names, frame_namespaces
from .rendering import MIN_TEXT_PX, Drawing
from .source import StatementIndex
from .traced_steps import TracedSteps


class Recorder:
    """Records the eager (or traced) graph step by step; use it through :func:`record`."""

    def __init__(self, group: str = "statement", merge_creations: bool = True,
                 names: Mapping[str, Any] | None = None, include_backward: bool = False, **draw_options: Any):
        if group not in ("statement", "op"):
            raise ValueError(f"group must be 'statement' or 'op', got {group!r}; use rec.step(label) to group "
                             "steps by hand")
        self.group = group
        self.merge_creations = merge_creations
        self.include_backward = include_backward
        self.names = names
        self.draw_options = draw_options
        self._layout = {k: draw_options.pop(k) for k in ("rankdir", "legend") if k in draw_options}
        self._by_module = draw_options.pop("by_module", True)
        self._tensors: list[Tensor] = []
        self._index: dict[int, int] = {}
        self._made_by: dict[int, Application] = {}
        self._bound: dict[int, str] = {}
        self._preexisting: list[Tensor] = []   # held, so that their ids stay theirs during the block
        self._steps: list[Step] = []          # eager steps; counts are tensors
        self._traced = TracedSteps()          # Graph-mode steps; counts are nodes
        self._ops_pending = 0
        self._final_names: dict[int, str] = {}
        self._frame: Any = None
        self._statements: StatementIndex | None = None
        self._statement: tuple[int, int] | None = None
        self._previous_trace: Any = None
        self._previous_frame_trace: Any = None
        self._frames: list[Frame] | None = None
        self._picture: Picture | None = None   # the final picture, once frames are built

    # ---------------------------------------------------------------------------- the block

    def __enter__(self) -> Recorder:  # noqa: PYI034  (Self needs Python 3.11)
        frame = sys._getframe(1)
        self._frame = frame
        self._statements = StatementIndex(frame.f_code.co_filename)
        self._preexisting = [v for v in frame.f_locals.values() if isinstance(v, Tensor)]
        mode.op_observers.append(self)
        mode.node_observers.append(self.on_node)
        mode.log_observers.append(self._traced.on_log)
        self._previous_trace, self._previous_frame_trace = sys.gettrace(), frame.f_trace
        sys.settrace(_trace_nothing)   # line events need a global trace function...
        frame.f_trace = self._on_line  # ...but only this frame is traced line by line
        frame.f_trace_lines = True
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._scan_variables()
            self._close_step()
            self._final_names = find_names(frame_namespaces(self._frame))  # module paths: model.weight
            self._traced.find_graph(frame_namespaces(self._frame))
        finally:
            self._frame.f_trace = self._previous_frame_trace
            sys.settrace(self._previous_trace)
            if self in mode.op_observers:
                mode.op_observers.remove(self)
            if self.on_node in mode.node_observers:
                mode.node_observers.remove(self.on_node)
            if self._traced.on_log in mode.log_observers:
                mode.log_observers.remove(self._traced.on_log)
            self._frame = None
            self._frames = None

    def _on_line(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and frame is self._frame:
            statement = self._statements.span(frame.f_lineno)
            if statement != self._statement:
                self._scan_variables()
                self._close_step()
                self._statement = statement
        return self._on_line

    # --------------------------------------------------------------------- what is watched

    def __call__(self, op: Any, inputs: tuple, attrs: dict, result: Tensor) -> None:
        """The observer toynet.dynamic.tensor.apply calls after every eager op."""
        if not self.include_backward and not mode.grad_enabled and _inside_backward():
            return
        for x in inputs:
            if isinstance(x, Tensor):
                self._add(x)
        self._made_by[id(result)] = Application(op, inputs, attrs, result)
        self._add(result)
        self._ops_pending += 1
        if self.group == "op" and self._frame is not None:
            span = self._statements.span(self._frame.f_lineno)  # the statement running this op
            self._close_step(label=f"{op.describe(**attrs)} in: {self._statements.text(span)}", span=span)

    def on_node(self, node: Node, graph: Graph | None = None) -> None:
        """For Graph mode's tracer: ``node`` was just added (to ``graph``, if given)."""
        self._traced.on_node(node, graph)
        self._frames = None

    def step(self, label: str | None = None) -> None:
        """Merge every step since the previous ``rec.step`` (or the start) into one step called ``label``
        (by default, the source of the statements it merges)."""
        self._scan_variables()
        self._close_step()
        if self._traced.nodes:
            self._traced.finish()
        steps = self._traced.steps if self._traced.nodes else self._steps
        first = max((i + 1 for i, s in enumerate(steps) if s.manual), default=0)
        merged = steps[first:]
        if not merged:
            return
        source = "\n".join(s.source for s in merged if s.source)
        steps[first:] = [Step(label if label is not None else source, source, merged[0].lineno,
                               merged[-1].count, sum(s.ops for s in merged), manual=True,
                               log=[line for s in merged for line in s.log])]
        self._frames = None

    # ------------------------------------------------------------------------------ steps

    def _add(self, t: Tensor) -> None:
        if id(t) not in self._index:
            self._index[id(t)] = len(self._tensors)
            self._tensors.append(t)

    def _scan_variables(self) -> None:
        """New tensors bound to the block's variables (created without an op) and their names."""
        if self._frame is None:
            return
        preexisting = {id(t) for t in self._preexisting}
        for name, value in list(self._frame.f_locals.items()):
            if not isinstance(value, Tensor) or name.startswith("_"):
                continue
            if id(value) not in self._index and id(value) not in preexisting:
                self._add(value)
            if id(value) in self._index:
                self._bound.setdefault(id(value), name)

    def _close_step(self, label: str | None = None, span: tuple[int, int] | None = None) -> None:
        if len(self._tensors) == (self._steps[-1].count if self._steps else 0):
            return
        span = span or self._statement
        if span is None and self._frame is not None:
            span = self._statements.span(self._frame.f_lineno)
        source = self._statements.text(span) if span else ""
        step = Step(label or source, source, span[0] if span else None, len(self._tensors), self._ops_pending)
        self._ops_pending = 0
        previous = self._steps[-1] if self._steps else None
        if (self.merge_creations and self.group == "statement" and step.ops == 0 and previous is not None
                and previous.ops == 0 and not previous.manual):
            previous.label = previous.source = previous.source + "\n" + source
            previous.count = step.count
        else:
            self._steps.append(step)
        self._frames = None

    # ----------------------------------------------------------------------------- frames

    @property
    def frames(self) -> list[Frame]:
        """One :class:`Frame` per step (built when first asked for)."""
        if self._frames is None:
            if self._traced.nodes:
                self._traced.finish()
                self._frames, self._picture = self._traced.frames(self.draw_options, self._layout, self._by_module)
            else:
                self._frames = self._eager_frames()
        return self._frames

    def _eager_frames(self) -> list[Frame]:
        namer = Namer(self.names, [])

        def name_of(t: Any) -> str:  # explicit or tensor.name, then the name bound first, then model.weight
            return namer(t) or self._bound.get(id(t), "") or self._final_names.get(id(t), "")

        origin: dict[str, int] = {}
        picture = eager_picture(self._tensors, self._made_by, name_of, origin=origin, **self.draw_options)
        return self._build_frames(picture, self._steps, lambda count: {n for n, i in origin.items() if i < count})

    def _build_frames(self, picture: Picture, steps: list[Step], present: Any) -> list[Frame]:
        self._picture = picture
        return build_frames(picture, steps, present, self._layout)

    # ------------------------------------------------------------------------------ output

    def drawing(self) -> Drawing:
        """The whole recorded graph, nothing highlighted: the picture every frame shows part of."""
        if not self.frames:
            raise ValueError("nothing to draw: the recording has no steps")
        return to_digraph(self._picture, **self._layout)

    def to_gif(self, path: str, fps: float = 1.0, duration: float | None = None, captions: bool = True,
               loop: int = 0, width: int = FRAME_WIDTH, height: int = FRAME_HEIGHT, min_text_px: float = MIN_TEXT_PX,
               log: bool = True, max_size: int | None = None) -> str:
        """Save the frames as an animated GIF of at most ``width`` x ``height`` pixels (900 x 620), its text at
        least ``min_text_px`` pixels high, with the debug lines beside the picture if there are any and ``log``
        (see :func:`toynet.viz.gif.to_gif`)."""
        return to_gif(self.frames, path, fps=fps, duration=duration, captions=captions, loop=loop, width=width,
                      height=height, min_text_px=min_text_px, log=log, max_size=max_size)

    def gif(self, fps: float = 1.0, duration: float | None = None, alt: str = "", **options: Any) -> Any:
        """The frames as an animated GIF that a notebook shows, embedded (it plays without a kernel and in the
        saved notebook; no file is written): :class:`toynet.viz.display.Image`, ``.save(path)`` writes it.
        ``options`` as for :meth:`to_gif`."""
        buffer = io.BytesIO()
        to_gif(self.frames, buffer, fps=fps, duration=duration, **options)
        return Image(buffer.getvalue(), "gif", alt or f"the graph built in {len(self.frames)} steps")

    def still(self, index: int = -1, width: int = FRAME_WIDTH, height: int = FRAME_HEIGHT, captions: bool = True,
              log: bool = True) -> Any:
        """Step ``index`` as the GIF shows it (the graph, and the debug lines beside it), as a picture a
        notebook displays (:class:`toynet.viz.display.Image`; ``.data`` holds the PNG bytes): for readers
        without widgets."""
        step = range(len(self.frames))[index]
        alt = f"step {step + 1}/{len(self.frames)}: {(self.frames[step].label.splitlines() or [''])[0]}"
        return Image(still(self.frames, step, width, height, captions, log), "png", alt=alt)

    def player(self, interval: int = 1000, height: int = 700) -> Any:
        """A notebook widget at most ``height`` pixels high: Play, a step slider, the step's source line
        above the graph as SVG, and the debug lines beside it if any (see :mod:`toynet.viz.player`)."""
        try:
            from .player import Player  # needs ipywidgets: toynet.viz imports without it
        except ImportError as error:
            raise ImportError("rec.player() needs ipywidgets (pip install ipywidgets; JupyterLab 3+ and Notebook 7 "
                              "show it without more setup); rec.to_gif('build.gif') works without it") from error
        return Player(self.frames, interval=interval, height=height)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        frames = self.frames
        return frames[-1]._repr_mimebundle_(include, exclude) if frames else {"text/plain": repr(self)}

    def __repr__(self) -> str:
        return f"<toynet.viz.Recorder: {len(self._traced.steps if self._traced.nodes else self._steps)} steps>"


def record(group: str = "statement", merge_creations: bool = True, names: Mapping[str, Any] | None = None,
           include_backward: bool = False, **draw_options: Any) -> Recorder:
    """Record the graph the ``with`` block builds; see the module docstring.

    ``draw_options`` are those of :func:`toynet.viz.draw` that make sense per frame: ``rankdir``,
    ``legend``, ``show_values``, ``show_saved``, ``show_attrs``, ``literals`` (and for Graph mode
    ``phases``, ``show_names``; ``by_module=False`` draws a traced graph in phase clusters instead of
    by module). ``include_backward=True`` also records the ops ``backward()`` runs. Around an ``nn.Graph``'s
    first call, each frame's ``log`` holds the lines ``graph.debug(level)`` printed during its step.
    """
    return Recorder(group, merge_creations, names, include_backward, **draw_options)


def _trace_nothing(frame: Any, event: str, arg: Any) -> None:
    """The global trace function: trace no new frame (only the recorded block's frame is traced)."""
    return


def _inside_backward() -> bool:
    """Is this op part of ``backward()`` (a vjp rule running), rather than the user's program?"""
    code = autograd.run_backward.__code__
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False
