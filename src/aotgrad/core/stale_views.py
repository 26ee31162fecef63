"""Uses of (and writes through) views whose recorded op chain no longer gives their geometry.

An in-place metadata op (``t_``, ``transpose_``, ``unsqueeze_``, ``squeeze_``, ``as_strided_``)
on a view (or on a view it was taken from, or on its base) changes the view's geometry, or its
base's, without autograd's record of the view's chain (``_view_func``) following. Eager's
autograd never replays that chain: a view whose storage changed gets its ``grad_fn``
regenerated as ``AsStridedBackward0`` off its base in the view's *current* (size, stride,
offset), and a write through a view is recorded as ``CopySlices`` addressing the view by those
numbers too. Autograd on the traced (functional) program replays the chain instead, so its
gradient would reach other elements (or, where an ``as_strided`` step after the chain's first
reaches outside its input, lose some: ``_replay_drops_gradient``).

:class:`StaleViewUses` rewrites such a use at the call site: the view is replaced by
``base.as_strided(size, stride, offset)`` of its current geometry (a fresh view whose chain
is that one ``as_strided``, which autograd replays exactly), and a write through it writes
through that ``as_strided`` view. The gradient is then the one eager's ``AsStridedBackward0`` /
``CopySlices`` gives wherever the functional base addresses its storage as eager's base does
and the view's functional geometry is eager's; the analysis
(:meth:`~aotgrad.core.view_geometry.EagerViewGeometry`) checks that for every rewrite it sees
and refuses the program where it does not hold. The mode runs in the analysis and in the
joint trace alike, so both see the same program.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch._C._functionalization as functionalization
import torch.utils._pytree as pytree
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes

from .inplace_ops import NO_DATA_INPLACE, RELAYING_INPLACE
from .op_args import tree_leaves, view_property
from .saved_tensors import note_saved_by_stand_in, saving_into_copy

__all__ = ["StaleViewUses", "same_addressing", "writes_through_source"]

Geometry = tuple[tuple[int, ...], tuple[int, ...], int]

#: ops that read a tensor's metadata (or make an alias autograd does not record): no use of
#: its autograd history, so nothing to rewrite (and nothing for the analysis to refuse)
_NOT_RECORDED = frozenset(
    {"__get__", "__set__", "size", "stride", "dim", "ndimension", "numel", "nelement", "storage_offset",
     "is_contiguous", "element_size", "untyped_storage", "data_ptr", "__len__", "__repr__",
     "__format__", "requires_grad_", "is_floating_point", "is_complex", "type"}
)
#: functionalization's records of in-place metadata ops that keep a tensor's elements
_RELAYOUT_VIEW_METAS = frozenset(
    {"t__ViewMeta", "transpose__ViewMeta", "unsqueeze__ViewMeta", "squeeze__ViewMeta",
     "squeeze__dim_ViewMeta", "squeeze__dims_ViewMeta"}
)
#: augmented assignments (``t += x``): in-place data ops by another name
_INPLACE_DUNDERS = frozenset(
    {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
     "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__"}
)


def _geometry(t: torch.Tensor) -> Geometry:
    with torch._C.DisableTorchFunction():
        return (tuple(t.shape), tuple(t.stride()), t.storage_offset())


def _laid_out_as(base: torch.Tensor, earlier: Geometry) -> torch.Tensor | None:
    """A view of ``base`` in the geometry ``earlier`` that names the same elements with its
    dims permuted or size-1 dims added or removed (``squeeze``, ``permute``, ``unsqueeze``),
    as in-place metadata ops (``t_``, ``unsqueeze_``, ...) change a tensor; ``base`` itself
    where it is laid out so already; None where no such view gives it (other elements, dims
    that cannot be told apart)."""
    size, stride, offset = _geometry(base)
    size0, stride0, offset0 = earlier
    if offset != offset0:
        return None
    now = [(n, st) for n, st in zip(size, stride) if n != 1]
    then = [(n, st) for n, st in zip(size0, stride0) if n != 1]
    if sorted(now) != sorted(then) or len(set(now)) != len(now):
        return None
    relaid = base.squeeze() if len(now) != len(size) else base
    order = [now.index(d) for d in then]
    if order != sorted(order):
        relaid = relaid.permute(order)
    for dim, n in enumerate(size0):
        if n == 1:
            relaid = relaid.unsqueeze(dim)
    return relaid if same_addressing(_geometry(relaid), earlier) else None


def _relocatable(view: FunctionalTensor) -> bool:
    """A write through ``view`` can go through a copy of its base's storage
    (:meth:`StaleViewUses._relocated_write`): static geometries, the base's dtype, the
    view's elements distinct and all among the base's, and the base's distinct (the copy
    holds the base's elements only, and each once)."""
    from .overlapping_writes import _location_set  # (it imports saved_tensors, not this module)

    base = view._base
    if view.dtype != base.dtype:
        return False
    geometries = (_geometry(view), _geometry(base))
    if any(type(v) is not int for g in geometries for v in (*g[0], *g[1], g[2])):
        return False
    (view_locations, base_locations) = (_location_set(g) for g in geometries)
    if view_locations is None or base_locations is None:
        return False
    return (
        len(view_locations) == math.prod(geometries[0][0]) and len(base_locations) == math.prod(geometries[1][0])
        and view_locations <= base_locations
    )


