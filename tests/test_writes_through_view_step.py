"""Writes into a view whose chain has a ``view()`` step (``t.view(2, 3).permute(1, 0)``) where
the written value is laid out otherwise than the view: functionalization writes it back
through ``view`` of the new value, which raised ("Cannot view a tensor with shape ... and
strides ..."). ``masked_fill_`` (whose functional op returns a contiguous tensor) and
``out=`` ops (whose result follows their inputs) now copy their result into the view
(:mod:`aotgrad.core.eager_rewrites`).
"""

from __future__ import annotations

import pytest

from tests.fuzz.harness import check_case

INPUTS = {
    "bases": [{"shape": [3, 2], "dtype": "float32", "rg": True}, {"shape": [6], "dtype": "float32", "rg": False}],
    "args": [{"kind": "tensor", "base": 0, "expr": "x"}, {"kind": "tensor", "base": 1, "expr": "x"}],
}

#: views with a view() step of a fresh (2, 3) tensor t
VIEWS = {
    "permute": "t.view(2, 3).permute(1, 0)",
    "transpose_slice": "t.view(2, 3).t()[1:]",
    "view_of_view": "t.view(6).view(3, 2).t()",
    "unflatten_t": "t.unflatten(0, (2, 3)).t()",
}
#: the fresh tensor: a leaf-like one (no grad), or one computed from the input requiring grad
FRESH = {"arange": "torch.arange(6, dtype=a.dtype)", "of_input": "(a * 2).reshape(6)", "of_b": "b + 0"}
WRITES = {
    "masked_fill_scalar": "v.masked_fill_(v > 2, 0.0)",
    "masked_fill_broadcast_mask": "v.masked_fill_((v > 2)[:1], -1.0)",
    "masked_fill_tensor_value": "v.masked_fill_(v > 2, a.sum().detach())",
    "mul_out_contiguous": "torch.mul(v.detach().contiguous(), 2, out=v)",
    "sin_out": "torch.sin(v.detach().t().contiguous().t(), out=v)",
    "add_out_transposed": "torch.add(v.detach().t().contiguous().t(), 1, out=v)",
}


@pytest.mark.parametrize("fresh", sorted(FRESH))
@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("write", sorted(WRITES))
def test_write_through_view_step(write, view, fresh):
    src = (
        f"def f(a, b):\n    t = {FRESH[fresh]}\n    v = {VIEWS[view]}\n    {WRITES[write]}\n"
        "    return v * 1, t\n"
    )
    check_case(src, INPUTS, modes=["grad", "no_grad"])


def test_fuzz_1014037():
    check_case(
        source='''
def f(s, a, b, k):
    t1 = torch.arange(6, dtype=a.dtype).view(a.shape)
    t2 = t1.permute(1, 0)
    t2.masked_fill_(t2 > 0, 0.0)
    return b, t1
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': False}, {'shape': [3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'value', 'value': -1.5}, {'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(3,))'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}, {'kind': 'value', 'value': 2}]},
    )


def test_fuzz_2015069():
    check_case(
        source='''
def f(a, s):
    t0 = a + a
    t3 = t0 + s
    t4 = torch.arange(6, dtype=t3.dtype).view(t3.shape)
    torch.mul(t0, 2, out=t4)
    return t4,
''',
        inputs={'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.detach().transpose(0, 1)'}, {'kind': 'value', 'value': 2.0}]},
    )
