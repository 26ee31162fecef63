"""An output that is a view of an intermediate the program ``detach_()``es afterwards
(``t2 = t1.select(1, 0); t1.detach_(); return t2``): eager's view keeps its history (it
requires grad, its ``grad_fn`` reaches what ``t1`` was computed from) while its base does
not. aotgrad rebuilt the view off the graph's base, which required no grad: the output was a
leaf and the backward raised "element 0 of tensors does not require grad". The graph now
returns an alias of the intermediate taken before its ``detach_()`` as that base
(:class:`aotgrad.core.tracing.IntermediateDetaches`), with a tangent.
"""

from __future__ import annotations

import pytest

from tests.fuzz.harness import check_case

INPUTS = {"bases": [{"shape": [4, 2, 3], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": "x"}]}

VIEWS = {
    "select": "t1.select(1, 0)",
    "narrow": "t1.narrow(0, 1, 2)",
    "transpose": "t1.transpose(2, 1)",
    "view": "t1.view(8, 3)",
    "diagonal": "t1.diagonal(0, 1, 2)",
    "chain": "t1[1:].permute(2, 0, 1)[0]",
}
#: what else the program does after the detach_
AFTER = {
    "nothing": "",
    "use_base": "    u = t1 * 2\n",
    "use_view": "    u = v.sin()\n",
}


@pytest.mark.parametrize("after", sorted(AFTER))
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_view_of_intermediate_detached_in_place(view, after):
    src = f"def f(a):\n    t1 = a.pow(2) * a\n    v = {VIEWS[view]}\n    t1.detach_()\n{AFTER[after]}    return v,\n"
    check_case(src, INPUTS, modes=["grad", "no_grad"])


def test_two_views_detached_base():
    src = "def f(a):\n    t1 = a * 3\n    v = t1[0]\n    w = t1[1:].sum(0)\n    t1.detach_()\n    return v, w\n"
    check_case(src, INPUTS)


def test_fuzz_1008110():
    check_case(
        source='''
def f(a):
    t0 = a.pow(2)
    t1 = t0 * a
    t2 = t1.select(1, 0)
    t1.detach_()
    return t2,
''',
        inputs=INPUTS,
    )


def test_fuzz_2014224():
    check_case(
        source='''
def f(a, b):
    t4 = b.reshape(1, 2)
    t5 = t4.mT @ t4
    t6 = t5.reshape(-1)
    t5.detach_()
    return t6,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[1:]'}, {'kind': 'same', 'arg': 0}]},
    )


#: which outputs the program returns: the view and its detached base, in either order
RETURNS_WITH_BASE = {
    "view_then_base": "v, t1",
    "base_then_view": "t1, v",
    "base_view_and_sum": "t1, v, v.sum()",
}


@pytest.mark.parametrize("returns", sorted(RETURNS_WITH_BASE))
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_view_of_intermediate_detached_in_place_returned_with_it(view, returns):
    """Fuzz seed 3019885: ``t1 = tanh(b); v = t1.unsqueeze(0); t1.detach_(); return v, t1``:
    eager's ``v`` keeps its history and has ``t1`` (detached) as its ``_base``; rebuilt off the
    graph's detached ``t1`` it required no grad, and a backward from it raised."""
    src = f"def f(a):\n    t1 = a.pow(2) * a\n    v = {VIEWS[view]}\n    t1.detach_()\n    return {RETURNS_WITH_BASE[returns]}\n"
    check_case(src, INPUTS, modes=["grad", "no_grad"])