def _storage_copy(base: torch.Tensor) -> torch.Tensor:
    """A fresh tensor, as long as ``base``'s storage reaches, with ``base``'s elements copied
    to their storage offsets (with autograd: the copy's gradient reaches ``base``); the other
    places are zeros (a write through it must stay within ``base``'s elements)."""
    from .overlapping_writes import _span  # (it imports saved_tensors, not this module)

    with torch._C.DisableTorchFunction():
        geometry = _geometry(base)
    storage = torch.zeros(_span(geometry)[1] + 1, dtype=base.dtype, device=base.device)
    storage.as_strided(*geometry).copy_(base)
    return storage


def _reaches_outside(source: torch.Tensor, view: torch.Tensor) -> bool:
    """``view``, an ``as_strided`` of ``source``, a view that requires grad, names a location
    outside ``source``'s elements, or ``source``'s elements overlap, or that is not known
    (symbolic or large geometries): its ``AsStridedBackward0`` keeps to ``source``'s."""
    from .overlapping_writes import _location_set  # (it imports saved_tensors, not this module)

    if source._base is None or not source.requires_grad:
        return False
    geometries = (_geometry(source), _geometry(view))
    if any(type(v) is not int for g in geometries for v in (*g[0], *g[1], g[2])):
        return True
    inside, named = (_location_set(g) for g in geometries)
    return inside is None or named is None or len(inside) < math.prod(geometries[0][0]) or not named <= inside


def same_addressing(a: Geometry, b: Geometry) -> bool:
    """Two layouts of one shape put every element at the same storage offset: only the
    strides of size-1 dims (never stepped along) may differ, and nothing where it is empty."""
    (size, stride, offset), (size_b, stride_b, offset_b) = a, b
    if size != size_b:
        return False
    if any(n == 0 for n in size):
        return True
    return offset == offset_b and all(n == 1 or st == st_b for n, st, st_b in zip(size, stride, stride_b))


def changed_in_place(name: str, source: Any, out: Any, version: int | None) -> bool:
    """``out``, what the op ``name`` returned, is its first argument ``source`` changed in
    place: the op wrote it (its version moved from ``version``, read before the op) or re-laid
    it out. An op that returns its input itself unchanged (``flatten()`` of a 1-D tensor,
    ``to``/``type_as``/``float()`` of its own dtype, ``contiguous()`` of a contiguous
    tensor, ``requires_grad_()``...) is no in-place op: eager's autograd records nothing, the
    view keeps its ``grad_fn`` (issue 12, fuzz seed 20016921: such a view counted as written
    through, was rebuilt off the root)."""
    if out is not source or not isinstance(source, FunctionalTensor):
        return False
    if name in RELAYING_INPLACE:
        return True
    with torch._C.DisableTorchFunction():
        return version is None or source._version != version


