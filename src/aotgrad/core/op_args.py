"""The leaves of an op's arguments or results, as ``torch.utils._pytree.tree_leaves`` gives them.

The analysis's torch-function modes (core/analysis.py, view_geometry.py, eager_rewrites.py,
kernel_checks.py) read the tensors among every op's arguments and results, several times
an op. ``pytree.tree_leaves`` asks each node's type whether it is a namedtuple and walks
nested generators (~7 µs for ``conv2d``'s arguments); :func:`tree_leaves` walks the
containers an op's arguments are made of (exact ``tuple``, ``list``, ``dict``) itself and
hands anything else that is not a known leaf to pytree.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor

__all__ = ["VIEW_PROPERTIES", "tree_leaves", "view_property"]

#: types pytree never flattens (no registered node type is one of these, nor a namedtuple)
_LEAF_TYPES = frozenset({
    FunctionalTensor, FakeTensor, torch.Tensor, torch.nn.Parameter, int, float, bool, complex, str,
    type(None), torch.dtype, torch.device, torch.layout, torch.memory_format,
    torch.SymInt, torch.SymFloat, torch.SymBool,
})


#: tensor properties that are views of the tensor (``x.mT``: a transpose); a torch-function
#: mode sees a read of one as a call of its getter, named ``__get__``
VIEW_PROPERTIES = frozenset({"T", "mT", "H", "mH", "real", "imag"})


def view_property(func: Any) -> str | None:
    """The name of the view property (:data:`VIEW_PROPERTIES`) whose getter ``func`` is, as a
    torch-function mode receives it; None for any other callable."""
    if getattr(func, "__name__", None) != "__get__":
        return None
    name = getattr(getattr(func, "__self__", None), "__name__", None)
    return name if name in VIEW_PROPERTIES else None


def tree_leaves(tree: Any) -> list[Any]:
    """``pytree.tree_leaves(tree)``: the same leaves in the same order. Exact ``tuple`` and
    ``list`` are walked in order and exact ``dict`` by its values in insertion order, as
    pytree's registered flatten functions for them do; values of :data:`_LEAF_TYPES` are
    leaves; any other value goes to pytree."""
    leaves: list[Any] = []
    _collect(tree, leaves)
    return leaves


def _collect(tree: Any, leaves: list[Any]) -> None:
    typ = type(tree)
    if typ in _LEAF_TYPES:
        leaves.append(tree)
    elif typ is tuple or typ is list:
        for child in tree:
            _collect(child, leaves)
    elif typ is dict:
        for child in tree.values():
            _collect(child, leaves)
    else:
        leaves.extend(pytree.tree_leaves(tree))
