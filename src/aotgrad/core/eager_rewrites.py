"""Eager calls that functionalization would capture wrongly, rewritten at the call site.

- **Dropout masks.** Eager CPU dropout is ``noise = empty_like(x).bernoulli_(1 - p)``: the in-place fill walks
``x``'s own memory layout. Functionalization turns that into the functional
``aten.bernoulli.p``, whose kernel allocates a *contiguous* tensor, so a non-contiguous ``x``
(a transposed attention output, say) gets a different mask than eager. :class:`EagerRewrites`
reroutes ``torch.dropout`` through ``aotgrad::bernoulli_like``, a functional op whose kernel is
eager's own fill, so the traced graph consumes the generator exactly as eager does.
- **polygamma_.** Its schema puts ``self`` first while the functional ``polygamma`` takes
  ``(n, self)``; functionalization finds no functional twin and rejects it. It is captured
  as ``self.copy_(polygamma(n, self.clone()))``, which eager autograd treats the same way.
- **squeeze_(dim) of a dim whose size is not 1.** Functionalization's ``squeeze_`` of such a
  dim (a no-op in eager) crashes the process in a symbolic trace (torch 2.13); the dims
  that are not 1 are dropped from the call (a symbolic size is never 1: sizes 0 and 1 are
  specialised), leaving ``squeeze_(())``, the same no-op, where none is.
- **Layout through in-place ops.** Eager keeps a tensor's strides through an in-place data
  op (``t.masked_fill_(m, 0)`` on a transposed ``t`` leaves it transposed, and so are the
  results of elementwise ops on it afterwards). Functionalization replaces the tensor's value
  by the out-of-place op's result, laid out as that op chooses (often contiguous). Where the
  tensor written to (or the base of the view written through) changes strides in the trace,
  :func:`_keeping_layout` gives its new value the old layout: ``empty_like`` of the old value
  (at run time: the strides the kernels gave it, size-1 dims included), then ``copy``.
- **as_strided of a view.** ``v.as_strided(size, stride, offset)`` addresses ``v``'s storage,
  so it is the same view as ``v._base.as_strided(...)``; functionalization refuses a mutation
  through an ``as_strided`` that is not the first view of its chain, so it is taken of the
  base where the dtype is the same and autograd records neither, or where it records both
  and the result addresses only ``v``'s own elements (eager's gradient of ``v.as_strided``
  reaches only ``v``'s elements: the same ones then).
- **A write through as_strided of a detach()ed alias.** Functionalization holds ``detach()``
  as a view, so ``v = t.detach(); w = v.as_strided(...)`` is no first view of its chain and
  a write into ``w`` was refused; where autograd does not record it, the write goes into
  ``t``'s root's ``as_strided(...).detach()`` instead, whose chain it starts (``w`` reads it
  from the shared storage, and stays eager's view of ``v``).
- **Writes through a view() step.** Functionalization writes a view's new value back into
  its base through each step's inverse, and the inverse of ``view`` is ``view`` of the new
  value, which raises where that value is not laid out as ``view`` needs: ``masked_fill``'s
  result is contiguous, an ``out=`` op's follows its inputs. ``masked_fill_`` of a
  non-contiguous such view, and a deterministic ``out=`` op into one that autograd does not
  record, become ``dest.copy_(result)`` (the copy is laid out as ``dest``).
- **Eager's dtype errors.** An in-place op whose result cannot be cast to the written
  tensor's dtype, or a kernel not built for a dtype, raise eager's error at the op
  (:func:`~aotgrad.core.kernel_checks.raise_eager_dtype_error`): functionalization's copy
  casts, and meta functions have no per-dtype kernels.
- **Writes through memory that overlaps itself** (an ``expand()``ed view, an overlapping
  ``as_strided``, or a view taken through one) are written into the root's memory locations
  by :func:`~aotgrad.core.overlapping_writes.overlapping_write` (functionalization's inverses
  of such views sum or drop writes, and ``expand``'s is not bit-exact even for one element);
  loop-order-dependent ones are refused there. The ``detach()`` and ``view(dtype)`` aliases
  functionalization holds without an autograd base are noted (:meth:`EagerRewrites._note_aliases`)
  for the root to be reached through them, and a ``torch.nn.functional`` call with
  ``inplace=True`` (whose in-place op this mode does not see) on such a view is made an
  in-place op of that view (:func:`_inplace_functional`; ``dropout``'s and ``polygamma_``'s
  own rewrites write a view through an ``expand`` or ``unfold`` through the same path).
"""

from __future__ import annotations

import functools
import inspect
import weakref

from typing import Any, Callable

import torch
import torch._C._functionalization as functionalization
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch._subclasses.functional_tensor import FunctionalTensor, disable_functional_mode
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode

from ..errors import AotgradCompileError, current_user_line
from .kernel_checks import raise_eager_dtype_error
from .op_args import tree_leaves
from .overlapping_writes import _same_data_copy, chain_overlaps, has_lossy_step, overlapping_write
from .stale_views import writes_through_source
from .view_geometry import as_strided_geometry, rebased_root, restride_drops_gradient

__all__ = ["EagerRewrites", "bernoulli_like"]


@torch.library.custom_op(
    "aotgrad::bernoulli_like", mutates_args=(), tags=(torch.Tag.nondeterministic_seeded,)
)
def bernoulli_like(x: torch.Tensor, p: float) -> torch.Tensor:
    """``empty_like(x).bernoulli_(p)``: eager's fill order for ``x``'s layout."""
    return torch.empty_like(x).bernoulli_(p)


@bernoulli_like.register_fake
def _(x: torch.Tensor, p: float) -> torch.Tensor:
    return torch.empty_like(x)


