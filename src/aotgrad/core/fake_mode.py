"""The fake tensor mode aotgrad analyses and traces programs with.

``FakeTensorMode`` keeps a dispatch cache (shared by every instance) that rebuilds a cached
op's output as ``empty_strided`` of its recorded size and stride: a storage offset the output
had is dropped, and its storage shrinks to the strides' extent. Functionalization writes
through an ``as_strided`` view of an input at a storage offset (``x[:, 1:]`` re-strided by
``as_strided_``, then written) as ``as_strided_scatter``, whose output keeps the input's
offset (ATen's ``clone_preserve_strides``, as the compiled graph's run does); the
``as_strided`` record, replayed on it with its absolute offset, then named other elements or
raised "setStorage: ... out of bounds", but only from the second trace of such a program in
a process on (fuzz seed 20005827).

ATen's ``as_strided_scatter`` asserts that its ``self`` is contiguous where it requires grad
(its derivative formula's assumption). Functionalization calls it below autograd, to write an
``as_strided`` view (or a view an in-place metadata op re-strided) back into its base's value,
and the analysis's base value is the caller's fake input, which carries the input's
``requires_grad``: a write into an input laid out densely but not contiguously (``x.t()``)
raised an internal assert where eager runs (fuzz seeds 30000167, 29002168).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, _BypassDispatchCache

__all__ = ["OffsetKeepingFakeTensorMode"]


_AS_STRIDED_SCATTER = torch.ops.aten.as_strided_scatter.default


class OffsetKeepingFakeTensorMode(FakeTensorMode):
    """``FakeTensorMode`` that does not cache an op whose output (not a view) is at a
    storage offset other than 0: its cached copy would be at offset 0; and that runs
    ``as_strided_scatter`` of a ``self`` requiring grad on a ``detach()``ed alias of it."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Sequence[object] = (), kwargs: Any = None) -> Any:
        """Dispatch ``func``; an ``as_strided_scatter`` whose ``self`` requires grad gets
        ``self.detach()`` instead. Exact: this dispatch is below autograd (no gradient flows
        through the call), and the output's metadata does not depend on ``requires_grad``;
        only ATen's contiguity assert does."""
        if func is _AS_STRIDED_SCATTER and isinstance(args[0], torch.Tensor) and args[0].requires_grad:
            args = (args[0].detach(), *args[1:])
        return super().__torch_dispatch__(func, types, args, kwargs)

    def _validate_output_for_cache_entry(
        self, state: Any, key: Any, func: Any, args: Sequence[object], kwargs: Mapping[str, object], output: Any,
    ) -> None:
        if (
            isinstance(output, FakeTensor) and not func.is_view
            and not (type(offset := output.storage_offset()) is int and offset == 0)
        ):
            raise _BypassDispatchCache("output at a storage offset")
        super()._validate_output_for_cache_entry(state, key, func, args, kwargs, output)
