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

from typing import Any

import torch
import torch._C._functionalization as functionalization
import torch.utils._pytree as pytree
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["StaleViewUses", "same_addressing", "writes_through_source"]

Geometry = tuple[tuple[int, ...], tuple[int, ...], int]

#: in-place ops that change a tensor's size, stride or storage and no data
_METADATA_INPLACE = frozenset(
    {"t_", "transpose_", "swapdims_", "swapaxes_", "unsqueeze_", "squeeze_", "as_strided_",
     "resize_", "resize_as_", "set_", "detach_", "requires_grad_", "share_memory_"}
)
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


def same_addressing(a: Geometry, b: Geometry) -> bool:
    """Two layouts of one shape put every element at the same storage offset: only the
    strides of size-1 dims (never stepped along) may differ, and nothing where it is empty."""
    (size, stride, offset), (size_b, stride_b, offset_b) = a, b
    if size != size_b:
        return False
    if any(n == 0 for n in size):
        return True
    return offset == offset_b and all(n == 1 or st == st_b for n, st, st_b in zip(size, stride, stride_b))


def writes_through_source(name: str) -> bool:
    """``name`` is an in-place data op on its first argument (no metadata op)."""
    if name in _METADATA_INPLACE:
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

    def __init__(self) -> None:
        super().__init__()
        #: id(view) -> (the view, the version autograd last recorded its history at)
        self._versions: dict[int, tuple[torch.Tensor, int]] = {}
        #: id(view) -> (the view, its base's geometry when it was made)
        self._base_geometries: dict[int, tuple[torch.Tensor, Geometry]] = {}
        #: ids of the call's targets written through their recorded ops (:meth:`replays_write`)
        #: instead of ``as_strided`` of their base, for the analysis to check too
        self.replayed: set[int] = set()
        self.rewritten: dict[int, tuple[torch.Tensor, Geometry]] = {}
        self.rewritten_in = ""

    def _stale(self, t: torch.Tensor) -> bool:
        entry = self._versions.get(id(t))
        return entry is not None and entry[0] is t and entry[1] != t._version

    def _targets(self, name: str, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The views of this call to address by ``as_strided`` of their base."""
        from .view_geometry import _autograd_replays, _replay_drops_gradient  # (it imports this module)

        if not torch.is_grad_enabled() or name in _NOT_RECORDED or not args:
            return []
        source = args[0]
        leaves = pytree.tree_leaves((args, {k: v for k, v in kwargs.items() if k != "out"}))
        writes = isinstance(source, FunctionalTensor) and writes_through_source(name) and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in leaves
        )
        targets: list[torch.Tensor] = []
        self.replayed = set()
        with torch._C.DisableTorchFunction():
            for t in leaves:
                written = writes and t is source
                if (
                    not isinstance(t, FunctionalTensor) or t._base is None
                    # (a view written with a value requiring grad: eager's CopySlices
                    # addresses it by its geometry, whether it required grad before or not)
                    or not (t.requires_grad or written)
                    or any(t is u for u in targets)
                ):
                    continue
                if t is source and name in _METADATA_INPLACE:
                    continue  # the op changes the view itself: not a use of it
                if not (written or self._stale(t)):
                    continue
                if _autograd_replays(t) and (written or not _replay_drops_gradient(t)):
                    continue
                if torch._C._autograd._get_creation_meta(t) != torch._C._autograd.CreationMeta.DEFAULT:
                    continue  # eager raises on such a view; the trace does too
                chain = functionalization.get_view_meta_sequence(t.elem)
                if chain and type(chain[0]).__name__ == "alias_ViewMeta":
                    # the joint's own alias of an input whose geometry the program changes
                    # (tracing._functional_forward): no view in the analysis run, which checks
                    # each rewrite against eager's layout, so none is made here either (a
                    # sliced input's functional value is not eager's storage: the rewrite
                    # named other elements, silently; fuzz seed 1001813)
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
                    continue
                targets.append(t)
        return targets

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

    def _note_versions(self, source: Any, out: Any) -> None:
        """As :meth:`EagerViewGeometry._note_versions`: new views' versions; an in-place op
        autograd records on a view rebases it."""
        if out is source and isinstance(source, FunctionalTensor):
            entry = self._versions.get(id(source))
            if entry is not None and entry[0] is source and torch.is_grad_enabled() and source.requires_grad:
                self._versions[id(source)] = (source, source._version)
            return
        for r in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(r, FunctionalTensor) and r is not source and r._base is not None and id(r) not in self._versions:
                self._versions[id(r)] = (r, r._version)
                self._base_geometries[id(r)] = (r, _geometry(r._base))

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        targets = self._targets(name, args, kwargs)
        self.rewritten = {}
        if not targets:
            out = func(*args, **kwargs)
            with torch._C.DisableTorchFunction():
                self._note_versions(args[0] if args else None, out)
            return out
        proxies: dict[int, torch.Tensor] = {}
        self.rewritten_in = name
        for t in targets:
            geometry = _geometry(t)
            self.rewritten[id(t)] = (t, geometry)
            if id(t) in self.replayed:
                proxies[id(t)] = _laid_out_as(
                    t._view_func_unsafe(_laid_out_as(t._base, self._base_geometries[id(t)][1])), geometry
                )
            else:
                proxies[id(t)] = t._base.as_strided(*geometry)
        source = args[0]

        def swap(x: Any) -> Any:
            return proxies.get(id(x), x) if isinstance(x, FunctionalTensor) and any(x is t for t in targets) else x

        new_args, new_kwargs = pytree.tree_map(swap, (args, kwargs))
        out = func(*new_args, **new_kwargs)
        if id(source) in proxies and out is proxies[id(source)]:
            # an in-place op through the view returns the view itself; its value follows the
            # base's (the write went through the as_strided view), and its next recorded use
            # is rewritten again, as eager regenerates its grad_fn again
            return source
        with torch._C.DisableTorchFunction():
            self._note_versions(new_args[0], out)
        return out
