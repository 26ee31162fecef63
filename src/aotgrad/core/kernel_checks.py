"""Eager's per-dtype kernel errors, which the traced program's ops do not raise.

Two of eager's errors depend only on the dtypes an op meets, and never reach the trace:

- an in-place or ``out=`` op whose result dtype cannot be cast to the written tensor's
  (``t.mul_(x)``, ``torch.mul(a, 2, out=t)`` for an integer ``t`` and a float result:
  ``result type Float can't be cast to the desired output type Int``). Functionalization runs
  such an op as its out-of-place op and a copy into ``t``, which casts;
- a kernel that was not built for a dtype (``t.softmax(0)`` of an integer ``t``:
  ``"softmax_lastdim_kernel_impl" not implemented for 'Int'``). Fake tensors run meta
  functions, which have no per-dtype kernels.

:func:`raise_eager_dtype_error` runs an op whose tensors include an integer or bool one on
small CPU tensors of the same dtypes (each dim of size 1, or 0 where the op's tensor's is
0) and raises the error eager's kernel raised there, where it is one of these. Any other
error of that run (an index or shape the small tensors do not meet) is ignored: the op
itself raises eager's error where eager's does. The run draws nothing from the global
generator (its state is restored) and records no autograd history.

A third error depends only on where tensors lie in memory: an in-place (or ``out=``)
pointwise op, or ``copy_``, whose written tensor and an input share memory without being the
same elements in the same layout (``x[1:].add_(x[:-1])``, ``x.copy_(x.t())``): ``unsupported
operation: some elements of the input tensor and the written-to tensor refer to a single
memory location``. The traced program reads its inputs' values before any write, so it never
sees the overlap; :func:`raise_eager_overlap_error` applies eager's test (TensorIterator's
``assert_no_partial_overlap``) to the tensors' eager layouts.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import _disable_current_modes

from ..errors import AotgradCompileError, current_user_line
from .op_args import tree_leaves
from .overlapping_writes import _OVERLAP_ENUMERATION_LIMIT, _span
from .overlapping_writes import _locations as _element_locations

__all__ = ["raise_eager_dtype_error", "raise_eager_overlap_error"]

#: calls that run no kernel of their own on the tensors' data, or act on autograd / Python state
_NOT_KERNELS = frozenset(
    {"__get__", "__set__", "size", "stride", "dim", "ndimension", "numel", "nelement", "storage_offset",
     "is_contiguous", "element_size", "untyped_storage", "data_ptr", "__len__", "__repr__", "__format__",
     "__str__", "__hash__", "__bool__", "__index__", "__int__", "__float__", "item", "tolist", "backward",
     "register_hook", "retain_grad", "requires_grad_", "detach", "detach_", "is_floating_point",
     "is_complex", "type", "__reduce_ex__", "__deepcopy__", "_make_subclass", "grad", "numpy"}
)

_MESSAGES = ("can't be cast to the desired output type", "not implemented for '")


def raise_eager_dtype_error(func: Any, args: tuple, kwargs: dict) -> None:
    """Raise the dtype error (see the module docstring) eager's kernel raises for
    ``func(*args, **kwargs)``; nothing where it raises none, or the op is not checked (no
    integer or bool tensor, not all tensors strided on the CPU, symbolic values)."""
    name = getattr(func, "__name__", "")
    if name in _NOT_KERNELS:
        return
    module = getattr(func, "__module__", None) or ""
    if "distributed" in module or "c10d" in module:
        return  # a collective: run on this rank's small tensors alone, it would wait for the others
    leaves = tree_leaves((args, kwargs))  # (their structure is needed for the key only)
    with torch._C.DisableTorchFunction():
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        if not any(not t.is_floating_point() and not t.is_complex() for t in tensors):
            return
        if any(t.device.type != "cpu" or t.layout != torch.strided for t in tensors):
            return
        if any(isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) for v in leaves):
            return
        sizes = {id(t): [0 if type(n) is int and n == 0 else 1 for n in t.shape] for t in tensors}
    leaves, spec = pytree.tree_flatten((args, kwargs))
    key = _small_run_key(func, spec, leaves, sizes)
    error = _SMALL_RUNS.get(key) if key is not None else None
    if error is None:
        error = _small_run_error(func, args, kwargs, sizes)
        if key is not None:
            if len(_SMALL_RUNS) >= _SMALL_RUNS_LIMIT:
                _SMALL_RUNS.clear()
            _SMALL_RUNS[key] = error
    if error:
        raise error[0](error[1]) from None


#: the outcome of :func:`_small_run_error` per :func:`_small_run_key` (a model's in-place
#: ops on integer buffers, ``num_batches_tracked.add_(1)``, meet the same small run again in
#: every analysis and trace)
_SMALL_RUNS: dict[tuple, tuple] = {}
_SMALL_RUNS_LIMIT = 4096
#: the non-tensor arguments a remembered outcome may depend on, by type and value
_KEYED_VALUES = (bool, int, float, complex, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


def _small_run_key(func: Any, spec: pytree.TreeSpec, leaves: list, sizes: dict[int, list[int]]) -> tuple | None:
    """What decides the small run of ``func`` (:func:`_small_run_error`): the op, its
    arguments' structure, each tensor's dtype and small sizes, each other argument's type
    and value, and the global state a result dtype follows (default dtype, CPU autocast);
    None where an argument is of another kind (its outcome is not remembered)."""
    described = []
    for v in leaves:
        if isinstance(v, torch.Tensor):
            described.append((v.dtype, tuple(sizes[id(v)])))
        elif type(v) in _KEYED_VALUES:
            described.append((type(v), v))
        else:
            return None
    key = (
        func, spec, tuple(described), torch.get_default_dtype(),
        torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype(),
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _small_run_error(func: Any, args: tuple, kwargs: dict, sizes: dict[int, list[int]]) -> tuple:
    """``func`` run on small CPU zeros of the tensors' dtypes (``sizes``): ``(type, message)``
    of the error eager's kernel raised there where it is one of the dtype errors, else ``()``."""
    state = torch.default_generator.get_state()
    try:
        with _outside_modes(), torch.no_grad():
            small_args, small_kwargs = pytree.tree_map(
                lambda v: torch.zeros(sizes[id(v)], dtype=v.dtype) if isinstance(v, torch.Tensor) else v,
                (args, kwargs),
            )
            func(*small_args, **small_kwargs)
    except (RuntimeError, NotImplementedError) as e:
        if any(m in str(e) for m in _MESSAGES):
            return (type(e), str(e))
    except Exception:  # noqa: BLE001 - another error of the small tensors: not eager's
        pass
    finally:
        torch.default_generator.set_state(state)
    return ()


