"""Trace the functional forward, and the joint forward+backward, into FX graphs of ATen ops.

The functional forward returns the outputs :class:`~aotgrad.core.signature.GraphSignature` lays
out: the new value of each mutated input, each non-aliased user output, each intermediate base.
The joint function
``joint(primals, tangents) -> [fw_outs, grads]`` follows the convention of
``docs/contracts.md`` so that partitioners written for torch's AOT Autograd work unchanged.
"""

from __future__ import annotations

import contextlib
import linecache
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_impls import fast_detach
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx._lazy_graph_module import _LazyGraphModule, _use_lazy_graph_module
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing, get_proxy_mode, make_fx, track_tensor_tree
from torch.overrides import TorchFunctionMode

from ..errors import AotgradCompileError, compile_error_from, frame_rank, known_limit, user_frame_of
from .analysis import Analysis, _sets_requires_grad, from_functional, to_functional
from .inplace_ops import SAME_ELEMENTS_INPLACE
from .metadata import ViewAndMutationMetadata
from .eager_rewrites import EagerRewrites
from .functional_storage import UncheckedMetadataOps
from .stale_views import StaleViewUses
from .overlapping_writes import overlaps_itself, scatter_once_per_location
from .saved_tensors import versions_unchecked
from .effects import effects_as_ordered_nodes, is_effectful
from .provenance import backward_stack_traces
from .signature import GraphSignature, mark_tangents

__all__ = ["IN_CUSTOM_FUNCTION", "NO_GRAD", "JointGraph", "NoGradMarks", "analyze_tracing_inference", "analyze_tracing_joint", "fake_detach", "trace_function", "trace_inference", "trace_joint", "trace_loss_joint", "trace_pre_dispatch"]

Program = Callable[..., tuple[list[Any], Any]]


def _functional_forward(
    program: Program, analysis: Analysis, *, protect_mutated_inputs: bool
) -> Callable[..., list[Any]]:
    """The forward as a function of functional inputs returning the forward outputs.

    A mutated input's forward output is its new *data in its geometry at entry*; its new
    geometry is static, in the metadata. So the program gets an alias of an input whose
    metadata it changes: the alias absorbs the size/stride change, and writes through it land
    in the input, in the input's own geometry. (Where the change is undone by the end, as in
    ``unsqueeze_`` then ``squeeze_``, no alias is needed; functionalization is also fragile
    with in-place metadata ops on views.) With ``protect_mutated_inputs`` (the joint), an input
    that requires grad and whose data is mutated is first cloned: an in-place op on a leaf
    would be rejected, and autograd.grad must see the original value. A mutated input the
    program detaches in place is cloned in every trace (autograd refuses ``detach_()`` of a
    view alias), and the clones and aliases are taken with grad recording on whatever the
    caller's grad mode, as eager's input is no view made in no_grad mode.
    """
    md = analysis.metadata
    signature = analysis.signature

    def forward(*inputs: Any) -> list[Any]:
        inputs = list(inputs)
        originals = list(inputs)
        # clones whose geometry the program changes: read back in their entry geometry
        entry_geometry: dict[int, tuple] = {}
        # The clones and aliases below are ours, not the program's: autograd records them
        # whatever the caller's grad mode, as eager records the program's later grad-mode
        # uses of the input itself (a no_grad caller whose program enables grad inside). In
        # the inference trace too: an alias taken under no_grad of an input that requires grad
        # is a view made in no_grad mode, whose in-place metadata op under the program's own
        # enable_grad() autograd refuses, where eager's input is no view (fuzz seed 34002129).
        with _recording():
            for i in signature.mutated_inputs:
                info = md.input_info[i]
                x = inputs[i]
                geometry_changes = info.mutates_metadata and info.new_view != (
                    tuple(x.shape), tuple(x.stride()), x.storage_offset()
                )
                # (and an input that autograd's history reaches only through the program's
                # write, re-laid out: a write recorded through a view alias of it would be
                # replayed by autograd on the alias's chain, which misses the metadata ops)
                # (and, in the inference trace too, an input the program detaches in place,
                # which requires grad or gains a history from a write: its detach_() cuts a
                # clone's history, where a view alias's autograd refuses, "Can't detach views
                # in-place" (fuzz seeds 33014873, 29017461))
                if protect_mutated_inputs and (
                    (info.mutates_data or info.relaid_out_under_no_grad
                     or info.grad_layout_at_use is not None) and x.requires_grad
                    or info.mutation_visible_to_autograd and geometry_changes
                ) or info.detached_in_place:
                    inputs[i] = _clone_keeping_strides(x)
                    if not info.mutates_data:
                        continue  # detached in place (below); the clone absorbs the metadata changes
                    originals[i] = inputs[i]
                    if geometry_changes:
                        # No view alias of the clone here: autograd's view replay does not follow
                        # an in-place view op (t_) applied to a view, so a later write through
                        # a view of it would get a wrong gradient. The clone is the program's
                        # own tensor; its new data is read back in its entry geometry below.
                        c = inputs[i]
                        entry_geometry[i] = (tuple(c.shape), tuple(c.stride()), c.storage_offset())
                        continue
                if geometry_changes or (protect_mutated_inputs and info.mutates_metadata and not info.mutates_data):
                    # alias, not view(shape): view recomputes the strides of size-1 dims, and
                    # the program's stride-following ops (ones_like, clone) would see others
                    inputs[i] = torch.ops.aten.alias.default(inputs[i])
            for i in md.detached_in_place:
                # The program's detach_() of the input resets the history of a copy with a
                # grad_fn (the graph input, a leaf, must keep requiring grad for autograd.grad),
                # so what it computed before still reaches the input, nothing after does.
                # (a mutated one was cloned above)
                if protect_mutated_inputs and i not in signature.mutated_inputs and inputs[i].requires_grad:
                    inputs[i] = _clone_keeping_strides(inputs[i])
        detaches = InPlaceDetaches({id(inputs[i]) for i in md.detached_in_place}) if (
            md.detached_in_place or signature.mutated_inputs
        ) else contextlib.nullcontext()
        # (a leaf used in its new layout: the recorded relayout takes the gradient back to
        # the entry layout, which the runtime lays out as at the use, as eager's is)
        relaid = [
            i for i, x in enumerate(md.input_info)
            if x.relaid_out_under_no_grad or x.grad_layout_at_use is not None
        ]
        relayouts = RecordedRelayouts({id(inputs[i]) for i in relaid}) if (
            relaid and protect_mutated_inputs
        ) else contextlib.nullcontext()
        kept = IntermediateDetaches() if protect_mutated_inputs else contextlib.nullcontext()
        with detaches, relayouts, kept:
            out_leaves, _ = program(*inputs)
        # (ours too, as the clones: recorded under a no_grad caller whose program wrote the
        # clone with grad recording inside; fuzz seed 35001192)
        with _recording():
            for i, (size, stride, offset) in entry_geometry.items():
                originals[i] = _in_geometry(inputs[i], size, stride, offset)
        bases = [out_leaves[j]._base for j in analysis.intermediate_base_sources]
        if isinstance(kept, IntermediateDetaches):
            bases = [kept.before_detach(b) for b in bases]
        if any(b is None for b in bases):
            raise AotgradCompileError(
                "aotgrad internal error: an output that aliased an intermediate in the analysis "
                "run is not a view when traced; please report this program."
            )
        return signature.pack_forward(
            [originals[i] for i in signature.mutated_inputs],
            md.graph_values(
                out_leaves, signature.user_outputs, kept.before_detach if isinstance(kept, IntermediateDetaches) else None
            ),
            bases,
        )

    return forward


