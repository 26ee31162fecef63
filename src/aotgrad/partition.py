"""Split a joint forward+backward graph into a forward graph and a backward graph.

Contract (see docs/contracts.md). A partitioner is called as
``partition_fn(joint_module, joint_inputs, *, num_fwd_outputs) -> (fw_module, bw_module)``:

- ``joint_module``: ``make_fx(joint)(primals, tangents)``; placeholders ``primals_1..N`` then
  ``tangents_1..M``; the output node holds ``[fw_outs, grads]`` (flattened with pytree, the
  first ``num_fwd_outputs`` leaves are the forward outputs, the rest are the grads, one per
  primal, ``None`` where a primal gets no gradient). Every node carries ``meta["val"]``.
- ``fw_module``: placeholders = the primals (same names); outputs =
  ``[*fw_outs, *saved_tensors, *saved_symints]``.
- ``bw_module``: placeholders = ``[*saved_tensors, *saved_symints, *tangents]``; outputs = the
  grads (one per primal, ``None`` kept).

Saved values keep their joint-graph node names, in both modules. Each partitioner records
the split on both modules' ``.meta`` dict: ``meta["num_fwd_outputs"]``,
``meta["num_saved_tensors"]`` and ``meta["num_saved_symints"]``, so a reader of
``fw_module`` knows that the saved values start at output index ``num_fwd_outputs``
(:func:`saved_bytes` uses this).

Two partitioners: :func:`default_partition` (the forward computes what the forward outputs
need; the backward reads every forward value it uses from the saved set) and
:func:`min_cut_rematerialization_partition` (a max-flow/min-cut over output bytes chooses
the saved set; cheap ops are recomputed in the backward). With both, random ops (tagged
``nondeterministic_seeded``) and ops with side effects or mutations that the eager forward
ran are placed in the forward graph and never recomputed in the backward: the backward reads
their saved outputs, so a dropout mask in the backward is the mask the forward drew. Nodes
that neither the forward outputs nor the grads need are dropped.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
from collections.abc import Iterable, Sequence
from typing import Any

import networkx as nx
import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import optimization_hint

from .core.effects import is_effectful
from .core.signature import graph_outputs, is_tangent

__all__ = [
    "REDUCTION_RECOMPUTE_MAX_NUMEL",
    "SavedReport",
    "SavedValue",
    "default_partition",
    "grad_tangent_dependencies",
    "min_cut_rematerialization_partition",
    "saved_bytes",
    "saved_values",
    "tag_forward_nodes",
]

log = logging.getLogger(__name__)

_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


# --------------------------------------------------------------------------- joint graph


@dataclasses.dataclass(frozen=True)
class _Joint:
    """The pieces of a joint graph a partitioner needs; nodes are the joint graph's own."""

    primals: list[fx.Node]
    tangents: list[fx.Node]
    fw_outs: list[Any]  # fx.Node, or a constant the graph returns as is
    grads: list[Any]  # fx.Node, None, or a constant
    tangent_dependent: frozenset[fx.Node]  # nodes with a tangent among their ancestors


def _split_joint(joint_module: fx.GraphModule, num_fwd_outputs: int) -> _Joint:
    graph = joint_module.graph
    placeholders = graph.find_nodes(op="placeholder")
    tangents = [n for n in placeholders if is_tangent(n)]
    primals = [n for n in placeholders if not is_tangent(n)]
    flat = graph_outputs(joint_module)
    if num_fwd_outputs > len(flat):
        raise ValueError(
            f"num_fwd_outputs={num_fwd_outputs} but the joint graph has only {len(flat)} outputs"
        )
    # Tangent dependence, propagated forward along users in graph (topological) order.
    dependent: set[fx.Node] = set(tangents)
    for node in graph.nodes:
        if node.op != "output" and any(a in dependent for a in node.all_input_nodes):
            dependent.add(node)
    joint = _Joint(
        primals=primals,
        tangents=tangents,
        fw_outs=list(flat[:num_fwd_outputs]),
        grads=list(flat[num_fwd_outputs:]),
        tangent_dependent=frozenset(dependent),
    )
    bad = [o for o in joint.fw_outs if isinstance(o, fx.Node) and o in dependent]
    if bad:
        raise ValueError(f"forward outputs depend on tangents: {[n.name for n in bad]}")
    return joint