@contextlib.contextmanager
def _outside_modes() -> Iterator[None]:
    """No dispatch mode (fake, functional, proxy) and no torch-function mode sees the run."""
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        yield


#: eager's message where an input and the written tensor partly share memory
PARTIAL_OVERLAP = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer "
    "to a single memory location. Please clone() the tensor before performing the operation."
)

#: (size, stride, storage_offset), in elements
_Geometry = tuple[tuple[int, ...], tuple[int, ...], int]


def raise_eager_overlap_error(
    func: Any, args: tuple, kwargs: dict, geometry: Callable[[torch.Tensor], _Geometry | None]
) -> None:
    """Raise eager's error (:data:`PARTIAL_OVERLAP`) where ``func(*args, **kwargs)`` writes a
    tensor that an input partly overlaps: an in-place op or ``out=`` form of a pointwise op
    (ATen's ``pointwise`` tag), ``copy_``, or ``__setitem__`` with basic indexing and a
    tensor value (a ``copy_`` of the value expanded to the indexed view). ``geometry(t)`` is
    ``t``'s eager layout, None where it is not known (the op is then not checked); tensors are
    compared where they share a storage (``StorageWeakRef``). Eager's test: two layouts,
    both non-overlapping and dense, whose element ranges intersect, unless both are the same
    range in the same strides (:func:`_partial_overlap`). Layouts eager finds "too hard" (not
    dense) it runs; where an element the op changes is read at another position there, the
    result is eager's kernel's visiting order's, and the op is refused
    (:class:`AotgradCompileError`, :func:`_order_dependent`)."""
    written, read, index = _written_and_read(func, args, kwargs)
    if written is None or not read:
        return
    w_geometry = geometry(written)
    if w_geometry is None or not _static(w_geometry):
        return
    if index is not None:
        w_geometry = _indexed(w_geometry, index)  # the view the value is copied into
        if w_geometry is None:
            return
    storage = StorageWeakRef(written.untyped_storage())
    for t in read:
        if t is written or StorageWeakRef(t.untyped_storage()) != storage:
            continue
        r_geometry = geometry(t)
        if r_geometry is None or not _static(r_geometry):
            continue
        if index is not None:  # copy_ of the value expanded to the view's shape
            r_geometry = _expanded(r_geometry, w_geometry[0])
            if r_geometry is None:
                continue
        if _partial_overlap(w_geometry, written.element_size(), r_geometry, t.element_size()):
            raise RuntimeError(PARTIAL_OVERLAP)
        copies = index is not None or getattr(func, "__name__", "") == "copy_"
        if _order_dependent(w_geometry, written.element_size(), r_geometry, t.element_size(), copies):
            raise AotgradCompileError(
                f"aotgrad: in-place {getattr(func, '__name__', func)} at {current_user_line()} reads "
                "memory it writes, laid out otherwise (eager's overlap check finds the layouts too "
                "hard to compare and runs the op): eager's result then depends on the order its "
                "kernel visits the elements, which the compiled program does not follow. Read "
                "from a clone()."
            )