_DROPOUTS = {torch.dropout, torch._C._VariableFunctions.dropout}
_DROPOUTS_INPLACE = {torch.dropout_, torch._C._VariableFunctions.dropout_}
_FUNCTIONAL_DROPOUT = torch.nn.functional.dropout
_POLYGAMMA_INPLACE = torch.Tensor.polygamma_
_SQUEEZE_INPLACE = torch.Tensor.squeeze_
_MASKED_FILL_INPLACE = torch.Tensor.masked_fill_
_AS_STRIDED = {torch.Tensor.as_strided, torch.as_strided}
_AS_STRIDED_INPLACE = torch.Tensor.as_strided_
_DETACH = {torch.Tensor.detach, torch.detach}
_COPY_INPLACE = torch.Tensor.copy_


class EagerRewrites(TorchFunctionMode):
    """Applies the rewrites of this module while the program is analysed and traced.

    Dropout: same values as ``at::native::_dropout_impl``,
    ``noise = bernoulli_like(x, 1 - p) / (1 - p)`` then ``x * noise``; other cases (p of 0 or
    1, eval mode, empty input) are left to torch.

    In-place ops keep the written tensor's layout (:func:`_keeping_layout`).
    """

    def __init__(
        self, reroot_is_exact: Callable[[FunctionalTensor, list[FunctionalTensor]], bool] | None = None,
        addressed_as_eager: Callable[..., bool] | None = None,
        copy_slices_layout: Callable[[FunctionalTensor, bool], tuple | None] | None = None,
    ) -> None:
        super().__init__()
        #: the program has used a tensor whose size-1 dims have strides a contiguous tensor
        #: would not have: the kernels then lay out what they compute from it otherwise than
        #: the trace's meta functions in size-1 dims (``a * 2``, ``ones_like(a)`` keep ``a``'s
        #: strides), so the trace cannot tell whether an in-place op changes the layout there
        self.odd_size1_strides = False
        #: ``id(t.detach())`` → (the alias, weakly; ``t``): see :func:`_as_strided_of_detached`
        self.detached_from: dict[int, tuple[weakref.ref, torch.Tensor]] = {}
        #: ``id(t)`` → (``t``, weakly; the tensor it aliases) for each tensor an op returned
        #: that functionalization holds as a view without an autograd base (``detach()``,
        #: ``view(dtype)``): see :meth:`_alias_source`
        self.aliased_from: dict[int, tuple[weakref.ref, torch.Tensor]] = {}
        #: ``id(v.as_strided(...))`` of such an alias → what :meth:`_write_proxy` needs
        self.strided_detached: dict[int, tuple] = {}
        #: storage → (view, root) for the views re-strided by ``as_strided_`` whose record
        #: :func:`rebase_restrided_view` changes only at the next write into the storage
        #: (:func:`~aotgrad.core.view_geometry.restride_drops_gradient`: until then eager's
        #: gradient of the view stays within its old elements, as functionalization's own
        #: record replays it), and the views taken of them since, with their root
        self.pending_rebases: dict[StorageWeakRef, list[tuple[FunctionalTensor, FunctionalTensor]]] = {}
        #: storage → (view, root) for the views whose functionalization chain has an
        #: ``as_strided`` step after its first, and the views taken of them, until a write
        #: through one of them (:meth:`_reroot_before_write`)
        self.strided_views: dict[StorageWeakRef, list[tuple[FunctionalTensor, FunctionalTensor]]] = {}
        #: whether a write through views re-recorded as ``as_strided`` of a root writes
        #: eager's elements (the analysis's eager layouts decide); None: the trace after the
        #: analysis, which decided so
        self.reroot_is_exact = reroot_is_exact
        #: whether the tensors' sizes, strides and offsets are eager's (the analysis's eager
        #: layouts decide); None: the trace after the analysis, which decided so
        self.addressed_as_eager = addressed_as_eager
        #: eager's layout of the tensor eager's autograd records a write through a view on
        #: (the analysis's eager layouts decide; ``overlapping_write`` refuses a recorded write
        #: where it overlaps); None: the trace after the analysis, which decided so
        self.copy_slices_layout = copy_slices_layout

    def _rebase_before_write(self, func, args: tuple, kwargs: dict) -> None:
        """Before a write into a storage with views whose rebase waits (``pending_rebases``),
        rebase them: the write bumps the storage's version, so eager regenerates each one's
        history as ``AsStridedBackward0`` off the base, which ``root.as_strided`` replays, and
        a write through one of them scatters onto the root as eager's storage has it."""
        pending = []
        for written in _written(func, args, kwargs):
            with torch._C.DisableTorchFunction():
                pending += self.pending_rebases.pop(StorageWeakRef(written.untyped_storage()), [])
        for view, root in pending:
            if view.dtype != root.dtype:
                raise AotgradCompileError(
                    f"aotgrad: in-place {getattr(func, '__name__', func)} at {current_user_line()} writes "
                    "into a storage with a view of another dtype taken of a view re-strided by "
                    "as_strided_: functionalization would replay the write onto the view's old "
                    "layout. clone() the view first."
                )
            rebase_restrided_view(view, root)

    def _note_pending_views(self, source: Any, out: Any) -> None:
        """Views taken of a view whose rebase waits wait with it (same storage, same root)."""
        if not isinstance(source, FunctionalTensor):
            return
        with torch._C.DisableTorchFunction():
            pending = self.pending_rebases.get(StorageWeakRef(source.untyped_storage()))
            if not pending:
                return
            root = next((r for v, r in pending if v is source), None)
            if root is None:
                return
            for t in tree_leaves(out):
                if (
                    type(t) is FunctionalTensor and t is not source and t._base is not None
                    and StorageWeakRef(t.untyped_storage()) == StorageWeakRef(source.untyped_storage())
                    and not any(t is v for v, _ in pending)
                ):
                    pending.append((t, root))

    def _write_proxy(self, func, args: tuple, kwargs: dict) -> torch.Tensor | None:
        """For an in-place data write into ``v.as_strided(...)`` of a ``detach()``ed alias
        ``v`` (:func:`_as_strided_of_detached`), the tensor to write instead; None elsewhere,
        and where autograd would record the write (eager gives the view a history then)."""
        entry = self.strided_detached.get(id(args[0]))
        if entry is None or entry[0]() is not args[0]:
            return None
        name = getattr(func, "__name__", "")
        # (not ``__get__``, a property read such as ``_base`` or ``mT``, which ends in "_" too)
        if not writes_through_source(name) or "out" in kwargs:
            return None
        if torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in (*args[1:], *kwargs.values())
        ):
            return None
        _, source, as_strided, v, a, kw = entry
        return _as_strided_of_detached(as_strided, v, source, a, kw, self._detached_source)

    def _detached_source(self, v: Any) -> torch.Tensor | None:
        """The tensor ``v`` was ``detach()``ed from in the program, where ``v`` is that alias."""
        entry = self.detached_from.get(id(v))
        if entry is None or entry[0]() is not v or getattr(v, "_base", None) is not None:
            return None
        return entry[1] if entry[1].dtype == v.dtype else None

    def _commit(self, root: FunctionalTensor, new: torch.Tensor) -> None:
        """``root.copy_(new)``, keeping ``root``'s layout (a rewritten write, see
        :mod:`.overlapping_writes`)."""
        _keeping_layout(root, torch.Tensor.copy_, (root, new), {}, size1_unknown=self.odd_size1_strides)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.strided_views:
            self._reroot_before_write(func, args, kwargs)
        if not self.pending_rebases:
            out = self._rewritten(func, types, args, kwargs)
        else:
            self._rebase_before_write(func, args, kwargs)
            out = self._rewritten(func, types, args, kwargs)
            if args:
                self._note_pending_views(args[0], out)
        _own_roots(args, kwargs, out)
        if args and type(args[0]) is FunctionalTensor:
            self._note_strided_views(func, args[0], out)
            self._note_aliases(args[0], out)
        return out

    def _note_aliases(self, source: FunctionalTensor, out: Any) -> None:
        """Note each tensor in ``out`` that functionalization holds as a view of ``source``'s
        storage without an autograd base (``detach()``, ``view(dtype)``) as an alias of
        ``source``, for :func:`~aotgrad.core.overlapping_writes.write_root` to reach the
        storage's root through it."""
        with torch._C.DisableTorchFunction():
            for t in tree_leaves(out):
                if (
                    type(t) is FunctionalTensor and t is not source and t._base is None
                    and functionalization.get_view_meta_sequence(t.elem)
                    and StorageWeakRef(t.untyped_storage()) == StorageWeakRef(source.untyped_storage())
                ):
                    self.aliased_from[id(t)] = (weakref.ref(t), source)

    def _alias_source(self, t: Any) -> torch.Tensor | None:
        """The tensor ``t`` was made an alias of without an autograd base (:meth:`_note_aliases`)."""
        entry = self.aliased_from.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def _unrecorded_write_past_as_strided(self, func, args: tuple, kwargs: dict) -> bool:
        """An in-place write that autograd does not record through a view whose
        functionalization chain has an ``as_strided`` after its first step, which
        :meth:`_reroot_before_write` did not re-record (its base's own chain does not start
        at it: an in-place metadata op changed the base, ``a.t_(); a[0].as_strided(...)``;
        fuzz seeds 3003721, 4001955, 7000266): it is written as its base's memory locations
        (:func:`~aotgrad.core.overlapping_writes.overlapping_write`), where (in the analysis)
        the view's and its base's sizes, strides and offsets are eager's
        (``addressed_as_eager``); else functionalization's refusal stands."""
        written = _written(func, args, kwargs)
        if len(written) != 1:
            return False
        dest = written[0]
        with torch._C.DisableTorchFunction():
            base = dest._base
            if type(base) is not FunctionalTensor or not _as_strided_after_first(dest):
                return False
            if torch.is_grad_enabled() and any(
                isinstance(t, torch.Tensor) and t.requires_grad for t in tree_leaves((args, kwargs))
            ):
                return False  # eager's autograd records it: its gradient is not expressed here
        return self.addressed_as_eager is None or self.addressed_as_eager(dest, base)

    def _note_strided_views(self, func, source: FunctionalTensor, out: Any) -> None:
        """Note the views ``func`` made of ``source`` whose functionalization chain has an
        ``as_strided`` step after its first (:meth:`_reroot_before_write`), with the root
        their record may start at instead (:func:`storage_root`); and give a fresh tensor
        recorded as a functionalization-only view of a temporary its own record."""
        with torch._C.DisableTorchFunction():
            storage = StorageWeakRef(source.untyped_storage())
            for t in tree_leaves(out):
                if type(t) is not FunctionalTensor or t is source:
                    continue
                if StorageWeakRef(t.untyped_storage()) != storage:
                    continue
                noted = self.strided_views.get(storage, [])
                if any(v is t for v, _ in noted):
                    continue
                root = next((r for v, r in noted if v is source), None)
                if root is None:
                    if func not in _AS_STRIDED or not _as_strided_after_first(t):
                        continue
                    root = storage_root(t, self._detached_source)
                    if root is None:
                        continue
                self.strided_views.setdefault(storage, []).append((t, root))

    def _reroot_before_write(self, func, args: tuple, kwargs: dict) -> None:
        """Before an in-place write through a view noted by :meth:`_note_strided_views` (or
        a view of one), record every such view of its storage as ``root.as_strided`` of its
        geometry (:func:`rebase_restrided_view`): functionalization refuses a write through
        a chain whose ``as_strided`` is not its first view ("as_strided() is
        non-compositional"); as one ``as_strided`` of the root it scatters into (a copy of)
        the root, at the storage locations eager's ``as_strided`` offsets name. Only where
        ``root`` still starts its chain, of the views' dtype (else functionalization's
        refusal stands), and where (in the analysis) ``reroot_is_exact``: else refused;
        in a trace without it, where ``root``'s value is its whole storage laid out as the
        program's tensor (:func:`_addresses_own_storage`), else functionalization refuses.

        Not before: until the storage is written eager's view keeps the history it was made
        with (an ``AsStridedBackward0`` of the view it was taken of, whose gradient stays
        within that view's elements, and its creation's standing: no_grad, multi-output),
        which functionalization's own record replays for a returned view; a write bumps the
        storage's version, and eager regenerates each view's history as ``as_strided`` off
        the base, as the new record replays it."""
        for written in _written(func, args, kwargs):
            with torch._C.DisableTorchFunction():
                storage = StorageWeakRef(written.untyped_storage())
                noted = self.strided_views.get(storage)
                if not noted or not any(v is written for v, _ in noted):
                    continue
                root = noted[0][1]
                if functionalization.get_view_meta_sequence(root.elem) or any(v.dtype != root.dtype for v, _ in noted):
                    continue
                if self.reroot_is_exact is None and not _addresses_own_storage(root):
                    continue  # (the trace after the analysis: leave functionalization's refusal)
                if self.reroot_is_exact is not None and not self.reroot_is_exact(root, [v for v, _ in noted]):
                    raise AotgradCompileError(
                        f"aotgrad: in-place {getattr(func, '__name__', func)} at {current_user_line()} "
                        "writes through an as_strided view taken of a view (a slice, a matmul result, "
                        "a detach()ed alias), into a tensor the traced program lays out otherwise than "
                        "eager's storage (a sliced, expanded or non-contiguous input, or one an in-place "
                        "op re-laid out): its offsets would name other elements. Take as_strided of a "
                        "clone(), or of the tensor that owns the storage."
                    )
                del self.strided_views[storage]
            for v, r in noted:
                rebase_restrided_view(v, r)

    def _rewritten(self, func, types, args: tuple, kwargs: dict):
        # eager's per-dtype kernel errors, which no functional op raises (core/kernel_checks.py)
        raise_eager_dtype_error(func, args, kwargs)
        if not self.odd_size1_strides:
            self.odd_size1_strides = any(_odd_size1_strides(t) for t in (*args, *kwargs.values()))
        if func is _POLYGAMMA_INPLACE:
            x, n = args[0], args[1] if len(args) > 1 else kwargs["n"]
            if has_lossy_step(x):
                # (the mode is off here: the write goes through the rewrites explicitly)
                return self._rewritten(torch.Tensor.copy_, types, (x, torch.polygamma(n, x.clone())), {})
            return x.copy_(torch.polygamma(n, x.clone()))  # the clone is what backward reads
        if func is _COPY_INPLACE and _copies_own_data_unrecorded(args, kwargs):
            torch.autograd.graph.increment_version(args[0])  # (eager's autograd still counts the write)
            return args[0]
        if func is _SQUEEZE_INPLACE and (len(args) > 1 or "dim" in kwargs):
            return _squeeze_(args[0], args[1] if len(args) > 1 else kwargs["dim"])
        if func in _DETACH and args and isinstance(args[0], FunctionalTensor):
            out = func(*args, **kwargs)
            self.detached_from[id(out)] = (weakref.ref(out), args[0])
            return out
        if func in _AS_STRIDED and args and (source := self._detached_source(args[0])) is not None:
            out = func(*args, **kwargs)
            size, stride, offset = _bind(args[1:], kwargs, ("size", "stride", "storage_offset"), (None,))
            if offset is None:  # (v's, now: a later metadata op of v does not move the view)
                with torch._C.DisableTorchFunction():
                    offset = args[0].storage_offset()
            self.strided_detached[id(out)] = (weakref.ref(out), source, func, args[0], (size, stride, offset), {})
            return out
        if args and (proxy := self._write_proxy(func, args, kwargs)) is not None:
            result = self.__torch_function__(func, types, (proxy, *args[1:]), kwargs)
            return args[0] if result is proxy else result
        if func is _AS_STRIDED_INPLACE and args and (root := rebased_root(args[0], args[1:], kwargs)) is not None:
            drops_gradient = restride_drops_gradient(args[0], args[1:], kwargs)
            out = func(*args, **kwargs)
            if drops_gradient:
                with torch._C.DisableTorchFunction():
                    key = StorageWeakRef(args[0].untyped_storage())
                pending = self.pending_rebases.setdefault(key, [])
                if not any(args[0] is v for v, _ in pending):
                    pending.append((args[0], root))
            else:
                rebase_restrided_view(args[0], root)
            return out
        if func in _AS_STRIDED and args and _as_strided_of_base(args[0], args[1:], kwargs):
            return _with_creation_meta_of(func(args[0]._base, *args[1:], **kwargs), args[0])
        if (inplace_call := _inplace_functional(func, args, kwargs)) is not None:
            # ``F.relu(v, inplace=True)`` writes ``v`` with ``relu_`` inside the call, which
            # this mode does not see: made an in-place op of ``v``, whose write through the
            # expand is exact (core/overlapping_writes.py)
            dest, write = inplace_call
            return self._rewritten(write, types, (dest,), {})
        if func is _FUNCTIONAL_DROPOUT:
            x, p, train, inplace = _bind(args, kwargs, ("input", "p", "training", "inplace"), (0.5, True, False))
        elif func in _DROPOUTS or func in _DROPOUTS_INPLACE:
            x, p, train = _bind(args, kwargs, ("input", "p", "train"), ())
            inplace = func in _DROPOUTS_INPLACE
        else:
            rewritten, out = overlapping_write(
                func, args, kwargs, self._commit, by_location=self._unrecorded_write_past_as_strided(func, args, kwargs),
                alias_source=self._alias_source, copy_slices_layout=self.copy_slices_layout,
            )
            if rewritten:
                return out
            root = _written_root(func, args, kwargs)
            if root is None:
                return func(*args, **kwargs)
            if func is _MASKED_FILL_INPLACE and _unviewable_fill(args, kwargs):
                # the functional masked_fill is contiguous, and functionalization's inverse of a
                # view() step in the destination's chain is view() of it: where the destination
                # is not contiguous that raises; copy_ keeps the destination's layout
                # (fuzz seed 1014037). Autograd sees masked_fill of the old value copied in.
                filled = torch.Tensor.masked_fill(*args, **kwargs)
                func, args, kwargs = torch.Tensor.copy_, (args[0], filled), {}
            elif _unviewable_out(func, args, kwargs):
                # the same for an out= op whose result is laid out otherwise than ``out``
                # (torch.mul(t, 2, out=v) of a transposed t; fuzz seed 2015069); autograd
                # records neither (eager refuses out= ops it would record); where the result
                # does not fit ``out`` (out= resizes it), the op runs as written (the unused
                # result is dead code)
                result = func(*args, **{k: v for k, v in kwargs.items() if k != "out"})
                out = kwargs["out"]
                with torch._C.DisableTorchFunction():
                    fits = isinstance(result, torch.Tensor) and tuple(result.shape) == tuple(out.shape)
                if fits:
                    func, args, kwargs = torch.Tensor.copy_, (out, result), {}
                else:
                    return func(*args, **kwargs)
            return _keeping_layout(root, func, args, kwargs, size1_unknown=self.odd_size1_strides)
        if train and 0 < p < 1 and x.numel() > 0 and x.device.type == "cpu" and x.is_floating_point():
            noise = bernoulli_like(x.detach(), 1 - p).div_(1 - p)
            if inplace and has_lossy_step(x):
                # (the mode is off here: the write goes through the rewrites explicitly)
                return self._rewritten(torch.Tensor.mul_, types, (x, noise), {})
            return x.mul_(noise) if inplace else x * noise
        return func(*args, **kwargs)