def tag_forward_nodes(joint_module: fx.GraphModule, num_fwd_outputs: int) -> None:
    """Tag each joint node the forward outputs need ``partitioner_tag="is_forward"`` (the
    rest ``"is_backward"``): torch's own partitioners place nodes by this tag, so tagging
    keeps them working on our joint graphs unchanged."""
    forward = _ancestors(_nodes(_split_joint(joint_module, num_fwd_outputs).fw_outs))
    for node in joint_module.graph.nodes:
        if node.op not in ("placeholder", "output"):
            node.meta["partitioner_tag"] = "is_forward" if node in forward else "is_backward"


def _nodes(values: Iterable[Any]) -> list[fx.Node]:
    return [v for v in values if isinstance(v, fx.Node)]


def _ancestors(roots: Iterable[fx.Node], stop: frozenset[fx.Node] = frozenset()) -> set[fx.Node]:
    """``roots`` and everything they read, not walking past nodes in ``stop``."""
    seen: set[fx.Node] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in stop:
            stack.extend(node.all_input_nodes)
    return seen


# --------------------------------------------------------------------------- op classes


def _is_random(node: fx.Node) -> bool:
    """An op that draws from the RNG: recomputing it would draw different numbers."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return torch.Tag.nondeterministic_seeded in target.tags
    return False


def _is_impure(node: fx.Node) -> bool:
    """An op with a side effect or a mutation: run once, in the graph eager ran it in
    (random ops are classified separately, by :func:`_is_random`)."""
    if node.op != "call_function":
        return False
    target = node.target
    if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
        return True
    return is_effectful(target) or node.is_impure(impure_random=False)


def _is_sym(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), _SYM_TYPES)


def _is_tensor(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), torch.Tensor)


def _must_run_in_forward(node: fx.Node) -> bool:
    """A tangent-independent node the forward must compute (and save) when backward needs it.

    Random and impure ops, because eager ran them once, in the forward. Symbolic scalars
    (sizes), because saving an int is cheaper than saving the tensor it was read from.
    """
    return _is_random(node) or _is_impure(node) or _is_sym(node)


# --------------------------------------------------------------------------- building


def _extract(
    joint_module: fx.GraphModule,
    inputs: Sequence[fx.Node],
    outputs: Sequence[Any],
    effects: Sequence[fx.Node] = (),
) -> fx.GraphModule:
    """A new module computing ``outputs`` from ``inputs`` with the joint graph's nodes.

    Only the nodes ``outputs`` (and the side-effect nodes ``effects``) need are copied (in
    joint order, so the copy is topologically sorted); names and ``meta`` are kept. Needing a
    joint placeholder that is not among ``inputs`` is a partitioner bug and raises.
    """
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in inputs:
        new = graph.placeholder(node.name, type_expr=node.type)
        new.meta = dict(node.meta)
        env[node] = new
    needed = _ancestors([*_nodes(outputs), *effects], stop=frozenset(inputs))
    for node in joint_module.graph.nodes:
        if node not in needed or node in env:
            continue
        if node.op == "placeholder":
            raise RuntimeError(f"partition: {node.name} is needed but is not an input")
        if node.op == "output":
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output([env[o] if isinstance(o, fx.Node) else o for o in outputs])
    # The joint module is the root so get_attr targets (constants) are copied along.
    module = fx.GraphModule(joint_module, graph)
    return module


def _build(
    joint_module: fx.GraphModule, joint: _Joint, saved: Iterable[fx.Node]
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Forward and backward modules for a chosen set of saved values (any order, no dups)."""
    order = {n: i for i, n in enumerate(joint_module.graph.nodes)}
    saved = sorted(set(saved), key=order.__getitem__)
    for node in saved:
        if not (_is_tensor(node) or _is_sym(node)):
            raise RuntimeError(
                f"partition: cannot save {node.name}, whose value is {node.meta.get('val')!r}"
            )
    tensors = [n for n in saved if _is_tensor(n)]
    symints = [n for n in saved if not _is_tensor(n)]
    # Side effects nobody reads (eager's linalg error checks) still run, in the forward.
    effects = [
        n for n in joint_module.graph.nodes
        if n.op == "call_function" and is_effectful(n.target) and n not in joint.tangent_dependent
    ]
    fw_module = _extract(joint_module, joint.primals, [*joint.fw_outs, *tensors, *symints], effects)
    bw_module = _extract(joint_module, [*tensors, *symints, *joint.tangents], joint.grads)
    for module in (fw_module, bw_module):
        module.meta["num_fwd_outputs"] = len(joint.fw_outs)
        module.meta["num_saved_tensors"] = len(tensors)
        module.meta["num_saved_symints"] = len(symints)
    log.debug(
        "partition: saved %d tensors, %d symints: %s",
        len(tensors),
        len(symints),
        [n.name for n in saved],
    )
    return fw_module, bw_module