@functools.lru_cache(maxsize=None)
def _pointwise(name: str, overload: str | None = None) -> bool:
    """ATen's op ``name`` (its ``overload``, else any) carries the ``pointwise`` tag
    (remembered: asked on every in-place op of every analysis run)."""
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return False
    overloads = [overload] if overload is not None and overload in packet.overloads() else packet.overloads()
    return any(torch.Tag.pointwise in getattr(packet, o).tags for o in overloads)


def _written_and_read(func: Any, args: tuple, kwargs: dict) -> tuple[torch.Tensor | None, list, Any]:
    """The tensor ``func`` writes, the inputs eager's kernel checks against it, and for
    ``__setitem__`` the index of the view written (else None); (None, [], None) for ops
    that are not checked."""
    name = getattr(func, "__name__", "")
    name = _AUGMENTED.get(name, name)
    if name == "__setitem__" and len(args) == 3 and isinstance(args[2], torch.Tensor):
        if isinstance(args[0], torch.Tensor) and _basic_index(args[1]):
            return args[0], [args[2]], args[1]
        return None, [], None
    out = kwargs.get("out")
    if isinstance(out, torch.Tensor) and _pointwise(name, "out"):
        written = out
        inputs = [v for v in (*args, *(v for k, v in kwargs.items() if k != "out")) if isinstance(v, torch.Tensor)]
    elif args and isinstance(args[0], torch.Tensor) and (
        name == "copy_" or (name.endswith("_") and not name.startswith("_") and _pointwise(name))
    ):
        written = args[0]
        inputs = [v for v in (*args[1:], *kwargs.values()) if isinstance(v, torch.Tensor)]
    else:
        return None, [], None
    return written, inputs, None


#: augmented assignments (``x += y``) and the in-place ops they run
_AUGMENTED = {
    "__iadd__": "add_", "__isub__": "sub_", "__imul__": "mul_", "__itruediv__": "div_",
    "__ifloordiv__": "floor_divide_", "__imod__": "remainder_", "__ipow__": "pow_",
    "__iand__": "bitwise_and_", "__ior__": "bitwise_or_", "__ixor__": "bitwise_xor_",
    "__ilshift__": "bitwise_left_shift_", "__irshift__": "bitwise_right_shift_",
}


def _basic_index(index: Any) -> bool:
    """Indexing by ints, slices, None and Ellipsis only: a view, written by ``copy_``."""
    items = index if isinstance(index, tuple) else (index,)
    return all(type(i) in (int, slice) or i is None or i is Ellipsis for i in items)


def _static(g: _Geometry) -> bool:
    return all(type(n) is int for n in (*g[0], *g[1], g[2]))


