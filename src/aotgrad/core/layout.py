"""Eager's strides for the graph's fresh outputs: which forward outputs the runtime re-strides.

Eager keeps a tensor's layout through in-place data ops (``t.t_(); t.pow_(2)`` leaves ``t``
with the transposed strides). The functional graph computes the new value out of place, so
its output takes the layout the out-of-place op chooses. Analysis records eager's layout
of each non-aliased output (:class:`~aotgrad.core.view_geometry.EagerViewGeometry` shadows
the program's intermediates); where it differs from the traced value's, the runtime gives the
graph output eager's strides once it is computed, inside the forward:

- where eager's layout is dense and starts at offset 0: copied into a tensor laid out as
  eager's (one copy, only for these outputs).

Elsewhere the output keeps the graph's layout; also where the two differ only in dims of
size 1 (or the tensor is empty): the shadow's strides there are the meta functions', which
lay such dims out otherwise than the kernels now and then, and the kernels' are eager's (a
written tensor keeps its layout in the graph too: ``eager_rewrites._keeping_layout``).
Outputs are decided at compile time from the traced values (symbolic sizes: none); a call
does nothing for other outputs.
Eager's layout is derived from the traced (meta) layouts, so an output is re-strided only
where the compiled forward produced the traced layout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from ..compilers import positional
from .metadata import OutputType, ViewAndMutationMetadata
from .signature import GraphSignature, graph_outputs

__all__ = ["eager_layouts", "restriding", "takes_eager_layout"]

#: (forward-output position, size, eager's stride, the traced stride)
Layout = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def _same_addresses(size, a, b) -> bool:
    """Two strides of one size address the same elements (they differ only in size-1 dims)."""
    if any(s == 0 for s in size):
        return True
    return all(x == y for s, x, y in zip(size, a, b) if s != 1)


def _dense_from_zero(size, stride, offset) -> bool:
    """A non-overlapping, dense layout starting at the storage's start (``empty_strided``
    makes it)."""
    if offset != 0:
        return False
    dims = sorted((st, sz) for sz, st in zip(size, stride) if sz != 1)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return False
        expected *= sz
    return True


def eager_layouts(gm: torch.fx.GraphModule, md: ViewAndMutationMetadata, signature: GraphSignature) -> tuple[Layout, ...]:
    """The forward outputs (non-aliased user outputs) whose traced layout is not eager's."""
    outs = graph_outputs(gm)
    layouts = []
    for j in signature.user_outputs:
        info = md.output_info[j]
        if (
            info.output_type is not OutputType.non_alias or info.duplicate_of is not None or info.custom_function_view
            or info.graph_returns_root  # the graph's value is the output's root, copied into the caller's storage
        ):
            continue
        p = signature.user_output_positions[j]
        node = outs[p]
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            continue
        size, stride = tuple(info.size), tuple(info.stride)
        if any(isinstance(x, torch.SymInt) for x in (*size, *stride, *val.shape, *val.stride())):
            continue
        if tuple(val.shape) != size or tuple(val.stride()) == stride:
            continue
        if _same_addresses(size, stride, tuple(val.stride())):
            # only size-1 dims (or an empty tensor) differ: the kernels' strides there are
            # eager's (the graph runs eager's ops, and eager_rewrites keeps a written tensor's
            # layout), while the shadow's are the meta functions' (pow of x[::2]: (2,) in the
            # trace, (1,) from the kernel), so the output is left as computed
            continue
        if _dense_from_zero(size, stride, info.storage_offset):
            layouts.append((p, size, stride, tuple(val.stride())))
    return tuple(layouts)


def takes_eager_layout(size, stride, offset, traced_stride) -> bool:
    """A non-aliased user output eager lays out as (``size``, ``stride``, ``offset``), traced
    with ``traced_stride``, is laid out as eager's after the forward, up to size-1 dims
    (:func:`eager_layouts` picks it, or the two differ only there: they address the same
    elements). Views of it the runtime rebuilds may then use eager's geometry."""
    if any(isinstance(x, torch.SymInt) for x in (*size, *stride, *traced_stride)):
        return False  # eager_layouts re-strides no symbolic output
    return _same_addresses(size, stride, traced_stride) or _dense_from_zero(size, stride, offset)


def restriding(compiled: Callable, layouts: tuple[Layout, ...]) -> Callable:
    """``compiled`` with the outputs ``layouts`` names given eager's strides."""
    if not layouts:
        return compiled
    compiled = positional(compiled)

    def forward(*args: Any) -> list:
        outs = list(compiled(*args))
        for p, size, stride, traced in layouts:
            t = outs[p]
            if t.stride() != traced:
                # the kernels chose another layout than the trace's meta functions (they differ
                # in size-1 dims now and then): eager's was derived from the trace's, so it
                # is not known here; the output keeps its own
                continue
            new = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
            new.copy_(t)
            outs[p] = new
        return outs

    return forward
