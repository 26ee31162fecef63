"""In-place writes through memory that overlaps itself, rewritten as writes of the storage's base.

Functionalization replays a write into a view onto the view's base through each view op's
inverse. Two inverses are wrong where elements share memory: ``expand``'s is
``base + sum_to(new - base)`` (a write reaching ``n`` copies of a location adds ``n`` times),
and ``as_strided_scatter``/``unfold_backward`` of an overlapping view keep one writer per
location, or sum them. Eager writes memory: a location gets the value of *any* element
written there. ``expand``'s is wrong even where no elements of the destination share memory
(``x.expand(2, 3)[0]``, ``x.expand(1).view(torch.int32)``): ``(new - b) + b`` loses ``-0.0``,
turns ``inf`` into ``nan``, rounds (``1e8 + (2 - 1e8) == 0`` in float32) and mangles the bit
patterns written through a ``view(dtype)``.

The contract: **every data write whose destination's functionalization chain has an
``expand`` or ``unfold`` step** (``unfold``'s inverse, ``unfold_backward``, also zeroes the
elements between windows) is written exactly (below) or refused (:class:`~aotgrad.errors.AotgradCompileError`
naming the op and the user's line); so is a write whose destination overlaps itself (an
``expand()``ed or overlapping ``as_strided`` view) or is a view taken through an
overlapping ``as_strided``/``unfold``. Such a write is rewritten by :func:`overlapping_write`
(called by ``EagerRewrites`` for every in-place method, ``out=`` op, item assignment, and
``torch.nn.functional`` call with ``inplace=True`` made an in-place op): the op runs on a
``clone()`` of the destination (dense, so the functional op is exact), and the new values go
to the destination's memory locations in its **root** (:func:`write_root`: the functional
``._base``, or the tensor itself, followed up past any tensor whose own chain has an
``expand`` or ``unfold`` step, through the ``detach()`` and ``view(dtype)`` aliases functionalization holds
as views without an autograd base, written unrecorded then, as eager's write of the
alias's memory is), by location arithmetic on the sizes, strides and storage offsets of the destination's and
the root's functional values (:func:`_value_geometry`; a ``view(dtype)`` of the root's
element size: its bits): ``root.copy_(where(hit, values, root))`` with ``hit``/``values``
scattered over the storage span (``index_put``). The op itself runs first as far as its
first mutating op below autograd, so that autograd's checks of the destination raise
eager's errors (:func:`_check_inplace_as_eager`). Autograd then sees what
eager's sees: written locations lose the root's old gradient, the written values' sources
get theirs (an element written through several aliases gets the gradient once per alias,
as eager's ``as_strided`` view of the gradient gives it).

This is exact where every element mapping to one location is written the same value:

- ``fill_``, ``zero_``, ``masked_fill_`` with a one-element value (a location is written where
  the mask holds for *any* of its elements), ``copy_``/``__setitem__`` of a one-element value
  or of the destination's own memory laid out as it (eager's ``copy_`` of the same data);
- any op where no two destination elements share memory (the overlap is in a view above it:
  ``x.expand(2, 3)[0].add_(1)``).

Otherwise eager's result is its kernel's loop order (``neg_`` through an overlapping
``as_strided``: a location shared by two elements is negated twice), and the write is
refused (:class:`~aotgrad.errors.AotgradCompileError`). Where eager's TensorIterator itself
raises (a stride-0 dim of size > 1 in the output of an op other than ``fill_``/``zero_``/
``masked_fill_``), eager's ``RuntimeError`` is raised; and where autograd records a write
through a stride-0 dim, eager's backward raises it (its ``CopySlices`` copies the gradient
into the view's geometry): noted on the rewrite's autograd node, for the compiled backward
to raise it too (core/saved_tensors.py). What the op's node saves of the clone stands for
the destination eager's saved, whose version eager's backward checks: noted on that node
(``saved_tensors.note_saved_by_stand_in``).

Refused through a chain with an ``expand`` or ``unfold`` step: a destination of another element size than
its root (``view_as_real``, ``.real`` of an expanded complex tensor); a write autograd records
into a ``detach()``ed or ``view(dtype)`` alias crossed on the way to the root (eager records
it on the alias alone); a root out of reach (an alias of a tensor functionalization made
internally, symbolic sizes); and, by the analysis's functionalization mode
(:class:`NoLossyReplays`, at the aten op), every write that reaches functionalization
without passing here (an ``out=`` tuple, ``_foreach_*_``, an op's internal write).
"""

from __future__ import annotations

import collections
import contextlib
import enum
import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch._C._functionalization as functionalization
import torch.utils._pytree as pytree
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import AotgradCompileError, current_user_line
from .inplace_ops import NO_DATA_INPLACE
from .saved_tensors import note_backward_error, note_saved_by_stand_in, saving_into_copy

__all__ = ["Overlap", "overlap_of", "overlapping_write", "overlaps_itself", "scatter_once_per_location", "write_root",
           "NoLossyReplays", "has_lossy_step", "chain_overlaps"]

#: layouts with more elements than this are not enumerated by :func:`overlaps_itself`
_OVERLAP_ENUMERATION_LIMIT = 1 << 16

#: eager's TensorIterator error for an output with a stride-0 dim of size > 1
_EAGER_INTERNAL_OVERLAP = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation."
)

#: in-place ops whose written value does not depend on the element written (eager lets them
#: write through a stride-0 dim)
_CONSTANT_WRITES = frozenset({"fill_", "zero_", "masked_fill_"})
#: in-place ops that change size, stride or storage, and no data
#: in-place writes that are no TensorIterator output (eager checks no internal overlap)
_NOT_ITERATOR_WRITES = frozenset(
    {"index_fill_", "index_put_", "index_add_", "index_copy_", "index_reduce_", "scatter_",
     "scatter_add_", "scatter_reduce_", "masked_scatter_", "put_"}
)
_INPLACE_DUNDERS = frozenset(
    {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
     "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__"}
)