def _recording() -> contextlib.AbstractContextManager:
    """Grad recording on for the trace's own clones and aliases of inputs: ``enable_grad()``
    where it is off, else nothing (a pre-dispatch export records each grad-mode switch as a
    graph node: one that changes nothing would be a node too)."""
    return contextlib.nullcontext() if torch.is_grad_enabled() else torch.enable_grad()


def _in_geometry(c: torch.Tensor, size: tuple, stride: tuple, offset: Any) -> torch.Tensor:
    """``c``'s elements read in another geometry of its storage (the one it had at entry).

    Where the two geometries address the same elements in another order (``t_``,
    ``transpose_``, ``unsqueeze_``, ``squeeze_``, a permuting ``as_strided_``), the result is
    built from logical views (``squeeze``, ``permute``, ``reshape``): ``as_strided`` reads
    the storage of the functional value behind ``c``, whose layout the kernels choose at run
    time and may differ from the trace's (``masked_fill`` of a transposed clone: the
    elements came back permuted in the caller's tensor). Otherwise ``as_strided``."""
    values = (*c.shape, *c.stride(), c.storage_offset(), *size, *stride, offset)
    if not any(isinstance(v, torch.SymInt) for v in values) and c.storage_offset() == offset:
        have = [(n, st) for n, st in zip(c.shape, c.stride()) if n != 1]
        want = [(n, st) for n, st in zip(size, stride) if n != 1]
        order: list[int] = []
        for dim in want:
            k = next((k for k, d in enumerate(have) if d == dim and k not in order), None)
            if k is None:
                break
            order.append(k)
        else:
            if len(order) == len(have):
                squeezed = c.reshape([n for n, _ in have])
                return squeezed.permute(order).reshape(size)
    return c.as_strided(size, stride, offset)