def _indexed(g: _Geometry, index: Any) -> _Geometry | None:
    """The geometry of ``t[index]`` (basic indexing) for ``t`` laid out as ``g``."""
    size, stride, offset = g
    try:
        with _outside_modes():
            view = torch.empty_strided(size, stride, device="meta")[index]
    except (IndexError, RuntimeError, TypeError):
        return None  # eager's own indexing error is raised by the op itself
    return tuple(view.shape), tuple(view.stride()), offset + view.storage_offset()


def _expanded(geometry: _Geometry, shape: tuple[int, ...]) -> _Geometry | None:
    size, stride, offset = geometry
    try:
        with _outside_modes():
            meta = torch.empty_strided(size, stride, device="meta").expand(shape)
    except RuntimeError:
        return None
    return tuple(meta.shape), tuple(meta.stride()), offset


def _partial_overlap(a: _Geometry, a_item: int, b: _Geometry, b_item: int) -> bool:
    """ATen's ``get_overlap_status(a, b) == Partial`` for two layouts of one storage."""
    numel_a, numel_b = math.prod(a[0]), math.prod(b[0])
    if numel_a == 0 or numel_b == 0:
        return False
    if not (_non_overlapping_and_dense(a) and _non_overlapping_and_dense(b)):
        return False  # eager's "too hard"
    a_begin, b_begin = a[2] * a_item, b[2] * b_item
    a_end, b_end = a_begin + numel_a * a_item, b_begin + numel_b * b_item
    if a_begin == b_begin and a_end == b_end:
        # Eager compares all strides. Of layouts of one shape, only the dims of size > 1
        # are compared here: a trace's strides of size-1 dims are its meta functions', which
        # now and then differ from the kernels' (fuzz seed 3015141: a transpose of size-1
        # dims copied into its own tensor, which eager runs)
        if tuple(a[0]) == tuple(b[0]):
            return _significant_strides(a) != _significant_strides(b)
        return tuple(a[1]) != tuple(b[1])
    return a_begin < b_end and b_begin < a_end


def _order_dependent(w: _Geometry, w_item: int, r: _Geometry, r_item: int, copies: bool) -> bool:
    """Reading ``r`` (broadcast to ``w``'s shape) while writing ``w`` (one storage) gives a
    result that depends on the order of the elements' visits: an element that the op changes
    at one position is read at another (``copies``: a copy changes no element it reads at its
    own position). Layouts too large to enumerate (or of other element sizes) count as
    dependent where their spans meet."""
    broadcast = _expanded(r, w[0]) if w_item == r_item else None
    w_locations = _locations(w) if broadcast is not None else None
    r_locations = _locations(broadcast) if broadcast is not None else None
    if w_locations is None or r_locations is None:
        return _bytes_intersect(w, w_item, r, r_item)
    changed_at = {
        loc: k for k, (loc, read) in enumerate(zip(w_locations, r_locations)) if not (copies and loc == read)
    }
    return any(changed_at.get(loc, k) != k for k, loc in enumerate(r_locations))


def _locations(g: _Geometry) -> list[int] | None:
    """The element offsets of a layout, position by position (row-major); None past
    ``overlapping_writes``' enumeration limit."""
    if math.prod(g[0]) > _OVERLAP_ENUMERATION_LIMIT:
        return None
    with _outside_modes():
        return _element_locations(g, torch.device("cpu")).reshape(-1).tolist()


def _bytes_intersect(a: _Geometry, a_item: int, b: _Geometry, b_item: int) -> bool:
    (a_lo, a_hi), (b_lo, b_hi) = _span(a), _span(b)
    return a_lo * a_item < (b_hi + 1) * b_item and b_lo * b_item < (a_hi + 1) * a_item


def _significant_strides(g: _Geometry) -> tuple:
    """The (size, stride) pairs of the dims of size > 1: where the elements lie."""
    return tuple((n, st) for n, st in zip(g[0], g[1]) if n != 1)


def _non_overlapping_and_dense(g: _Geometry) -> bool:
    with _outside_modes():
        return is_non_overlapping_and_dense_or_false(torch.empty_strided(g[0], g[1], device="meta"))