def version_of(t: Any) -> int | None:
    """``t``'s version counter where it is a functional tensor (read outside the modes);
    None for other values and for an inference tensor (which tracks none: reading it raises)."""
    if not isinstance(t, FunctionalTensor):
        return None
    with torch._C.DisableTorchFunction():
        return None if t.is_inference() else t._version


def writes_through_source(name: str) -> bool:
    """``name`` is an in-place data op on its first argument (no metadata op)."""
    if name in NO_DATA_INPLACE:
        return False
    return name == "__setitem__" or name in _INPLACE_DUNDERS or (name.endswith("_") and not name.endswith("__"))


class StaleViewUses(TorchFunctionMode):
    """Replaces, in each op that autograd records, a view whose recorded chain autograd would
    replay to another geometry (:func:`~aotgrad.core.view_geometry._autograd_replays`) by
    ``base.as_strided`` of the view's current geometry, where eager's autograd addresses the
    view that way: a write through it, or a use once an in-place op changed its storage since
    autograd last recorded its history (eager regenerates its ``grad_fn`` then).

    ``rewritten``: the views the call being made replaces, ``id -> (view, geometry used)``,
    and ``rewritten_in`` its op's name, for the analysis to check that geometry against
    eager's (it consumes them)."""

    def __init__(self, history_recorded: Callable[[torch.Tensor], None] | None = None) -> None:
        super().__init__()
        #: told of a view whose write :meth:`_relocated_write` made through a copy: eager's
        #: write through the view itself rebased the view's history (the analysis's eager
        #: shadow then has it fresh; here it stays stale, see there)
        self.history_recorded = history_recorded
        #: id(view) -> (the view, the version autograd last recorded its history at)
        self._versions: dict[int, tuple[torch.Tensor, int]] = {}
        #: id(view) -> (the view, its base's geometry when it was made)
        self._base_geometries: dict[int, tuple[torch.Tensor, Geometry]] = {}
        #: id(view) -> the view, for views autograd recorded as an ``as_strided`` of a view
        #: naming elements outside that view's (or not known not to), or as views of such a
        #: view: autograd's replay of the chain (its own, which functionalization's record,
        #: one ``as_strided`` off the storage's root, does not show) keeps the gradient to the
        #: inner view's elements, eager's regenerated ``grad_fn`` of a stale one does not
        self._clamped: dict[int, torch.Tensor] = {}
        #: ids of the call's targets written through their recorded ops (:meth:`replays_write`)
        #: instead of ``as_strided`` of their base, for the analysis to check too
        self.replayed: set[int] = set()
        #: ids of the call's targets written through (a write's backward replays the view's
        #: chain on a buffer at offset 0: the analysis checks the base's offset too)
        self.written: set[int] = set()
        #: ids of the written targets whose write goes through a copy of the base's storage
        #: (:meth:`_relocated_write`), for the analysis to check the geometries it used
        self.relocated: set[int] = set()
        self.rewritten: dict[int, tuple[torch.Tensor, Geometry]] = {}
        self.rewritten_in = ""

    def _stale(self, t: torch.Tensor) -> bool:
        entry = self._versions.get(id(t))
        return entry is not None and entry[0] is t and entry[1] != t._version

    def _targets(self, func: Any, name: str, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The views of this call to address by ``as_strided`` of their base."""
        from .view_geometry import _starts_its_storage  # (it imports this module)

        if not torch.is_grad_enabled() or not args:
            return []
        source = args[0]
        if name in _NOT_RECORDED:
            # (a view property, ``x.mT``, is a view op autograd records on ``x``, reading its
            # grad_fn: regenerated off the base where stale; fuzz seed 33010476)
            if view_property(func) is None:
                return []
            leaves = [source]
        else:
            leaves = tree_leaves((args, {k: v for k, v in kwargs.items() if k != "out"}))
        targets: list[torch.Tensor] = []
        self.replayed = set()
        self.written = set()
        self.relocated = set()
        with torch._C.DisableTorchFunction():
            # (autograd's own answer, which decides whether it records the write: the modes
            # outside may answer otherwise for a view of a detach()ed alias that a write
            # through a copy of its storage gave a history, _relocated_write)
            writes = isinstance(source, FunctionalTensor) and writes_through_source(name) and any(
                isinstance(t, torch.Tensor) and t.requires_grad for t in leaves
            )
            for t in leaves:
                written = writes and t is source
                if not isinstance(t, FunctionalTensor) or any(t is u for u in targets):
                    continue
                if t is source and name in NO_DATA_INPLACE:
                    continue  # the op changes the view itself: not a use of it
                if not self._rewrites(t, written):
                    continue
                if written and not _starts_its_storage(t._base):
                    # as_strided offsets are absolute, and the backward's buffer for the base
                    # starts at 0: the write goes through a copy of the base's storage that
                    # does (:meth:`_relocated_write`), where it can; else the analysis refuses
                    targets.append(t)
                    self.written.add(id(t))
                    if _relocatable(t):
                        self.relocated.add(id(t))
                    continue
                if written and functionalization.get_view_meta_sequence(t._base.elem):
                    # an in-place metadata op made the base a view of itself in
                    # functionalization, which refuses a write through an as_strided that is
                    # not the first view of its chain: the write goes through the base laid
                    # back out as it was when the view was made and the view's own ops, where
                    # they give its geometry (else the analysis refuses the write)
                    if self.replays_write(t):
                        targets.append(t)
                        self.replayed.add(id(t))
                        self.written.add(id(t))
                    continue
                targets.append(t)
                if written:
                    self.written.add(id(t))
        return targets

    def _rewrites(self, t: FunctionalTensor, written: bool) -> bool:
        """``t`` (a tensor the call uses, ``written`` through with a value requiring grad, or
        read) is a view to address by ``as_strided`` of its base: autograd on the traced
        program would address it otherwise than eager's. A write's backward (``CopySlices``)
        replays the view's recorded chain on a fresh tensor laid out as the base at offset 0
        (:func:`~aotgrad.core.view_geometry._write_replays`); a use of a view whose storage
        changed since autograd recorded it regenerates its ``grad_fn`` by replaying the chain
        on the base (:func:`~aotgrad.core.view_geometry._autograd_replays`, and
        :func:`~aotgrad.core.view_geometry._replay_drops_gradient`), where eager's is one
        ``as_strided`` off the base."""
        from .view_geometry import _autograd_replays, _replay_drops_gradient, _write_replays  # (it imports this module)

        if t._base is None or not (t.requires_grad or written):
            # (a view written with a value requiring grad: eager's CopySlices addresses it by
            # its geometry, whether it required grad before or not)
            return False
        if not (written or self._stale(t)):
            return False
        if _write_replays(t) if written else (
            _autograd_replays(t) and not _replay_drops_gradient(t) and self._clamped.get(id(t)) is not t
        ):
            return False
        if torch._C._autograd._get_creation_meta(t) != torch._C._autograd.CreationMeta.DEFAULT:
            return False  # eager raises on such a view; the trace does too
        chain = functionalization.get_view_meta_sequence(t.elem)
        # the joint's own alias of an input whose geometry the program changes
        # (tracing._functional_forward): no view in the analysis run, which checks each
        # rewrite against eager's layout, so none is made here either (a sliced input's
        # functional value is not eager's storage: the rewrite named other elements,
        # silently; fuzz seed 1001813)
        return not (chain and type(chain[0]).__name__ == "alias_ViewMeta")

    def read_by_backward(self, outs: list[Any]) -> list[Any]:
        """``outs``, the forward outputs the joint differentiates, as the backward reads them:
        a returned view whose storage changed since autograd recorded it, and whose recorded
        chain autograd would replay otherwise than eager's regenerated ``grad_fn``
        (:meth:`_rewrites`), is ``base.as_strided`` of its geometry (the same elements, and
        eager's ``AsStridedBackward0`` off the base; fuzz seed 12006332). The analysis checks
        each such output as a rewritten use (:meth:`stale_outputs`)."""
        return [
            t._base.as_strided(*_geometry(t)) if isinstance(t, FunctionalTensor) and self._rewrites_output(t) else t
            for t in outs
        ]

    def stale_outputs(self, outs: list[Any]) -> dict[int, tuple[torch.Tensor, Geometry]]:
        """The outputs among ``outs`` that :meth:`read_by_backward` replaces, ``id -> (view,
        geometry used)``, as :attr:`rewritten` holds a call's."""
        return {id(t): (t, _geometry(t)) for t in outs if isinstance(t, FunctionalTensor) and self._rewrites_output(t)}

    def _rewrites_output(self, t: FunctionalTensor) -> bool:
        """The returned ``t``, which the backward reads with a gradient (it requires grad),
        is a view :meth:`_rewrites` addresses by ``as_strided`` of its base, as a use."""
        with torch._C.DisableTorchFunction():
            return t.requires_grad and self._rewrites(t, False)

    def replays_write(self, t: torch.Tensor) -> bool:
        """A write through ``t``, a view whose base an in-place metadata op made a view of its
        own storage in functionalization since ``t`` was made, can go through ``t``'s recorded
        ops (``_view_func``) applied to the base laid back out as it was then
        (:func:`_laid_out_as`): the base's elements are the ones it had (only ``t_``,
        ``transpose_``, ``swapdims_``, ``unsqueeze_``, ``squeeze_`` changed it), ``t`` has no
        ``as_strided`` step (functionalization refuses a write through one that is not its
        chain's first), and the replay, run on meta tensors, gives ``t``'s elements, laid out
        as ``t`` is by such ops (``t`` itself may have been re-laid out in place since).
        Autograd's replay of that chain on the base as it is then names the same elements, as
        eager's ``CopySlices`` does by ``t``'s geometry."""
        entry = self._base_geometries.get(id(t))
        if entry is None or entry[0] is not t:
            return False
        base_chain = functionalization.get_view_meta_sequence(t._base.elem)
        chain = functionalization.get_view_meta_sequence(t.elem)
        if any(type(vm).__name__ not in _RELAYOUT_VIEW_METAS for vm in base_chain) or any(
            type(vm).__name__ in ("as_strided_ViewMeta", "as_strided__ViewMeta") for vm in chain
        ):
            return False
        with torch._C.DisableTorchFunction():
            base = t._base
            try:
                with _disable_current_modes():
                    storage = torch.empty(base.untyped_storage().nbytes() // base.element_size(), dtype=base.dtype, device="meta")
                    relaid = _laid_out_as(storage.as_strided(*_geometry(base)), entry[1])
                    if relaid is None:
                        return False
                    replayed = _laid_out_as(t._view_func_unsafe(relaid), _geometry(t))
            except Exception:  # noqa: BLE001 - the view's ops do not apply: no replay
                return False
            return replayed is not None

    @staticmethod
    def _relocated_write(
        func: Any, args: tuple, kwargs: dict, view: torch.Tensor, storage: torch.Tensor, name: str
    ) -> Any:
        """Run the in-place op ``func`` (``args[0]`` standing for ``view``) on a copy of
        ``view``'s elements taken of ``storage``, a copy of its base laid out at the base's
        storage locations in a fresh tensor that starts at offset 0 (:func:`_storage_copy`);
        write the result into ``storage`` through ``as_strided`` of ``view``'s geometry, then
        the base's elements back into the base. Autograd's ``CopySlices`` for that write
        replays ``as_strided`` at the view's absolute offset on a buffer that also starts at 0,
        as eager's addresses the view relative to its base, and the base's gradient comes back
        through ``as_strided`` of ``storage`` (its own geometry). The same values are written
        (the view's elements are the base's). What the op's node saves of the copy is noted as
        ``view`` (eager's node saved the view: its backward checks the view's version,
        :func:`~aotgrad.core.saved_tensors.note_saved_by_stand_in`).

        ``view`` is left stale here: its next recorded use, where autograd's replay of its
        chain is not eager's ``as_strided`` off the base, is another stale view's. Returns what
        the op returns (``view`` where it returns the tensor written)."""
        with torch._C.DisableTorchFunction():
            base = view._base
            geometry, base_geometry = _geometry(view), _geometry(base)
            version = view._version
        values = storage.as_strided(*geometry).clone()
        out, saved = saving_into_copy(lambda: func(values, *args[1:], **kwargs))
        storage.as_strided(*geometry).copy_(values)
        base.copy_(storage.as_strided(*base_geometry))
        with torch._C.DisableTorchFunction():
            note_saved_by_stand_in(saved, values, view, version, name)
        return view if out is values else out

    def _note_versions(self, source: Any, out: Any, name: str = "", version: int | None = None) -> None:
        """As :meth:`EagerViewGeometry._note_versions`: new views' versions; an in-place op
        autograd records on a view rebases it (``version``: ``source``'s before the op)."""
        if changed_in_place(name, source, out, version):
            entry = self._versions.get(id(source))
            if entry is not None and entry[0] is source and torch.is_grad_enabled() and source.requires_grad:
                self._versions[id(source)] = (source, source._version)
            return
        for r in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(r, FunctionalTensor) and r is not source and r._base is not None and id(r) not in self._versions:
                self._versions[id(r)] = (r, r._version)
                self._base_geometries[id(r)] = (r, _geometry(r._base))
                if isinstance(source, FunctionalTensor) and (
                    self._clamped.get(id(source)) is source or (name == "as_strided" and _reaches_outside(source, r))
                ):
                    self._clamped[id(r)] = r

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        targets = self._targets(func, name, args, kwargs)
        self.rewritten = {}
        if not targets:
            source = args[0] if args else None
            version = version_of(source)
            out = func(*args, **kwargs)
            with torch._C.DisableTorchFunction():
                self._note_versions(source, out, name, version)
            return out
        proxies: dict[int, torch.Tensor] = {}
        #: id(view) -> the copy of its base's storage a relocated write goes through
        storages: dict[int, torch.Tensor] = {}
        self.rewritten_in = name
        for t in targets:
            geometry = _geometry(t)
            self.rewritten[id(t)] = (t, geometry)
            if id(t) in self.relocated:
                with torch._C.DisableTorchFunction():
                    base = t._base  # (autograd's; the modes outside may answer for a detached alias)
                storages[id(t)] = _storage_copy(base)
                proxies[id(t)] = storages[id(t)].as_strided(*geometry)
            elif id(t) in self.replayed:
                proxies[id(t)] = _laid_out_as(
                    t._view_func_unsafe(_laid_out_as(t._base, self._base_geometries[id(t)][1])), geometry
                )
            else:
                proxies[id(t)] = t._base.as_strided(*geometry)
        source = args[0]

        def swap(x: Any) -> Any:
            return proxies.get(id(x), x) if isinstance(x, FunctionalTensor) and any(x is t for t in targets) else x

        new_args, new_kwargs = pytree.tree_map(swap, (args, kwargs))
        if id(source) in storages:
            out = self._relocated_write(func, new_args, new_kwargs, source, storages[id(source)], name)
            if self.history_recorded is not None:
                with torch._C.DisableTorchFunction():
                    self.history_recorded(source)
            return out
        version = version_of(new_args[0])
        out = func(*new_args, **new_kwargs)
        if id(source) in proxies and out is proxies[id(source)]:
            # an in-place op through the view returns the view itself; its value follows the
            # base's (the write went through the as_strided view), and its next recorded use
            # is rewritten again, as eager regenerates its grad_fn again
            return source
        with torch._C.DisableTorchFunction():
            self._note_versions(new_args[0], out, name, version)
        return out
