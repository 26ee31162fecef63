"""``aotgrad.explain``: what aotgrad did with a program, as one report.

:func:`explain` compiles a function or module (nop compilers unless given), calls it once and
returns an :class:`ExplainReport`: per compiled entry (:class:`EntryReport`) the metadata
(inputs mutated and how, outputs and what they alias), the joint / forward / backward (or
inference) graphs with each node's user source line (:mod:`aotgrad.core.provenance`), the
tensors saved for backward with shape, dtype, bytes and the line that made each, what the
partitioner recomputes in the backward, the compile time per stage, the guard and the
recompile reasons. ``str(report)`` is the text; :meth:`ExplainReport.html` the page
(:mod:`aotgrad.report_html`). The report holds plain values only, read off the entries once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch import nn

from .compilers import nop
from .core import dispatch
from .core.dispatch import AotFunction
from .core.pipeline import CompiledEntry
from .core.provenance import source_of
from .module import AOTModule, _CompiledForward, aot_module
from .partition import saved_bytes
from .api import aot_function

__all__ = ["EntryReport", "ExplainReport", "GraphReport", "NodeRow", "SavedTensor", "explain", "observe_compiles"]


@dataclass(frozen=True)
class NodeRow:
    """One node of a graph: ``args`` are the names of the nodes it reads; ``source`` the user's
    line (``"grad of file:line in fn"`` for a backward formula's node; "" where none)."""

    name: str
    op: str
    target: str
    args: tuple[str, ...]
    shape: str
    dtype: str
    source: str
    code: str
    saved: bool = False
    recomputed: bool = False


@dataclass(frozen=True)
class GraphReport:
    """One graph as rows (``kind``: "joint", "forward", "backward" or "inference")."""

    kind: str
    nodes: tuple[NodeRow, ...]
    code: str

    @property
    def num_ops(self) -> int:
        return sum(1 for n in self.nodes if n.op == "call_function")


@dataclass(frozen=True)
class SavedTensor:
    """A value the forward saves for the backward (``dtype`` "symint" for a SymInt)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    source: str
    code: str


@dataclass(frozen=True)
class EntryReport:
    """What one compiled entry holds, as plain values."""

    function: str
    kind: str
    inputs: tuple[dict[str, Any], ...]
    outputs: tuple[dict[str, Any], ...]
    metadata_text: str
    signature_text: str
    graphs: tuple[GraphReport, ...]
    saved: tuple[SavedTensor, ...]
    recomputed: tuple[str, ...]
    stage_seconds: dict[str, float]
    compile_seconds: float
    guard: str
    recompile_reasons: tuple[str, ...]
    sources_recorded: bool

    @property
    def saved_bytes(self) -> int:
        return sum(s.nbytes for s in self.saved)

    def graph(self, kind: str) -> GraphReport:
        for g in self.graphs:
            if g.kind == kind:
                return g
        raise KeyError(f"no {kind} graph in this {self.kind} entry")

    def __str__(self) -> str:
        lines = [f"== {self.function}: {self.kind} entry (compiled in {self.compile_seconds:.3f} s)"]
        lines.append("compile time per stage: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in self.stage_seconds.items()))
        lines.append(f"guard: {self.guard}")
        for r in self.recompile_reasons:
            lines.append(f"compiled because: {r}")
        lines.append("inputs:")
        for row in self.inputs:
            lines.append("  " + ", ".join(f"{k}={v}" for k, v in row.items()))
        lines.append("outputs:")
        for row in self.outputs:
            lines.append("  " + ", ".join(f"{k}={v}" for k, v in row.items()))
        if self.kind == "training":
            lines.append(f"saved for backward: {len(self.saved)} values, {self.saved_bytes} bytes")
            for s in self.saved:
                lines.append(f"  {s.name}: {s.dtype}{list(s.shape)} {s.nbytes} B  <- {s.source or '?'}  {s.code}")
            lines.append(f"recomputed in backward: {', '.join(self.recomputed) or 'nothing'}")
        if not self.sources_recorded:
            lines.append("(no source lines recorded: compile through aotgrad.explain to see them)")
        for g in self.graphs:
            lines.append(f"-- {g.kind} graph ({g.num_ops} ops)")
            for n in g.nodes:
                if n.op in ("call_function", "placeholder"):
                    mark = " [saved]" if n.saved else (" [recomputed]" if n.recomputed else "")
                    where = f"  # {n.source}: {n.code}" if n.source else ""
                    lines.append(f"  {n.name} = {n.target}({', '.join(n.args)}) : {n.dtype}{n.shape}{mark}{where}")
        return "\n".join(lines)


@dataclass
class ExplainReport:
    """The entries an :func:`explain` call (or a script run) compiled, and the call's result."""

    entries: list[EntryReport] = field(default_factory=list)
    result: Any = field(default=None, repr=False)
    title: str = "aotgrad report"

    def __str__(self) -> str:
        if not self.entries:
            return f"{self.title}: no entry was compiled"
        return f"{self.title}: {len(self.entries)} entries\n\n" + "\n\n".join(str(e) for e in self.entries)

    def html(self) -> str:
        """The report as one self-contained HTML page (inline CSS/JS, no network)."""
        from .report_html import render

        return render(self)

    def save_html(self, path: str | os.PathLike) -> str:
        """Write :meth:`html` to ``path``; return the path."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.html())
        return os.fspath(path)


# --------------------------------------------------------------------------- reading an entry


def _val_text(node: torch.fx.Node) -> tuple[str, str]:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return str(list(val.shape)), str(val.dtype).removeprefix("torch.")
    if isinstance(val, torch.SymInt):
        return "", "symint"
    return "", ""


def _target_text(node: torch.fx.Node) -> str:
    if node.op == "call_function":
        return str(node.target).removeprefix("aten.")
    return node.op if node.op != "placeholder" else "input"


def _graph_report(kind: str, gm: torch.fx.GraphModule, saved: frozenset[str], recomputed: frozenset[str]) -> GraphReport:
    rows = []
    for node in gm.graph.nodes:
        shape, dtype = _val_text(node)
        source = source_of(node)
        rows.append(NodeRow(
            node.name, node.op, _target_text(node), tuple(a.name for a in node.all_input_nodes), shape, dtype,
            "" if source is None else str(source), "" if source is None else source.code,
            saved=node.name in saved and (kind in ("forward", "joint") or node.op == "placeholder"),
            recomputed=node.name in recomputed,
        ))
    return GraphReport(kind, tuple(rows), gm.code.strip())


def _io_rows(entry: CompiledEntry) -> tuple[tuple[dict, ...], tuple[dict, ...]]:
    md = entry.metadata
    inputs = tuple(
        {
            "input": k,
            "mutation": "data and metadata" if i.mutates_data and i.mutates_metadata
            else "data" if i.mutates_data else "metadata" if i.mutates_metadata else "none",
            "autograd sees it": i.mutation_visible_to_autograd if (i.mutates_data or i.mutates_metadata) else "",
            "requires_grad": i.requires_grad,
            "leaf": i.is_leaf,
        }
        for k, i in enumerate(md.input_info)
    )
    outputs = tuple(
        {
            "output": j,
            "type": o.output_type.name,
            "aliases": (f"input {o.call_input_index}" if o.call_input_index is not None
                        else f"intermediate base {o.base_index}" if o.base_index is not None and o.is_alias else "")
            + (f" (same as output {o.duplicate_of})" if o.duplicate_of is not None else ""),
            "shape": list(o.size),
            "requires_grad": o.requires_grad,
        }
        for j, o in enumerate(md.output_info)
    )
    return inputs, outputs


def entry_report(fn: AotFunction, entry: CompiledEntry) -> EntryReport:
    """Read one compiled entry into an :class:`EntryReport`."""
    graphs = entry.graphs
    saved_rows: tuple[SavedTensor, ...] = ()
    saved_names: frozenset[str] = frozenset()
    recomputed: frozenset[str] = frozenset()
    if entry.training:
        fw, bw = graphs["forward"], graphs["backward"]
        fw_nodes = {n.name: n for n in fw.graph.nodes}
        report = saved_bytes(fw, entry.signature.num_forward_outputs)
        rows = []
        for v in report.values:
            source = source_of(fw_nodes[v.name]) if v.name in fw_nodes else None
            rows.append(SavedTensor(
                v.name, v.shape, "symint" if v.dtype is None else str(v.dtype).removeprefix("torch."), v.nbytes,
                "" if source is None else str(source), "" if source is None else source.code,
            ))
        saved_rows = tuple(rows)
        saved_names = frozenset(v.name for v in report.values)
        fw_ops = {n.name for n in fw.graph.nodes if n.op == "call_function"}
        recomputed = frozenset(n.name for n in bw.graph.nodes if n.op == "call_function" and n.name in fw_ops)
    reports = []
    joint = entry.joint_graph
    if joint is not None:
        reports.append(_graph_report("joint", joint, saved_names, frozenset()))
    for kind in ("forward", "backward", "inference"):
        if kind in graphs:
            reports.append(_graph_report(kind, graphs[kind], saved_names, recomputed if kind == "backward" else frozenset()))
    inputs, outputs = _io_rows(entry)
    sources = any(n.source for g in reports for n in g.nodes)
    order = len(fn.entries) - 1 - fn.entries.index(entry) if entry in fn.entries else -1
    reasons = tuple(str(r) for r in fn.recompile_reasons if r.number == order)
    return EntryReport(
        function=getattr(fn.fn, "__qualname__", None) or getattr(fn.fn, "__name__", repr(fn.fn)),
        kind="training" if entry.training else "inference",
        inputs=inputs, outputs=outputs, metadata_text=repr(entry.metadata), signature_text=repr(entry.signature),
        graphs=tuple(reports), saved=saved_rows, recomputed=tuple(sorted(recomputed)),
        stage_seconds=dict(entry.stage_seconds), compile_seconds=entry.compile_seconds,
        guard=entry.guard.describe(), recompile_reasons=reasons, sources_recorded=sources,
    )


# --------------------------------------------------------------------------- observing compiles


@contextlib.contextmanager
def observe_compiles() -> Iterator[list[tuple[AotFunction, CompiledEntry]]]:
    """Collect ``(aot_function, entry)`` for every entry compiled inside the block (by
    ``aot_function``, ``aot_module`` or the ``torch.compile`` backend), in order; those
    entries are traced with source lines recorded (``AotConfig.record_source_lines``)."""
    seen: list[tuple[AotFunction, CompiledEntry]] = []

    def listener(fn: AotFunction, entry: CompiledEntry) -> None:
        seen.append((fn, entry))

    dispatch.compile_listeners.append(listener)
    try:
        yield seen
    finally:
        dispatch.compile_listeners.remove(listener)


def _aot_functions(target: Any) -> list[AotFunction]:
    """The AotFunctions behind an already compiled callable (empty: not one of ours)."""
    if isinstance(target, AotFunction):
        return [target]
    forward = target._compiled_forward if isinstance(target, AOTModule) else target
    if isinstance(forward, _CompiledForward):
        return [compiled for _, compiled in forward.entries.values()]
    return []


def explain(target: Callable | nn.Module, *args: Any, fw_compiler: Callable | None = None,
            bw_compiler: Callable | None = None, **kwargs: Any) -> ExplainReport:
    """Compile ``target`` with aotgrad, call it once with ``args``/``kwargs`` and report.

    ``target``: a function (compiled with ``aot_function``), an ``nn.Module`` (``aot_module``),
    or what aotgrad already compiled (an ``AotFunction``, an ``aot_module`` result, an
    ``aot_module_simplified`` callable): then every entry it holds is reported (its own
    compilers are kept; ``fw_compiler``/``bw_compiler`` are ignored). The compilers default
    to :func:`aotgrad.compilers.nop`. The call's result is ``report.result``
    (call ``.backward()`` on it yourself if you want the gradients; the backward graph is
    compiled ahead of time and is in the report either way). ``fw_compiler`` and
    ``bw_compiler`` are taken by explain, never passed to ``target``.
    """
    existing = isinstance(target, (AotFunction, AOTModule, _CompiledForward))
    compiled = target
    if not existing:
        if isinstance(target, nn.Module):
            compiled = aot_module(target, fw_compiler or nop, bw_compiler)
        elif callable(target):
            compiled = aot_function(target, fw_compiler or nop, bw_compiler)
        else:
            raise TypeError(f"aotgrad.explain: expected a function or nn.Module, got {type(target).__name__}")
    with observe_compiles() as seen:
        result = compiled(*args, **kwargs)
    name = getattr(target, "__qualname__", None) or type(target).__name__
    report = ExplainReport(result=result, title=f"aotgrad report for {name}")
    if existing:
        pairs = [(fn, e) for fn in _aot_functions(target) for e in reversed(fn.entries)]
    else:
        pairs = seen
    report.entries = [entry_report(fn, entry) for fn, entry in pairs]
    return report
