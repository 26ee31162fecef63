"""Writes through memory that overlaps itself (:mod:`aotgrad.core.overlapping_writes`) where
eager raises nothing: an empty region of an ``expand()``ed or stride-0 tensor (eager writes
nothing and checks nothing), and ``copy_`` into an expanded input from another input the
caller passed on the same memory laid out the same way (eager's ``copy_`` returns at once).

Both raised eager's "more than one element of the written-to tensor refers to a single
memory location" at compile time: the empty region counted as overlapping, and the analysis
run over the call's inputs (before synthetic bases merge aliasing inputs) saw two storages.
"""

from __future__ import annotations

import pytest

from tests.fuzz.harness import check_case

INTERMEDIATE = {"bases": [{"shape": [1, 3], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": "x"}]}

#: writes of an empty region through a stride-0 dim
EMPTY_WRITES = {
    "setitem_scalar": "v[1:] = 1.0",
    "setitem_tensor": "v[1:] = t.sum()",
    "copy_": "v[1:].copy_(t[:0].expand(0, 3))",
    "add_": "v[1:].add_(t)",
    "neg_": "v[1:].neg_()",
    "mul_tensor": "v[1:].mul_(t * 2)",
}
#: stride-0 views of the intermediate t (1, 3) with an empty slice along dim 0
STRIDE0_VIEWS = {
    "expand": "t.expand(1, 3)",
    "expand_t_": "t.t().expand(3, 1).t()",
    "as_strided0": "t.as_strided((1, 3), (1, 0), 0)",
}


@pytest.mark.parametrize("view", sorted(STRIDE0_VIEWS))
@pytest.mark.parametrize("write", sorted(EMPTY_WRITES))
def test_empty_write_through_stride0_view(view, write):
    src = f"def f(a):\n    t = a.sin()\n    v = {STRIDE0_VIEWS[view]}\n    {EMPTY_WRITES[write]}\n    return v * 1, t\n"
    check_case(src, INTERMEDIATE, modes=["grad", "no_grad"])


def _aliasing_inputs(dest: str, src: str, rg: bool) -> dict:
    return {
        "bases": [{"shape": [4], "dtype": "float32", "rg": rg}],
        "args": [{"kind": "tensor", "base": 0, "expr": dest}, {"kind": "tensor", "base": 0, "expr": src}],
    }


#: (dest, src) views of one base tensor passed as separate inputs: same data (eager's copy_
#: returns at once) or not (eager raises its overlap error, as aotgrad)
ALIASED_COPIES = {
    "same_expand": ("x[:3].expand(2, 3)", "x[:3].expand(2, 3)"),
    "same_expand_other_chain": ("x[:3].expand(2, 3)", "x[:3].unsqueeze(0).expand(2, 3)"),
    "same_offset_expand": ("x[1:].expand(2, 3)", "x[1:].expand(2, 3)"),
    "other_offset_raises": ("x[:3].expand(2, 3)", "x[1:].expand(2, 3)"),
    "dense_src_raises": ("x[:3].expand(2, 3)", "x[:3]"),
}


@pytest.mark.parametrize("rg", [False, True])
@pytest.mark.parametrize("name", sorted(ALIASED_COPIES))
def test_copy_into_expanded_input_from_aliasing_input(name, rg):
    dest, src = ALIASED_COPIES[name]
    source = "def f(c, a):\n    c.copy_(a)\n    t0 = c.add(c, alpha=2)\n    return t0.sigmoid(), a * 1\n"
    check_case(source, _aliasing_inputs(dest, src, rg), modes=["grad", "no_grad"])


def test_fuzz_2000390():
    check_case(
        source='''
def f(a, b, c, k):
    c.copy_(a)
    t0 = c.add(c, alpha=2)
    t1 = t0.sigmoid()
    return t1,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(3,))'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(3,))'}, {'kind': 'value', 'value': 1}]},
    )


def test_fuzz_1011471():
    check_case(
        source='''
def f(a, b):
    t0 = b @ b
    t1 = t0.detach()
    t2 = t1.as_strided((1, 2), (1, 0), 0)
    with torch.set_grad_enabled(True):
        t2[1:] = 1.0
        t4, = a.split(3, 0)
    t6 = t4.cumsum(0)
    return t6,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': False}, {'shape': [2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}]},
    )


def test_fuzz_2011757():
    check_case(
        source='''
def f(a, b):
    with torch.set_grad_enabled(True):
        t5 = b.transpose(1, 0)
        t6 = t5.cumsum(0)
    t7 = t6.expand(3, 3, 1)
    with torch.no_grad():
        t7.transpose_(0, 2)
    t7[1:] = a
    return t5, t7
''',
        inputs={'bases': [{'shape': [1, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'same', 'arg': 0}]},
    )


def test_fuzz_2018913():
    check_case(
        source='''
def f(a, flag, opt):
    t0 = a.sin()
    t1 = t0.t()
    t2 = t1 * 2
    with torch.no_grad():
        t5 = t2 * t0
    t7 = t0.expand(1, 2)
    t7[1:] = t5
    return t0,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': True}, {'kind': 'value', 'value': None}]},
        modes=['no_grad', 'grad'],
    )
