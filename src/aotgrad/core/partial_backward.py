"""A backward that some outputs' gradients do not reach: the graph pruned of what only they feed.

Autograd hands a compiled call's backward None for each output the backward pass does not
reach (``ctx.set_materialize_grads(False)``). Eager's engine never runs the nodes that only
such outputs' gradients flow through: their contributions are *missing* from every sum of
gradients, not zeros. Running the whole backward graph with zero tangents instead is exact
only where those paths are finite: ``log``'s ``grad / x`` at ``x == 0``, or a saved ``inf``,
turns a zero tangent into ``nan``, which the sum then carries into a gradient eager computes
finite (fuzz seed 22013348).

:func:`prune_absent_tangents` rewrites a backward graph for one set of absent tangents, as
eager's engine runs it: a value computed only from absent tangents is *absent* (not
computed); a sum (``add``/``sub``) of an absent and a present gradient is the present one;
any other op reading an absent value next to a present one (``cat`` of ``split``'s
gradients, a scatter) reads zeros in its place, as eager's formulas materialise an
undefined gradient. :class:`PartialBackwards` keeps one compiled backward per set.

Invariant relied on: a first-order backward graph is linear in its tangents, so an op whose
tangent-dependent inputs are all absent computes zero, except for ops that read only their
input's metadata (``zeros_like``, ``new_ones``), random ops, mutable ops and non-floating
results, which are never taken as absent.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

__all__ = ["PartialBackwards", "prune_absent_tangents"]

log = logging.getLogger("aotgrad")

_aten = torch.ops.aten
#: the sums autograd's input buffers make of gradients from two consumers
_SUMS = (_aten.add.Tensor, _aten.sub.Tensor)


class _Absent:
    """A value computed only from absent tangents: the graph does not compute it."""

    def __repr__(self) -> str:
        return "ABSENT"


_ABSENT = _Absent()


def _floating(val: Any) -> bool:
    if isinstance(val, (tuple, list)):
        return all(v is None or _floating(v) for v in val)
    return isinstance(val, torch.Tensor) and (val.is_floating_point() or val.is_complex())


def _absent_propagates(node: fx.Node) -> bool:
    """Whether ``node`` computes zero where every tangent-dependent input it reads is zero:
    an op's floating result that is a function of its inputs' values (linearity)."""
    if node.op != "call_function" or not _floating(node.meta.get("val")):
        return False
    target = node.target
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    name = target._schema.name.split("::")[-1]
    if name.endswith("_like") or name.startswith("new_"):
        return False  # reads its input's metadata only (zeros_like, new_ones, ...)
    return not target._schema.is_mutable and torch.Tag.nondeterministic_seeded not in target.tags


def _same_layout_class(a: fx.Node, b: fx.Node) -> bool:
    """Whether ``a``'s value can stand for ``b``'s: the same dtype and (provably) the same
    shape, as read off their fake values."""
    va, vb = a.meta.get("val"), b.meta.get("val")
    if not (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)):
        return False
    return va.dtype == vb.dtype and va.dim() == vb.dim() and all(
        statically_known_true(x == y) for x, y in zip(va.shape, vb.shape)
    )


def prune_absent_tangents(
    gm: fx.GraphModule, absent: frozenset[int], num_tangents: int, nulled: frozenset[int] = frozenset()
) -> fx.GraphModule | None:
    """``gm`` (a backward graph whose last ``num_tangents`` placeholders are the tangents)
    run as eager's engine runs it where the tangents numbered ``absent`` are None (see the
    module docstring), as a new graph with the same placeholders and outputs; None where it
    computes what ``gm`` does with zeros for them.

    ``nulled``: output positions the caller replaces by None (gradients whose every tangent
    is absent); such an output that is absent is returned as None.
    """
    placeholders = gm.graph.find_nodes(op="placeholder")
    first_tangent = len(placeholders) - num_tangents
    absent_nodes = {placeholders[first_tangent + k] for k in absent}
    graph = fx.Graph()
    graph._codegen = gm.graph._codegen
    full: dict[fx.Node, fx.Node] = {}
    graph.graph_copy(gm.graph, full)
    depends = {p for p in placeholders[first_tangent:]}  # reads a tangent, directly or not
    pruned: dict[fx.Node, Any] = {}
    zeros: dict[fx.Node, fx.Node] = {}
    changed = False

    def zeros_for(a: fx.Node) -> fx.Node:
        """The value read in place of absent ``a``: zeros (its full value where it is no
        floating tensor: ``getitem`` of a tuple keeps its full source)."""
        nonlocal changed
        changed = True
        val = a.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return full[a]
        if a not in zeros:
            zeros[a] = _zeros_node(graph, val, full[a])
        return zeros[a]

    def present(a: Any) -> Any:
        if not isinstance(a, fx.Node):
            return a
        value = pruned[a]
        return zeros_for(a) if value is _ABSENT else value

    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        if node.op == "placeholder":
            pruned[node] = _ABSENT if node in absent_nodes else full[node]
            continue
        inputs = node.all_input_nodes
        if any(a in depends for a in inputs):
            depends.add(node)
        if all(pruned[a] is full[a] for a in inputs):
            pruned[node] = full[node]
            continue
        pruned[node] = _rewrite(node, graph, pruned, depends, present)
        if pruned[node] is not _ABSENT:
            changed = True
    (out_node,) = gm.graph.find_nodes(op="output")
    outputs = [
        # (an absent output the caller nulls anyway: not computed, and no change)
        None if isinstance(old, fx.Node) and pruned[old] is _ABSENT and k in nulled else present(old)
        for k, old in enumerate(out_node.args[0])
    ]
    if not changed:
        return None
    graph.output(type(out_node.args[0])(outputs))  # (a list or a tuple, as gm's)
    graph.eliminate_dead_code()
    return fx.GraphModule(gm, graph)


def _zeros_node(graph: fx.Graph, val: torch.Tensor, node: fx.Node) -> fx.Node:
    """A ``full(size, 0)`` node with ``val``'s size, dtype and device (a core op every
    compiler lowers: graphs are handed over decomposed); a symbolic size is read off
    ``node``, whose value ``val`` is."""
    size = [
        d if isinstance(d, int) else _meta_node(graph.call_function(_aten.sym_size.int, (node, i)), d)
        for i, d in enumerate(val.shape)
    ]
    z = graph.call_function(
        _aten.full.default, (size, 0),
        {"dtype": val.dtype, "layout": torch.strided, "device": val.device, "pin_memory": False},
    )
    return _meta_node(z, val.new_zeros(val.shape))


def _meta_node(node: fx.Node, val: Any) -> fx.Node:
    node.meta["val"] = val
    return node


def _rewrite(
    node: fx.Node, graph: fx.Graph, pruned: dict[fx.Node, Any], depends: set[fx.Node],
    present: Callable[[Any], Any],
) -> Any:
    """``node``'s value in the pruned graph, some input of which is absent or rewritten."""
    if node.target in _SUMS:
        a, b = node.args[0], node.args[1]
        alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
        if isinstance(a, fx.Node) and isinstance(b, fx.Node) and a in depends and b in depends:
            pa, pb = pruned[a], pruned[b]
            if pa is _ABSENT and pb is _ABSENT:
                return _ABSENT
            if pb is _ABSENT and _same_layout_class(a, node):
                return pa  # a + absent
            if pa is _ABSENT and _same_layout_class(b, node):
                scale = alpha if node.target is _aten.add.Tensor else -alpha
                if scale == 1:
                    return pb  # absent + b
                scaled = graph.call_function(_aten.mul.Tensor, (pb, scale))
                scaled.meta = dict(node.meta)
                return scaled
    tangent_inputs = [a for a in node.all_input_nodes if a in depends]
    if tangent_inputs and all(pruned[a] is _ABSENT for a in tangent_inputs) and _absent_propagates(node):
        return _ABSENT
    copied = graph.create_node(
        node.op, node.target, fx.node.map_arg(node.args, present), fx.node.map_arg(node.kwargs, present), name=node.name
    )
    copied.meta = dict(node.meta)
    return copied


