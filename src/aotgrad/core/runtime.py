"""Run compiled graphs with eager semantics: the autograd.Function and the wrapper around it.

:class:`CompiledRuntime` turns the compiled forward (and backward) into a callable over the
call inputs. Every position it needs comes from the entry's
:class:`~aotgrad.core.signature.GraphSignature`, read once here; a call then visits only the
mutated inputs and the aliased outputs.

Order of effects in a call: run the forward; write back input mutations (data in the
input's original geometry, then its new geometry); rebuild each aliased output from the
caller's real tensors.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch._C._functionalization as functionalization
import torch.utils._pytree as pytree
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from .metadata import OutputInfo, OutputType, ViewAndMutationMetadata
from .overlapping_writes import _locations as _element_locations
from .overlapping_writes import _span, strides_keep_apart
from .saved_tensors import EagerSavedTensors, SavedVersions, check_saved_versions
from .signature import GraphSignature
from .symbolic import holds_sym, size_function

__all__ = ["BackwardSpec", "CompiledRuntime", "OutputBuilder", "TensorAlias", "regenerate_alias"]

log = logging.getLogger(__name__)

_set_grad_enabled = torch._C._set_grad_enabled
_DEFAULT_VIEW = torch._C._autograd.CreationMeta.DEFAULT
_set_version_counter = torch._C._autograd._unsafe_set_version_counter


class TensorAlias:
    """Carries an aliased output through ``autograd.Function.apply`` untouched: autograd
    gives a non-tensor no gradient and does not wrap it as a view of the Function's inputs."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __repr__(self) -> str:
        return f"TensorAlias(shape={tuple(self.tensor.shape)})"


def regenerate_alias(base: torch.Tensor, info: OutputInfo, geometry: tuple | None = None) -> torch.Tensor:
    """Rebuild an aliased output off ``base``: replay its view chain, else ``as_strided``.

    ``geometry``: the output's (size, stride, storage_offset) on this call, where the
    entry's are symbolic (``info`` has them otherwise).
    requires_grad is made to match eager's: a view that does not require grad of a base
    that does is replayed under no_grad (as the eager view was made without autograd). An
    output eager made through ``detach()`` is rebuilt off ``base.detach()`` (``_base`` and
    view-ness as in eager). An output eager's later in-place ops invalidated
    (``info.invalidated``) is rebuilt invalidated too (:func:`_invalidated_view`).
    """
    if info.invalidated is not None:
        return _invalidated_view(base, info, geometry)
    return _regenerate(base, info, geometry)


def _invalidated_view(base: torch.Tensor, info: OutputInfo, geometry: tuple | None) -> torch.Tensor:
    """The alias as eager's stale view: made while the shared version counter reads less than
    it does after the call, so the view's recorded version differs from its storage's (as
    eager's does: an in-place op changed the storage after the view was made), with eager's
    creation meta. Autograd then raises on every read of its history (or regenerates an
    ordinary view's grad_fn), as in eager. The counter's value is left as it was where it
    can be, so saved tensors of the storage stay valid (the compiled forward's saved outputs
    are ``.data``, with counters of their own)."""
    try:
        version = base._version
    except RuntimeError:  # an inference tensor has no version counter
        return _regenerate(base, info, geometry)
    # made below the counter's value after the call, where it can: the caller's later
    # in-place ops only raise the counter, so the view stays stale. Where it cannot (at 0,
    # or where rebuilding replays an in-place view op, t_, which records the raised count
    # as the view's), the counter is left one past the view's: eager's storage was written
    # after its view was made, so its counter is past it too.
    _set_version_counter((base,), (version - 1 if version else version,))
    prev = torch.is_grad_enabled()
    if info.invalidated_without_grad_fn:
        _set_grad_enabled(False)  # eager's view has no grad_fn of its own
    history = _made_with_history_since_detached(base, info)
    try:
        if history:
            _set_grad_enabled(True)
            base.requires_grad_(True)
        out = _last_step_view(base, info, geometry)
        if out is None:
            out = _multi_output_view(base, info, geometry)
        if out is None:
            out = _regenerate(base, info, geometry)
    finally:
        if history:
            base.detach_()
        _set_grad_enabled(prev)
        made_at = base._version
        _set_version_counter((base,), (version if made_at < version else made_at + 1,))
    meta = getattr(torch._C._autograd.CreationMeta, info.invalidated)
    if out._is_view() and torch._C._autograd._get_creation_meta(out) != meta:
        torch._C._autograd._set_creation_meta(out, meta)
    return out


def _made_with_history_since_detached(base: torch.Tensor, info: OutputInfo) -> bool:
    """Eager's invalidated view ``info`` has a grad_fn while ``base`` requires no grad: eager
    made the view while its base had a history, which a ``detach_()`` of the base took away
    since (fuzz seed 9010335: ``t8 = t0.split(1, 0)[0]; t0.detach_(); t0.add_(1)``). The view
    keeps its autograd record: it requires grad, and reading its ``grad_fn`` raises (a
    multi-output view) or regenerates one without a next edge (an ordinary view). So it is
    rebuilt as eager made it: off ``base`` made a leaf requiring grad, which is then
    ``detach_()``ed again (``base`` is a graph output or a detached user output: a leaf)."""
    return (
        info.requires_grad and not info.no_grad_view and not info.invalidated_without_grad_fn
        and not info.detached and not base.requires_grad and base.is_leaf and not base._is_view()
        and (base.is_floating_point() or base.is_complex())
    )


def _last_step_view(base: torch.Tensor, info: OutputInfo, geometry: tuple | None) -> torch.Tensor | None:
    """The invalidated view ``info`` (a multi-output view, or a view of one or of a no_grad
    view, with a grad_fn) made, as eager's, by the view op the program made it with
    (``info.last_view_step``, a ``view_geometry.LastViewStep``), of an ``as_strided`` of
    ``base`` laid out as eager's input of that op, so that autograd's error names that op
    and output as eager's does (``Output 0 of T``, ``Output 0 of ReshapeAlias``, ``Output 1
    of Unbind``). Its grad_fn is made in grad mode, the ``as_strided`` under no_grad where
    eager's chain began so; where an in-place metadata op under no_grad re-laid the view
    out since, ``as_strided_`` under no_grad gives it its geometry (eager's grad_fn is still
    the op's). None where the plain rebuild is used: no such op recorded, a detached or
    dtype view, a layout the storage cannot hold, or a result that is not the view's
    geometry (the view is the same view whichever way it is made: only the name differs)."""
    step = info.last_view_step
    if step is None or info.detached or base.dtype != info.dtype or not base.requires_grad:
        return None
    name, attribute, args, kwargs, (size, stride, offset), output, relaid = step
    if offset < 0 or (
        all(n > 0 for n in size)
        and (offset + sum((n - 1) * st for n, st in zip(size, stride))) * base.element_size() >= base.untyped_storage().nbytes()
    ):
        return None
    expected = _view_geometry(base, info) if geometry is None else geometry
    expected = (tuple(expected[0]), tuple(expected[1]), expected[2])
    prev = torch.is_grad_enabled()
    try:
        _set_grad_enabled(not info.no_grad_steps)
        source = base.as_strided(size, stride, offset)
        _set_grad_enabled(True)
        out = getattr(source, name) if attribute else getattr(source, name)(*args, **dict(kwargs))
        if output is not None:
            out = out[output]
        if not isinstance(out, torch.Tensor) or out.grad_fn is None:
            return None
        if relaid:
            # (with eager's creation meta first: an in-place op on an ordinary view would
            # have its grad_fn regenerated as AsStrided; the counter as before: the caller
            # (_invalidated_view) leaves it past the view's, as eager's)
            torch._C._autograd._set_creation_meta(out, getattr(torch._C._autograd.CreationMeta, info.invalidated))
            _set_grad_enabled(False)
            made_at = base._version
            out.as_strided_(*expected)
            _set_version_counter((base,), (made_at,))
    except (RuntimeError, TypeError, IndexError, ValueError):  # not the op's input after all
        return None
    finally:
        _set_grad_enabled(prev)
    if (tuple(out.shape), out.stride(), out.storage_offset()) != expected:
        return None
    return out