def overlaps_itself(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """True when two elements of a strided layout share a memory location.

    Quick test first (each stride, in ascending order, past the extent of the smaller ones:
    no overlap); else the offsets are enumerated for small tensors. A large layout the quick
    test cannot clear is reported as not overlapping (as eager's own check says "too hard").
    """
    if any(sz == 0 for sz in size):
        return False  # no elements (eager writes nothing, and checks nothing: fuzz seed 1011471)
    dims = sorted((abs(st), sz) for sz, st in zip(size, stride) if sz > 1)
    if any(st == 0 for st, _ in dims):
        return True
    if strides_keep_apart(size, stride):
        return False
    numel = 1
    for _, sz in dims:
        numel *= sz
    if numel > _OVERLAP_ENUMERATION_LIMIT:
        return False
    offsets = {0}
    for st, sz in dims:
        offsets = {o + k * st for o in offsets for k in range(sz)}
    return len(offsets) < numel


def strides_keep_apart(size: tuple, stride: tuple) -> bool:
    """The quick test that no two elements of a strided layout share a memory location:
    each stride (of the dims of size > 1, in ascending order) is past the extent of the
    smaller ones. False proves nothing (``overlaps_itself`` then enumerates)."""
    extent = 0
    for st, sz in sorted((abs(st), sz) for sz, st in zip(size, stride) if sz > 1):
        if st <= extent:
            return False
        extent += (sz - 1) * st
    return True


class Overlap(enum.Enum):
    """Eager's ``at::has_internal_overlap`` classes, as far as they matter to a write."""

    NONE = "none"
    #: a stride-0 dim of size > 1: eager's TensorIterator refuses such an output
    STRIDE0 = "stride0"
    #: elements share memory otherwise (``as_strided``, ``unfold``): eager lets it through
    OTHER = "other"


def overlap_of(size: tuple[int, ...], stride: tuple[int, ...]) -> Overlap:
    if not overlaps_itself(size, stride):
        return Overlap.NONE
    if any(st == 0 and sz > 1 for sz, st in zip(size, stride)):
        return Overlap.STRIDE0
    return Overlap.OTHER


def _geometry(t: torch.Tensor) -> tuple[tuple, tuple, Any] | None:
    """``t``'s size, stride and storage offset (no program op), None where any is symbolic."""
    with torch._C.DisableTorchFunction():
        g = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
    if any(not isinstance(n, int) for n in (*g[0], *g[1], g[2])):
        return None
    return g


def chain_overlaps(t: FunctionalTensor) -> bool:
    """A view step in ``t``'s chain from its storage's root made elements share memory: an
    ``expand`` (whose functional inverse sums), an overlapping ``as_strided`` or ``unfold``."""
    for vm in functionalization.get_view_meta_sequence(t.elem):
        kind = type(vm).__name__
        if kind == "expand_ViewMeta":
            return True
        if kind in ("as_strided_ViewMeta", "as_strided__ViewMeta"):
            args = vm.as_tuple()
            size, stride = _ints(args, 0), _ints(args, 1)
            if size is None or stride is None or overlaps_itself(size, stride):
                return True
        if kind == "unfold_ViewMeta":
            return True  # its inverse (unfold_backward) sums what overlapping windows hold
    return False


def _ints(args: tuple, k: int) -> tuple[int, ...] | None:
    for a in args:
        if isinstance(a, (list, tuple)) and all(isinstance(n, int) for n in a):
            if k == 0:
                return tuple(a)
            k -= 1
    return None


def _written(func: Any, args: tuple, kwargs: dict) -> tuple[str, Any] | None:
    """(op name, the tensor an in-place data op writes) or None for other ops."""
    name = getattr(func, "__name__", "")
    out = kwargs.get("out")
    if isinstance(out, torch.Tensor):
        return name, out
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    if name == "__setitem__" or name in _INPLACE_DUNDERS:
        return name, args[0]
    if name.endswith("_") and not name.endswith("__") and name not in NO_DATA_INPLACE:
        return name, args[0]
    return None


def overlapping_write(
    func: Any, args: tuple, kwargs: dict, commit: Callable[[FunctionalTensor, torch.Tensor], None],
    *, by_location: bool = False, alias_source: Callable[[FunctionalTensor], Any] | None = None,
    copy_slices_layout: Callable[[FunctionalTensor, bool], tuple | None] | None = None,
) -> tuple[bool, Any]:
    """Run the in-place op ``func(*args, **kwargs)`` as a write of its destination's root
    where the destination overlaps itself or is a view through an overlapping step (see the
    module docstring). Returns ``(True, result)`` where it did, ``(False, None)`` where the op
    is none of these (the caller runs it). ``commit(root, new_value)`` writes the root
    (``root.copy_(new_value)``, keeping its layout). Raises eager's error, or refuses, where
    eager's result would be its loop order's. ``by_location``: write the destination's root so
    whether or not the destination overlaps (a write functionalization would refuse, whose
    destination's chain has an ``as_strided`` after its first step; the caller checks that
    autograd does not record it and that the sizes, strides and offsets are eager's).
    ``alias_source(t)``: the tensor ``t`` is an alias of, where functionalization holds ``t``
    as a view without an autograd base (a ``detach()``, a ``view(dtype)``), else None
    (:func:`write_root`). ``copy_slices_layout(dest, itself)``: eager's layout of the tensor eager's
    autograd records the write on, None where that is not ``dest``'s base as traced; the
    check it serves (:func:`_refuse_recorded_write_into_overlapping_base`) is skipped where
    None is passed (the trace after the analysis)."""
    written = _written(func, args, kwargs)
    if written is None or type(written[1]) is not FunctionalTensor:
        return False, None
    name, dest = written
    base_layout = (
        None if copy_slices_layout is None
        else _refuse_recorded_write_into_overlapping_base(func, name, dest, args, kwargs, copy_slices_layout)
    )
    chain = by_location or chain_overlaps(dest)
    geometry = _geometry(dest)
    dest_overlaps = geometry is not None and overlaps_itself(geometry[0], geometry[1])
    if geometry is not None and not dest_overlaps and not chain:
        return _plain_write(name, base_layout)
    if geometry is None and not chain:
        with torch._C.DisableTorchFunction():
            if is_non_overlapping_and_dense_or_false(dest):
                # provably no overlap with symbolic sizes (no guard is added): the plain op
                return _plain_write(name, base_layout)
    # from here on the op runs on a clone: eager's autograd checks of the destination first
    _check_inplace_as_eager(func, args, kwargs)
    if geometry is None:
        # a symbolic trace falls back to a static one (core/pipeline.py), where this is exact
        raise AotgradCompileError(
            f"aotgrad: in-place {name} at {current_user_line()} through memory that may overlap "
            "itself, with symbolic sizes: the locations written are computed with static ones."
        )
    root, cut_off = write_root(dest, alias_source)
    if root is None and not has_lossy_step(dest):
        return _plain_write(name, base_layout)  # (no functional base: functionalization's own replay)
    if cut_off:
        # through an alias autograd does not connect to ``root``: eager writes ``root``'s
        # memory unrecorded, and records the write (if at all) on the alias alone
        if torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in pytree.tree_leaves((args, kwargs))
        ):
            raise AotgradCompileError(
                f"aotgrad: in-place {name} at {current_user_line()} writes, recorded by autograd, "
                "through a detach()ed or view(dtype) alias of an expand()ed or unfold()ed tensor: eager records "
                "it on the alias alone, which the exact write of the expanded tensor's base does "
                "not express. Write into a clone() instead."
            )
    unrecorded = torch.no_grad() if cut_off else contextlib.nullcontext()
    root_geometry = None if root is None else _geometry(root)
    if root_geometry is None:
        raise AotgradCompileError(
            f"aotgrad: in-place {name} at {current_user_line()} writes through a view taken "
            "through an expand() or unfold() whose base the write cannot be expressed on (a tensor "
            "functionalization made internally, or symbolic sizes): functionalization's replay "
            "(base + (new - base), unfold_backward) is not exact. Write into a clone() instead."
        )
    if dest.dtype != root.dtype and dest.element_size() != root.element_size():
        raise AotgradCompileError(
            f"aotgrad: in-place {name} at {current_user_line()} writes through a view of another "
            "element size than its base (view(dtype), view_as_real, .real) taken through an "
            "expand(), unfold() or memory that overlaps itself; this is not supported. Write into "
            "a clone() instead."
        )
    # the locations written: where ``dest``'s and ``root``'s functional values lie (see
    # :func:`_value_geometry`); ``geometry`` stays eager's for eager's overlap checks
    locations, root_locations = _value_geometry(dest), _value_geometry(root)
    if locations is None or root_locations is None:
        raise AotgradCompileError(
            f"aotgrad: in-place {name} at {current_user_line()} through memory that overlaps itself, "
            "whose functional value has symbolic sizes: the locations written cannot be computed."
        )
    if name == "__setitem__":
        with unrecorded:
            return True, _setitem(dest, root, locations, root_locations, args, commit, base_layout)
    overlap = overlap_of(geometry[0], geometry[1])
    if name == "fill_" and isinstance(args[1] if len(args) > 1 else kwargs.get("value"), torch.Tensor):
        name = "copy_"  # eager fills from a tensor through copy_: its checks, not fill_'s
    if overlap is Overlap.STRIDE0 and name not in _CONSTANT_WRITES and not _same_data_copy(name, dest, args):
        if name in _NOT_ITERATOR_WRITES:
            raise AotgradCompileError(
                f"aotgrad: in-place {name} at {current_user_line()} writes through an expand()ed "
                "tensor (elements sharing memory); aotgrad expresses only fill_, zero_, "
                "masked_fill_ and copy_ of the same data there. Write into a clone() instead."
            )
        raise RuntimeError(_EAGER_INTERNAL_OVERLAP)
    writer = None
    if overlap is not Overlap.NONE:
        if name == "masked_fill_":
            value = args[2] if len(args) > 2 else kwargs.get("value")
            if not _one_element(value):
                _refuse_loop_order(name, "its value has more than one element")
            recorded = torch.is_grad_enabled() and (
                dest.requires_grad or (isinstance(value, torch.Tensor) and value.requires_grad)
            )
            if overlap is Overlap.OTHER and recorded:
                # eager's backward copies the masked gradient back into the overlapping view:
                # a location some of whose elements are masked and some not gets the last one
                _refuse_loop_order(name, "autograd records it (eager's gradient of a location "
                                   "masked for some of its elements and not others is its loop order's)")
            writer = args[1] if len(args) > 1 else kwargs["mask"]
        elif name in ("fill_", "zero_"):
            pass
        elif name == "copy_":
            src = args[1] if len(args) > 1 else kwargs.get("src", kwargs.get("value"))
            if not (_one_element(src) and not _shares_storage(src, dest)) and not _same_data_copy(name, dest, args):
                _refuse_loop_order(name, "elements sharing memory are copied different values")
        else:
            _refuse_loop_order(name, "the value written depends on the element written")
    if overlap is not Overlap.NONE and copy_slices_layout is not None:
        _refuse_recorded_value_into_overlapping_tensor(
            getattr(func, "__name__", name), dest, args, kwargs, copy_slices_layout
        )
    values = dest.clone()
    version = dest._version
    if "out" in kwargs:
        result, saved = saving_into_copy(lambda: func(*args, **{**kwargs, "out": values}))
    else:
        result, saved = saving_into_copy(lambda: func(values, *args[1:], **kwargs))
    # (a tensor that is no view, re-strided by as_strided_ to overlap itself, is written as
    # itself: its node's formula, not CopySlices, takes the gradient; fuzz seed 35010912)
    with torch._C.DisableTorchFunction():
        written_view = geometry if dest._base is not None else None
    with unrecorded:
        _write_locations(root, locations, root_locations, values, writer, commit, written_view, base_layout)
    _refresh_history(dest)
    # eager's node saved ``dest`` where this one saved ``values``: its version is checked
    note_saved_by_stand_in(saved, values, dest, version, name)
    return True, dest if result is values else result


