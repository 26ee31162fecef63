"""Tensor-subclass inputs (issue 11, begun): a ``__tensor_flatten__`` wrapper subclass
(``TwoTensor``) flows through aotgrad's graphs as it is (not yet flattened to its inner
tensors), which the nop compiler runs correctly. Compared with eager by ``check``."""

from __future__ import annotations

import pytest
import torch
from eager_compare import check
from torch.testing._internal.two_tensor import TwoTensor


def two(*shape, requires_grad=False):
    t = TwoTensor(torch.randn(*shape), torch.randn(*shape))
    return t.requires_grad_(requires_grad)


PROGRAMS = {
    "pointwise": (lambda x, w: (x * w).sin().sum(), lambda: (two(3, requires_grad=True), two(3, requires_grad=True))),
    "input mutation": (lambda x, buf: (buf.add_(1), x * buf)[1], lambda: (two(3, requires_grad=True), two(3))),
    "outputs alias": (lambda x: (x.view(-1), (x * 2).t()), lambda: (two(2, 3, requires_grad=True),)),
    "matmul": (lambda x, w: torch.relu(x @ w), lambda: (two(4, 3), two(3, 2, requires_grad=True))),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_two_tensor_inputs_match_eager(name):
    fn, make = PROGRAMS[name]
    check(fn, make, mutate_outputs=False)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_both_inner_tensors_match_eager(name):
    import torch.utils._pytree as pytree

    import aotgrad
    from aotgrad.compilers import nop

    fn, make = PROGRAMS[name]
    torch.manual_seed(0)
    eager_in = make()
    torch.manual_seed(0)
    comp_in = make()
    outs = pytree.tree_leaves(fn(*eager_in)), pytree.tree_leaves(aotgrad.aot_function(fn, nop)(*comp_in))
    for e, c in zip(*outs, strict=True):
        assert type(c) is TwoTensor
        assert torch.equal(e.a, c.a) and torch.equal(e.b, c.b)
    for e, c in zip(eager_in, comp_in):  # inputs after the call (mutations)
        assert torch.equal(e.a, c.a) and torch.equal(e.b, c.b)