def _signature(func: Callable) -> inspect.Signature | None:
    """``inspect.signature(func)`` (None where it raises), remembered per function
    (:func:`_remembered_signature`; an unhashable callable is asked each time): it reads the
    function's code and defaults anew on each call, and a function's signature does not change."""
    try:
        return _remembered_signature(func)
    except TypeError:  # unhashable
        return _signature_of(func)


@functools.cache
def _remembered_signature(func: Callable) -> inspect.Signature | None:
    return _signature_of(func)


def _signature_of(func: Callable) -> inspect.Signature | None:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):
        return None


def _inplace_functional(
    func, args: tuple, kwargs: dict,
) -> tuple[FunctionalTensor, Callable[[torch.Tensor], torch.Tensor]] | None:
    """For a ``torch.nn.functional`` call with ``inplace=True`` (other than ``dropout``,
    rewritten on its own) whose input (its first parameter) overlaps itself or is a view
    through an overlapping step (``expand``, ``unfold``, an overlapping ``as_strided``: what
    :func:`~aotgrad.core.overlapping_writes.overlapping_write` writes): the call as an in-place
    op of that input: (the input, ``w``, named as an in-place op, ``relu_``: ``w(x)`` runs
    ``func`` with ``x`` for the input and the call's other arguments); else None."""
    if getattr(func, "__module__", None) != "torch.nn.functional" or func is _FUNCTIONAL_DROPOUT:
        return None
    signature = _signature(func)
    if signature is None or "inplace" not in signature.parameters:
        return None  # (bound.arguments would hold no "inplace")
    try:
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    if bound.arguments.get("inplace") is not True:
        return None
    first = next(iter(bound.arguments))
    dest = bound.arguments[first]
    if type(dest) is not FunctionalTensor or not (chain_overlaps(dest) or _overlaps(dest)):
        return None

    def write(dest: torch.Tensor) -> torch.Tensor:
        bound.arguments[first] = dest
        return func(*bound.args, **bound.kwargs)

    write.__name__ = f"{func.__name__}_"
    return dest, write