class PartialBackwards:
    """Per set of absent tangents, the compiled backward pruned of what only they feed
    (:func:`prune_absent_tangents`), or None where the full backward computes the same;
    each built on the first backward that has that set, and kept.

    ``graph()`` gives the backward graph (read on first use: an entry from the persistent
    cache decodes it then), ``compile(gm)`` compiles a pruned one to a positional callable
    with the same calling convention, ``grad_tangent_deps`` are the runtime's (per
    gradient output, the tangents whose absence makes it None)."""

    def __init__(
        self, graph: Callable[[], fx.GraphModule], compile: Callable[[fx.GraphModule], Callable],
        num_tangents: int, grad_tangent_deps: tuple[frozenset[int], ...], name: str,
    ) -> None:
        self._graph = graph
        self._compile = compile
        self._num_tangents = num_tangents
        self._grad_tangent_deps = grad_tangent_deps
        self.name = name
        self._by_absent: dict[frozenset[int], Callable | None] = {}

    def __repr__(self) -> str:
        return f"PartialBackwards({self.name}, {len(self._by_absent)} patterns)"

    def __call__(self, absent: frozenset[int]) -> Callable | None:
        try:
            return self._by_absent[absent]
        except KeyError:
            pass
        nulled = frozenset(i for i, deps in enumerate(self._grad_tangent_deps) if deps and deps <= absent)
        gm = prune_absent_tangents(self._graph(), absent, self._num_tangents, nulled)
        if gm is None:
            compiled = None
        else:
            log.info(
                "aotgrad: backward of %s without the gradients of tangents %s: compiling it pruned of what "
                "only they feed", self.name, sorted(absent),
            )
            compiled = self._compile(gm)
        self._by_absent[absent] = compiled
        return compiled
