"""Which line of the user's program made each node of a traced graph.

While a graph is traced under :class:`SourceMarks`, every node a torch call makes is tagged
``node.meta[SOURCE]`` with the user's line (:class:`SourceLine`; the line ``errors.py``'s policy
names as the user's, or, for a graph Dynamo captured, the node's own ``stack_trace``). The
backward's nodes are made by autograd, not by the program: each autograd node the forward
creates is hooked so that what its backward formula traces is tagged with the forward line,
``backward=True``. The partitioner copies node meta, so the forward and backward graphs keep
the tags. Only traces that someone will look at are marked (``AotConfig.record_source_lines``:
``aotgrad.explain`` and ``python -m aotgrad explain`` turn it on); it costs a frame walk per
torch call of the program.

Separately, and always: a graph whose nodes carry ``stack_trace`` (Dynamo's, run node by node
under ``fx_traceback.preserve_node_meta``) gives each ATen node of the forward that stack trace,
and each node of the backward the stack trace of the forward op it differentiates, as torch's
AOT Autograd does (:func:`running_with_stack_traces`, :func:`backward_stack_traces`).
"""

from __future__ import annotations

import collections
import contextlib
import linecache
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.fx.traceback as fx_traceback
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import get_proxy_mode
from torch.overrides import TorchFunctionMode

from ..errors import frame_rank

__all__ = ["SOURCE", "SourceLine", "SourceMarks", "backward_stack_traces", "running_with_stack_traces", "source_of"]

#: node meta key: the :class:`SourceLine` that made the node
SOURCE = "aotgrad_source"


@dataclass(frozen=True)
class SourceLine:
    """A line of the user's program. ``backward``: the node computes part of the gradient of
    what this line made (autograd's formula for it), not the line itself."""

    filename: str
    lineno: int
    function: str
    backward: bool = False

    @property
    def code(self) -> str:
        return linecache.getline(self.filename, self.lineno).strip()

    def __str__(self) -> str:
        where = f"{self.filename}:{self.lineno} in {self.function}"
        return f"grad of {where}" if self.backward else where


def _from_stack_trace(stack_trace: str) -> SourceLine | None:
    """The last ``File "...", line N, in fn`` of a node's ``stack_trace`` (Dynamo's)."""
    for line in reversed(stack_trace.splitlines()):
        line = line.strip()
        if line.startswith('File "'):
            try:
                filename, rest = line[6:].split('", line ', 1)
                lineno, _, function = rest.partition(", in ")
                return SourceLine(filename, int(lineno), function.strip())
            except ValueError:
                return None
    return None


