"""In-place ops that write no tensor data, by what they change.

Names as the analysis's modes see them: a ``torch.Tensor`` method's ``__name__``, an ATen
schema's name without its namespace (the two agree for these ops). One vocabulary for every
stage that tells a write from a re-layout.
"""

from __future__ import annotations

__all__ = ["METADATA_INPLACE", "NO_DATA_INPLACE", "RELAYING_INPLACE", "SAME_ELEMENTS_INPLACE"]

#: re-lay a tensor out (size, stride, storage offset) over the same storage, writing no
#: data, so its version stays; autograd records them on the tensor they return, itself
RELAYING_INPLACE = frozenset({"t_", "transpose_", "swapdims_", "swapaxes_", "unsqueeze_", "squeeze_", "as_strided_"})

#: those whose new layout names the same elements as the old one (a permutation of the
#: dims, or a size-1 dim added or removed)
SAME_ELEMENTS_INPLACE = RELAYING_INPLACE - {"as_strided_"}

#: change a tensor's size, stride or storage, and no data
METADATA_INPLACE = RELAYING_INPLACE | {"resize_", "resize_as_"}

#: in-place-named ops that write no data of ``self``
NO_DATA_INPLACE = METADATA_INPLACE | {"set_", "detach_", "requires_grad_", "share_memory_"}
