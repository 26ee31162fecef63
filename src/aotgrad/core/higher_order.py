"""Double backward: an entry's backward as a differentiable function, traced from its joint.

The compiled backward runs on saved values that carry no autograd history, so the gradients
it returns cannot be differentiated again. When autograd asks for them with
``create_graph=True``, the runtime calls the entry's :class:`DifferentiableBackward` instead:
the joint graph's gradient outputs as a function of ``(primals, frozen, tangents)``. Its
forward part is recomputed from the primals, so autograd sees how every saved value depends
on them, except the *frozen* saved values: those that are constants for differentiation
(random masks, integer tensors, results of the program's ``no_grad`` regions and
``detach()``, anything that depends on no input requiring grad). Those come from the
forward's own saved tensors, so a dropout mask is the mask the forward drew.

That function is compiled by aotgrad itself, with the entry's compilers and partitioner, on
the first differentiable backward, and kept: its gradients carry history in turn, and a
third derivative goes through its own :class:`DifferentiableBackward` the same way.

First-order calls pay nothing for it: the autograd.Function keeps a reference to its inputs
(no copy, no extra saved tensor) and never builds any of this.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx

from .partial_backward import prune_absent_tangents
from .signature import graph_outputs, is_tangent
from .tracing import IN_CUSTOM_FUNCTION, NO_GRAD

__all__ = ["DifferentiableBackward", "DifferentiableBackwardGraph", "differentiable_backward_graph"]

log = logging.getLogger("aotgrad")

_detach = torch.ops.aten.detach.default


@dataclass(frozen=True)
class DifferentiableBackwardGraph:
    """``graph(*primals, *frozen, *tangents) -> grads`` (one per primal, None where the joint
    has none). ``frozen`` indexes the forward's saved tensors; ``reads_inputs`` are the
    primals the graph reads (their values at the call)."""

    graph: fx.GraphModule
    frozen: tuple[int, ...]
    reads_inputs: frozenset[int]


def _outputs_of(g: fx.Graph) -> list[Any]:
    (out,) = g.find_nodes(op="output")
    return pytree.tree_leaves(out.args, is_leaf=lambda x: x is None)


def _is_random(node: fx.Node) -> bool:
    t = node.target
    return isinstance(t, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in t.tags


def _floating(val: Any) -> bool:
    if isinstance(val, (tuple, list)):
        return any(_floating(v) for v in val)
    return isinstance(val, torch.Tensor) and (val.is_floating_point() or val.is_complex())


#: training-mode batch norms: (positions of the running-statistics arguments, outputs that
#: are no function of the inputs for autograd: the new statistics and the reserve). Their
#: other outputs do not read the statistics' values.
_RUNNING_STATS = {
    torch.ops.aten._native_batch_norm_legit_functional.default: ((3, 4), frozenset({3, 4})),
    torch.ops.aten._batch_norm_with_update_functional.default: ((3, 4), frozenset({3, 4, 5})),
}


def _trains(node: fx.Node) -> bool:
    return node.target in _RUNNING_STATS and (
        node.target is not torch.ops.aten._native_batch_norm_legit_functional.default or bool(node.args[5])
    )


def _nondifferentiable_output(node: fx.Node) -> bool:
    """A ``getitem`` of an output autograd never records (batch norm's new statistics)."""
    if node.target is not operator.getitem:
        return False
    src = node.args[0]
    return isinstance(src, fx.Node) and _trains(src) and node.args[1] in _RUNNING_STATS[src.target][1]


def _value_reads(node: fx.Node) -> list[fx.Node]:
    """The input nodes whose values ``node``'s used outputs depend on (a training batch
    norm's outputs other than the new statistics do not read the old ones)."""
    if not _trains(node):
        return node.all_input_nodes
    stats = {node.args[i] for i in _RUNNING_STATS[node.target][0]}
    return [a for a in node.all_input_nodes if a not in stats]


_aten = torch.ops.aten
#: functional scatters autograd differentiates only for real dtypes: view op of the base
_SCATTER_VIEWS = {
    _aten.slice_scatter.default: _aten.slice.Tensor,
    _aten.select_scatter.default: _aten.select.int,
    _aten.diagonal_scatter.default: _aten.diagonal.default,
}


def _kept(node: fx.Node) -> bool:
    return node.op in ("placeholder", "output") or (
        isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable
    )


def _as_inplace_on_copy(g: fx.Graph, n: fx.Node, env: dict) -> fx.Node | None:
    """Functionalization's ops autograd cannot differentiate, written back as the in-place
    op they came from on a copy of their base: ``copy(dst, src)`` (no derivative formula) and
    a scatter of complex values (``slice_scatter``'s formula is real-only). Autograd
    differentiates the in-place form, and functionalization, tracing it again, restores
    the functional op in the graph."""
    view = _SCATTER_VIEWS.get(n.target)
    if n.target is _aten.copy.default and not n.kwargs and len(n.args) == 2:
        dst, src = n.args
        out = g.call_function(_aten.copy_.default, (g.call_function(_aten.clone.default, (env[dst],)), env[src]))
    elif view is not None and not n.kwargs and getattr(n.meta.get("val"), "is_complex", lambda: False)():
        base, src, *rest = n.args
        out = g.call_function(_aten.clone.default, (env[base],))
        target = g.call_function(view, (out, *rest))
        g.call_function(_aten.copy_.default, (target, env[src]))
    else:
        return None
    out.meta = dict(n.meta)
    return out


def differentiable_nodes(joint: fx.GraphModule, primal_requires_grad: Sequence[bool]) -> set[fx.Node]:
    """The joint's nodes whose value eager's autograd would record as a function of an
    input that requires grad (or of a tangent, which may): floating outputs, traced in grad
    mode, not random, not ``detach``, with a differentiable input."""
    diff: set[fx.Node] = set()
    k = 0
    for n in joint.graph.nodes:
        if n.op == "placeholder":
            if is_tangent(n):
                diff.add(n)
            else:
                if primal_requires_grad[k]:
                    diff.add(n)
                k += 1
        elif n.op == "call_function":
            if n.meta.get(NO_GRAD) or _is_random(n) or _nondifferentiable_output(n):
                continue
            if _floating(n.meta.get("val")) and any(a in diff for a in n.all_input_nodes):
                diff.add(n)
    return diff


def differentiable_backward_graph(
    joint: fx.GraphModule,
    num_fwd_outputs: int,
    primal_requires_grad: Sequence[bool],
    saved: Sequence[tuple[str, Any]],
) -> DifferentiableBackwardGraph:
    """Build ``(primals, frozen saved, tangents) -> grads`` from a joint graph traced with
    ``create_graph=True``. ``saved``: the (name, target) of each saved tensor's node in the
    first-order forward graph; the joint's forward part, traced the same way, names its
    nodes the same (a node whose target differs is not taken for the saved one).

    Raises RuntimeError where the recomputed forward would need a random op's value that the
    forward did not save (it cannot be drawn again)."""
    diff = differentiable_nodes(joint, primal_requires_grad)
    by_name = {n.name: n for n in joint.graph.nodes}
    # A saved input that requires no grad is frozen too: the saved value is its value at
    # the call (a copy, where the call then wrote to it).
    frozen_nodes: dict[fx.Node, int] = {}
    for k, (name, target) in enumerate(saved):
        node = by_name.get(name)
        if node is not None and node.target == target and node not in diff and node not in frozen_nodes:
            frozen_nodes[node] = k

    g = fx.Graph()
    env: dict[fx.Node, Any] = {}
    placeholders = joint.graph.find_nodes(op="placeholder")
    primals = [p for p in placeholders if not is_tangent(p)]
    tangents = [p for p in placeholders if is_tangent(p)]
    primal_nodes = {p: g.placeholder(p.name) for p in primals}
    for p, placeholder in primal_nodes.items():
        placeholder.meta = dict(p.meta)
    env.update(primal_nodes)
    for node in frozen_nodes:
        env[node] = g.placeholder(f"saved_{node.name}")
        env[node].meta = dict(node.meta)
    for p in tangents:
        env[p] = g.placeholder(p.name)
        env[p].meta = dict(p.meta)
    differentiable_copies: set[fx.Node] = set()
    for n in joint.graph.nodes:
        if n in env or n.op in ("placeholder", "output"):
            continue
        if n.target is _detach and not n.meta.get(NO_GRAD):
            # autograd's own detach of a value it saved: eager's double backward sees the
            # saved value with its history
            env[n] = env[n.args[0]]
            continue
        copied = _as_inplace_on_copy(g, n, env) or g.node_copy(n, lambda a: env[a])
        if n in diff:
            differentiable_copies.add(copied)
        if n.meta.get(NO_GRAD) and _floating(n.meta.get("val")) and isinstance(n.meta.get("val"), torch.Tensor):
            # eager recorded no autograd for it: a constant for the differentiation
            copied = g.call_function(_detach, (copied,))
            copied.meta = dict(n.meta)
        env[n] = copied
    grads = graph_outputs(joint)[num_fwd_outputs:]
    g.output(tuple(None if x is None else env[x] for x in grads))
    # Only in-place ops (of _as_inplace_on_copy) are impure here: a random op left is one the
    # gradients need (checked below).
    g.eliminate_dead_code(is_impure_node=_kept)
    for n in g.nodes:
        if n.meta.get(IN_CUSTOM_FUNCTION) and n in differentiable_copies:
            raise RuntimeError(
                f"aotgrad: double backward needs to differentiate the value {n.name} ({n.target}) made in a "
                "custom autograd.Function's forward, whose derivative is the Function's own backward; that is "
                "not supported through a compiled function. Compute this higher-order gradient eagerly."
            )
        if n.op == "call_function" and _is_random(n):
            raise RuntimeError(
                f"aotgrad: double backward needs the value of the random op {n.target} (node {n.name}) "
                "again, and the forward did not save it, so it cannot be reproduced. Compute this "
                "higher-order gradient eagerly, or use the default partitioner."
            )
    # Whose values the gradients depend on, from the outputs back (a training batch norm's
    # statistics inputs, and what only they read, are not)
    read = {a for a in _outputs_of(g) if isinstance(a, fx.Node)}
    for n in reversed(g.nodes):
        if n in read and n.op == "call_function":
            read.update(_value_reads(n))
    reads = frozenset(i for i, p in enumerate(primals) if primal_nodes[p] in read)
    gm = fx.GraphModule(joint, g)
    return DifferentiableBackwardGraph(gm, tuple(frozen_nodes.values()), reads)


class DifferentiableBackward:
    """An entry's backward for ``create_graph=True``: ``(primals, saved, tangents) -> grads``
    with autograd history, compiled by aotgrad on first use (see the module docstring).

    ``mutated_inputs`` maps a graph input the call changes (its data, or its size/stride) to
    a word for the change: the recomputation cannot read such an input's value at the call,
    so a differentiable backward that needs it raises, naming it.
    """

    def __init__(
        self,
        trace_joint: Callable[[], fx.GraphModule],
        num_fwd_outputs: int,
        primal_requires_grad: Sequence[bool],
        saved: Sequence[fx.Node],
        mutated_inputs: dict[int, str],
        config: Any,
        name: str,
    ) -> None:
        #: traces the joint again, its gradients taken as create_graph=True takes them
        self._trace_joint = trace_joint
        self._num_fwd_outputs = num_fwd_outputs
        self._primal_requires_grad = tuple(primal_requires_grad)
        #: (name, target) of each saved tensor's node in the forward graph
        self._saved = tuple((n.name, n.target) for n in saved)
        self._mutated_inputs = dict(mutated_inputs)
        self._config = config
        self.name = name
        self.graph: DifferentiableBackwardGraph | None = None
        #: the compiled differentiable backward (an AotFunction), built on first use
        self.compiled: Callable | None = None
        #: per set of absent tangents (autograd's None), the differentiable backward pruned
        #: of what only they feed (:mod:`.partial_backward`), or None where it computes the same
        self._partial: dict[frozenset[int], Callable | None] = {}

    def __repr__(self) -> str:
        state = "not built" if self.compiled is None else f"{len(self.compiled.entries)} entries"
        return f"DifferentiableBackward({self.name}, {state})"

    def _for_absent(self, absent: frozenset[int], num_tangents: int) -> Callable:
        """The compiled differentiable backward for calls whose tangents ``absent`` are None."""
        if not absent:
            assert self.compiled is not None
            return self.compiled
        if absent not in self._partial:
            from .dispatch import AotFunction  # the pipeline imports this module

            assert self.graph is not None
            gm = prune_absent_tangents(self.graph.graph, absent, num_tangents)
            if gm is not None:
                gm.__name__ = f"{self.name}_differentiable_backward_without_{'_'.join(map(str, sorted(absent)))}"  # type: ignore[attr-defined]
            self._partial[absent] = None if gm is None else AotFunction(gm, self._config)
        return self._partial[absent] or self.compiled

    def _build(self) -> Callable:
        from .dispatch import AotFunction  # the pipeline imports this module

        self.graph = differentiable_backward_graph(
            self._trace_joint(), self._num_fwd_outputs, self._primal_requires_grad, self._saved
        )
        log.info(
            "aotgrad: double backward of %s: differentiable backward over %d primals, %d saved constants",
            self.name, len(self._primal_requires_grad), len(self.graph.frozen),
        )
        gm = self.graph.graph
        gm.__name__ = f"{self.name}_differentiable_backward"  # type: ignore[attr-defined]
        return AotFunction(gm, self._config)

    def __call__(
        self, primals: Sequence[Any], saved: Sequence[torch.Tensor], tangents: Sequence[Any],
        absent: frozenset[int] = frozenset(),
    ) -> list:
        if self.compiled is None:
            self.compiled = self._build()
        assert self.graph is not None
        for i in sorted(self.graph.reads_inputs & self._mutated_inputs.keys()):
            raise RuntimeError(
                f"aotgrad: double backward (create_graph=True) through {self.name} needs graph input {i} as it "
                f"was at the call, but the call {self._mutated_inputs[i]} it in place. Higher-order gradients "
                "through a compiled function that mutates an input it differentiates are not supported; "
                "clone the input before the call, or compute this gradient eagerly."
            )
        frozen = [saved[k] for k in self.graph.frozen]
        return list(self._for_absent(absent, len(tangents))(*primals, *frozen, *tangents))