def _copies_own_data_unrecorded(args: tuple, kwargs: dict) -> bool:
    """``args[0].copy_(src)`` into memory that overlaps itself, where ``src`` is the
    destination's own data (the same storage, offset, sizes, strides, dtype, conj and neg
    bits) and autograd records nothing: eager's kernel returns at once, writing nothing and
    checking no overlap (an ``expand()``ed input copied from an alias of itself runs; fuzz
    seed 35002142), where the traced write would be written back into the input at run time,
    which raises. Functionally it is no write, so the call is dropped, its version bump kept.
    (Into other memory the traced write runs as it is: its values are the same.)"""
    if len(args) < 2 or set(kwargs) - {"non_blocking"}:
        return False
    dest, src = args[0], args[1]
    if not (isinstance(dest, FunctionalTensor) and isinstance(src, FunctionalTensor)):
        return False
    with torch._C.DisableTorchFunction():
        if torch.is_grad_enabled() and (dest.requires_grad or src.requires_grad):
            return False
        # (overlapping_writes' own test of eager's early return, plus the conj and neg bits)
        return (
            _same_data_copy("copy_", dest, args) and dest.is_conj() == src.is_conj()
            and dest.is_neg() == src.is_neg() and _overlaps(dest)
        )


def _unviewable_fill(args: tuple, kwargs: dict) -> bool:
    """``dest.masked_fill_(mask, value)`` (``args``, ``kwargs``) writes a view ``dest`` that is
    not contiguous and whose functionalization chain has a ``view`` step, with a mask that
    broadcasts to ``dest`` (else the op raises eager's error itself)."""
    dest = args[0]
    mask = args[1] if len(args) > 1 else kwargs.get("mask")
    if type(dest) is not FunctionalTensor or not isinstance(mask, torch.Tensor):
        return False
    with torch._C.DisableTorchFunction():
        if dest.is_contiguous():
            return False
        try:
            if tuple(torch.broadcast_shapes(dest.shape, mask.shape)) != tuple(dest.shape):
                return False
        except RuntimeError:
            return False
    return _through_view_step(dest)