def _refuse_recorded_write_into_overlapping_base(
    func: Any, name: str, dest: FunctionalTensor, args: tuple, kwargs: dict,
    copy_slices_layout: Callable[[FunctionalTensor, bool], tuple | None],
) -> tuple | None:
    """Eager's layout of ``dest``'s autograd base (``copy_slices_layout(dest)``, eager's
    ``CopySlices`` base) where autograd records the write ``func`` (``name``) through the view
    ``dest`` and that layout has elements sharing memory (an ``as_strided_`` of a tensor that
    is no view, in the program or the caller's); None elsewhere. Refuses where eager's
    gradients are not the traced program's (fuzz seed 19003932), after eager's own checks of
    the write (which raise eager's error first).

    Eager's ``CopySlices`` at the base copies the base's incoming gradient into the base's
    layout (a location shared by several elements keeps one of their gradients, its loop
    order's) and hands that on to the base's earlier history, which reads each location once
    per element; the view's regenerated ``grad_fn`` (one ``AsStridedBackward0`` off the base)
    divides a location's gradient by the number of the base's elements there. The traced
    program differentiates the functional value, whose elements are apart. The two agree
    where the base had no history before the write (nothing reads the collapsed gradient)
    and no location the write goes to is shared (nothing is divided); elsewhere refused.
    A stride-0 layout is returned, not refused: eager's backward of the write raises
    (``copy_`` into it), noted on the write's node by :func:`_write_locations`."""
    with torch._C.DisableTorchFunction():
        # ``t[i] = v`` of a tensor that is no view writes through the view ``t[i]``, whose
        # CopySlices is at ``t`` itself (fuzz seed 34018504)
        itself = name == "__setitem__" and dest._base is None
        base = dest if itself else dest._base
        if base is None or not torch.is_grad_enabled():
            return None
        if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in pytree.tree_leaves((args, kwargs))):
            return None  # autograd records nothing: no CopySlices
        base_layout = copy_slices_layout(dest, itself)
        base_had_history = base.requires_grad
    if base_layout is None:
        return None
    geometry = _geometry(dest)
    if geometry is None or any(type(v) is not int for v in (*base_layout[0], *base_layout[1], base_layout[2])):
        with torch._C.DisableTorchFunction():
            if is_non_overlapping_and_dense_or_false(base):
                return None  # provably no overlap with symbolic sizes (no guard is added)
        raise AotgradCompileError(
            f"aotgrad: in-place {name} at {current_user_line()} through memory that may overlap "
            "itself, with symbolic sizes: the locations written are computed with static ones."
        )
    overlap = overlap_of(base_layout[0], base_layout[1])
    if overlap is Overlap.NONE:
        return None
    if overlap is Overlap.STRIDE0:
        return base_layout
    shared = _shared_locations(base_layout)
    written = _location_set(_written_region(name, dest, args) or geometry)
    if base_had_history or shared is None or written is None or written & shared:
        _check_inplace_as_eager(func, args, kwargs)
        raise AotgradCompileError(
            f"aotgrad: in-place {name} at {current_user_line()} writes, recorded by autograd, "
            "through a view of a tensor whose elements share memory (as_strided_ laid it out "
            "so): eager's backward of the write copies the tensor's gradient into that layout, "
            "keeping one value per shared location, and divides the gradient of a shared "
            "location the view reaches by the number of elements there; the traced program "
            "differentiates a tensor whose elements are apart. clone() the tensor after "
            "as_strided_, or write under no_grad."
        )
    return base_layout