def _multi_output_view(base: torch.Tensor, info: OutputInfo, geometry: tuple | None) -> torch.Tensor | None:
    """The invalidated multi-output view ``info`` made, as eager's, by its own op (so that
    autograd's error names it: ``Output 1 of Split``) on an ``as_strided`` of ``base`` laid
    out so that the op's output there has the view's geometry: the outputs before it are
    stacked at stride 0 (``unbind``) or lie where eager's did (``split``). None where the
    plain rebuild (:func:`_regenerate`) is used: no such step recorded, a detached, dtype or
    no_grad view, or a layout the storage cannot hold. (A replayable chain is not replayed:
    an in-place metadata op after the op, under no_grad, would name itself instead.)"""
    step = info.multi_output_step
    if step is None or info.detached or info.no_grad_steps or base.dtype != info.dtype:
        return None
    size, stride, offset = _view_geometry(base, info) if geometry is None else geometry
    size, stride = list(size), list(stride)
    op, n, args = step
    if op == "unbind":
        (dim,) = args
        dim %= len(size) + 1
        return base.as_strided(size[:dim] + [n + 1] + size[dim:], stride[:dim] + [0] + stride[dim:], offset).unbind(dim)[n]
    if op == "split":
        split_size, dim = args
        sizes = [split_size] * n + [size[dim]]
    else:
        chunks, dim = args
        sizes = list(chunks[:n]) + [size[dim]]
    dim %= len(size)
    out = _split_output(base, op, n, sizes, dim, size, stride, offset)
    if out is None:
        # the view was re-strided in place since (t_ under no_grad): the op's arguments name
        # its geometry before; any split whose output ``n`` has the view's geometry names the
        # same op and output in autograd's error
        # (split_with_sizes: empty chunks before it, so it starts at the view's own offset)
        for d in range(len(size)):
            if (d != dim or op == "split_with_sizes") and size[d] > 0:
                chunks = [0] * n if op == "split_with_sizes" else [size[d]] * n
                out = _split_output(base, op, n, chunks + [size[d]], d, size, stride, offset)
                if out is not None:
                    break
    return out


def _view_geometry(base: torch.Tensor, info: OutputInfo) -> tuple:
    """The (size, stride, storage_offset) of the view ``info`` of ``base`` on this call: its
    recorded chain replayed on ``base`` where it has one of view ops only (the kernels laid
    ``base`` out, size-1 dims included, as eager's; the recorded strides there are the meta
    functions', which differ now and then), else the recorded geometry."""
    chain = info.view_source
    if chain is not None and not any("__" in type(vm).__name__[1:] for vm in chain):
        with torch.no_grad():
            v = functionalization.apply_view_meta_sequence(base, chain)
        if tuple(v.shape) == tuple(info.size):
            return tuple(v.shape), v.stride(), v.storage_offset()
    return info.size, info.stride, info.storage_offset


def _split_output(base, op: str, n: int, sizes: list, dim: int, size: list, stride: list, offset: int):
    """Output ``n`` of ``op`` (``split``/``split_with_sizes``, chunk ``sizes`` along ``dim``)
    of an ``as_strided`` of ``base`` placed so that it has the geometry (``size``, ``stride``,
    ``offset``); None where that needs memory outside ``base``'s storage, or gives another
    geometry."""
    start = offset - sum(sizes[:-1]) * stride[dim]
    whole_size = size[:dim] + [sum(sizes)] + size[dim + 1:]
    end = start + sum((k - 1) * st for k, st in zip(whole_size, stride) if k > 0)
    if start < 0 or min(whole_size) > 0 and end * base.element_size() >= base.untyped_storage().nbytes():
        return None
    whole = base.as_strided(whole_size, stride, start)
    out = whole.split_with_sizes(sizes, dim)[n] if op == "split_with_sizes" else whole.split(sizes[0] if n else size[dim], dim)[n]
    if (list(out.shape), list(out.stride()), out.storage_offset()) != (size, stride, offset):
        return None
    return out


def _regenerate(base: torch.Tensor, info: OutputInfo, geometry: tuple | None) -> torch.Tensor:
    if info.detached:
        base = base.detach()
        if not info.is_view:
            # (a dtype view is no autograd view in eager either)
            out = _as_dtype(base, info.dtype)
            _restride_to_output(out, info, geometry)
            return out
    if info.no_grad_steps and base.requires_grad:
        # eager made the first steps under no_grad: the chain's gradient stops there
        k = info.no_grad_steps
        prev = torch.is_grad_enabled()
        _set_grad_enabled(False)
        try:
            head = functionalization.apply_view_meta_sequence(base, info.view_source[:k])
            # the rest eager recorded (its grad mode region, also in a call under no_grad)
            _set_grad_enabled(True)
            return functionalization.apply_view_meta_sequence(head, info.view_source[k:])
        finally:
            _set_grad_enabled(prev)
    if not (base.requires_grad and (not info.requires_grad or info.no_grad_view)):
        return _view_of(base, info, geometry)
    prev = torch.is_grad_enabled()
    _set_grad_enabled(False)
    try:
        return _view_of(base, info, geometry)
    finally:
        _set_grad_enabled(prev)


def _view_of(base: torch.Tensor, info: OutputInfo, geometry: tuple | None) -> torch.Tensor:
    size, stride, offset = (info.size, info.stride, info.storage_offset) if geometry is None else geometry
    if info.view_source is not None:
        out = functionalization.apply_view_meta_sequence(base, info.view_source)
        if out.shape == size and out.dtype == info.dtype:
            return out
    if base.dtype != info.dtype:
        base = _as_dtype(base, info.dtype)
    elif info.off_root and _as_strided_of_root(base):
        base = base._base  # the same elements: as_strided addresses the storage
    for step in info.restrided_through:
        base = base.as_strided(*step)  # (each step's AsStridedBackward0 keeps to its input's elements)
    return base.as_strided(size, stride, offset)


