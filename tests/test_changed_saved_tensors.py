"""A tensor autograd saved that the program re-shapes in place afterwards (``t0 = b @ a;
a.unsqueeze_(-1)``): eager's backward raises its version error ("modified by an inplace
operation") where it reaches the op that saved it, and runs where it does not (the output
detached after the call, the gradient of another output).

The joint trace's autograd met the saved tensor's new shape in the op's derivative formula
("DotBackward0 returned an invalid gradient"), and the program was refused at compile time.
The joint now leaves out the gradients of the outputs whose backward reaches such an op
(:func:`aotgrad.core.tracing.trace_joint`): the compiled backward raises eager's error first
wherever one of them has a gradient (``saved_tensors.check_saved_versions``).
"""

from __future__ import annotations

import pytest

from tests.fuzz.harness import Case, check_case, run

INPUTS = {
    "bases": [{"shape": [4], "dtype": "float32", "rg": True}, {"shape": [2, 3], "dtype": "float32", "rg": True}],
    "args": [
        {"kind": "tensor", "base": 0, "expr": "x.clone()"}, {"kind": "tensor", "base": 0, "expr": "x"},
        {"kind": "tensor", "base": 1, "expr": "x.clone()"}, {"kind": "tensor", "base": 1, "expr": "x"},
    ],
}

#: (op saving ``a`` or ``m``, metadata op changing it afterwards)
PROGRAMS = {
    "dot_unsqueeze_": "    t0 = b @ a\n    a.unsqueeze_(-1)\n",
    "mul_unsqueeze_": "    t0 = (b * a).sum()\n    a.unsqueeze_(0)\n",
    "mm_t_": "    t0 = (m @ n.t()).sum()\n    m.t_()\n",
    "mul_transpose_": "    t0 = (n * m).sum()\n    m.transpose_(0, 1)\n",
    "sigmoid_as_strided_": "    t0 = m.sigmoid().sum()\n    m.as_strided_((3, 2), (1, 3))\n",
}

#: (what else is returned, post-call ops): the backward reaches t0's node or not
RETURNS = {
    "t0_backward_raises": ("t0,", []),
    "t0_detached_after_call": ("t0,", [(0, "detach_()")]),
    "other_output_only": ("t0, (b * n.sum()).sin()", [(0, "detach_()")]),
    "both_outputs": ("t0, (b * n.sum()).sin()", []),
}


@pytest.mark.parametrize("returns", sorted(RETURNS))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_saved_tensor_reshaped_in_place(name, returns):
    ret, post = RETURNS[returns]
    src = f"def f(a, b, m, n):\n{PROGRAMS[name]}    return {ret}\n"
    r = run(Case(src, INPUTS, post, ["grad"], 0), strict_stage=True)
    assert r.ok, r.report()


def test_fuzz_1003102():
    check_case(
        source='''
def f(a, b):
    t0 = b @ a
    a.unsqueeze_(-1)
    return t0,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        post=[(0, 'detach_()')],
    )


def test_fuzz_2016298():
    check_case(
        source='''
def f(a, s, b, c, d):
    t0 = c + s
    a.addcmul_(t0, t0)
    t0.t_()
    t3 = b.cumsum(-2)
    return t3,
''',
        inputs={'bases': [{'shape': [3, 4], 'dtype': 'float32', 'rg': False}, {'shape': [1, 1, 2], 'dtype': 'float32', 'rg': False}, {'shape': [1, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 2.0}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}, {'kind': 'tensor', 'base': 2, 'expr': 'x'}, {'kind': 'tensor', 'base': 2, 'expr': 'x'}]},
    )