# --------------------------------------------------------------------------- default


def _forward_nodes(joint: _Joint) -> tuple[set[fx.Node], set[fx.Node]]:
    """(nodes the forward computes, nodes the backward computes) under the default policy.

    Forward: the primals, everything the forward outputs need, every tangent-independent
    node the grads need that must run in forward (with its inputs), and the ``getitem``s of
    multi-output forward nodes the backward reads (a tuple cannot be saved; its items can).
    Backward: everything else the grads need.
    """
    forward = _ancestors([*joint.primals, *_nodes(joint.fw_outs)])
    grad_needs = _ancestors(_nodes(joint.grads))
    forced = [
        n
        for n in grad_needs
        if n not in forward and n not in joint.tangent_dependent and _must_run_in_forward(n)
    ]
    forward |= _ancestors(forced)
    for node in grad_needs - forward:
        for arg in node.all_input_nodes:
            if arg in forward and not (_is_tensor(arg) or _is_sym(arg)):
                if node.target is not operator.getitem:
                    raise RuntimeError(
                        f"partition: {node.name} reads the non-tensor value of {arg.name}"
                    )
                forward.add(node)
    return forward, grad_needs - forward


def default_partition(
    joint_module: fx.GraphModule,
    joint_inputs: Any,
    *,
    num_fwd_outputs: int,
    **kwargs: Any,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Partition like eager autograd: forward computes the forward, backward the rest.

    The forward graph holds the nodes the forward outputs need (plus random/impure ops and
    sizes the backward needs, see :func:`_must_run_in_forward`); the backward graph holds the
    remaining nodes the grads need; every forward value the backward reads (primals
    included) is saved. Nodes nobody needs are dropped. ``joint_inputs`` and extra keyword
    arguments (e.g. torch's ``static_lifetime_input_indices``) are accepted and ignored.
    """
    joint = _split_joint(joint_module, num_fwd_outputs)
    forward, backward = _forward_nodes(joint)
    saved = {arg for node in backward for arg in node.all_input_nodes if arg in forward}
    # A grad that is itself a forward value (a primal, say) is returned from saved values.
    saved |= {g for g in _nodes(joint.grads) if g in forward}
    return _build(joint_module, joint, saved)


# --------------------------------------------------------------------------- min-cut

aten = torch.ops.aten
prims = torch.ops.prims

#: A reduction may be recomputed in the backward when its largest input has at most this
#: many elements (one pass over <= 4 MiB of float32, the cost of a large pointwise op).
REDUCTION_RECOMPUTE_MAX_NUMEL = 1 << 20

# Besides ops tagged ``pointwise`` and view ops (schema returns an alias, no mutation),
# these may be recomputed: copies, reshapes, cheap dtype conversions, and factories.
_RECOMPUTABLE = frozenset(
    {
        aten.clone,
        aten._to_copy,
        prims.convert_element_type,
        aten._unsafe_view,
        aten.lift_fresh_copy,
        aten.scalar_tensor,
        aten.full,
        aten.zeros,
        aten.ones,
        aten.empty,
        aten.arange,
        aten.full_like,
        aten.zeros_like,
        aten.ones_like,
        aten.empty_like,
        aten.new_full,
        aten.new_zeros,
        aten.new_ones,
        aten.new_empty,
    }
)

# Reductions, recomputable below REDUCTION_RECOMPUTE_MAX_NUMEL input elements.
_REDUCTIONS = frozenset(
    {
        aten.sum,
        aten.mean,
        aten.amax,
        aten.amin,
        aten.max,
        aten.min,
        aten.prod,
        aten.var,
        aten.std,
        aten.var_mean,
        aten.any,
        aten.all,
        aten.argmax,
        aten.argmin,
    }
)

# Everything else is never recomputed; named here because they matter most:
# matmuls and convolutions (compute-bound), normalisations and softmax (fused reductions).
_EXPENSIVE = frozenset(
    {
        aten.mm,
        aten.bmm,
        aten.addmm,
        aten.baddbmm,
        aten.convolution,
        aten.convolution_backward,
        aten._scaled_dot_product_flash_attention,
        aten._scaled_dot_product_efficient_attention,
    }
)


def _max_input_numel(node: fx.Node) -> int:
    numels = [
        _hint(a.meta["val"].numel()) for a in node.all_input_nodes if _is_tensor(a)
    ]
    return max(numels, default=0)


def _is_view_op(target: torch._ops.OpOverload) -> bool:
    schema = target._schema
    return not schema.is_mutable and any(
        r.alias_info is not None for r in schema.returns
    )


def _is_recomputable(node: fx.Node) -> bool:
    """Whether the backward may recompute ``node`` instead of having it saved.

    Allowed: getitems of multi-output nodes, constants (get_attr), symbolic-size arithmetic,
    ops tagged ``pointwise``, view ops, the ops in ``_RECOMPUTABLE``, and reductions (sum,
    mean, amax, ...) whose largest input has at most ``REDUCTION_RECOMPUTE_MAX_NUMEL``
    elements. Never: random ops, mutating or side-effecting ops, primals, and any op not
    allowed above (``_EXPENSIVE`` among them).
    """
    if node.op == "placeholder" or _is_random(node) or _is_impure(node):
        return False
    if node.op == "get_attr" or node.target is operator.getitem or _is_sym(node):
        return True
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    packet = target.overloadpacket
    if packet in _EXPENSIVE:
        return False
    if torch.Tag.pointwise in target.tags or _is_view_op(target) or packet in _RECOMPUTABLE:
        return True
    if packet in _REDUCTIONS:
        return _max_input_numel(node) <= REDUCTION_RECOMPUTE_MAX_NUMEL
    return False


def _save_cost_bytes(node: fx.Node) -> int | None:
    """Bytes it costs to save ``node``; a symint costs 1; None where it cannot be saved."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return _hint(val.numel()) * val.element_size()
    if isinstance(val, _SYM_TYPES):
        return 1
    return None


def _has_mutations(graph: fx.Graph) -> bool:
    return any(
        n.op == "call_function"
        and isinstance(n.target, torch._ops.OpOverload)
        and n.target._schema.is_mutable
        for n in graph.nodes
    )


def _choose_saved(joint: _Joint) -> set[fx.Node]:
    """The min-cut: the cheapest set of tangent-independent values the backward can start from.

    Flow network: every tangent-independent node ``n`` the backward transitively needs is
    split into ``n_in -> n_out`` with capacity = the bytes it costs to save (infinite when it
    cannot be saved, e.g. a tuple); ``a_out -> n_in`` is infinite for each input ``a``;
    ``source -> n_in`` is infinite for primals and for nodes that may not be recomputed (so
    they are computed in forward); ``a_out -> sink`` is infinite for each tangent-independent
    value a tangent-dependent node (or a grad output) reads. Cutting ``n_in -> n_out`` means
    saving ``n``; nodes on the sink side are recomputed in the backward.

    Ties: capacities are ``bytes * scale + penalty`` where ``penalty`` is 1 for values the
    forward would not compute anyway, so bytes dominate and, among equal-byte cuts, the
    forward does no extra work; the cut is taken closest to the sink (least recomputation).
    """
    dependent = joint.tangent_dependent
    frontier: set[fx.Node] = {
        a
        for n in _ancestors(_nodes(joint.grads))
        if n in dependent
        for a in n.all_input_nodes
        if a not in dependent
    }
    frontier |= {g for g in _nodes(joint.grads) if g not in dependent}
    candidates = _ancestors(frontier)
    fw_required = _ancestors([*joint.primals, *_nodes(joint.fw_outs)])
    scale = len(candidates) + 1

    graph = nx.DiGraph()
    graph.add_nodes_from(["source", "sink"])
    for node in candidates:
        # Edges without a "capacity" attribute are infinite in networkx. Vertex keys are
        # (node, side) tuples so they never collide with "source"/"sink".
        n_in, n_out = (node, "in"), (node, "out")
        cost = _save_cost_bytes(node)
        if cost is None:
            graph.add_edge(n_in, n_out)
        else:
            penalty = 0 if node in fw_required else 1
            graph.add_edge(n_in, n_out, capacity=cost * scale + penalty)
        if not _is_recomputable(node):
            graph.add_edge("source", n_in)
        for arg in node.all_input_nodes:
            graph.add_edge((arg, "out"), n_in)
        if node in frontier:
            graph.add_edge(n_out, "sink")
    # networkx returns as sink side the vertices that reach the sink in the residual
    # network, so the cut is the minimum one closest to the sink.
    try:
        cut_value, (_, sink_side) = nx.minimum_cut(graph, "source", "sink")
    except nx.NetworkXUnbounded as err:
        raise RuntimeError(
            "min-cut partition: the backward needs a value that can neither be saved nor "
            "recomputed"
        ) from err
    saved = {
        node
        for node in candidates
        if (node, "in") not in sink_side and (node, "out") in sink_side
    }
    log.debug("min-cut partition: cut %s, saving %s", cut_value, sorted(n.name for n in saved))
    return saved


def min_cut_rematerialization_partition(
    joint_module: fx.GraphModule,
    joint_inputs: Any,
    compiler: Any = None,
    *,
    num_fwd_outputs: int,
    **kwargs: Any,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Partition saving the fewest bytes, recomputing cheap forward ops in the backward.

    Which ops may be recomputed is decided by :func:`_is_recomputable` (pointwise ops,
    views, reshapes, cheap conversions, factories, small reductions); random ops, mutations
    and expensive ops (matmuls, convolutions, normalisations) are computed once, in the
    forward, and saved when the backward needs them. The saved set is a minimum cut of the
    joint graph weighted by output bytes (see :func:`_choose_saved`).

    A joint graph that contains in-place ops is not functional: moving reads of a mutated
    buffer across the mutation would change results, so such graphs fall back to
    :func:`default_partition` (logged at WARNING). ``joint_inputs``, ``compiler`` and extra
    keyword arguments (torch's ``static_lifetime_input_indices``) are accepted and ignored.
    """
    if _has_mutations(joint_module.graph):
        log.warning(
            "min-cut partition: the joint graph has in-place ops; using default_partition"
        )
        return default_partition(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs)
    joint = _split_joint(joint_module, num_fwd_outputs)
    return _build(joint_module, joint, _choose_saved(joint))


# --------------------------------------------------------------------------- reporting


@dataclasses.dataclass(frozen=True)
class SavedValue:
    """One value a forward graph saves for the backward. ``dtype`` is None for a symint."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype | None
    nbytes: int


@dataclasses.dataclass(frozen=True)
class SavedReport:
    """What a forward graph saves for the backward; ``bytes`` sums the saved tensors.

    A tensor counts ``numel * element_size`` bytes (symbolic sizes at their hints), each
    saved node once; symints count 0 bytes, though they are listed.
    """

    values: tuple[SavedValue, ...]

    @property
    def bytes(self) -> int:
        return sum(v.nbytes for v in self.values)

    def __repr__(self) -> str:
        lines = [f"SavedReport({len(self.values)} values, {self.bytes} bytes)"]
        for v in self.values:
            kind = "symint" if v.dtype is None else f"{str(v.dtype).removeprefix('torch.')}"
            lines.append(f"  {v.name}: {kind}{list(v.shape)} {v.nbytes} B")
        return "\n".join(lines)


def _hint(x: Any) -> int:
    return optimization_hint(x, fallback=1) if isinstance(x, torch.SymInt) else int(x)


def saved_bytes(fw_module: fx.GraphModule, num_fwd_outputs: int | None = None) -> SavedReport:
    """Report the values ``fw_module`` saves: its outputs from index ``num_fwd_outputs`` on.

    ``num_fwd_outputs`` defaults to ``fw_module.meta["num_fwd_outputs"]``, which this
    module's partitioners record; pass it for a module partitioned elsewhere (torch's).
    """
    if num_fwd_outputs is None:
        if "num_fwd_outputs" not in fw_module.meta:
            raise ValueError(
                "fw_module.meta has no 'num_fwd_outputs' (not partitioned by aotgrad); pass it"
            )
        num_fwd_outputs = fw_module.meta["num_fwd_outputs"]
    values: list[SavedValue] = []
    seen: set[fx.Node] = set()
    for node in _nodes(graph_outputs(fw_module)[num_fwd_outputs:]):
        if node in seen:
            continue
        seen.add(node)
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            shape = tuple(_hint(s) for s in val.shape)
            numel = 1
            for s in shape:
                numel *= s
            values.append(SavedValue(node.name, shape, val.dtype, numel * val.element_size()))
        else:
            values.append(SavedValue(node.name, (), None, 0))
    return SavedReport(tuple(values))


# --------------------------------------------------------------------------- reading a split


def saved_values(fw_module: fx.GraphModule, num_fwd_outputs: int) -> tuple[list[fx.Node], list[fx.Node]]:
    """(saved tensors, saved symints) of a partitioned forward: its outputs from index
    ``num_fwd_outputs`` on, tensors first (the partitioner contract). Works for a module
    partitioned elsewhere (torch's), which records no counts in ``meta``."""
    saved = graph_outputs(fw_module)[num_fwd_outputs:]
    symints = [n for n in saved if isinstance(n, fx.Node) and _is_sym(n)]
    tensors = saved[: len(saved) - len(symints)]
    if symints != saved[len(tensors):]:
        raise RuntimeError("partition: the forward's saved values put a symint before a tensor")
    return tensors, symints


def view_root(node: fx.Node) -> fx.Node:
    """The node whose value ``node``'s is a view of, through view ops such as ``select``,
    ``t``, ``as_strided``, and a multi-output one's ``getitem`` (``split``, ``unbind``;
    ``node`` itself if it is no view): at run time the two share a version counter."""
    while node.op == "call_function" and (
        isinstance(node.target, torch._ops.OpOverload) and node.target.is_view or _item_of_views(node)
    ):
        source = node.args[0]
        if not isinstance(source, fx.Node):
            break
        node = source
    return node


def _item_of_views(node: fx.Node) -> bool:
    """``node`` is ``operator.getitem`` of a multi-output view op's result."""
    if node.target is not operator.getitem or not isinstance(node.args[0], fx.Node):
        return False
    target = node.args[0].target
    return isinstance(target, torch._ops.OpOverload) and target.is_view


def viewed_placeholder(node: fx.Node) -> fx.Node | None:
    """The forward graph's placeholder that ``node`` is (or is a view of), else None: a
    saved value the runtime's write back of that input would change under backward's feet."""
    root = view_root(node)
    return root if root.op == "placeholder" else None


def grad_tangent_dependencies(bw_module: fx.GraphModule) -> tuple[frozenset[int], ...]:
    """For each output of the backward graph (a gradient), the tangents (by order) it reads,
    directly or not; a gradient that reads no tangent depends on none."""
    tangents = [n for n in bw_module.graph.find_nodes(op="placeholder") if is_tangent(n)]
    index = {n: k for k, n in enumerate(tangents)}
    deps: dict[fx.Node, frozenset[int]] = {}
    for n in bw_module.graph.nodes:
        if n in index:
            deps[n] = frozenset((index[n],))
        else:
            acc: frozenset[int] = frozenset()
            for a in n.all_input_nodes:
                acc |= deps.get(a, frozenset())
            deps[n] = acc
    return tuple(
        deps.get(g, frozenset()) if isinstance(g, fx.Node) else frozenset() for g in graph_outputs(bw_module)
    )