def _through_view_step(dest: Any) -> bool:
    """``dest`` is a view whose functionalization chain has a ``view`` step: a write into it
    is written back into its base through ``view`` of the new value, which must be laid out
    as ``view`` accepts."""
    if type(dest) is not FunctionalTensor:
        return False
    with torch._C.DisableTorchFunction():
        if dest._base is None:
            return False
        chain = functionalization.get_view_meta_sequence(dest.elem)
    return any(type(vm).__name__ in ("view_ViewMeta", "_unsafe_view_ViewMeta") for vm in chain)


#: ops drawing from a generator: the rewrite below may run the op twice in the trace
_RANDOM_WORDS = ("rand", "normal", "bernoulli", "multinomial", "poisson", "exponential", "cauchy", "geometric", "uniform", "dropout")


def _unviewable_out(func, args: tuple, kwargs: dict) -> bool:
    """A deterministic ``out=`` op into a view with a ``view`` step
    (:func:`_through_view_step`) that autograd does not record."""
    name = getattr(func, "__name__", "")
    if any(w in name for w in _RANDOM_WORDS) or not _through_view_step(kwargs.get("out")):
        return False
    return not (torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tree_leaves((args, kwargs))
    ))


def _written(func, args: tuple, kwargs: dict) -> list[FunctionalTensor]:
    """The functional tensors an in-place data op (``__setitem__`` too) or an ``out=`` op
    writes into; none for other ops."""
    name = getattr(func, "__name__", "")
    written = kwargs.get("out")
    if written is None and args and writes_through_source(name):
        written = args[0]
    return [t for t in tree_leaves(written) if type(t) is FunctionalTensor]