def _refuse_recorded_value_into_overlapping_tensor(
    name: str, dest: FunctionalTensor, args: tuple, kwargs: dict,
    copy_slices_layout: Callable[[FunctionalTensor, bool], tuple | None],
) -> None:
    """Refuse the write ``name`` into ``dest``, a tensor whose elements share memory and that
    is no view in eager (an ``as_strided_`` of an intermediate, or of the caller's tensor:
    ``copy_slices_layout(dest, True)`` is its eager layout, None for an input the caller passed
    as a view), of a value that requires grad with autograd recording (``fill_(w)``,
    ``copy_(w)``, ``masked_fill_(m, w)``). Eager records the op's own node on ``dest``, whose
    formula sums the value's gradient over ``dest``'s elements, each shared location once per
    element there; the traced write puts the value into the locations, and its gradient
    counts each location once: silently another gradient (found while fixing fuzz seed
    35010912). A constant written (``fill_(0.5)``, ``zero_()``) has no such gradient."""
    with torch._C.DisableTorchFunction():
        if dest._base is not None or not torch.is_grad_enabled():
            return
        if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in pytree.tree_leaves((args[1:], kwargs))):
            return
        if copy_slices_layout(dest, True) is None:
            return
    raise AotgradCompileError(
        f"aotgrad: in-place {name} at {current_user_line()} writes a value that requires grad, "
        "recorded by autograd, into a tensor that is no view and whose elements share memory "
        "(as_strided_ laid it out so, or it is a detach()ed expand()): eager's gradient of the "
        "value counts every element of the tensor, the traced write's every memory location "
        "once. clone() the tensor first, or write the value under no_grad."
    )