def _as_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` viewed as ``dtype`` (a 0-d tensor through 1-d, which ``view(dtype)`` needs)."""
    if t.dtype == dtype:
        return t
    return t.view(dtype) if t.dim() else t.view(-1).view(dtype)


def _as_strided_of_root(view: torch.Tensor) -> bool:
    """``view._base.as_strided(...)`` has the requires_grad and autograd standing of
    ``view.as_strided(...)`` (same dtype, not detached, not a no_grad or multi-output view)."""
    root = view._base
    return (
        root is not None
        and root.dtype == view.dtype
        and root.requires_grad == view.requires_grad
        and (not view.requires_grad or torch._C._autograd._get_creation_meta(view) == _DEFAULT_VIEW)
    )


class OutputBuilder:
    """Turns the forward outputs into the user's output pytree.

    ``plan`` holds one ``(kind, index, info)`` per user output, with kind one of ``"out"``
    (a forward output position), ``"input"`` (the caller's input), ``"alias_input"``,
    ``"alias_fw"`` (regenerate off a forward output), ``"detached_copy"`` (a detach()ed alias of
    an input given the forward output's history), ``"alias_user"`` (off an earlier user
    output), ``"same"`` (the object of an earlier user output), ``"const"``.
    """

    def __init__(self, metadata: ViewAndMutationMetadata, out_spec: pytree.TreeSpec, signature: GraphSignature):
        plan: list[tuple[str, int, Any]] = []
        position = signature.user_output_positions
        first_base = signature.intermediate_base_slice.start
        slot_of_output = {s.output: k for k, s in enumerate(metadata.leaf_slots) if s.output is not None}
        slot_bases = {s.base for s in metadata.leaf_slots if s.base is not None}
        for j, o in enumerate(metadata.output_info):
            t = o.output_type
            if j in slot_of_output:
                plan.append(("slot", slot_of_output[j], None))
            elif t is OutputType.non_tensor:
                plan.append(("const", 0, o.constant))
            elif o.duplicate_of is not None:
                plan.append(("same", o.duplicate_of, None))
            elif t is OutputType.non_alias and o.graph_returns_root:
                plan.append(("view_of_detached_copy", position[j], o))
            elif t is OutputType.non_alias and o.storage_of_input is not None:
                plan.append(("detached_copy", position[j], o))
            elif t is OutputType.non_alias and o.new_leaf:
                plan.append(("leaf", position[j], None))
            elif t is OutputType.non_alias:
                plan.append(("out", position[j], None))
            elif t is OutputType.is_input:
                plan.append(("input", o.call_input_index, None))
            elif t is OutputType.alias_of_input:
                plan.append(("alias_input", o.call_input_index, o))
            elif t is OutputType.alias_of_intermediate_base_is_user_output:
                plan.append(("alias_user", o.base_index, o))
            else:
                plan.append(("alias_fw", first_base + o.base_index, o))
        self.plan = tuple(plan)
        #: per ``view_of_detached_copy`` output, the record of the detached alias it views
        self.alias_info = {j: _alias_info(o) for j, (kind, _, o) in enumerate(plan) if kind == "view_of_detached_copy"}
        #: (user-output index, kind, index, info): outputs taken as they are, then aliases
        self.direct = tuple((j, *p) for j, p in enumerate(plan) if p[0] in ("out", "input", "const"))
        # an output rebuilt off another user output ("alias_user", "same") comes after it
        # (a view of a detach()ed input alias returned after it, and that view returned twice)
        aliases = [(j, *p) for j, p in enumerate(plan) if p[0] not in ("out", "input", "const")]
        #: call inputs the program detaches in place (``detached_call_inputs``): the
        #: caller's tensors are detached once the aliases requiring grad are rebuilt (eager
        #: made them before its ``detach_()``), before those that do not (made after it)
        self.detached_inputs = metadata.detached_call_inputs

        def made_after_detach(j: int) -> bool:
            kind, idx, info = plan[j]
            if kind == "same":
                return made_after_detach(idx)
            return kind in ("alias_input", "alias_user") and not info.requires_grad or (
                kind == "alias_user" and made_after_detach(idx)
            )

        after = {a[0] for a in aliases if self.detached_inputs and made_after_detach(a[0])}
        # invalidated views before the others of each depth: rebuilding one moves the version
        # counter of its storage (_invalidated_view), which would invalidate a view eager made
        # after its in-place op, rebuilt before it (a no_grad view then raises on grad_fn)
        self.aliases = tuple(sorted(aliases, key=lambda a: (
            a[0] in after, _build_depth(plan, a[0]), getattr(a[3], "invalidated", None) is None
        )))
        #: how many of :attr:`aliases` are rebuilt before the detach
        self.before_detach = len(aliases) - len(after)
        #: user outputs detached once their views are rebuilt (``OutputInfo.detached_after_views``)
        self.detached_outputs = tuple(j for j, o in enumerate(metadata.output_info) if o.detached_after_views)
        #: forward-output positions of intermediate bases the program ``detach_()``ed after
        #: the views rebuilt off them (``ViewAndMutationMetadata.intermediate_base_detached``):
        #: detached once those are rebuilt, as the :attr:`detached_outputs`
        self.detached_bases = tuple(
            first_base + k for k, detached in enumerate(metadata.intermediate_base_detached) if detached
        )
        #: forward-output positions of intermediate bases the program made new autograd leaves
        self.leaf_bases = tuple(
            first_base + k for k, leaf in enumerate(metadata.intermediate_base_new_leaf)
            if leaf and k not in slot_bases
        )
        self.user_slice = signature.user_output_slice
        #: outputs are exactly a slice of the forward outputs
        self.is_slice = (
            all(k == "out" for k, _, _ in plan) and not self.leaf_bases and not slot_bases and not self.detached_inputs
            and not self.detached_outputs and not self.detached_bases
        )
        self.out_spec = out_spec
        if out_spec.is_leaf():
            self.pack = lambda r: r[0]
        elif out_spec == pytree.tree_flatten(tuple(range(out_spec.num_leaves)))[1]:
            self.pack = tuple
        else:
            self.pack = lambda r: pytree.tree_unflatten(r, out_spec)

    def symbolic_sizes(self) -> tuple[tuple, tuple]:
        """What a symbolic entry evaluates on every call: each alias's (size, stride,
        storage_offset), in :attr:`aliases` order (None for a duplicate), and each
        ``const`` output's value, in :attr:`direct` order (SymInt outputs)."""
        geometry = tuple(
            None if info is None else (info.size, info.stride, info.storage_offset)
            for _, _, _, info in self.aliases
        )
        return geometry, tuple(info for _, kind, _, info in self.direct if kind == "const")

    def __call__(self, fw_outs: Any, call_inputs: Any, sizes: tuple | None = None, slots: Any = ()) -> Any:
        """The user outputs; ``input``/``alias_input`` index the caller's distinct inputs;
        ``sizes``: :meth:`symbolic_sizes` evaluated on this call (symbolic entries)."""
        if self.is_slice:
            return self.pack(fw_outs[self.user_slice])
        result: list[Any] = [None] * len(self.plan)
        geometry, constants = (None, None) if sizes is None else sizes
        if self.leaf_bases:
            fw_outs = list(fw_outs)
            for p in self.leaf_bases:
                fw_outs[p] = _new_leaf(_unwrap(fw_outs[p]))
        # Direct outputs first: an alias may name a user output that comes after it.
        c = 0
        for j, kind, idx, info in self.direct:
            if kind == "out":
                result[j] = fw_outs[idx]
            elif kind == "input":
                result[j] = call_inputs[idx]
            elif constants is None:
                result[j] = info
            else:
                result[j] = constants[c]
                c += 1
        for k, (j, kind, idx, info) in enumerate(self.aliases):
            if k == self.before_detach:
                _detach_inputs(call_inputs, self.detached_inputs)
            where = None if geometry is None else geometry[k]
            if kind == "alias_fw":
                result[j] = regenerate_alias(_unwrap(fw_outs[idx]), info, where)
            elif kind == "alias_input":
                result[j] = regenerate_alias(call_inputs[idx], info, where)
            elif kind == "alias_user":
                result[j] = regenerate_alias(result[idx], info, where)
            elif kind == "detached_copy":
                result[j] = _detached_alias_with_history(call_inputs[info.storage_of_input], _unwrap(fw_outs[idx]), info, where)
                continue
            elif kind == "view_of_detached_copy":
                real = call_inputs[info.storage_of_input]
                result[j] = _view_of_detached_alias(real, _unwrap(fw_outs[idx]), self.alias_info[j], info, where)
                continue
            elif kind == "leaf":
                result[j] = _new_leaf(fw_outs[idx])
                continue
            elif kind == "slot":
                result[j] = slots[idx]
                continue
            else:
                result[j] = result[idx]
                continue
            if info.new_leaf:
                result[j] = _alias_requiring_grad(result[j], info.new_leaf)
            if info.history_read_before_detach:
                result[j].grad_fn  # regenerated off its base before the base's detach_(), below
        if self.before_detach == len(self.aliases):
            _detach_inputs(call_inputs, self.detached_inputs)
        for j in self.detached_outputs:
            result[j].detach_()  # the program's detach_(), after the views eager took before it
        for p in self.detached_bases:
            # (likewise: a view stale by then regenerates its grad_fn off the detached base,
            # without a next edge, as eager's; the others keep the history they were made with)
            _unwrap(fw_outs[p]).detach_()
        return self.pack(result)


def _detach_inputs(call_inputs: Any, indices: tuple[int, ...]) -> None:
    """The program's ``detach_()`` of these inputs, on the caller's tensors: they become
    leaves that do not require grad; what the compiled forward computed from them keeps
    its history (a leaf's gradient is dropped by its AccumulateGrad, as in eager)."""
    for i in indices:
        call_inputs[i].detach_()


def _build_depth(plan: list[tuple[str, int, Any]], j: int) -> int:
    """How many user outputs output ``j`` is rebuilt through: 0 for one taken as it is, one
    more than its source for ``alias_user``/``same`` (the source is a user output), else 1."""
    kind, idx, _ = plan[j]
    if kind in ("out", "input", "const"):
        return 0
    if kind in ("alias_user", "same"):
        return 1 + _build_depth(plan, idx)
    return 1


def _detached_alias_with_history(real: torch.Tensor, value: torch.Tensor, info: OutputInfo, geometry: tuple | None) -> torch.Tensor:
    """Eager's output that an in-place op with an operand requiring grad made of a
    ``detach()``ed alias of ``real`` (``OutputInfo.storage_of_input``): ``real``'s storage
    in eager's geometry, with its own autograd history: no view, or (``is_view``) a view of
    a fresh detached alias of ``real``. The write back already put
    the new data there; the graph's value (the same data, with the compiled forward's history)
    is copied in with grad enabled, so the alias's grad_fn leads into the compiled backward,
    and the version counter is set back (one in-place op in eager, one write back here).

    Where the output's elements share memory locations (an overlapping ``as_strided``,
    ``expand``, ``unfold``), the copy goes into the fresh alias in its own geometry, through
    ``_GradByLocation`` (a copy into such memory is refused, or sends each location's
    gradient to every element there, which the compiled backward sums again), and the output
    is viewed (or re-strided, with grad) off it afterwards, as eager's is off its alias."""
    root = out = real.detach()
    where = (info.size, info.stride, info.storage_offset) if geometry is None else geometry
    version = root._version
    stale = info.is_view and info.invalidated == "DEFAULT"
    if stale:
        # eager's view was taken before the in-place op gave its base a history: it has no
        # grad_fn of its own and is stale (regenerated off the base on the first read of its
        # grad_fn; an in-place op on it before that read raises as on a leaf). So it is made
        # before the history, at another version than the storage's after the call.
        _set_version_counter((root,), (version - 1 if version else version + 1,))
        try:
            out = root.as_strided(*where)
        finally:
            _set_version_counter((root,), (version,))
    prev = torch.is_grad_enabled()
    root_geometry = (tuple(root.shape), root.stride(), root.storage_offset())
    # (as eager's ``as_strided`` backward decides whether to sum per location: by the quick
    # test; a copy into a view reaching past the alias's locations records a ``CopySlices``
    # whose backward re-strides a gradient laid out as the alias past its extent, and raises)
    if not strides_keep_apart(where[0], where[1]) or not _within_extent(where, root_geometry):
        _set_grad_enabled(True)
        try:
            root.copy_(_GradByLocation.apply(value, root, tuple(where), root_geometry))
            _set_version_counter((root,), (version,))
            if not info.is_view:
                _restride_to_output(out, info, geometry)
        finally:
            _set_grad_enabled(prev)
        return out if stale or not info.is_view else root.as_strided(*where)
    # eager's output views the detached alias (its ``_base``), not the input
    target = root.as_strided(*where) if info.is_view else out
    if not info.is_view:
        _restride_to_output(out, info, geometry)
    _set_grad_enabled(True)
    try:
        target.copy_(value)
    finally:
        _set_grad_enabled(prev)
    _set_version_counter((root,), (version,))
    return target if info.is_view and not stale else out


def _within_extent(inner: tuple, outer: tuple) -> bool:
    """Every memory location ``inner`` (size, stride, storage_offset) addresses lies between
    the first and the last location ``outer`` addresses (strides are not negative)."""
    if any(n == 0 for n in inner[0]):
        return True
    if any(n == 0 for n in outer[0]):
        return False
    (first, last), (lo, hi) = _span(inner), _span(outer)
    return lo <= first and last <= hi


def _alias_info(view: OutputInfo) -> OutputInfo:
    """The ``detached_copy`` record of the detached alias that the graph returns for the
    view ``view`` (``OutputInfo.graph_returns_root``): no view, in ``view.root_geometry``."""
    geometry = {}
    if view.root_geometry is not None:
        geometry = dict(zip(("size", "stride", "storage_offset"), view.root_geometry))
    return dataclasses.replace(
        view, is_view=False, invalidated=None, multi_output_step=None, graph_returns_root=False, root_geometry=None,
        **geometry,
    )


def _view_of_detached_alias(
    real: torch.Tensor, value: torch.Tensor, alias: OutputInfo, info: OutputInfo, geometry: tuple | None
) -> torch.Tensor:
    """Eager's invalidated view (``info``) of a ``detach()``ed alias of ``real`` that an
    in-place op gave a history: the alias (``alias``, its geometry ``real``'s where the
    analysis recorded none) gets the graph's ``value`` with its history
    (:func:`_detached_alias_with_history`), and the view is made off it, invalidated as
    eager's (:func:`_invalidated_view`): its ``_base`` is the alias, as eager's."""
    where = None if info.root_geometry is not None else (tuple(real.shape), real.stride(), real.storage_offset())
    root = _detached_alias_with_history(real, value, alias, where)
    return _invalidated_view(root, info, geometry)


def _locations(geometry: tuple, device: torch.device) -> torch.Tensor:
    """The memory location (storage offset) of each element of ``geometry``, flattened in
    the elements' logical order (int64)."""
    return _element_locations(geometry, device).reshape(-1)


class _GradByLocation(torch.autograd.Function):
    """``root``'s values (its data already holds ``value`` where ``value_geometry`` says),
    with ``value``'s history: the gradient reaching ``root`` (laid out as
    ``root_geometry``) is summed per memory location and each location's sum is shared out
    evenly among the elements of ``value`` there. The compiled backward sums ``value``'s
    gradient per location again (its elements are a view of one alias), so each location
    gets what reached it, as eager's ``as_strided`` backward gives the alias."""

    @staticmethod
    def forward(ctx, value, root, value_geometry, root_geometry):
        ctx.geometries = (value_geometry, root_geometry)
        return root.clone()

    @staticmethod
    def backward(ctx, grad):
        value_geometry, root_geometry = ctx.geometries
        value_locs = _locations(value_geometry, grad.device)
        root_locs = _locations(root_geometry, grad.device)
        if value_locs.numel() == 0:
            return grad.new_zeros(value_geometry[0]), None, None, None
        low = min(int(value_locs.min()), int(root_locs.min()) if root_locs.numel() else 0)
        high = max(int(value_locs.max()), int(root_locs.max()) if root_locs.numel() else 0) + 1
        per_location = grad.new_zeros(high - low).index_add_(0, root_locs - low, grad.reshape(-1))
        count = torch.bincount(value_locs - low, minlength=high - low)
        shared = per_location[value_locs - low] / count[value_locs - low]
        return shared.view(value_geometry[0]), None, None, None


def _unwrap(x: Any) -> Any:
    return x.tensor if type(x) is TensorAlias else x


def _new_leaf(t: torch.Tensor) -> torch.Tensor:
    """A graph output eager made a new autograd leaf (``requires_grad_()`` on a tensor
    without history, inside the program): the same values, as a leaf requiring grad."""
    return t.detach().requires_grad_(True)


def _alias_requiring_grad(out: torch.Tensor, kind: int) -> torch.Tensor:
    """An aliased output rebuilt off a base that does not require grad, where eager's
    requires grad through ``requires_grad_()`` in the program (``OutputInfo.new_leaf``): 1,
    eager's output is that new leaf; 2, an autograd view of such a leaf (which the program
    does not return): made a leaf, then viewed once more to have a grad_fn, as eager's; 3,
    eager's is a view made under no_grad of a base requiring grad."""
    if out.requires_grad:
        return out
    if kind == 3 and (out._base is None or out._base.dtype == out.dtype):
        # a view made under no_grad of a leaf requiring grad: requires grad, no grad_fn,
        # and a backward from it raises, as from eager's no_grad view (a fresh leaf: the
        # caller's tensors are left as they are)
        root = (out if out._base is None else out._base).detach().requires_grad_(True)
        with torch.no_grad():
            return root.as_strided(out.shape, out.stride(), out.storage_offset())
    if not out.is_leaf:  # (cannot be: a tensor that does not require grad has no history)
        out = out.detach()
    out.requires_grad_(True)
    return out if kind == 1 else out.view_as(out)


@dataclass(frozen=True)
class Writeback:
    """One input mutation the runtime applies: forward output ``position`` → graph input
    ``input_index``."""

    position: int
    input_index: int
    data: bool
    metadata: bool
    visible_to_autograd: bool
    #: (size, stride, storage_offset) after the call, for a metadata mutation
    new_view: tuple | None = None
    #: ``InputInfo.metadata_mutation_is_no_op``
    metadata_no_op: bool = False
    #: ``InputInfo.metadata_mutation_under_no_grad``
    metadata_under_no_grad: bool = False


def _writebacks(metadata: ViewAndMutationMetadata, signature: GraphSignature) -> tuple[Writeback, ...]:
    start = signature.mutated_input_slice.start
    out = []
    for k, i in enumerate(signature.mutated_inputs):
        info = metadata.input_info[i]
        out.append(
            Writeback(
                start + k, i, info.mutates_data, info.mutates_metadata, info.mutation_visible_to_autograd,
                info.new_view, info.metadata_mutation_is_no_op, info.metadata_mutation_under_no_grad,
            )
        )
    return tuple(out)


def replay_metadata(real: torch.Tensor, new_view: tuple, no_op: bool = False, under_no_grad: bool = False) -> None:
    """Give ``real`` the (size, stride, storage_offset) the program left it with.

    As in eager, autograd records the change only where it sees it; on a leaf that requires
    grad, or a view of one, eager only allows it under no_grad. A recorded ``no_op``
    (:attr:`InputInfo.metadata_mutation_is_no_op`) is not replayed: its as_strided_ would put
    AsStridedBackward in the history where eager's has view ops that change nothing.

    The version counter ends one past where it was, as eager's in-place metadata op moved it:
    the caller's views of ``real`` (other inputs among them) regenerate their ``grad_fn`` in
    the new geometry when next read, as eager's do (fuzz seeds 1000288, 2000996, 2019802).
    (What the Function saved of the input is saved without its counter, the pipeline's
    ``unversioned``: eager saved it after its op, or refuses it, which ``core/saved_tensors``
    checks.)
    """
    of_leaf = real.is_leaf or (real._base is not None and real._base.is_leaf)
    # (``under_no_grad``: the program's op was, also where the entry runs its write backs
    # with grad enabled for what it records under a no_grad caller)
    recorded = torch.is_grad_enabled() and real.requires_grad and not of_leaf and not under_no_grad
    if no_op and recorded:
        return
    swaps = _swaps_to(real, new_view) if recorded else None
    with torch.set_grad_enabled(recorded):
        if swaps:
            # eager's history holds the program's transposes (t_, transpose_): their backward
            # transposes the gradient back, keeping its strides also in size-1 dims, where
            # AsStridedBackward0 would lay it out as the input
            version = real._version
            for d0, d1 in swaps:
                real.transpose_(d0, d1)
            _set_version_counter((real,), (version + 1,))
        else:
            _restride(real, new_view)
            _set_version_counter((real,), (real._version + 1,))


def _swaps_to(t: torch.Tensor, geometry: tuple) -> list[tuple[int, int]] | None:
    """Transpositions that take ``t``'s (size, stride) to ``geometry``'s, where that is a
    permutation of ``t``'s dims at the same storage offset (a sequence of ``t_`` /
    ``transpose_``); None otherwise. Dims of equal size and stride are interchangeable."""
    size, stride, offset = geometry
    dims = list(zip(t.shape, t.stride()))
    target = list(zip(size, stride))
    if offset != t.storage_offset() or sorted(dims) != sorted(target) or dims == target:
        return None
    swaps = []
    for i, want in enumerate(target):
        if dims[i] != want:
            j = dims.index(want, i + 1)
            dims[i], dims[j] = dims[j], dims[i]
            swaps.append((i, j))
    return swaps


def _restride_to_output(t: torch.Tensor, info: OutputInfo, geometry: tuple | None) -> None:
    """Give ``t`` (a fresh alias, no autograd view) the output's eager geometry: ``geometry``
    where the call computed it (symbolic sizes), else the static one ``info`` recorded."""
    size, stride, offset = (info.size, info.stride, info.storage_offset) if geometry is None else geometry
    if (tuple(t.shape), t.stride(), t.storage_offset()) != (tuple(size), tuple(stride), offset):
        _restride(t, (size, stride, offset))


def _restride(t: torch.Tensor, geometry: tuple) -> None:
    """``t.as_strided_(*geometry)`` keeping ``t``'s version: no data changes, so the compiled
    forward's saved views of ``t`` (made with its old geometry) stay valid, as eager's, saved
    after its own metadata op, are. A later in-place op by the caller still bumps the
    version and fails their backward, as in eager."""
    version = t._version
    t.as_strided_(*geometry)
    if t._base is not None and t.requires_grad and not torch.is_grad_enabled():
        # a view's grad_fn is regenerated for its new geometry when read at a version other
        # than its last read's, as eager's is after its in-place view op under no_grad: read
        # it now, so that the version put back below is such another version
        t.grad_fn  # noqa: B018
    _set_version_counter((t,), (version,))


def apply_writebacks(
    writebacks: tuple[Writeback, ...], fw_outs: Any, graph_inputs: Any, new_views: tuple | None = None
) -> None:
    """Write mutated inputs' new values back into the caller's tensors.

    Data first, in the input's original geometry (the graph returns it that way), then the
    new size/stride/offset, known from analysis (``new_views``, one per write back, when
    they are symbolic): a compiler need not return a view for them.
    """
    for k, w in enumerate(writebacks):
        real = graph_inputs[w.input_index]
        if w.data:
            new = _unwrap(fw_outs[w.position])
            if w.visible_to_autograd:
                real.copy_(new)
            else:
                prev = torch.is_grad_enabled()
                _set_grad_enabled(False)
                try:
                    real.copy_(new)
                finally:
                    _set_grad_enabled(prev)
        if w.metadata:
            replay_metadata(real, w.new_view if new_views is None else new_views[k], w.metadata_no_op, w.metadata_under_no_grad)


@dataclass(frozen=True)
class BackwardSpec:
    """What the autograd.Function needs to run the compiled backward, besides positions
    (those are the signature's)."""

    bw_callable: Callable
    #: (shape, dtype, device) of each tangent, for materialising zeros when autograd passes None
    tangent_meta: tuple[tuple[tuple[int, ...], torch.dtype, torch.device], ...]
    #: saved-tensor indices that are graph inputs mutated by the write back (cloned first)
    saved_inputs_to_clone: tuple[int, ...]
    #: saved-tensor indices that share a version counter with a forward output: saved as
    #: ``.data`` (a counter of its own), so that the caller's later write of the output is
    #: refused only where eager's backward refuses it (:mod:`aotgrad.core.saved_tensors`)
    saved_outputs_unversioned: tuple[int, ...] = ()
    #: per backward output, the tangent indices it depends on
    grad_tangent_deps: tuple[frozenset[int], ...] = ()
    #: per tangent, a maker of its zero value where that is a tensor subclass (else None,
    #: or empty when no tangent is): autograd's None becomes a zero of the traced type
    tangent_zeros: tuple[Callable[[], torch.Tensor] | None, ...] = ()
    #: ``(primals, saved, tangents, absent) -> grads`` with autograd history, for a backward
    #: with ``create_graph=True`` (:class:`~aotgrad.core.higher_order.DifferentiableBackward`);
    #: None: differentiating the gradients again raises
    differentiable: Callable[[Any, Any, Any, frozenset[int]], list] | None = None
    #: per set of tangents autograd passes None for, the backward that runs as eager's engine
    #: does without them, or None where ``bw_callable`` computes the same
    #: (:class:`~aotgrad.core.partial_backward.PartialBackwards`); None: always ``bw_callable``
    partial: Callable[[frozenset[int]], Callable | None] | None = None
    #: graph inputs whose gradient eager lays out as the input itself (see
    #: :func:`_as_input_in_size1_dims`): autograd views whose data the program writes
    grads_laid_out_as_inputs: tuple[int, ...] = ()
    #: (graph input, entry geometry, use geometry) of each leaf whose gradient eager indexes
    #: as the program laid the leaf out when it used it (``InputInfo.grad_layout_at_use``)
    grads_in_use_layout: tuple[tuple[int, tuple, tuple], ...] = ()


def _make_function(
    fw_callable: Callable,
    signature: GraphSignature,
    spec: BackwardSpec,
    alias_positions: tuple[int, ...],
    nondiff_positions: tuple[int, ...],
    anchored: bool = False,
    eager_saved: EagerSavedTensors | None = None,
) -> type:
    """A fresh autograd.Function subclass bound to one compiled forward/backward pair.

    ``anchored``: the Function takes one more argument after the graph inputs, a leaf that
    requires grad (:data:`_ANCHOR`), so that its outputs have a grad_fn where no graph input
    requires grad (outputs computed from a new leaf the program made); it gets no gradient.
    ``eager_saved``: the Function's last argument is the call's :class:`SavedVersions`, and
    its backward first makes eager's version check on what eager saved."""
    n = signature.num_forward_outputs
    saved_tensors = signature.saved_tensor_slice
    saved_symints = signature.saved_symint_slice
    bw = spec.bw_callable
    tangent_positions = signature.tangents
    tangent_meta = spec.tangent_meta
    to_clone = spec.saved_inputs_to_clone
    unversioned = spec.saved_outputs_unversioned
    grad_tangent_deps = spec.grad_tangent_deps
    tangent_zeros = spec.tangent_zeros or (None,) * len(tangent_meta)
    differentiable = spec.differentiable
    partial = spec.partial
    backward_mutated = signature.backward_mutated_inputs
    num_grads = signature.num_graph_inputs
    num_slots = signature.num_leaf_slots
    as_inputs = spec.grads_laid_out_as_inputs
    in_use_layout = spec.grads_in_use_layout

    # A symbolic entry's tangent shapes are read off each call's forward outputs.
    symbolic_tangents = any(holds_sym(shape) for shape, _, _ in tangent_meta)

    # gradients of the Function's arguments after the graph inputs and new leaves: none
    no_grads = (None,) * (int(anchored) + int(eager_saved is not None))

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):  # type: ignore[override]
            if eager_saved is not None:
                ctx.saved_versions = args[-1]
            if anchored or num_slots or eager_saved is not None:
                args = args[:num_grads]  # the anchor, new leaves and record are no graph inputs
            outs = fw_callable(*args)
            if eager_saved is not None:
                ctx.saved_versions.take(eager_saved, args, outs)
            if differentiable is not None:
                # A reference, not a saved tensor: read only by a create_graph backward.
                ctx.primals = args
            if as_inputs:
                # (a view of the caller's, whose history eager reroutes; else None)
                ctx.input_strides = tuple(args[i].stride() if args[i]._is_view() else None for i in as_inputs)
            if backward_mutated:
                # the caller's tensors the backward writes into (references, as eager's
                # custom Function holds them)
                ctx.backward_mutated = tuple(args[i] for i in backward_mutated)
            if symbolic_tangents:
                ctx.tangent_shapes = [outs[p].shape for p in tangent_positions]
            saved = list(outs[saved_tensors]) if to_clone or unversioned else outs[saved_tensors]
            for k in to_clone:
                saved[k] = saved[k].clone()
            for k in unversioned:
                saved[k] = saved[k].data
            ctx.save_for_backward(*saved)
            ctx.symints = outs[saved_symints]
            ctx.set_materialize_grads(False)
            result = list(outs[:n])
            for p in alias_positions:
                result[p] = TensorAlias(result[p])
            if nondiff_positions:
                ctx.mark_non_differentiable(*[result[p] for p in nondiff_positions])
            return tuple(result)

        @staticmethod
        def backward(ctx, *grad_outputs):  # type: ignore[override]
            if eager_saved is not None:
                check_saved_versions(eager_saved, ctx.saved_versions, grad_outputs)
            tangents = []
            missing = []
            for k, (p, (shape, dtype, device), zeros) in enumerate(zip(tangent_positions, tangent_meta, tangent_zeros)):
                g = grad_outputs[p]
                if g is None:
                    if zeros is not None:
                        g = zeros()
                    else:
                        g = torch.zeros(ctx.tangent_shapes[k] if symbolic_tangents else shape, dtype=dtype, device=device)
                    missing.append(k)
                elif not g.is_contiguous():
                    g = g.contiguous()
                tangents.append(g)
            if torch.is_grad_enabled() and num_slots:
                raise RuntimeError(
                    "aotgrad: a backward with create_graph=True through a compiled function that "
                    "returns a new autograd leaf (requires_grad_() inside it) and computes other "
                    "outputs from it is not supported. Run this backward without create_graph, or "
                    "the function eagerly."
                )
            if torch.is_grad_enabled() and backward_mutated:
                raise RuntimeError(
                    "aotgrad: a backward with create_graph=True through a compiled function whose "
                    "backward changes a forward input in place (graph inputs "
                    f"{', '.join(map(str, backward_mutated))}: a custom autograd.Function's backward "
                    "writing into a tensor it saved) is not supported. Run this backward without "
                    "create_graph, or the function eagerly."
                )
            # Eager's engine runs no node that only absent gradients reach: their paths are
            # no zeros in its sums (a zero tangent through log at 0 is nan).
            absent = frozenset(missing)
            run = bw if not missing or partial is None else partial(absent) or bw
            if torch.is_grad_enabled():  # create_graph=True: the grads may be differentiated again
                if differentiable is None:
                    return (*_NoDoubleBackward.apply(*run(*ctx.saved_tensors, *ctx.symints, *tangents)), *no_grads)
                grads = differentiable(ctx.primals, ctx.saved_tensors, tangents, absent)
            else:
                grads = run(*ctx.saved_tensors, *ctx.symints, *tangents)
            if backward_mutated:
                grads = list(grads)
                _write_backward_mutations(ctx.backward_mutated, grads[num_grads + num_slots:])
                grads = grads[: num_grads + num_slots]
            if as_inputs:
                grads = list(grads)
                for i, stride in zip(as_inputs, ctx.input_strides, strict=True):
                    grads[i] = _as_input_in_size1_dims(grads[i], stride)
            if in_use_layout:
                grads = list(grads)
                for i, entry, use in in_use_layout:
                    grads[i] = _in_use_layout(grads[i], entry, use)
            if missing:
                # As in eager, an input reached only from outputs that got no gradient gets
                # None, not zeros.
                grads = [
                    None if deps and deps <= absent else g for g, deps in zip(grads, grad_tangent_deps, strict=True)
                ]
            return (*grads, *no_grads)

    return CompiledFunction


def _in_use_layout(grad: torch.Tensor | None, entry: tuple, use: tuple) -> torch.Tensor | None:
    """``grad``, the gradient for a leaf laid out as ``entry`` (size, stride, storage
    offset), indexed instead as the leaf was laid out at the program's uses, ``use``: each
    element the gradient of the storage location ``use`` addresses there (a fresh
    contiguous tensor; differentiable). ``use`` addresses each location once, each one
    ``entry`` addresses (``analysis._grad_layout_at_use``)."""
    if grad is None:
        return None
    (size0, stride0, offset0), (size1, stride1, offset1) = entry, use
    if 0 in size1:
        return grad.new_zeros(size1)
    end = max(
        offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1
        for size, stride, offset in (entry, use) if 0 not in size
    )
    locations = grad.new_zeros(end)
    locations.as_strided(size0, stride0, offset0).copy_(grad)
    return locations.as_strided(size1, stride1, offset1).clone(memory_format=torch.contiguous_format)


def _as_input_in_size1_dims(grad: torch.Tensor | None, stride: tuple[int, ...] | None) -> torch.Tensor | None:
    """``grad`` with the input's strides ``stride`` in its size-1 dims (the same elements
    at the same addresses: an ``as_strided`` view, no copy); unchanged where it differs from
    them in another dim, or where ``stride`` is None (the caller's tensor is no view).

    Invariant: the input is an autograd view whose data the program writes. Eager routes
    its history through its base (``CopySlices`` after a recorded write, a regenerated
    ``AsStridedBackward0`` after a no_grad one), which lays the gradient out as the base, so
    the part of it for the view has the view's own strides; a leaf's ``AccumulateGrad``
    keeps the size-1 dims' strides of what it steals, so they are observable in ``.grad``.
    The compiled backward's kernels choose their own there."""
    if grad is None or stride is None or grad.stride() == stride or grad.dim() != len(stride):
        return grad
    if any(n != 1 and a != b for n, a, b in zip(grad.shape, grad.stride(), stride)):
        return grad
    return grad.as_strided(grad.shape, stride, grad.storage_offset())


def _write_backward_mutations(targets: tuple[torch.Tensor, ...], values: list[Any]) -> None:
    """Write the new values of the inputs the backward mutated into the caller's tensors,
    without autograd (eager's backward runs its in-place op with grad mode off)."""
    prev = torch.is_grad_enabled()
    _set_grad_enabled(False)
    try:
        for real, new in zip(targets, values, strict=True):
            real.copy_(new)
    finally:
        _set_grad_enabled(prev)


#: the extra Function argument of an anchored entry (see :func:`_make_function`)
_ANCHOR = torch.empty(0, requires_grad=True)


class _NoDoubleBackward(torch.autograd.Function):
    """Passes gradients through; differentiating them again raises (an entry without a
    differentiable backward). The compiled backward's saved values carry no autograd
    history, so a second derivative would silently miss terms."""

    @staticmethod
    def forward(ctx, *grads):  # type: ignore[override]
        return tuple(g if g is None else g.view_as(g) for g in grads)

    @staticmethod
    def backward(ctx, *grad_grads):  # type: ignore[override]
        raise RuntimeError(
            "aotgrad: double backward (differentiating gradients made with create_graph=True) "
            "through a compiled function is not supported. Compute higher-order gradients eagerly."
        )


def _setting_requires_grad(forward: Callable, inputs: tuple[int, ...]) -> Callable:
    """``forward`` that first makes the graph inputs ``inputs`` require grad, as the
    program's ``requires_grad_()`` does to the caller's tensors in eager."""

    def run(*graph_inputs: Any) -> Any:
        for i in inputs:
            graph_inputs[i].requires_grad_(True)
        return forward(*graph_inputs)

    return run


def _recording_versions(apply: Callable, calls: threading.local) -> Callable:
    """``apply`` that hands the Function a fresh :class:`SavedVersions` as its last argument
    and leaves it, for :func:`_snapshotting_versions`, in ``calls.record``."""

    def apply_recording(*args: Any) -> Any:
        calls.record = record = SavedVersions()
        return apply(*args, record)

    return apply_recording


def _snapshotting_versions(run: Callable[[Any], Any], calls: threading.local) -> Callable[[Any], Any]:
    """``run`` that reads the witnesses' versions once the call, write backs included, is done:
    a later change is the caller's, which eager's backward would see."""

    def run_snapshotting(graph_inputs: Any) -> Any:
        out = run(graph_inputs)
        calls.record.snapshot()
        return out

    return run_snapshotting


def _holding_grad_accumulators(run: Callable[[Any], Any], made: tuple[tuple[int, tuple | None], ...]) -> Callable[[Any], Any]:
    """``run`` that first makes the AccumulateGrad of each graph input ``made`` names (``(input,
    shape or None)``, ``InputInfo.grad_accumulator_made``), as eager's program made it before
    changing the input's shape, and holds it until the outputs, whose graphs reach it, are
    built (an input holds its accumulator only weakly)."""

    def run_holding(graph_inputs: Any) -> Any:
        held = _grad_accumulators(graph_inputs, made)
        out = run(graph_inputs)
        del held
        return out

    return run_holding


def _grad_accumulators(graph_inputs: Any, made: tuple[tuple[int, tuple | None], ...]) -> list[Any]:
    """The AccumulateGrad node of each graph input ``made`` names, made as
    :func:`_grad_accumulator` makes it; the caller holds the list until the outputs are built."""
    return [_grad_accumulator(graph_inputs[i], shape) for i, shape in made]


def _grad_accumulator(t: torch.Tensor, shape: tuple[int, ...] | None) -> Any:
    """``t``'s AccumulateGrad node (the live one where ``t`` has one, as eager's program
    found it), made while ``t`` has ``shape`` (None: its own): the node checks the gradients
    it gets against that shape. ``t`` is a leaf requiring grad; its geometry and version are
    as they were afterwards."""
    if shape is None or tuple(t.shape) == shape:
        return torch.autograd.graph.get_gradient_edge(t).node
    geometry, version = (tuple(t.shape), t.stride(), t.storage_offset()), t._version
    with torch.no_grad():
        # only the shape is recorded: zero strides address the input's first element only
        t.as_strided_(shape, (0,) * len(shape), t.storage_offset())
        node = torch.autograd.graph.get_gradient_edge(t).node
        t.as_strided_(*geometry)
    _set_version_counter((t,), (version,))
    return node


class CompiledRuntime:
    """A callable over graph inputs that runs one compiled entry with eager semantics.

    ``training``: the forward runs inside an autograd.Function whose backward runs the
    compiled backward. Otherwise the inference graph runs directly.
    """

    def __init__(
        self,
        metadata: ViewAndMutationMetadata,
        signature: GraphSignature,
        out_spec: pytree.TreeSpec,
        fw_callable: Callable,
        backward: BackwardSpec | None,
        graph_inputs_of: Callable[[Any], list] | None = None,
        member_metadata_writebacks: tuple[tuple[int, tuple], ...] = (),
        separate_family_mutations: tuple[int, ...] = (),
        shape_env: ShapeEnv | None = None,
        records_under_no_grad: bool = False,
        anchored: bool = False,
    ) -> None:
        self.metadata = metadata
        self.signature = signature
        #: call inputs → graph inputs (synthetic bases); None when they are the same
        self.graph_inputs_of = graph_inputs_of
        #: (call-input index, (size, stride, storage_offset)) of merged inputs whose
        #: metadata the program changes; applied to the caller's tensor after the call
        self.member_metadata_writebacks = member_metadata_writebacks
        #: (call-input index, forward-output position of its new value) of merged inputs
        #: whose own autograd records their data mutation (a detach()ed alias mutated with
        #: an operand that requires grad): copied in with grad after the base's write back.
        #: Their values are the program's last outputs, which the user never sees.
        n_user = len(metadata.output_info)
        self.separate_family_mutations = tuple(
            (i, signature.user_output_positions[n_user - len(separate_family_mutations) + k])
            for k, i in enumerate(separate_family_mutations)
        )
        self.training = backward is not None
        #: what the autograd.Function's backward runs (None: inference)
        self.backward = backward
        #: a training entry called under no_grad (the program turns grad mode on inside):
        #: the Function is applied, and input mutations and aliases are made, with grad
        #: enabled, each made in eager's mode as the metadata records it
        self.records_under_no_grad = records_under_no_grad and self.training
        self.writebacks = _writebacks(metadata, signature)
        self.outputs = OutputBuilder(metadata, out_spec, signature)
        #: a symbolic entry's ``(alias geometries, new views)`` on a call (None: static)
        self.sizes_of: Callable[..., tuple] | None = None
        if shape_env is not None:
            sizes = (self.outputs.symbolic_sizes(), tuple(w.new_view for w in self.writebacks))
            if holds_sym(sizes):
                self.sizes_of = size_function(sizes, shape_env, signature.num_graph_inputs)
        self._fw = fw_callable
        #: per thread, the running call's :class:`SavedVersions`, if the entry checks any
        self._calls = threading.local()
        if backward is not None:
            # Outputs autograd must not see as views of the Function's inputs: metadata-only
            # mutations (the input itself, re-strided). Aliased and repeated user outputs are
            # no forward outputs (the signature leaves them to the OutputBuilder).
            alias_positions = tuple(w.position for w in self.writebacks if not w.data)
            differentiable = set(signature.tangents) | set(alias_positions)
            nondiff = tuple(p for p in range(signature.num_forward_outputs) if p not in differentiable)
            eager_saved = metadata.eager_saved
            self._function = _make_function(
                fw_callable, signature, backward, alias_positions, nondiff, anchored, eager_saved
            )
            self._apply = self._function.apply
            if eager_saved is not None:  # the record is the Function's last argument
                self._apply = _recording_versions(self._apply, self._calls)
            if anchored:
                apply = self._apply
                self._apply = lambda *graph_inputs: apply(*graph_inputs, _ANCHOR)
        #: graph inputs the program makes require grad (``requires_grad_()``): the caller's
        #: tensors are made to before the forward, so the Function differentiates them
        self.sets_requires_grad = metadata.sets_requires_grad
        #: new leaves the program returns and computes with: made per call, passed to the
        #: Function, given their values after the forward (see ``LeafSlot``)
        self.leaf_slots = metadata.leaf_slots

        #: (graph input, shape or None) of each leaf input whose AccumulateGrad eager's program
        #: made before changing its shape (``InputInfo.grad_accumulator_made``)
        self.grad_accumulators_made = tuple(
            (i, info.grad_accumulator_shape) for i, info in enumerate(metadata.input_info) if info.grad_accumulator_made
        )
        run = self._build_run()
        if self.grad_accumulators_made and graph_inputs_of is None:
            # (with synthetic bases run_with_bases makes them off the graph inputs it makes:
            # an unmerged leaf input, or a leaf that is a merged input's common ._base)
            run = _holding_grad_accumulators(run, self.grad_accumulators_made)
        if self.training and metadata.eager_saved is not None:
            run = _snapshotting_versions(run, self._calls)
        if self.records_under_no_grad:
            def run_recording(graph_inputs: Any, run: Callable[[Any], Any] = run) -> Any:
                _set_grad_enabled(True)
                try:
                    return run(graph_inputs)
                finally:
                    _set_grad_enabled(False)

            self.run: Callable[[Any], Any] = run_recording
        else:
            self.run = run

    def _build_run(self) -> Callable[[Any], Any]:
        """``run(call_inputs) -> user outputs``, specialised to what this entry needs: the
        common entry (no mutation, outputs a slice of the forward's) is two calls."""
        forward = self._apply if self.training else self._fw
        if self.sets_requires_grad:
            forward = _setting_requires_grad(forward, self.sets_requires_grad)
        writebacks = self.writebacks
        outputs = self.outputs
        graph_inputs_of = self.graph_inputs_of
        member_metadata = self.member_metadata_writebacks
        separate_families = self.separate_family_mutations
        sizes_of = self.sizes_of
        if self.leaf_slots and self.training:
            return self._run_with_slots(forward)
        if sizes_of is not None:

            def run_symbolic(graph_inputs: Any) -> Any:
                # Evaluated first: the write backs change the inputs' sizes.
                output_sizes, new_views = sizes_of(*graph_inputs)
                fw_outs = forward(*graph_inputs)
                if writebacks:
                    apply_writebacks(writebacks, fw_outs, graph_inputs, new_views)
                return outputs(fw_outs, graph_inputs, output_sizes)

            return run_symbolic
        if graph_inputs_of is not None:

            made = self.grad_accumulators_made

            def run_with_bases(call_inputs: Any) -> Any:
                graph_inputs = graph_inputs_of(call_inputs)
                # held until the outputs are built (see _holding_grad_accumulators)
                held = _grad_accumulators(graph_inputs, made)  # noqa: F841
                fw_outs = forward(*graph_inputs)
                apply_writebacks(writebacks, fw_outs, graph_inputs)
                if separate_families:
                    prev = torch.is_grad_enabled()
                    _set_grad_enabled(True)  # eager's autograd recorded these mutations
                    try:
                        for i, position in separate_families:
                            call_inputs[i].copy_(fw_outs[position])
                    finally:
                        _set_grad_enabled(prev)
                for i, new_view in member_metadata:
                    replay_metadata(call_inputs[i], new_view)
                if separate_families:
                    return outputs(fw_outs, call_inputs)[0]  # (user outputs, new values)
                return outputs(fw_outs, call_inputs)

            return run_with_bases
        if not writebacks and outputs.is_slice:
            lo, hi = outputs.user_slice.start, outputs.user_slice.stop
            pack = outputs.pack
            if pack is tuple:
                return lambda graph_inputs: tuple(forward(*graph_inputs)[lo:hi])
            if outputs.out_spec.is_leaf():
                return lambda graph_inputs: forward(*graph_inputs)[lo]
            return lambda graph_inputs: pack(forward(*graph_inputs)[lo:hi])

        def run(graph_inputs: Any) -> Any:
            fw_outs = forward(*graph_inputs)
            if writebacks:
                apply_writebacks(writebacks, fw_outs, graph_inputs)
            return outputs(fw_outs, graph_inputs)

        return run

    def _run_with_slots(self, forward: Callable) -> Callable[[Any], Any]:
        """``run`` of a (static, non-synthetic-base) entry with leaf slots (``LeafSlot``)."""
        writebacks = self.writebacks
        outputs = self.outputs
        md = self.metadata
        first_base = self.signature.intermediate_base_slice.start
        plan = []
        for s in self.leaf_slots:
            if s.alias:
                plan.append((s, None, md.output_info[s.output]))
            elif s.output is not None:
                plan.append((s, self.signature.user_output_positions[s.output], None))
            else:
                plan.append((s, first_base + s.base, None))

        def run_with_slots(graph_inputs: Any) -> Any:
            slots = []
            for s, _, info in plan:
                if info is None:
                    t = torch.empty(s.shape, dtype=s.dtype, device=s.device)
                else:  # a view of the caller's input, as eager's leaf is
                    t = regenerate_alias(graph_inputs[info.call_input_index], info)
                    if not t.is_leaf:
                        t = t.detach()
                slots.append(t.requires_grad_(True))
            fw_outs = list(forward(*graph_inputs, *slots))
            prev = torch.is_grad_enabled()
            _set_grad_enabled(False)
            try:
                for (s, position, info), t in zip(plan, slots):
                    if position is not None:
                        t.set_(_unwrap(fw_outs[position]))
                        fw_outs[position] = t
            finally:
                _set_grad_enabled(prev)
            if writebacks:
                apply_writebacks(writebacks, fw_outs, graph_inputs)
            return outputs(fw_outs, graph_inputs, None, slots)

        return run_with_slots

    def __call__(self, graph_inputs: Any) -> Any:
        return self.run(graph_inputs)