def _written_root(func, args: tuple, kwargs: dict) -> FunctionalTensor | None:
    """The functional tensor whose value an in-place data op (or an ``out=`` op) replaces:
    the tensor written to, or the base of the view written through; None for other ops."""
    name = getattr(func, "__name__", "")
    out = kwargs.get("out")
    if isinstance(out, torch.Tensor):
        written: Any = out
    elif not args or not isinstance(args[0], torch.Tensor):
        return None
    elif writes_through_source(name):
        written = args[0]
    else:
        return None
    with torch._C.DisableTorchFunction():  # attribute reads, no program ops
        root = written if written._base is None else written._base
    return root if type(root) is FunctionalTensor else None


def _value(f: FunctionalTensor) -> torch.Tensor:
    """``f``'s functional value (the wrapper keeps its own strides through a replaced value)."""
    torch._sync(f)
    return torch._from_functional_tensor(f.elem)


def _static(t: torch.Tensor) -> bool:
    return not any(isinstance(x, torch.SymInt) for x in (*t.shape, *t.stride()))


def _at_offset_zero(t: torch.Tensor) -> bool:
    """``t``'s storage offset is 0 (a symbolic one the shape environment cannot prove 0
    counts as not: no guard is added)."""
    return statically_known_true(t.storage_offset() == 0)


def _known_equal(a: Any, b: Any) -> bool:
    """Two sizes or strides are the same for every value of their symbols (no guard is added:
    where the shape environment cannot tell, they count as different)."""
    return len(a) == len(b) and all(statically_known_true(x == y) for x, y in zip(a, b))


def _overlaps(t: torch.Tensor) -> bool:
    """Two elements of ``t`` share a memory location (an expanded tensor)."""
    dims = sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz > 1)
    extent = 1
    for st, sz in dims:
        if st < extent:
            return True
        extent = st * (sz - 1) + 1
    return False


def _odd_size1_strides(t: Any) -> bool:
    """``t`` (a functional tensor) has a size-1 dim whose stride is not a contiguous tensor's."""
    if type(t) is not FunctionalTensor:
        return False
    with torch._C.DisableTorchFunction():
        size, stride = tuple(t.shape), tuple(t.stride())
    # sizes 0 and 1 are never symbolic; a stride the shape environment cannot prove to be the
    # contiguous one counts as odd (no guard is added)
    if not any(type(n) is int and n == 1 for n in size) or any(type(n) is int and n == 0 for n in size):
        return False
    expected: Any = 1
    for sz, st in reversed(list(zip(size, stride))):
        if type(sz) is int and sz == 1 and not statically_known_true(st == expected):
            return True
        expected = expected * sz
    return False


