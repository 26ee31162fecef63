"""Ops with side effects (``_linalg_check_errors``, ``_print``) traced as ordinary graph nodes.

torch registers them as ORDERED effects and its own AOT Autograd threads effect tokens through
the graph. aotgrad's graphs run their nodes in graph order and its partitioners never move or
drop an impure node, so plain nodes keep eager's order and eager's errors (a singular matrix
still raises in ``linalg.inv``) without tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["effects_as_ordered_nodes", "is_effectful"]

#: ops torch registers as ORDERED side effects (threaded with effect tokens in torch's own
#: AOT Autograd). Our graphs keep them as ordinary impure nodes, run in graph order.
_EFFECTFUL_OPS = ("aten::_linalg_check_errors", "aten::_print")


@contextlib.contextmanager
def effects_as_ordered_nodes() -> Iterator[None]:
    """While tracing, trace effectful ops as plain nodes instead of token-threaded ones."""
    from torch._library.simple_registry import singleton

    handles = [singleton.find(name).effect.register(None) for name in _EFFECTFUL_OPS]
    try:
        yield
    finally:
        for h in reversed(handles):
            h.destroy()




def is_effectful(target: object) -> bool:
    """True for the ops above: a graph must keep such a node even when nothing reads it."""
    return isinstance(target, torch._ops.OpOverload) and target._schema.name in _EFFECTFUL_OPS