def _user_line() -> SourceLine | None:
    """The user's line now running: a preserved node meta's stack trace (a Dynamo graph run
    node by node), else the innermost frame :func:`aotgrad.errors.frame_rank` ranks highest."""
    if fx_traceback.has_preserved_node_meta():
        stack_trace = fx_traceback.get_current_meta().get("stack_trace")
        if stack_trace:
            found = _from_stack_trace(stack_trace)
            if found is not None:
                return found
    frame = sys._getframe(2)
    fallback = None
    while frame is not None:
        rank = frame_rank(frame.f_code.co_filename)
        if rank == 2:
            return SourceLine(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        if rank == 1 and fallback is None:
            fallback = SourceLine(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return fallback


def _tag_new_nodes(graph: torch.fx.Graph, last: torch.fx.Node, source: SourceLine) -> None:
    """Tag every node after ``last`` (untagged ones only) with ``source``."""
    node = last._next
    while node is not graph._root:
        node.meta.setdefault(SOURCE, source)
        node = node._next


class SourceMarks(TorchFunctionMode):
    """While active around a trace, tags each new node with the user's line (see the module
    docstring), and hooks the autograd nodes the forward makes so that their backward's
    nodes are tagged too."""

    def __init__(self) -> None:
        super().__init__()
        #: the autograd nodes hooked so far, by id (kept alive here, so no id is reused)
        self._hooked: dict[int, Any] = {}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        proxy_mode = get_proxy_mode()
        if proxy_mode is None:
            return func(*args, **(kwargs or {}))
        source = _user_line()
        graph = proxy_mode.tracer.graph
        last = graph._root._prev
        out = func(*args, **(kwargs or {}))
        if source is None:
            return out
        _tag_new_nodes(graph, last, source)
        backward = SourceLine(source.filename, source.lineno, source.function, backward=True)
        for value in pytree.tree_leaves(out):
            if isinstance(value, torch.Tensor) and value.grad_fn is not None:
                self._hook(value.grad_fn, backward)
        return out

    def _hook(self, grad_fn: Any, source: SourceLine) -> None:
        """Tag what ``grad_fn``'s backward traces, and that of the autograd nodes behind it
        that no earlier call hooked (a composite op makes several)."""
        stack = [grad_fn]
        while stack:
            fn = stack.pop()
            if fn is None or id(fn) in self._hooked or type(fn).__name__ == "AccumulateGrad":
                continue
            self._hooked[id(fn)] = fn
            start: list[torch.fx.Node] = []

            def before(grad_outputs: Any, start: list = start) -> None:
                proxy_mode = get_proxy_mode()
                if proxy_mode is not None:
                    start.append(proxy_mode.tracer.graph._root._prev)

            def after(grad_inputs: Any, grad_outputs: Any, start: list = start) -> None:
                proxy_mode = get_proxy_mode()
                if proxy_mode is not None and start:
                    _tag_new_nodes(proxy_mode.tracer.graph, start.pop(), source)

            fn.register_prehook(before)
            fn.register_hook(after)
            stack.extend(next_fn for next_fn, _ in fn.next_functions)


def source_of(node: torch.fx.Node) -> SourceLine | None:
    """The user's line that made ``node`` (None: none recorded, e.g. a placeholder)."""
    source = node.meta.get(SOURCE)
    if source is None and node.meta.get("stack_trace"):
        source = _from_stack_trace(node.meta["stack_trace"])
    return source


def running_with_stack_traces() -> contextlib.AbstractContextManager:
    """Around a run of a graph whose nodes carry ``stack_trace``, node by node under
    ``preserve_node_meta``: autograd's anomaly mode (``set_detect_anomaly``, which does not
    warn) makes each autograd node store ``fx_traceback.format_stack()`` — the running
    node's ``stack_trace`` — in ``Node.metadata["traceback_"]``, for
    :func:`backward_stack_traces`. Only around the forward: an error in a backward run under
    anomaly mode would add a warning of its own."""
    return torch.autograd.set_detect_anomaly(True, check_nan=False)


def backward_stack_traces(outputs: Iterable[Any]) -> None:
    """Before ``autograd.grad`` of ``outputs`` while the joint is traced: the nodes each
    autograd node's backward formula traces get the ``stack_trace`` its forward op had (a
    prehook notes the graph's last node, a hook tags the nodes after it), so the backward
    graph's nodes carry it, as torch's. Nothing is hooked where no forward op had one (a
    program that is no graph with stack traces, or was not run under
    :func:`running_with_stack_traces`); no global state is touched, so an error in the
    backward leaves nothing behind."""
    nodes = _autograd_nodes(t.grad_fn for t in outputs if isinstance(t, torch.Tensor) and t.grad_fn is not None)
    traces = ["".join(line for line in node.metadata.get("traceback_", ()) if line) for node in nodes]
    for node, trace in zip(nodes, traces):
        if trace:
            _tag_backward_of(node, trace)


def _tag_backward_of(node: Any, trace: str) -> None:
    """Hooks on autograd ``node``: the graph nodes its backward formula traces get
    ``stack_trace`` ``trace`` (where they have none yet)."""
    start: list[torch.fx.Node] = []

    def before(grad_outputs: Any) -> None:
        proxy_mode = get_proxy_mode()
        if proxy_mode is not None:
            start.append(proxy_mode.tracer.graph._root._prev)

    def after(grad_inputs: Any, grad_outputs: Any) -> None:
        proxy_mode = get_proxy_mode()
        if proxy_mode is None or not start:
            return
        graph, new = proxy_mode.tracer.graph, start.pop()._next
        while new is not graph._root:
            if not new.meta.get("stack_trace"):
                new.meta["stack_trace"] = trace
            new = new._next

    node.register_prehook(before)
    node.register_hook(after)


def _autograd_nodes(roots: Iterable[Any]) -> list[Any]:
    """Every autograd node reachable from ``roots`` (each once)."""
    seen, queue = set(), collections.deque()
    for root in roots:
        if root not in seen:
            seen.add(root)
            queue.append(root)
    order = []
    while queue:
        node = queue.popleft()
        order.append(node)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                queue.append(child)
    return order