def _keeping_layout(root: FunctionalTensor, func, args: tuple, kwargs: dict, *, size1_unknown: bool) -> Any:
    """Run the in-place op ``func`` (which writes ``root``, or a view of it), then give
    ``root``'s new functional value the layout eager keeps: ``root``'s before the op.

    Only where the trace shows another layout afterwards than ``empty_like`` of the old value
    has (``root``'s own strides where it is dense; same size, no overlap; symbolic strides
    the shape environment cannot prove equal count as another layout), or ``root`` has a
    size-1 dim and ``size1_unknown`` (the kernels' strides there may not be the trace's, see
    :class:`EagerRewrites`), or ``root`` is empty: the graph then gets ``copy(empty_like(old value), new value)``,
    laid out at run time as the kernels laid out the old value (size-1 dims included).
    ``root``'s views are regenerated off the new value. Autograd sees nothing of it (the
    same values)."""
    with torch._C.DisableTorchFunction():
        old = _value(root)
    out = func(*args, **kwargs)
    with torch._C.DisableTorchFunction():
        new = _value(root)
        if not _known_equal(old.shape, new.shape):
            return out
        dense = is_non_overlapping_and_dense_or_false(old)
        if not dense and (not _static(old) or _overlaps(old)):
            return out
        size1 = any(type(n) is int and n == 1 for n in old.shape)  # sizes 0 and 1 are never symbolic
        # an empty tensor's strides are the kernels' choice as much as the trace's (full_like
        # of an empty diagonal keeps its strides in eager, meta makes them contiguous)
        empty = any(type(n) is int and n == 0 for n in old.shape)
        keeps = not (size1_unknown and size1) and not empty
        if dense and keeps and _known_equal(new.stride(), old.stride()):
            return out  # (the usual case: decided without tracing an empty_like)
        with disable_functional_mode(), torch.no_grad():
            # (a non-dense old value, an input sliced with a step, is laid out densely: a
            # buffer in its own strides would hold its elements only, and an as_strided of it
            # would read that buffer's gaps, not the caller's: view_geometry._relaid_out
            # refuses it or merges the input into a synthetic base where laid out otherwise)
            if dense and not _at_offset_zero(old) and (old.is_contiguous() or not old.requires_grad):
                # (a dense input at a storage offset, ``x[:, 1:]``: ``empty_like`` would move
                # its elements to offset 0, where an ``as_strided`` record of it, replayed on
                # the new value with its absolute offset, names other elements than eager's;
                # the new value in the old one's exact layout, offset included, as the
                # caller's tensor is. ``as_strided_scatter`` asserts on a non-contiguous
                # value requiring grad: those keep ``empty_like``, and an ``as_strided`` of
                # them after the write is view_geometry's to refuse)
                relaid = torch.ops.aten.as_strided_scatter.default(
                    old, new, old.shape, old.stride(), old.storage_offset()
                )
            else:
                like = torch.empty_like(old)
                if not dense and keeps and _known_equal(new.stride(), like.stride()):
                    return out  # the unused empty_like is dropped with the trace's dead code
                relaid = torch.ops.aten.copy.default(like, new)
        # in the op's grad mode: functionalization counts this as part of its mutation
        root.replace_(relaid)
        root.commit_update()
        root.sync()
    return out


def rebase_restrided_view(v: FunctionalTensor, root: FunctionalTensor) -> None:
    """After ``v.as_strided_(...)`` on a view ``v`` of ``root`` (:func:`rebased_root`), record
    ``v`` in functionalization as ``root.as_strided(...)`` of ``v``'s new geometry: the same
    storage locations (``as_strided`` offsets are absolute), one step from the root, so a
    write through ``v`` is scattered into (a copy of) ``root``'s value rather than of the
    view's old layout. Only functionalization's record changes: ``v`` stays the same tensor
    with the same autograd history, and its value is the one the old record gave."""
    with torch._C.DisableTorchFunction(), torch.no_grad():
        aliased = root.as_strided(tuple(v.shape), tuple(v.stride()), v.storage_offset())
    v.elem = aliased.elem


def _as_strided_after_first(t: FunctionalTensor) -> bool:
    """``t``'s functionalization chain has an ``as_strided`` step after its first."""
    chain = functionalization.get_view_meta_sequence(t.elem)
    return any(type(vm).__name__ == "as_strided_ViewMeta" for vm in chain[1:])


def _addresses_own_storage(root: FunctionalTensor) -> bool:
    """``root``'s functional value is its whole storage (offset 0, dense, static) laid out as
    the program's tensor ``root``: an ``as_strided`` offset names the same element of both."""
    with torch._C.DisableTorchFunction():
        value = _value(root)
        if not _static(value) or not _static(root) or value.storage_offset() != 0 or root.storage_offset() != 0:
            return False
        return (
            is_non_overlapping_and_dense_or_false(value) and tuple(value.stride()) == tuple(root.stride())
            and value.untyped_storage().nbytes() == value.numel() * value.element_size()
        )


def storage_root(t: FunctionalTensor, detached_source: Callable[[Any], torch.Tensor | None]) -> FunctionalTensor | None:
    """The functional tensor that starts the view chain of ``t``'s storage, reached through
    autograd bases and the program's ``detach()``ed aliases (``detached_source``: the tensor
    such an alias was taken of); None where the chain leads to no tensor that starts its own
    chain (a view of a tensor functionalization made internally)."""
    while functionalization.get_view_meta_sequence(t.elem):
        base = t._base if t._base is not None else detached_source(t)
        if type(base) is not FunctionalTensor:
            return None
        t = base
    return t


def _own_roots(args: tuple, kwargs: dict, out: Any) -> None:
    """Record each tensor in ``out`` that functionalization holds as a view of a temporary
    the op made internally (``matmul``'s ``_unsafe_view`` of its ``bmm``/``mm`` result or
    ``squeeze_`` of it, ``reshape``'s ``_unsafe_view`` of a copy; no autograd view, no
    storage of an argument) as the root of its own storage: nothing else reaches the
    temporary, so the new record names the same storage locations, and a chain from the
    tensor starts at it (an ``as_strided`` of it is the first view of its chain, as
    functionalization requires of a write through one; fuzz seeds 3002622, 4003661,
    7008097)."""
    with torch._C.DisableTorchFunction():
        fresh = [
            t for t in tree_leaves(out)
            if type(t) is FunctionalTensor and t._base is None and functionalization.get_view_meta_sequence(t.elem)
        ]
        if not fresh:
            return
        taken = {
            StorageWeakRef(a.untyped_storage())
            for a in tree_leaves((args, kwargs)) if type(a) is FunctionalTensor
        }
        for t in fresh:
            if StorageWeakRef(t.untyped_storage()) not in taken:
                t.elem = torch._to_functional_tensor(_value(t))