def _plain_write(name: str, base_layout: tuple | None) -> tuple[bool, Any]:
    """``overlapping_write``'s answer for a write it leaves to the caller (functionalization
    runs it as written): ``(False, None)``. Refused where eager's backward of the write raises
    (``base_layout``: a stride-0 layout of the view's base, from
    :func:`_refuse_recorded_write_into_overlapping_base`), which only a rewritten write notes."""
    if base_layout is not None:
        raise AotgradCompileError(
            f"aotgrad: in-place {name} at {current_user_line()} writes, recorded by autograd, "
            "through a view of a tensor laid out with a stride-0 dim (elements sharing memory): "
            "eager's backward of the write raises there, which aotgrad does not express for this "
            "write. clone() the tensor first, or write under no_grad."
        )
    return False, None


def _written_region(name: str, dest: FunctionalTensor, args: tuple) -> tuple | None:
    """Eager's geometry of the part of ``dest`` an item assignment with a basic index writes
    (``dest[index]``); None for other writes (all of ``dest``) or where symbolic."""
    if name != "__setitem__" or not _basic_index(args[1]):
        return None
    with torch._C.DisableTorchFunction():
        return _geometry(dest[args[1]])


def _shared_locations(geometry) -> set[int] | None:
    """The memory locations of a static layout that several of its elements share; None
    where it is too large to enumerate."""
    size, stride, offset = geometry
    if math.prod(size) > _OVERLAP_ENUMERATION_LIMIT:
        return None
    counts = collections.Counter([offset])
    for n, st in zip(size, stride):
        grown: collections.Counter = collections.Counter()
        for o, c in counts.items():
            for k in range(n):
                grown[o + k * st] += c
        counts = grown
    return {o for o, c in counts.items() if c > 1}


class _ReachedKernel(Exception):
    """An in-place op got past autograd to its first mutating op (:class:`_StopAtMutation`)."""