def _clone_keeping_strides(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x`` laid out as ``x`` (``clone()`` makes a non-dense layout contiguous,
    and then ``contiguous()`` in the program would return it instead of copying, as eager's
    does on the caller's non-contiguous input). An overlapping layout cannot be written, so it
    is cloned contiguous. The copy is ours, not the program's: the torch-function modes
    (``EagerRewrites`` lays a non-dense tensor out densely again after a program's write into
    it) do not see it (fuzz seed 14002453: ``contiguous()`` of the input returned it)."""
    if is_non_overlapping_and_dense_or_false(x) or overlaps_itself(tuple(x.shape), tuple(x.stride())):
        return x.clone()
    with torch._C.DisableTorchFunction():
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(x)


def _trace(
    fn: Callable, args: tuple, decompositions: dict | None, fake_mode: FakeTensorMode, *, lazy: bool = False,
    pre_dispatch: bool = False,
) -> torch.fx.GraphModule:
    """``fn`` traced over ``args`` into a graph with flat positional placeholders. ``lazy``:
    a graph no compiler is handed (the joint, which the partitioner splits) generates its
    Python code only when something reads or calls it (torch's ``_LazyGraphModule``);
    otherwise it is generated here, once (a caller that edits the graph further passes
    ``lazy`` and forces it after). ``pre_dispatch``: ops are recorded above autograd (make_fx's pre-dispatch tracing), grad
    mode changes as ``torch._C._set_grad_enabled`` nodes; ``fn`` functionalizes at that level."""
    # Inputs that are already plain fake tensors of ``fake_mode`` (static sizes) are traced
    # as they are; make_fx's "fake" mode would convert each one into a new fake tensor first.
    tracing_mode = "real" if fake_mode.shape_env is None and all(
        type(t) is FakeTensor and t.fake_mode is fake_mode
        for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)
    ) else "fake"
    try:
        dispatcher = enable_python_dispatcher() if pre_dispatch else contextlib.nullcontext()
        # lazy in any case: make_fx's own code (pytree signature) would be thrown away below
        with fake_mode, dispatcher, effects_as_ordered_nodes(), _use_lazy_graph_module(True):
            gm = make_fx(
                fn, decomposition_table=decompositions or {}, tracing_mode=tracing_mode, pre_dispatch=pre_dispatch,
                _disable_torch_fn_metadata_mode=_no_torch_fn_metadata(fake_mode),
            )(*args)
    except AotgradCompileError:
        raise
    except Exception as exc:  # tracing a program that ran fine on fake tensors in analysis
        raise compile_error_from(exc, "trace the program into a graph") from exc
    _flat_graph(gm, lazy=lazy)
    _refuse_fake_constants(gm)
    return gm


def _flat_graph(gm: torch.fx.GraphModule, *, lazy: bool) -> None:
    """Give a graph make_fx traced flat positional placeholders (primals_1, ...,
    tangents_1, ...) instead of make_fx's pytree-flattening signature (compilers and the
    runtime call graphs with flat args), and one scatter per written location; its code is
    generated now unless ``lazy`` (see :func:`_trace`)."""
    gm.graph._codegen = torch.fx.graph.CodeGen()
    scatter_once_per_location(gm.graph)
    _scatter_into_detached_inputs(gm.graph)
    gm.recompile()
    if not lazy:
        _LazyGraphModule.force_recompile(gm)


def _scatter_into_detached_inputs(graph: torch.fx.Graph) -> None:
    """Give each ``as_strided_scatter`` of ``graph`` whose ``self`` is a graph input, or a
    view of one, ``self.detach()`` instead (a new node): at run time a graph input may be the
    caller's tensor requiring grad (the inference graph's, or the forward's inside the
    autograd.Function), and ATen asserts such a ``self`` contiguous. The value is the same;
    the graph runs below autograd (the analysis and traces do the same on fake tensors:
    ``fake_mode.OffsetKeepingFakeTensorMode``)."""
    for node in graph.find_nodes(op="call_function", target=torch.ops.aten.as_strided_scatter.default):
        target = node.args[0]
        if not isinstance(target, torch.fx.Node) or not _view_of_graph_input(target):
            continue
        with graph.inserting_before(node):
            detached = graph.call_function(torch.ops.aten.detach.default, (target,))
        if "val" in target.meta:
            detached.meta["val"] = target.meta["val"]
        node.args = (detached, *node.args[1:])


def _view_of_graph_input(node: torch.fx.Node) -> bool:
    """``node`` is a placeholder, or a chain of view ops from one."""
    while node.op == "call_function" and getattr(node.target, "is_view", False) and node.args:
        node = node.args[0]
        if not isinstance(node, torch.fx.Node):
            return False
    return node.op == "placeholder"


def _no_torch_fn_metadata(fake_mode: FakeTensorMode) -> bool:
    """Whether make_fx may leave out its torch-function mode (``TorchFunctionMetadataMode``):
    in a static trace. The mode notes each torch call for ``node.meta["torch_fn"]``, which
    only make_fx's module-stack tracer (export's, ``record_module_stack``) writes, never
    ours; and it turns ``aten.size.default`` of a tensor with symbolic sizes into
    ``aten.sym_size``, which a static trace never meets. It costs a Python hop on every
    torch call of the trace, the analysis's own attribute reads included (2625 per resnet
    inference compile of ``bench/compile_time.py``, 1405 in torch's)."""
    return fake_mode.shape_env is None


def _refuse_fake_constants(gm: torch.fx.GraphModule) -> None:
    """Raise if a constant of ``gm`` is a fake tensor.

    A fake tensor the program reads without taking it as an input (a closure, a module
    attribute of a fake-tensor GraphModule) is traced in as a constant; the compiled graph
    would fail on its first real call, so it is refused at compile time, as torch does.
    """
    from torch._subclasses.fake_tensor import is_fake

    for node in gm.graph.find_nodes(op="get_attr"):
        value = getattr(gm, str(node.target), None)
        if isinstance(value, torch.Tensor) and is_fake(value):
            readers = sorted({str(u.target) for u in node.users}) or ["nothing"]
            raise AotgradCompileError(
                f"aotgrad: the program reads a fake tensor that is not one of its inputs "
                f"(shape {tuple(value.shape)}, read by {', '.join(readers)}): held by a closure or a "
                "module attribute, e.g. of a GraphModule built on fake tensors. A compiled graph "
                "cannot hold a fake tensor as a constant; pass it as an input, or use a real tensor."
            )


def trace_function(fn: Callable, args: tuple, fake_mode: FakeTensorMode) -> torch.fx.GraphModule:
    """``fn`` (already functional: a traced graph, wrapped) traced again over ``args``, fake
    tensors of ``fake_mode``, without decompositions; flat positional placeholders."""
    return _trace(fn, args, None, fake_mode)


@dataclass(frozen=True)
class JointGraph:
    """The traced joint graph and the example inputs it was traced with.

    Placeholders are ``primals_*`` then ``tangents_*`` (tagged, see
    :func:`~aotgrad.core.signature.mark_tangents`); the output is ``[fw_outs, grads]``, laid out
    as ``signature`` says (forward outputs, then one gradient per primal).
    """

    graph: torch.fx.GraphModule
    signature: GraphSignature
    primals: list[torch.Tensor]
    tangents: list[torch.Tensor]
    #: per tangent, the gradients (graph inputs, then new leaves, by position) that eager's
    #: autograd graph, as the joint recorded it, reaches from its forward output
    #: (:func:`reached_inputs`); empty for an output whose gradient the joint leaves out
    tangent_reach: tuple[frozenset[int], ...] = ()


def _tangents(analysis: Analysis, fake_mode: FakeTensorMode) -> list[torch.Tensor]:
    """Fake tangents for the joint: one per forward output the signature takes a tangent
    for, of that output's size, dtype and device (a tensor subclass's structure where the
    output is one)."""
    avals = analysis.forward_output_avals
    structures = analysis.tangent_structures or (None,) * len(avals)
    with fake_mode:
        return [
            torch.empty(avals[p][0], dtype=avals[p][1], device=avals[p][2]) if structures[p] is None
            else structures[p].zeros()
            for p in analysis.signature.tangents
        ]


def trace_joint(
    program: Program,
    analysis: Analysis,
    fake_inputs: list[torch.Tensor],
    fake_mode: FakeTensorMode,
    decompositions: dict | None,
    *,
    grad_enabled: bool = True,
    create_graph: bool = False,
) -> JointGraph:
    """Trace ``joint(primals, tangents) -> [fw_outs, grads]`` under functionalization.

    The forward runs in the caller's grad mode ``grad_enabled`` (under no_grad only the
    program's own ``enable_grad`` regions record autograd, as in eager); the gradients are
    taken whatever the mode. With ``create_graph`` the gradients are taken as eager's
    ``create_graph=True`` takes them: some derivative formulas differ then (mish's, for one,
    is written with differentiable ops only in grad mode)."""
    signature = analysis.signature
    forward = _functional_forward(program, analysis, protect_mutated_inputs=True)
    primals = _primals(fake_inputs, fake_mode)

    tangent_positions = signature.tangents
    tangents = _tangents(analysis, fake_mode)
    # (and the inputs the program itself makes require grad: requires_grad_() on the
    # functional input, so only what it computes afterwards is differentiated)
    md = analysis.metadata
    slot_flips = [slot.flip for slot in md.leaf_slots]
    grad_inputs = tuple(
        i for i, t in enumerate(primals)
        if isinstance(t, torch.Tensor) and (t.requires_grad or md.input_info[i].sets_requires_grad)
    )

    #: forward-output positions whose gradient the joint leaves out (see the retry below)
    refused: frozenset[int] = frozenset()

    def joint(primals: list, tangents: list) -> list:
        # (an input detached in place after autograd saved it: the analysis holds eager's
        # errors for it, the trace's own unpacking would refuse it)
        unchecked = versions_unchecked(md.eager_saved, detaches=bool(md.detached_in_place))
        mode = UncheckedMetadataOps()
        with mode:
            f_primals = [to_functional(p) for p in primals]
            f_tangents = [to_functional(t) for t in tangents]
        leaves = NewLeaves(f_primals) if slot_flips else contextlib.nullcontext()
        stale_uses = StaleViewUses()
        with unchecked, mode, torch.set_grad_enabled(grad_enabled), EagerRewrites(), NoGradMarks(), leaves, stale_uses:
            fw_outs = forward(*f_primals)
        after_forward = [_mutation_state(f) for f in f_primals]
        with unchecked, mode, torch.enable_grad(), EagerRewrites():
            kept = [k for k, p in enumerate(tangent_positions) if p not in refused]
            wrt = [f_primals[i] for i in grad_inputs]
            wrt_positions = list(grad_inputs)
            if slot_flips:
                wrt.extend(leaves.made[k] for k in slot_flips)
                wrt_positions.extend(range(len(f_primals), len(f_primals) + len(slot_flips)))
            grads, reach = _joint_gradients(
                fw_outs, f_tangents, tangent_positions, kept, wrt, wrt_positions,
                len(f_primals) + len(slot_flips), stale_uses, create_graph=create_graph,
            )
            found_reach.append(reach)
        mutated_in_backward = _backward_mutations(f_primals, after_forward, set(signature.mutated_inputs))
        found.append(mutated_in_backward)
        new_values = [from_functional(f_primals[i]) for i in mutated_in_backward]
        return [[from_functional(o) for o in fw_outs], [from_functional(g) for g in grads] + new_values]

    found: list[tuple[int, ...]] = []
    found_reach: list[tuple[frozenset[int], ...]] = []
    try:
        gm = _trace(joint, (primals, tangents), decompositions, fake_mode, lazy=True)
    except AotgradCompileError as exc:
        cause = exc.__cause__
        if cause is None or user_frame_of(cause) is not None:
            raise
        # autograd's own error in the backward formula: where it reads a saved tensor the
        # program changed afterwards (t0 = b @ a; a.unsqueeze_(-1): the formula meets a's new
        # shape), eager's backward raises its version error before that formula runs, and so
        # does the compiled one (saved_tensors.check_saved_versions) wherever the gradient of
        # an output reaches it: the joint leaves those outputs' gradients out (fuzz seed 1003102)
        refused = _refused_positions(md)
        if refused:
            with contextlib.suppress(AotgradCompileError):
                gm = _trace(joint, (primals, tangents), decompositions, fake_mode, lazy=True)
                mark_tangents(gm.graph, len(primals))
                if found and found[-1]:
                    signature = replace(signature, backward_mutated_inputs=found[-1])
                return JointGraph(gm, signature, primals, tangents, found_reach[-1])
            refused = frozenset()
        # autograd's own error in the backward formula: no user frame on its stack
        line = _forward_line_of_failing_gradient(lambda: _trace(joint, (primals, tangents), decompositions, fake_mode, lazy=True))
        if line is None:
            raise
        plain = known_limit(cause)
        reason = f"{type(cause).__name__}: {cause}" if plain is None else f"aotgrad does not support this: {plain}"
        raise AotgradCompileError(f"aotgrad could not trace the gradient of {line}: {reason}") from cause
    mark_tangents(gm.graph, len(primals))
    if found and found[-1]:
        signature = replace(signature, backward_mutated_inputs=found[-1])
    return JointGraph(gm, signature, primals, tangents, found_reach[-1])


def _joint_gradients(
    fw_outs: list[Any], f_tangents: list[Any], tangent_positions: tuple[int, ...], kept: list[int],
    wrt: list[Any], wrt_positions: list[int], num_grads: int, stale_uses: StaleViewUses, *, create_graph: bool,
) -> tuple[list[Any], tuple[frozenset[int], ...]]:
    """The joint's backward, traced under the caller's functional mode with grad recording:
    ``autograd.grad`` of the forward outputs at ``tangent_positions[k]`` for each ``k`` in
    ``kept`` (tangent ``f_tangents[k]``) with respect to ``wrt``. Returns ``num_grads``
    gradients (``wrt[j]``'s at ``wrt_positions[j]``, None elsewhere) and per tangent the
    positions its output's recorded autograd graph reaches (empty for one not kept):
    :attr:`JointGraph.tangent_reach`."""
    # (a returned view that eager's backward reads off its base, where autograd here
    # would replay its recorded chain: StaleViewUses.read_by_backward)
    diff_outs = stale_uses.read_by_backward([fw_outs[tangent_positions[k]] for k in kept])
    backward_stack_traces(diff_outs)  # backward nodes get their forward op's stack_trace
    # one gradient per graph input, then one per new leaf the program returns
    grads: list[Any] = [None] * num_grads
    reach = reached_inputs(diff_outs, wrt)
    tangent_reach = tuple(
        frozenset(wrt_positions[j] for j in reach[kept.index(k)]) if k in kept else frozenset()
        for k in range(len(tangent_positions))
    )
    if diff_outs and wrt:
        computed = torch.autograd.grad(
            diff_outs, wrt, [f_tangents[k] for k in kept], allow_unused=True, create_graph=create_graph
        )
        for i, g in zip(wrt_positions, computed, strict=True):
            grads[i] = g
    return grads, tangent_reach


def reached_inputs(outputs: list[Any], inputs: list[Any]) -> tuple[frozenset[int], ...]:
    """For each of ``outputs``, the positions in ``inputs`` (tensors requiring grad, as
    ``autograd.grad`` takes them) whose node its recorded autograd graph reaches
    (``grad_fn``, then ``next_functions``; a leaf's node is its ``AccumulateGrad``, a
    non-leaf's its ``grad_fn``): eager's backward from that output gives each of them a
    tensor, zeros where a formula reads no incoming gradient (``pow(x, 0)``), and none of
    the others anything. A view made under no_grad, a ``detach()`` or a random op cuts the
    graph as it cut eager's, whatever the traced ops' data flow.

    The ``grad_fn`` reads are no program ops: the joint's torch-function modes do not see them."""
    with torch._C.DisableTorchFunction():
        return _reached_inputs(outputs, inputs)


def _reached_inputs(outputs: list[Any], inputs: list[Any]) -> tuple[frozenset[int], ...]:
    """:func:`reached_inputs`, with torch functions disabled."""
    leaf_position = {id(t): k for k, t in enumerate(inputs) if t.grad_fn is None}
    node_position = {t.grad_fn: k for k, t in enumerate(inputs) if t.grad_fn is not None}
    reach: dict[Any, frozenset[int]] = {}
    for out in outputs:
        root = getattr(out, "grad_fn", None)
        # iterative post-order: a node's reach is its children's, computed first
        stack: list[tuple[Any, bool]] = [] if root is None else [(root, False)]
        while stack:
            node, children_done = stack.pop()
            if node in reach:
                continue
            if type(node).__name__ == "AccumulateGrad":
                k = leaf_position.get(id(node.variable))
                reach[node] = frozenset() if k is None else frozenset((k,))
                continue
            own = frozenset((node_position[node],)) if node in node_position else frozenset()
            children = [n for n, _ in node.next_functions if n is not None]
            if children_done:
                for n in children:
                    own |= reach[n]
                reach[node] = own
            else:
                stack.append((node, True))
                stack.extend((n, False) for n in children if n not in reach)
    return tuple(
        reach[out.grad_fn] if out.grad_fn is not None
        else frozenset((leaf_position[id(out)],)) if id(out) in leaf_position  # (the input itself)
        else frozenset()
        for out in outputs
    )


def _refused_positions(md: ViewAndMutationMetadata) -> frozenset[int]:
    """The forward-output positions from whose gradient eager's backward reaches a saved
    tensor the program changed after saving it (it raises there)."""
    saved = md.eager_saved
    if saved is None:
        return frozenset()
    return frozenset(p for e in saved.entries if e.changed_by_program is not None for p in e.reached_from)


_ANOMALY_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _forward_line_of_failing_gradient(trace_again: Callable[[], Any]) -> str | None:
    """``file:line in fn: "code"`` of the user's line whose gradient failed while the joint
    was traced, where the failure (``trace_again()`` raising again) was autograd's own (a
    backward formula's shape check, say) and so named no user line. Only on that error
    path: the trace is run once more under anomaly mode, whose warning carries the forward
    call's stack (autograd records it per node then); None where none is found."""
    with warnings.catch_warnings(record=True) as caught, torch.autograd.detect_anomaly(check_nan=False):
        warnings.simplefilter("always")
        try:
            trace_again()
        except Exception:  # the same failure, now with the forward's stack in the warning
            pass
    for w in caught:
        text = str(w.message)
        if "Traceback of forward call that caused the error" not in text:
            continue
        frames = [m for m in _ANOMALY_FRAME.finditer(text) if frame_rank(m.group(1)) == 2]
        if frames:
            filename, lineno, function = frames[-1].group(1), int(frames[-1].group(2)), frames[-1].group(3)
            code = linecache.getline(filename, lineno).strip()
            return f'{filename}:{lineno} in {function}: "{code}"'
    return None


def _mutation_state(f: Any) -> tuple[int, tuple] | None:
    """A functional input's mutation counter and geometry, to tell what a later stretch of
    the trace (the backward) changes."""
    if not isinstance(f, torch.Tensor):
        return None
    torch._sync(f)
    return torch._functionalize_mutation_counter(f.elem), (tuple(f.shape), tuple(f.stride()), f.storage_offset())


def _backward_mutations(f_primals: list[Any], after_forward: list[Any], forward_mutated: set[int]) -> tuple[int, ...]:
    """Graph inputs whose data the backward (a custom autograd.Function's, on a tensor it
    saved) changes in place; the backward graph returns their new values and the runtime
    writes them into the caller's tensors, as eager's backward does. Refused: a change of
    size or stride (torch refuses it too, in the same words), and a backward change of an
    input the forward changes as well."""
    mutated = []
    for i, (f, before) in enumerate(zip(f_primals, after_forward)):
        if before is None:
            continue  # a SymInt input is no tensor
        counter, geometry = _mutation_state(f)
        if geometry != before[1]:
            raise BackwardMutationError(
                f"Found a graph input that had its metadata mutated in the backward. This is not "
                f"supported. (aotgrad: graph input {i}'s size or stride is changed in place by the "
                "backward, e.g. a custom autograd.Function's backward calling transpose_() on a "
                "tensor it saved; only data mutations in the backward are written back.)"
            )
        if counter == before[0]:
            continue
        if i in forward_mutated:
            raise BackwardMutationError(
                f"aotgrad: graph input {i} is changed in place by the forward and again by the backward "
                "(a custom autograd.Function's backward writing into a tensor it saved); only inputs "
                "the forward leaves unchanged can be written by the backward."
            )
        mutated.append(i)
    return tuple(mutated)


class BackwardMutationError(AotgradCompileError, AssertionError):
    """A mutation in the backward aotgrad cannot write back. Also an ``AssertionError``, the
    class torch's AOT Autograd raises for these, so callers written for torch catch it."""


#: node meta key: the node was traced with grad mode off (eager recorded no autograd for it)
NO_GRAD = "aotgrad_no_grad"


#: the program's detach (aten's: a differentiable backward's graph, run again, holds it)
_DETACH = frozenset({torch.Tensor.detach, torch.detach, torch.ops.aten.detach.default})
#: node meta key: the node was traced inside a custom autograd.Function's forward (its
#: value's derivative is the Function's backward, which the graph holds only once)
IN_CUSTOM_FUNCTION = "aotgrad_in_custom_function"
_FUNCTION_APPLY = torch.autograd.Function.apply.__func__.__code__


def _inside_custom_function() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code is _FUNCTION_APPLY:
            return True
        frame = frame.f_back
    return False


class NewLeaves(TorchFunctionMode):
    """While the joint's forward runs, collects (in order) the tensors without autograd
    history that the program turns into leaves requiring grad (``requires_grad_()``, or
    ``requires_grad = True``), as the analysis counted them (``LeafSlot.flip``): the joint
    differentiates with respect to the ones the program returns."""

    def __init__(self, inputs: list[Any]) -> None:
        super().__init__()
        self._inputs = {id(t) for t in inputs if isinstance(t, torch.Tensor)}
        self.made: list[torch.Tensor] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if not _sets_requires_grad(func):
            return func(*args, **kwargs)
        t = args[0]
        value = bool(args[1]) if len(args) > 1 else bool(kwargs.get("requires_grad", True))
        new = (
            value and id(t) not in self._inputs and isinstance(t, torch.Tensor)
            and not t.requires_grad and t.grad_fn is None
        )
        out = func(*args, **kwargs)
        if new:
            self.made.append(t)
        return out


class InPlaceDetaches(TorchFunctionMode):
    """While the traced program runs: its ``requires_grad_(False)`` of an input (a leaf in
    eager; here a copy with a grad_fn, see :func:`_functional_forward`) is ``detach_()``, which
    is what it does to a leaf; and ``detach_()`` of a tensor that requires no grad changes
    nothing autograd sees (eager's error on a view was raised by the analysis), so it is
    skipped: the input may be a view alias absorbing its metadata changes here."""

    def __init__(self, detached: set[int]) -> None:
        super().__init__()
        self._detached = detached

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.detach_ and not args[0].requires_grad:
            return args[0]
        if _sets_requires_grad(func) and id(args[0]) in self._detached:
            value = bool(args[1]) if len(args) > 1 else bool(kwargs.get("requires_grad", True))
            if not value and args[0].requires_grad:
                args[0].detach_()
                return None if func is not torch._C.TensorBase.requires_grad_ else args[0]
        return func(*args, **kwargs)


class IntermediateDetaches(TorchFunctionMode):
    """While the joint's program runs: before its ``detach_()`` of an intermediate that
    requires grad (no view, no input), an alias of it keeps its history. Eager's views of it
    taken before keep theirs; where one is an output rebuilt off the intermediate as its base
    (``intermediate_base_requires_grad``), the graph returns the alias as that base, so the
    view's gradient reaches what the intermediate was computed from."""

    def __init__(self) -> None:
        super().__init__()
        self._kept: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def before_detach(self, t: Any) -> Any:
        """The alias kept of ``t`` before its ``detach_()``, else ``t``."""
        entry = self._kept.get(id(t))
        return entry[1] if entry is not None and entry[0] is t else t

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.detach_ and args and args[0].requires_grad and args[0]._base is None:
            with torch.enable_grad():
                self._kept.setdefault(id(args[0]), (args[0], torch.ops.aten.alias.default(args[0])))
        return func(*args, **kwargs)


class RecordedRelayouts(TorchFunctionMode):
    """While the joint's program runs: an in-place metadata op under no_grad on the copy of an
    input that is ``relaid_out_under_no_grad`` is run with grad recording. Eager's autograd
    rebuilds the view's history off its base in the new geometry when it next records a use
    of it; on the copy (no view) the op recorded as such gives the same gradient, as the
    new geometry names the same elements (the analysis refuses other ops)."""

    def __init__(self, copies: set[int]) -> None:
        super().__init__()
        self._copies = copies

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if (
            args and id(args[0]) in self._copies and not torch.is_grad_enabled()
            and getattr(func, "__name__", None) in SAME_ELEMENTS_INPLACE
        ):
            with torch.enable_grad():
                return func(*args, **kwargs)
        return func(*args, **kwargs)


class NoGradMarks(TorchFunctionMode):
    """While a graph is traced, marks the nodes that eager's autograd did not record
    (``node.meta[NO_GRAD]``): what each torch call made with grad mode off (the program's
    ``no_grad`` regions), and the program's own ``detach()``; and the nodes of a custom
    autograd.Function's forward (``node.meta[IN_CUSTOM_FUNCTION]``).
    The graph alone does not say this (autograd's saved outputs are ``detach`` nodes too),
    and a differentiable backward (:mod:`.higher_order`) must treat exactly those values as
    constants, as eager does."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if torch.is_grad_enabled() and func not in _DETACH:
            return func(*args, **(kwargs or {}))
        proxy_mode = get_proxy_mode()
        if proxy_mode is None:
            return func(*args, **(kwargs or {}))
        graph = proxy_mode.tracer.graph
        key = IN_CUSTOM_FUNCTION if func not in _DETACH and _inside_custom_function() else NO_GRAD
        last = graph._root._prev  # the graph's last node, O(1)
        out = func(*args, **(kwargs or {}))
        node = last._next
        while node is not graph._root:
            node.meta[key] = True
            node = node._next
        return out


#: calls after which the joint traced in the analysis run may differ from trace_joint's:
#: ``detach_()`` (:class:`IntermediateDetaches` keeps an alias of an intermediate,
#: :class:`InPlaceDetaches` skips it on a tensor requiring no grad, where the analysis run
#: does neither), ``as_strided``/``as_strided_`` (the analysis's ``EagerRewrites`` reroots
#: writes through such views by its eager layouts, the trace after it by its own: the
#: graphs' fake values differ, e.g. a ``copy`` in the backward at another offset)
_NOT_IN_ONE_RUN = frozenset({torch.Tensor.detach_, torch.Tensor.as_strided, torch.as_strided, torch.Tensor.as_strided_})


class _JointForwardMarks(NoGradMarks):
    """:class:`NoGradMarks` of the joint traced in the analysis run
    (:func:`analyze_tracing_joint`), noting too whether the program makes a call after
    which that joint may differ from :func:`trace_joint`'s (:data:`_NOT_IN_ONE_RUN`)."""

    joint_differs = False

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in _NOT_IN_ONE_RUN:
            self.joint_differs = True
        return super().__torch_function__(func, types, args, kwargs)


def trace_loss_joint(
    program: Program,
    analysis: Analysis,
    fake_inputs: list[torch.Tensor],
    fake_mode: FakeTensorMode,
    decompositions: dict | None,
    loss_output: int,
) -> tuple[torch.fx.GraphModule, tuple[int, ...]]:
    """Trace ``(*primals) -> [*forward outputs, *grads]`` under functionalization: the
    functional forward (laid out as ``analysis.signature``), then the gradient of user
    output ``loss_output`` (a scalar, backpropagated from 1) with respect to each primal
    that requires grad. No tangent inputs: the joint graph export hands out.

    Returns the graph and the primals the gradients are of, in order.
    """
    signature = analysis.signature
    forward = _functional_forward(program, analysis, protect_mutated_inputs=True)
    primals = _primals(fake_inputs, fake_mode)
    grad_inputs = tuple(i for i, t in enumerate(primals) if isinstance(t, torch.Tensor) and t.requires_grad)
    loss_position = signature.user_output_positions[loss_output]

    def joint(*primals: Any) -> list:
        mode = UncheckedMetadataOps()
        with mode:
            f_primals = [to_functional(p) for p in primals]
        with mode, torch.enable_grad(), EagerRewrites(), StaleViewUses():
            fw_outs = forward(*f_primals)
        after_forward = [_mutation_state(f) for f in f_primals]
        with mode, torch.enable_grad(), EagerRewrites():
            grads = torch.autograd.grad(fw_outs[loss_position], [f_primals[i] for i in grad_inputs], allow_unused=True)
        if _backward_mutations(f_primals, after_forward, set(signature.mutated_inputs)):
            raise AotgradCompileError(
                "aotgrad: the backward changes an input in place (a custom autograd.Function's "
                "backward writing into a tensor it saved); an exported joint graph has no output "
                "for it. Not supported."
            )
        return [from_functional(o) for o in fw_outs] + [from_functional(g) for g in grads]

    return _trace(joint, tuple(primals), decompositions, fake_mode), grad_inputs


def trace_inference(
    program: Program,
    analysis: Analysis,
    fake_inputs: list[torch.Tensor],
    fake_mode: FakeTensorMode,
    decompositions: dict | None,
    signature: GraphSignature,
    *,
    grad_enabled: bool,
) -> torch.fx.GraphModule:
    """Trace the functional forward alone (no autograd) into a graph over ``arg{i}_1``
    (torch's names for an inference graph's inputs; a training forward's are ``primals_*``).

    The graph returns what ``signature`` (the analysis's, less the kept mutations) lays out:
    the data mutations of the graph inputs ``analysis.signature`` returns but ``signature``
    does not are kept in the graph as ``copy_`` into the input.
    """
    forward = _functional_forward(program, analysis, protect_mutated_inputs=False)
    returned = analysis.signature.mutated_input_slice
    mutated = analysis.signature.mutated_inputs
    kept = frozenset(mutated) - frozenset(signature.mutated_inputs)
    # requires_grad kept: some ops decompose differently for inputs that require grad
    # (matmul's folding), and the analysis ran with it.
    primals = _primals(fake_inputs, fake_mode)

    def inference(*primals: Any) -> list:
        mode = UncheckedMetadataOps()
        with mode:
            f_primals = [to_functional(p) for p in primals]
        with mode, torch.set_grad_enabled(grad_enabled), EagerRewrites():
            outs = forward(*f_primals)
        result = []
        for i, o in zip(mutated, outs[returned], strict=True):
            if i in kept:
                primals[i].copy_(from_functional(o))
            else:
                result.append(from_functional(o))
        result.extend(from_functional(o) for o in outs[returned.stop:])
        return result

    gm = _trace(inference, tuple(primals), decompositions, fake_mode, lazy=True)
    # The joint graph is pruned by the partitioner; this one goes to the compiler as is.
    gm.graph.eliminate_dead_code(is_impure_node=_keep_node)
    gm.recompile()
    _LazyGraphModule.force_recompile(gm)  # its code generated once, for the compiler
    signature.check_forward_graph(gm, saved=False)
    return gm


def trace_pre_dispatch(
    program: Program,
    analysis: Analysis,
    fake_inputs: list[torch.Tensor],
    fake_mode: FakeTensorMode,
    decompositions: dict | None,
) -> torch.fx.GraphModule:
    """Trace the functional forward above autograd (export's ``pre_dispatch=True``) into a
    graph over ``arg{i}_1`` returning what ``analysis.signature`` lays out (no kept mutations).

    Run in the caller's grad mode, as eager: the program's grad-mode changes are recorded as
    ``torch._C._set_grad_enabled`` nodes, and autograd has not decomposed anything yet, so
    functional CompositeImplicitAutograd ops (``linear``, ``matmul``, ``dropout``) stay whole
    while in-place and view ones decompose (torch's functionalization in export mode
    decides which). ``dropout``'s output may not be written in place (its storage is frozen:
    it can be its input, or a fresh tensor, depending on ``train``), as in torch.
    """
    forward = _functional_forward(program, analysis, protect_mutated_inputs=False)
    primals = _primals(fake_inputs, fake_mode)

    def pre_dispatch_forward(*args: Any) -> tuple:
        mode = UncheckedMetadataOps(pre_dispatch=True, export=True)
        with mode:
            f_primals = [to_functional(p) for p in args]
            outs = forward(*f_primals)
        return tuple(from_functional(o) for o in outs)  # a tuple, as torch's exported graphs

    gm = _trace(pre_dispatch_forward, tuple(primals), decompositions, fake_mode, lazy=True, pre_dispatch=True)
    gm.graph.eliminate_dead_code(is_impure_node=_keep_node)
    gm.recompile()
    _LazyGraphModule.force_recompile(gm)
    analysis.signature.check_forward_graph(gm, saved=False)
    return gm


def analyze_tracing_inference(
    program: Program,
    analyze: Callable[[Program, list[Any]], Analysis],
    fake_inputs: list[torch.Tensor],
    fake_mode: FakeTensorMode,
    usable: Callable[[Analysis], bool],
) -> tuple[Analysis, torch.fx.GraphModule | None]:
    """The analysis and the inference graph from one run of the program.

    ``analyze(program, inputs)`` runs under make_fx: the program's ops are traced, the
    analysis's own work after the run is not (the proxy mode is set aside meanwhile), and
    the graph returns what the analysis's signature lays out, as :func:`trace_inference`'s
    does without kept mutations. For static inputs that are fake leaves of ``fake_mode``
    without a view base, requiring grad as the call's do: what :func:`trace_inference`'s
    primals would be. ``usable(analysis)`` says whether the graph serves the entry (an
    inference entry, no metadata mutation, no synthetic bases). The graph is None where it
    does not, or where an output came out of the analysis's own work untraced: then
    :func:`trace_inference` traces it as usual. Errors are the analysis's, unchanged.
    """
    state: dict[str, Any] = {}

    def analysed_program(*f_inputs: Any) -> tuple[list[Any], Any]:
        out_leaves, spec = program(*f_inputs)
        state["run"] = (f_inputs, out_leaves)
        state["proxy"] = torch._C._unset_dispatch_mode(torch._C._TorchDispatchModeKey.PROXY)
        return out_leaves, spec

    def traced(*primals: Any) -> list:  # placeholders arg{i}_1, as trace_inference's
        try:
            analysis = analyze(analysed_program, list(primals))
        finally:
            proxy = state.pop("proxy", None)
            if proxy is not None:
                torch._C._set_dispatch_mode(proxy)
        state["analysis"] = analysis
        if not usable(analysis):
            return []
        f_inputs, out_leaves = state["run"]
        signature = analysis.signature
        bases = [out_leaves[j]._base for j in analysis.intermediate_base_sources]
        if any(b is None for b in bases):
            return []
        outs = signature.pack_forward(
            [f_inputs[i] for i in signature.mutated_inputs],
            analysis.metadata.graph_values(out_leaves, signature.user_outputs), bases,
        )
        state["graph"] = True
        return [from_functional(o) for o in outs]

    with fake_mode, effects_as_ordered_nodes(), _use_lazy_graph_module(True):  # code generated once, below
        gm = make_fx(
            traced, tracing_mode="real", _disable_torch_fn_metadata_mode=_no_torch_fn_metadata(fake_mode)
        )(*fake_inputs)
    analysis = state["analysis"]
    if not state.get("graph") or _holds_fake_constant(gm):
        return analysis, None
    gm.graph._codegen = torch.fx.graph.CodeGen()
    gm.graph.eliminate_dead_code(is_impure_node=_keep_node)
    gm.recompile()
    _LazyGraphModule.force_recompile(gm)
    analysis.signature.check_forward_graph(gm, saved=False)
    return analysis, gm


def analyze_tracing_joint(
    program: Program,
    analyze: Callable[..., Analysis],
    fake_inputs: list[torch.Tensor],
    fake_mode: FakeTensorMode,
) -> tuple[Analysis, JointGraph | None]:
    """The analysis and the joint graph from one run of the program.

    ``analyze(program, inputs, forward_modes=...)`` runs under make_fx over the primals
    (placeholders ``primals_*``), with the joint forward's :class:`NoGradMarks` where
    :func:`trace_joint` has it (:class:`_JointForwardMarks`, which also notes the calls
    after which the joint could differ); the analysis's own work after the run is not
    traced (the proxy mode is set aside meanwhile). Where the joint's forward is the run as
    traced (:func:`_plain_joint_forward`), the tangent placeholders ``tangents_*`` are
    added after the primals' and the backward is traced as :func:`trace_joint` traces it:
    the same graph, signature and tangent reach. For a training entry (grad mode on, an
    input requiring grad) over static inputs that are fake leaves of ``fake_mode`` without
    a view base, requiring grad as the call's do, with no decompositions and no source
    marks (the caller checks). The joint is None wherever it may not be trace_joint's (a
    call of :data:`_NOT_IN_ONE_RUN`, a write into a view: :func:`_writes_into_views`; an
    output untraced; an error in the backward): then :func:`trace_joint` traces it as
    usual, and raises what it raises. Errors of the run are the analysis's, unchanged."""
    state: dict[str, Any] = {}
    marks = _JointForwardMarks()

    def forward_modes(stale_uses: StaleViewUses) -> list[contextlib.AbstractContextManager]:
        state["stale_uses"] = stale_uses
        return [marks]

    def analysed_program(*f_inputs: Any) -> tuple[list[Any], Any]:
        out_leaves, spec = program(*f_inputs)
        state["run"] = (f_inputs, out_leaves)
        state["proxy"] = torch._C._unset_dispatch_mode(torch._C._TorchDispatchModeKey.PROXY)
        return out_leaves, spec

    def traced(primals: list[Any]) -> list:  # placeholders primals_{i}, as trace_joint's
        try:
            analysis = analyze(analysed_program, list(primals), forward_modes=forward_modes)
            state["analysis"] = analysis
            if marks.joint_differs or not _plain_joint_forward(analysis):
                return []
            tangents = _tangents(analysis, fake_mode)  # (untraced, as trace_joint's)
        finally:
            proxy = state.pop("proxy", None)
            if proxy is not None:
                torch._C._set_dispatch_mode(proxy)
        try:
            return _traced_backward(analysis, state["run"], tangents, state["stale_uses"], state)
        except Exception:  # noqa: BLE001 - trace_joint traces it again and raises its error
            return []

    with fake_mode, effects_as_ordered_nodes(), _use_lazy_graph_module(True):
        gm = make_fx(
            traced, tracing_mode="real", _disable_torch_fn_metadata_mode=_no_torch_fn_metadata(fake_mode)
        )(list(fake_inputs))
    analysis = state["analysis"]
    if "joint" not in state or _holds_fake_constant(gm) or _writes_into_views(gm):
        return analysis, None
    _flat_graph(gm, lazy=True)
    mark_tangents(gm.graph, len(fake_inputs))
    tangents, reach = state["joint"]
    return analysis, JointGraph(gm, analysis.signature, _primals(fake_inputs, fake_mode), tangents, reach)


def _traced_backward(
    analysis: Analysis, run: tuple[Any, list[Any]], tangents: list[torch.Tensor], stale_uses: StaleViewUses,
    state: dict[str, Any],
) -> list:
    """:func:`analyze_tracing_joint`'s part after the analysis: the tangent placeholders,
    the forward outputs as the signature lays them out, the backward; ``[fw_outs, grads]``
    as :func:`trace_joint`'s joint returns them (``[]`` where the run's forward cannot be
    the joint's: an intermediate base not traced as a view, a backward that changes an
    input). Notes ``state["joint"] = (tangents, tangent reach)``."""
    f_primals, out_leaves = run
    md, signature = analysis.metadata, analysis.signature
    bases = [out_leaves[j]._base for j in analysis.intermediate_base_sources]
    if any(b is None for b in bases):
        return []
    fw_outs = signature.pack_forward(
        [f_primals[i] for i in signature.mutated_inputs], md.graph_values(out_leaves, signature.user_outputs), bases
    )
    _tangent_placeholders(tangents)
    mode = UncheckedMetadataOps()
    with mode:
        f_tangents = [to_functional(t) for t in tangents]
    after_forward = [_mutation_state(f) for f in f_primals]
    grad_inputs = [i for i, f in enumerate(f_primals) if isinstance(f, torch.Tensor) and f.requires_grad]
    with mode, torch.enable_grad(), EagerRewrites():
        grads, reach = _joint_gradients(
            fw_outs, f_tangents, signature.tangents, list(range(len(signature.tangents))),
            [f_primals[i] for i in grad_inputs], grad_inputs, len(f_primals), stale_uses, create_graph=False,
        )
    if _backward_mutations(f_primals, after_forward, set(signature.mutated_inputs)):
        return []
    state["joint"] = (tangents, reach)
    return [[from_functional(o) for o in fw_outs], [from_functional(g) for g in grads]]


def _tangent_placeholders(tangents: list[torch.Tensor]) -> None:
    """Placeholders ``tangents_1``, ... for ``tangents`` in the graph being traced, after
    its last placeholder (the primals'), as make_fx makes them for an argument
    ``tangents``: tracked as those tensors' proxies, their fake values in their meta."""
    tracer = get_proxy_mode().tracer
    graph = tracer.graph
    last = graph.find_nodes(op="placeholder")[-1]
    proxies = []
    for k in range(len(tangents)):
        with graph.inserting_after(last):
            last = graph.placeholder(f"tangents_{k + 1}")
        proxies.append(torch.fx.Proxy(last, tracer))
    with disable_proxy_modes_tracing():
        track_tensor_tree(tangents, proxies, constant=None, tracer=tracer)


def _writes_into_views(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` holds a functionalized write into a view: a ``copy`` or a
    ``*_scatter`` node (a write through a view in the program, in an op's own code such as
    circular ``pad``, or autograd's ``CopySlices`` in the backward). In the joint traced in
    the analysis run the fake values of such nodes may differ from :func:`trace_joint`'s
    (seen: a ``copy`` valued at its destination view's storage offset, 0 in trace_joint's,
    for ``t[1:3].add_(1)`` of an intermediate requiring grad), so that joint is not used
    there; the graphs' code is the same."""
    return any(
        isinstance(n.target, torch._ops.OpOverload)
        and (n.target is torch.ops.aten.copy.default or "scatter" in n.target._opname)
        for n in gm.graph.nodes
    )


def _plain_joint_forward(analysis: Analysis) -> bool:
    """Whether :func:`trace_joint`'s forward runs the program on the functional primals as
    they are, under its plain modes only (with no ``detach_()`` call: the caller checks):
    no input cloned, aliased or re-laid out by :func:`_functional_forward` (an input
    changed in place is one requiring no grad, whose data alone changes, and no value
    requiring grad is written into it), none detached in place or made to require grad, no
    new leaf returned (:class:`NewLeaves`), no saved tensor the program changes afterwards
    (``versions_unchecked``), no tensor-subclass output (its tangent a subclass)."""
    md = analysis.metadata
    return (
        all(
            not x.mutated or (
                x.mutates_data and not x.mutates_metadata and not x.requires_grad
                and not x.mutation_visible_to_autograd
            )
            for x in md.input_info
        )
        and not md.detached_in_place and not md.sets_requires_grad and not md.leaf_slots
        and (md.eager_saved is None or not md.eager_saved.changed_by_program)
        and all(s is None for s in analysis.tangent_structures)
    )


def _holds_fake_constant(gm: torch.fx.GraphModule) -> bool:
    """A graph constant is a fake tensor (an output not traced: see
    :func:`analyze_tracing_inference`; or the program reads one, which the trace refuses)."""
    try:
        _refuse_fake_constants(gm)
    except AotgradCompileError:
        return True
    return False


def _primals(fake_inputs: list[Any], fake_mode: FakeTensorMode) -> list[Any]:
    """Fresh fake leaves standing for the graph inputs (SymInt inputs as they are)."""
    return [
        fake_detach(t, fake_mode).requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
        for t in fake_inputs
    ]


def fake_detach(t: torch.Tensor, fake_mode: FakeTensorMode) -> torch.Tensor:
    """``t.detach()`` under ``fake_mode``. For a fake tensor of that mode, the mode's own
    kernel for ``detach`` (``fast_detach``: the same tensor, sharing ``t``'s storage and
    version counter), called directly as make_fx's ``snapshot_fake`` does: without the trip
    through the dispatcher and the mode (~0.07 ms a tensor, for every input of a compile)."""
    if type(t) is FakeTensor and t.fake_mode is fake_mode and not fake_mode.propagate_real_tensors:
        return fast_detach(fake_mode, t)
    with fake_mode:
        return t.detach()


def _keep_node(node: torch.fx.Node) -> bool:
    """Dead nodes that must stay: side effects, and random ops (dropping one would shift
    the generator's stream against eager's). ``eliminate_dead_code`` asks it of every node
    (last first) and erases a node only where it says no and the node has no users left:
    a node with users is answered at once, without reading its op's schema and tags
    (``Node.is_impure``)."""
    if node.users:
        return True
    target = node.target
    if isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags:
        return True
    return is_effectful(target) or node.is_impure()

