"""In-place metadata ops on functionalization's wrappers that address past their storage.

``FunctionalTensor`` (the Python wrapper functionalization hands the program) gets a
data-less storage sized from the wrapped tensor's size, stride and offset; a view's wrapper
shares its base's. An in-place metadata op (``t_``, ``unsqueeze_``...) re-strides the wrapper
itself, checking the new layout against that storage ("setStorage: ... out of bounds"),
where eager checks eager's layout against the caller's storage. The wrapper's layout can
reach past its storage where eager's tensor is well inside its own:

- a view of an input taken with ``as_strided`` past the input's elements (``x[0]`` passed,
  ``a.as_strided((2, 2), (2, 1), 0)`` taken): the input's wrapper storage holds only the
  input's own extent, eager's is the caller's whole storage;
- a view takes its sizes and strides off its base's *functional* value, which after an
  in-place write is the out-of-place op's result (dense), not eager's layout (an expanded
  input's stride 0): the view's wrapper then addresses more locations than eager's tensor.

The wrapper's storage size also says how much storage functionalization's values of an input
hold (``view_geometry._past_functional_storage`` refuses an ``as_strided_`` past it), so it
is left as it is: :class:`UncheckedMetadataOps` lends the wrapper a larger one for the one
op instead, and so does :func:`storage_for_layout` for an ``as_strided_`` past it that a run
over a synthetic base decides (an input without autograd history re-strided onto its
caller's storage past its own extent).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

__all__ = ["UncheckedMetadataOps", "storage_for_layout"]

#: in-place metadata ops that keep a tensor's set of locations (they permute dims or add or
#: drop dims of size 1): eager's tensor stays inside its storage through them
_LOCATION_KEEPING = frozenset({
    torch.ops.aten.t_.default,
    torch.ops.aten.transpose_.default,
    torch.ops.aten.swapdims_.default,
    torch.ops.aten.swapaxes_.default,
    torch.ops.aten.unsqueeze_.default,
    torch.ops.aten.squeeze_.default,
    torch.ops.aten.squeeze_.dim,
    torch.ops.aten.squeeze_.dims,
})


def _addressed_nbytes(t: torch.Tensor) -> int | None:
    """Bytes of storage ``t``'s size, stride and offset reach (0 for no element); None where
    a value is symbolic or a stride negative."""
    return _layout_nbytes(tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.element_size())


def _layout_nbytes(size: tuple, stride: tuple, offset: Any, element_size: int) -> int | None:
    """Bytes of storage a layout reaches (0 for no element); None where a value is symbolic
    or a stride negative."""
    if any(type(v) is not int for v in (*size, *stride, offset)) or any(s < 0 for s in stride):
        return None
    if any(n == 0 for n in size):
        return 0
    return (offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1) * element_size


def _data_less(like: torch.Tensor, nbytes: int | None) -> FunctionalTensor:
    """A wrapper with no data on ``like``'s device and dtype, whose storage has ``nbytes``
    (None: empty, to be handed another wrapper's storage)."""
    return torch.Tensor._make_wrapper_subclass(
        FunctionalTensor, (0,), dtype=like.dtype, device=like.device, storage_size=nbytes
    )


@contextlib.contextmanager
def _storage_of_size(wrapper: FunctionalTensor, nbytes: int) -> Iterator[None]:
    """``wrapper`` holds a storage of ``nbytes`` inside the block and its own after it (its
    views keep sharing that one: aliasing is read off storage identity)."""
    own = _data_less(wrapper, None)
    torch._functionalize_unsafe_set(own, wrapper)
    torch._functionalize_unsafe_set(wrapper, _data_less(wrapper, nbytes))
    try:
        yield
    finally:
        torch._functionalize_unsafe_set(wrapper, own)


@contextlib.contextmanager
def storage_for_layout(wrapper: Any, size: tuple, stride: tuple, offset: Any) -> Iterator[None]:
    """Inside the block ``wrapper`` (a ``FunctionalTensor``; anything else: nothing is done)
    holds a storage large enough for the layout where its own is not, for an ``as_strided_``
    of an input past the input's extent whose run over a synthetic base decides
    (``view_geometry.EagerViewGeometry._restride_left_to_base_run``; the caller checked the
    layout against eager's storage). Only in-place metadata ops check the wrapper's layout
    against its storage afterwards."""
    with torch._C.DisableTorchFunction():
        needed = None if type(wrapper) is not FunctionalTensor else _layout_nbytes(
            tuple(size), tuple(stride), offset, wrapper.element_size()
        )
        if needed is None or needed <= wrapper.untyped_storage().nbytes():
            lent = contextlib.nullcontext()
        else:
            lent = _storage_of_size(wrapper, needed)
            lent.__enter__()
    try:
        yield
    finally:
        with torch._C.DisableTorchFunction():
            lent.__exit__(None, None, None)


class UncheckedMetadataOps(FunctionalTensorMode):
    """Functionalization that applies an in-place metadata op keeping its tensor's locations
    (:data:`_LOCATION_KEEPING`) to a wrapper whose layout reaches past the wrapper's storage,
    instead of raising: eager's tensor is inside eager's storage and such an op keeps it
    there (``EagerViewGeometry`` follows eager's layout; the runtime rebuilds outputs and
    re-strides inputs from it). ``as_strided_`` is left to the check: the locations it names
    are checked against eager's storage by eager, and against functionalization's by
    ``view_geometry``."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in _LOCATION_KEEPING and type(args[0]) is FunctionalTensor:
            needed = _addressed_nbytes(args[0])
            if needed is not None and needed > args[0].untyped_storage().nbytes():
                with _storage_of_size(args[0], needed):
                    return super().__torch_dispatch__(func, types, args, kwargs)
        return super().__torch_dispatch__(func, types, args, kwargs)