class _StopAtMutation(TorchDispatchMode):
    """Raises :class:`_ReachedKernel` at the first op below autograd that mutates (before it
    runs: nothing is written, and the version counter, bumped after the kernel returns, is
    not); other ops (the views ``__setitem__`` takes on the way) go on to the modes below."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.is_mutable:
            raise _ReachedKernel
        return func(*args, **(kwargs or {}))


def _check_inplace_as_eager(func: Any, args: tuple, kwargs: dict) -> None:
    """Raise the error eager's autograd raises before the in-place op ``func`` writes its
    destination (``check_inplace``: "Output 1 of Split is a view and is being modified
    inplace...", "A view was created in no_grad mode and is being modified inplace with grad
    mode enabled...", for the destination or the view ``__setitem__`` writes), by running the
    op itself as far as its first mutating op below autograd. The rewrite runs the op on a
    clone of the destination, which autograd would check instead. Autograd checks nothing
    with grad mode off."""
    if not torch.is_grad_enabled():
        return
    try:
        with torch._C.DisableTorchFunction(), _StopAtMutation():
            func(*args, **kwargs)
    except _ReachedKernel:
        pass


def _setitem(dest, root, locations, root_locations, args: tuple, commit, base_layout=None) -> None:
    """``dest[index] = value`` through memory that overlaps: the region eager writes is
    ``dest[index]`` (a view for a basic index: eager copies into it, refusing a stride-0 dim;
    ``index_put_`` for an advanced one). ``locations``, ``root_locations``: the geometries of
    ``dest``'s and ``root``'s functional values (:func:`_value_geometry`); ``base_layout``: as
    for :func:`_write_locations`."""
    _, index, value = args
    geometry = _geometry(dest)  # eager's, for eager's overlap checks
    with torch._C.DisableTorchFunction():
        basic = _basic_index(index)
        region = dest[index] if basic else None
    region_geometry = _geometry(region) if region is not None else None
    region_overlap = (
        overlap_of(region_geometry[0], region_geometry[1]) if region_geometry is not None
        else overlap_of(geometry[0], geometry[1])
    )
    # eager expands the value to the region and copies, which returns at once where that is
    # the region's own memory laid out as it (each element gets its location's value)
    same = basic and region is not None and _same_data(region, value, broadcast=True)
    if region_overlap is Overlap.STRIDE0 and basic and not same:
        raise RuntimeError(_EAGER_INTERNAL_OVERLAP)
    if region_overlap is not Overlap.NONE and not _one_element(value) and not same:
        _refuse_loop_order("__setitem__", "elements sharing memory are assigned different values")
    values = dest.clone()
    values[index] = value
    writer = torch.zeros(geometry[0], dtype=torch.bool, device=dest.device)
    writer[index] = True
    _write_locations(root, locations, root_locations, values, writer, commit, region_geometry or geometry, base_layout)
    _refresh_history(dest)


def _write_locations(root, geometry, root_geometry, values, writer, commit, written_view=None, base_layout=None) -> None:
    """``root.copy_(new)``: each location of ``dest`` (``geometry``) that an element with
    ``writer`` true (all, where None) maps to gets that element's ``values``; ``root``'s other
    elements keep theirs. Every location of ``dest`` is one of ``root``'s (a view of it).
    ``geometry`` and ``root_geometry`` are of one buffer (the functional values').
    ``written_view``: eager's geometry of the view eager's autograd records the write through
    (None where it records it on the written tensor itself, no view: no ``CopySlices``);
    ``base_layout``: eager's geometry of that view's autograd base, where its elements overlap
    (:func:`_refuse_recorded_write_into_overlapping_base`)."""
    dest_loc = _location_set(geometry)
    root_loc = _location_set(root_geometry)
    if dest_loc is not None and root_loc is not None and not dest_loc <= root_loc:
        raise AotgradCompileError(
            f"aotgrad: in-place write at {current_user_line()} through memory that overlaps "
            "itself: the view's elements are not all elements of its base as traced (a re-laid-out "
            "functional value); this is not supported. Write into a clone() instead."
        )
    lo, hi = _span(root_geometry)
    span = hi - lo + 1
    device = values.device
    index = (_locations(geometry, device) - lo).reshape(-1)
    if writer is not None:
        # a non-writer goes to the slot past the span, which no root element reads
        index = torch.where(writer.expand(geometry[0]).reshape(-1), index, span)
    if values.dtype != root.dtype:
        values = values.view(root.dtype)  # the same bits (a view(dtype) of one element size)
    flat = values.reshape(-1)
    at = torch.zeros(span + 1, dtype=values.dtype, device=device).index_put((index,), flat)
    hit = torch.zeros(span + 1, dtype=torch.bool, device=device).index_put(
        (index,), torch.ones((), dtype=torch.bool, device=device)
    )
    root_index = _locations(root_geometry, device) - lo
    new = torch.where(hit.take(root_index), at.take(root_index), root)
    if new.grad_fn is not None and any(
        layout is not None and overlap_of(layout[0], layout[1]) is Overlap.STRIDE0 for layout in (written_view, base_layout)
    ):
        # eager's backward of the write (CopySlices) copies the gradient into its base's
        # geometry and into the view's, and its copy_ refuses a stride-0 output: raised
        # there, when a backward reaches it
        note_backward_error(new.grad_fn, _EAGER_INTERNAL_OVERLAP)
    commit(root, new)


def _value_geometry(f: FunctionalTensor) -> tuple[tuple, tuple, Any] | None:
    """The geometry of ``f``'s functional value, brought up to date with its storage (None
    where symbolic). The views of one storage are views of one buffer, their root's value, so
    these geometries place them against each other as the graph computes them. The wrappers'
    geometries do not: a write gives the root a new value (at storage offset 0, a non-dense
    one laid out densely) and the root's wrapper keeps its old geometry, while a view made or
    regenerated after it takes the new value's (fuzz seed 9011353: a write through an
    ``expand`` of a sliced input, after a write of the input, landed one element early)."""
    with torch._C.DisableTorchFunction():
        torch._sync(f)
        return _geometry(torch._from_functional_tensor(f.elem))


def _refresh_history(dest: torch.Tensor) -> None:
    """Autograd regenerates the ``grad_fn`` of a view whose base was written when it is next
    read; eager's write through ``dest`` gave it one at once. Read here, under the trace's
    modes (a read after the trace would replay the view outside them)."""
    with torch._C.DisableTorchFunction():
        if not torch.is_grad_enabled() or not dest.requires_grad:
            return  # eager's write recorded nothing either
        if dest._base is not None and torch._C._autograd._get_creation_meta(dest) != torch._C._autograd.CreationMeta.DEFAULT:
            return  # a no_grad or multi-output view: reading it raises eager's error, lazily
        dest.grad_fn  # noqa: B018 - the read regenerates it


def _locations(geometry, device) -> torch.Tensor:
    """The memory location (storage offset) of each element, an int64 tensor of ``size``."""
    size, stride, offset = geometry
    loc = torch.full(size, offset, dtype=torch.int64, device=device)
    for k, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[k] = n
        loc = loc + (torch.arange(n, dtype=torch.int64, device=device) * st).view(shape)
    return loc


def _location_set(geometry) -> set[int] | None:
    size, stride, offset = geometry
    numel = 1
    for n in size:
        numel *= n
    if numel > _OVERLAP_ENUMERATION_LIMIT:
        return None
    locs = {offset}
    for n, st in zip(size, stride):
        locs = {o + k * st for o in locs for k in range(n)}
    return locs if numel else set()


def _span(geometry) -> tuple[int, int]:
    size, stride, offset = geometry
    if any(n == 0 for n in size):
        return offset, offset
    lo = offset + sum(min(0, (n - 1) * st) for n, st in zip(size, stride))
    hi = offset + sum(max(0, (n - 1) * st) for n, st in zip(size, stride))
    return lo, hi


def write_root(
    dest: FunctionalTensor, alias_source: Callable[[FunctionalTensor], Any] | None,
) -> tuple[FunctionalTensor | None, bool]:
    """The tensor a write into ``dest`` is expressed on, as its memory locations: ``dest``'s
    autograd base (or ``dest``), followed up, while its own functionalization chain has an
    ``expand`` or ``unfold`` step (:func:`has_lossy_step`), through autograd bases and the aliases
    functionalization holds as views without one (``alias_source``: ``detach()``,
    ``view(dtype)``); and whether the walk went through such an alias (autograd does not
    connect ``dest`` to the result then). The result shares ``dest``'s storage; None where
    the walk ends at no functional tensor (an alias of a tensor functionalization made
    internally)."""
    cut_off = False
    with torch._C.DisableTorchFunction():
        t: Any = dest if dest._base is None else dest._base
        while type(t) is FunctionalTensor and has_lossy_step(t):
            if t._base is not None:
                t = t._base
            else:
                t, cut_off = (alias_source(t) if alias_source is not None else None), True
    return (t if type(t) is FunctionalTensor else None), cut_off


class NoLossyReplays(FunctionalTensorMode):
    """Functionalization (the analysis's mode) that refuses every data write reaching it
    whose destination's chain has an ``expand`` or ``unfold`` step (:func:`has_lossy_step`):
    :func:`overlapping_write` writes those it sees (at the user's call) into their root's
    locations, so what comes here was written where no torch function call shows it (an
    ``out=`` tuple, ``_foreach_*_``, an op's internal write) and would be replayed through
    a lossy inverse: refused, naming the op and the user's line."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _written_arguments(func) and any(has_lossy_step(t) for t in _mutated_functional(func, args, kwargs)):
            name = func._schema.name.split("::")[-1]
            raise AotgradCompileError(
                f"aotgrad: in-place {name} at {current_user_line()} writes through a view taken "
                "through an expand() or unfold() (an out= tuple, a _foreach_ op, or a write inside "
                "an op): aotgrad writes such a view exactly only in an in-place method, out= op, "
                "item assignment or inplace=True functional called on it; functionalization's "
                "replay (base + (new - base), unfold_backward) is not exact. Write into a clone() "
                "instead."
            )
        return super().__torch_dispatch__(func, types, args, kwargs)


@functools.cache
def _written_arguments(func: Any) -> tuple[tuple[int, str, bool], ...]:
    """(position, name, kwarg_only) of each argument ``func``'s schema says it writes
    (``Tensor(a!)``), none for an in-place metadata op; remembered per op overload."""
    if func._schema.name.split("::")[-1] in NO_DATA_INPLACE:
        return ()
    return tuple(
        (k, arg.name, arg.kwarg_only) for k, arg in enumerate(func._schema.arguments)
        if arg.alias_info is not None and arg.alias_info.is_write
    )


def _mutated_functional(func: Any, args: tuple, kwargs: dict) -> list[FunctionalTensor]:
    """The functional tensors ``func``'s schema says it writes (``Tensor(a!)`` arguments)."""
    found = []
    for k, name, kwarg_only in _written_arguments(func):
        value = kwargs.get(name) if kwarg_only or k >= len(args) else args[k]
        found += [t for t in pytree.tree_leaves(value) if type(t) is FunctionalTensor]
    return found


#: view steps whose functionalization inverse is not exact even where the written view's
#: elements do not share memory: ``expand``'s (``base + sum_to(new - base)``) and
#: ``unfold``'s (``unfold_backward``: the elements between windows become 0)
_LOSSY_STEPS = frozenset({"expand_ViewMeta", "unfold_ViewMeta"})


def has_lossy_step(t: Any) -> bool:
    """``t`` is a functional tensor whose chain has a step in :data:`_LOSSY_STEPS`."""
    return type(t) is FunctionalTensor and any(
        type(vm).__name__ in _LOSSY_STEPS for vm in functionalization.get_view_meta_sequence(t.elem)
    )


def _one_element(value: Any) -> bool:
    return not isinstance(value, torch.Tensor) or value.numel() == 1


def _shares_storage(a: Any, b: torch.Tensor) -> bool:
    """``a`` and ``b`` are one storage in eager: one functional storage, or inputs the caller
    passed sharing storage (separate functional storages in the analysis run over the call's
    inputs, before synthetic bases merge them) that no write has separated yet."""
    if not isinstance(a, torch.Tensor):
        return False
    with torch._C.DisableTorchFunction():
        if a.untyped_storage()._cdata == b.untyped_storage()._cdata:
            return True
        inner_a, inner_b = _unwritten_value(a), _unwritten_value(b)
        return (
            inner_a is not None and inner_b is not None
            and inner_a.untyped_storage()._cdata == inner_b.untyped_storage()._cdata
        )


def _unwritten_value(t: torch.Tensor) -> torch.Tensor | None:
    """The tensor a functional tensor wraps, where no write replaced it: the fake input (or a
    view of it) for an input, whose storage is shared as the caller's tensors share theirs."""
    if type(t) is not FunctionalTensor or torch._functionalize_has_data_mutation(t.elem):
        return None
    return torch._from_functional_tensor(t.elem)


def _same_data_copy(name: str, dest: torch.Tensor, args: tuple) -> bool:
    """``dest.copy_(src)`` where ``src`` is ``dest``'s own memory laid out as it: eager's
    ``copy_`` returns at once (each element gets the value its location holds)."""
    return name == "copy_" and len(args) > 1 and _same_data(dest, args[1], broadcast=False)


def _same_data(dest: torch.Tensor, src: Any, *, broadcast: bool) -> bool:
    """``src`` (expanded to ``dest``'s shape where ``broadcast``, as ``__setitem__`` does) is
    ``dest``'s memory laid out as ``dest``: same storage, dtype, sizes, strides and offset."""
    if not isinstance(src, torch.Tensor) or not _shares_storage(src, dest) or src.dtype != dest.dtype:
        return False
    d, g = _geometry(dest), _geometry(src)
    if d is None or g is None:
        return False
    if broadcast:
        g = _expanded(g, d[0])
    return g == d


def _expanded(geometry, size: tuple[int, ...]):
    """The geometry of ``expand(size)`` of a tensor laid out as ``geometry`` (None where it
    does not broadcast): new leading dims and expanded size-1 dims get stride 0."""
    src_size, src_stride, offset = geometry
    if len(src_size) > len(size):
        return None
    lead = len(size) - len(src_size)
    stride = [0] * lead
    for n, (m, st) in zip(size[lead:], zip(src_size, src_stride)):
        if m == n:
            stride.append(st)
        elif m == 1:
            stride.append(0)
        else:
            return None
    return tuple(size), tuple(stride), offset


def _basic_index(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(
        (isinstance(i, int) and not isinstance(i, bool)) or i is None or i is Ellipsis or isinstance(i, slice)
        for i in items
    )


def _refuse_loop_order(name: str, why: str) -> None:
    raise AotgradCompileError(
        f"aotgrad: in-place {name} at {current_user_line()} writes through a tensor whose elements "
        f"overlap in memory (an overlapping as_strided or unfold view) and {why}: eager's result "
        "is then the order its kernel visits the elements in, which a functional graph cannot "
        "reproduce. Write into a clone() (or .contiguous()) instead."
    )


#: the integer dtype of each element size: a float's bits, compared exactly
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits_differ(call: Callable, a: tuple, b: tuple, dtype: torch.dtype | None) -> tuple[torch.fx.Node, Any]:
    """Nodes (and value) of "``a``'s element is not ``b``'s, bit for bit" (each a (node,
    value) pair of ``dtype``): a float's (complex's) bits are compared as integers, so that
    ``-0.0`` differs from ``0.0`` and a ``nan`` does not differ from itself (``ne`` says
    otherwise of both); other dtypes by ``ne``. Without a known dtype, ``ne``."""
    ne = torch.ops.aten.ne.Tensor
    if dtype is None or not (dtype.is_floating_point or dtype.is_complex):
        value = None if a[1] is None or b[1] is None else ne(a[1], b[1])
        return call(ne, (a[0], b[0]), value), value

    def bits(node: torch.fx.Node, val: Any) -> tuple[torch.fx.Node, Any]:
        if dtype.is_complex:
            val = None if val is None else torch.ops.aten.view_as_real.default(val)
            node = call(torch.ops.aten.view_as_real.default, (node,), val)
        as_int = _BITS[dtype.itemsize // 2 if dtype.is_complex else dtype.itemsize]
        val = None if val is None else torch.ops.aten.view.dtype(val, as_int)
        return call(torch.ops.aten.view.dtype, (node, as_int), val), val

    (a_bits, a_val), (b_bits, b_val) = bits(*a), bits(*b)
    value = None if a_val is None or b_val is None else ne(a_val, b_val)
    differ = call(ne, (a_bits, b_bits), value)
    if dtype.is_complex:  # either part differs
        value = None if value is None else torch.ops.aten.any.dim(value, -1)
        differ = call(torch.ops.aten.any.dim, (differ, -1), value)
    return differ, value


def scatter_once_per_location(graph: torch.fx.Graph) -> None:
    """Rewrite each ``as_strided_scatter`` of ``graph`` whose layout has a stride-0 dim of
    static size > 1 to scatter one value per memory location.

    Functionalization writes a view's new value back into its base with
    ``as_strided_scatter``; through a stride-0 dim (the write back of a ``detach()``ed alias
    of an expanded input, say) the real op copies into memory that overlaps itself and raises
    eager's internal-overlap error, where eager's write ran (fuzz seed 420373). Every element
    along such a dim shares its location in eager: the value there is the one written. So
    along each such dim the value kept is the last element whose bits differ from the
    location's old value (the base's, read through the same layout; by value, ``-0.0`` would
    not differ from ``0.0``, and an unwritten ``nan`` would), else the old value: exact where
    the elements written there were written one value (a write through one element's view,
    ``a.unbind(0)[1]``, changes that element only: taking the first element lost it, fuzz
    seed 1003146; :func:`overlapping_write` writes every element of a location alike)."""
    for node in graph.find_nodes(op="call_function", target=torch.ops.aten.as_strided_scatter.default):
        base, src, size, stride = node.args[:4]
        offset = node.args[4] if len(node.args) > 4 else node.kwargs.get("storage_offset")
        if not all(type(v) is int for v in (*size, *stride)):
            continue
        dims = [d for d, (n, st) in enumerate(zip(size, stride)) if st == 0 and n > 1]
        if not dims:
            continue
        carried = {k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")}

        def call(target: Any, args: tuple, val: Any) -> torch.fx.Node:
            made = graph.call_function(target, args)
            made.meta.update(carried)
            if val is not None:
                made.meta["val"] = val
            return made

        base_val = base.meta.get("val") if isinstance(base, torch.fx.Node) else None
        src_val = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
        dtype = next((v.dtype for v in (node.meta.get("val"), base_val, src_val) if isinstance(v, torch.Tensor)), None)
        with graph.inserting_before(node):
            old_val = None if base_val is None else torch.ops.aten.as_strided.default(base_val, size, stride, offset)
            old = call(torch.ops.aten.as_strided.default, (base, size, stride, offset), old_val)
            for d in dims:
                first = lambda t, k, d=d: None if t is None else torch.ops.aten.slice.Tensor(t, d, k, k + 1)  # noqa: E731
                old0 = call(torch.ops.aten.slice.Tensor, (old, d, 0, 1), first(old_val, 0))
                old_val = first(old_val, 0)
                old = old0
                kept, kept_val = old0, old_val
                for k in range(size[d]):
                    elem = call(torch.ops.aten.slice.Tensor, (src, d, k, k + 1), first(src_val, k))
                    elem_val = first(src_val, k)
                    changed, changed_val = _bits_differ(call, (elem, elem_val), (old0, old_val), dtype)
                    kept_val = None if changed_val is None else torch.ops.aten.where.self(changed_val, elem_val, kept_val)
                    kept = call(torch.ops.aten.where.self, (changed, elem, kept), kept_val)
                src, src_val = kept, kept_val
        new_size = [1 if d in dims else n for d, n in enumerate(size)]
        node.args = (base, src, new_size, stride, *node.args[4:])
