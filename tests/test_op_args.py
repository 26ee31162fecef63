"""core/op_args.tree_leaves gives pytree.tree_leaves's leaves, in its order, for what ops take and return."""

import collections

import pytest
import torch
import torch.utils._pytree as pytree

from aotgrad.core.op_args import tree_leaves

_Pair = collections.namedtuple("_Pair", "a b")
_t = torch.randn(2, 3)
_u = torch.nn.Parameter(torch.randn(3))

CASES = {
    "tensor": _t,
    "conv2d args": ((_t, _u, None, [1, 1], [0, 0], [1, 1], 1), {}),
    "kwargs in insertion order": ((_t,), {"out": _u, "alpha": 2, "dim": (0, 1)}),
    "nested lists": ([[_t, [_u]], (), [None, 1.5, True]], {"d": {"z": _t, "a": [_u]}}),
    "namedtuple": (_Pair(_t, [_u, 3]),),
    "torch.Size": ((_t, torch.Size([2, 3])), {}),
    "ordered dict": (collections.OrderedDict([("b", _t), ("a", _u)]),),
    "dtype, device, layout, memory format": ((torch.float32, torch.device("cpu"), torch.strided, torch.channels_last), {}),
    "slice and ellipsis": ((_t, (slice(0, 1), Ellipsis, None)), {}),
    "subclass of list": (type("L", (list,), {})([_t, _u]),),
}


@pytest.mark.parametrize("name", CASES)
def test_same_leaves_as_pytree(name):
    tree = CASES[name]
    expected, got = pytree.tree_leaves(tree), tree_leaves(tree)
    assert len(got) == len(expected) and all(g is e for g, e in zip(got, expected))