def _as_strided_of_detached(
    func, v: torch.Tensor, source: torch.Tensor, args: tuple, kwargs: dict,
    detached_source: Callable[[Any], torch.Tensor | None],
) -> torch.Tensor:
    """``v.as_strided(*args, **kwargs)`` of ``v = source.detach()`` as
    ``source.as_strided(...).detach()``: the same elements of the same storage, without
    history, for a write into the former to go through (:meth:`EagerRewrites._write_proxy`).
    Functionalization holds ``detach()`` as a view, so an ``as_strided`` of ``v`` is no first
    view of its chain and a write through it was refused ("as_strided() is
    non-compositional", fuzz seeds 422519, 422630); taken off ``source``'s root (its
    ``_base``, where the dtype is the same) it starts the chain, and the program's own view
    of ``v`` (kept as it is, so its ``_base`` is eager's) reads the write from the shared
    storage. The storage offset is made explicit: ``v``'s own when the view was taken.
    ``source`` is followed through ``detach()``ed aliases too (``detached_source``: a
    ``detach()`` of a ``detach()``ed member of a synthetic base, fuzz seed 7000586)."""
    size, stride, offset = _bind(args, kwargs, ("size", "stride", "storage_offset"), (None,))
    if offset is None:
        with torch._C.DisableTorchFunction():
            offset = v.storage_offset()
    # (history is cut, so the view may start at the base whatever autograd records)
    while True:
        if source._base is not None and source._base.dtype == source.dtype:
            source = source._base
        elif (further := detached_source(source)) is not None:
            source = further
        else:
            break
    with torch.no_grad():
        return func(source, size, stride, offset).detach()


def _with_creation_meta_of(out: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``out`` (``v._base.as_strided(...)``, for ``v.as_strided(...)``) with the creation meta
    eager's view of ``v`` inherits: a view of a no_grad or multi-output view is one too
    (autograd's ``propagate_creation_meta``), so a later in-place op with grad recording on
    its storage makes reading its ``grad_fn`` raise, as eager's (fuzz seed 26015498: taken
    where neither required grad yet)."""
    with torch._C.DisableTorchFunction():  # attribute reads, no program ops
        meta = torch._C._autograd._get_creation_meta(v)
        if (
            meta != torch._C._autograd.CreationMeta.DEFAULT and out._base is not None
            and torch._C._autograd._get_creation_meta(out) == torch._C._autograd.CreationMeta.DEFAULT
        ):
            torch._C._autograd._set_creation_meta(out, meta)
    return out


def _as_strided_of_base(v: torch.Tensor, args: tuple, kwargs: dict) -> bool:
    """``v.as_strided(*args, **kwargs)`` may be taken of ``v._base`` instead (see the module
    docstring). Where autograd records neither, always. Where it records both (``v`` and its
    base require grad, ``v`` an ordinary view), only where the result addresses elements of
    ``v`` alone, ``v``'s (and the base's) elements overlap nowhere and all are static: eager's
    gradient of ``v.as_strided`` reaches ``v``'s elements of the storage, and through ``v``'s
    view the same elements of the base, which is the base's gradient of ``base.as_strided``."""
    base = getattr(v, "_base", None)
    if base is None or base.dtype != v.dtype:
        return False
    if not v.requires_grad and not base.requires_grad:
        return True
    if v.requires_grad != base.requires_grad:
        return False
    with torch._C.DisableTorchFunction():  # attribute reads, no program ops
        if torch._C._autograd._get_creation_meta(v) != torch._C._autograd.CreationMeta.DEFAULT:
            return False  # a multi-output or no_grad view: eager's result inherits its standing
        named = as_strided_geometry(v, args, kwargs)
        if named is None:
            return False
        wanted = _elements(*named)
        own = _elements(tuple(v.shape), tuple(v.stride()), v.storage_offset())
        whole = _elements(tuple(base.shape), tuple(base.stride()), base.storage_offset())
        if wanted is None or own is None or whole is None or own[1] or whole[1]:
            return False
        return wanted[0] <= own[0]


#: above this many elements, a layout's storage offsets are not enumerated
_ENUMERATION_LIMIT = 1 << 16


def _elements(size: tuple, stride: tuple, offset: Any) -> tuple[frozenset[int], bool] | None:
    """The storage offsets a static layout addresses and whether two of its elements share
    one; None where a value is symbolic or the layout is too large to enumerate."""
    if any(type(n) is not int for n in (*size, *stride, offset)):
        return None
    numel = 1
    for n in size:
        numel *= n
    if numel > _ENUMERATION_LIMIT:
        return None
    offsets = [offset]
    for n, st in zip(size, stride):
        offsets = [o + k * st for o in offsets for k in range(n)]
    found = frozenset(offsets)
    return found, len(found) < len(offsets)


def _squeeze_(x: torch.Tensor, dim: int | tuple[int, ...]) -> torch.Tensor:
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if x.dim() == 0:
        return torch.Tensor.squeeze_(x, dim)
    # x.shape, not x.size(d): the latter dispatches to functionalization. A bad dim raises
    # the IndexError eager's squeeze_ raises.
    shape = x.shape
    for d in dims:
        if not -len(shape) <= d < len(shape):
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-len(shape)}, {len(shape) - 1}], but got {d})"
            )
    return torch.Tensor.squeeze_(x, tuple(d for d in dims if shape[d] == 1))


def _bind(args: tuple, kwargs: dict, names: tuple, defaults: tuple) -> list:
    """Positional values of ``names`` from args/kwargs, trailing ones defaulted."""
    values = list(args)
    first_default = len(names) - len(defaults)
    for k in range(len(args), len(names)):
        values.append(kwargs[names[k]] if names[k] in kwargs else defaults[k - first_default])
    return values
