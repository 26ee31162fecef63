"""The compilation context a user compiler may ask about: which graph it is compiling.

torch's AOT Autograd lets a compiler call ``get_aot_compilation_context()`` (and
``get_aot_graph_name()``) to learn whether it is compiling a forward, a backward or an
inference graph, of which model, the how-manieth; compilers written for torch (graph
dumpers, debug compilers) do. The same names with the same results are here. The state is
a context variable set only while the pipeline calls a compiler (:func:`compiling`).

As in torch, a graph's name is ``"{aot_id}_{kind}"``: ``aot_id`` numbers the compiled
functions of the process (one per ``aot_function`` / ``aot_module`` /
``aot_module_simplified`` call and per graph Dynamo hands the backend, :func:`next_aot_id`),
so a compiler can tell which graphs belong together. Unlike torch's, aotgrad's backward is
compiled ahead of time, with its forward, not at the first backward call.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "compiling", "get_aot_compilation_context", "get_aot_graph_name", "get_graph_being_compiled", "next_aot_id",
    "set_model_name",
]


@dataclass(frozen=True)
class _Compiling:
    graph: str
    model_name: str
    nth_graph: int


_current: contextvars.ContextVar[_Compiling | None] = contextvars.ContextVar("aotgrad_compiling", default=None)
_model_name = contextvars.ContextVar("aotgrad_model_name", default="model")
_lock = threading.Lock()
#: how many graphs have been handed to compilers so far, in this process
_graphs_compiled = 0
#: torch's AOT_COUNTER: the next compiled function's number
_aot_ids = itertools.count()


def next_aot_id() -> int:
    """A new compiled function's number (torch's ``aot_id``), unique in the process."""
    return next(_aot_ids)


def set_model_name(name: str) -> None:
    """The model name :func:`get_aot_graph_name` reports (torch's ``set_model_name``)."""
    _model_name.set(name)


@contextlib.contextmanager
def compiling(kind: str, aot_id: int) -> Iterator[None]:
    """While a compiler runs on the ``kind`` ("forward", "backward", "inference") graph of
    compiled function ``aot_id``: the graph is named ``"{aot_id}_{kind}"``."""
    global _graphs_compiled
    with _lock:
        n, _graphs_compiled = _graphs_compiled, _graphs_compiled + 1
    token = _current.set(_Compiling(f"{aot_id}_{kind}", _model_name.get(), n))
    try:
        yield
    finally:
        _current.reset(token)


def get_aot_compilation_context() -> tuple[list[str], str, int]:
    """``([graph], model_name, nth_graph)`` of the graph being compiled, as torch's; outside
    a compiler, ``([], model_name, the next graph's number)``."""
    now = _current.get()
    if now is None:
        return [], _model_name.get(), _graphs_compiled
    return [now.graph], now.model_name, now.nth_graph


def get_aot_graph_name() -> str:
    """``"{model_name}__{graph}_{nth_graph}"``, as torch's names graphs for dumps and logs."""
    graphs, model, n = get_aot_compilation_context()
    return f"{model}__{'_'.join(graphs)}_{n}"



#: torch's other name for :func:`get_aot_graph_name`
get_graph_being_compiled = get_aot_graph_name
