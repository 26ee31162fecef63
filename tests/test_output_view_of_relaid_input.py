"""An output that is a view of an input taken before an in-place metadata op under no_grad
re-shaped the input (``t0 = a.reshape(2, 2, 3); with no_grad: a.t_(); return t0``): reading
the output's ``grad_fn`` in the analysis replays its recorded chain on the input's new shape,
which raised the view op's own error ("Cannot view a tensor with shape ..."), where eager
regenerates the view by ``as_strided``. Such a read now means no custom ``autograd.Function``
on the output's path (:func:`aotgrad.core.analysis._through_custom_function`).
"""

from __future__ import annotations

import pytest

from tests.fuzz.harness import check_case

#: the input: a non-contiguous view requiring grad, a contiguous non-leaf
INPUTS = {
    "slice": {"bases": [{"shape": [4, 4], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": "x[:, 1:]"}]},
    "nonleaf": {"bases": [{"shape": [4, 3], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": "x * 1"}]},
}
VIEWS = {"reshape": "a.reshape(2, 2, 3)", "view_flat": "a[1:].reshape(-1)", "select": "a.select(1, 2)", "unflatten": "a.unflatten(0, (2, 2))"}
METAS = {"t_": "a.t_()", "unsqueeze_": "a.unsqueeze_(0)", "transpose_": "a.transpose_(0, 1)"}


@pytest.mark.parametrize("meta", sorted(METAS))
@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("inputs", sorted(INPUTS))
def test_output_view_of_input_relaid_under_no_grad(inputs, view, meta):
    src = f"def f(a):\n    t0 = {VIEWS[view]}\n    with torch.no_grad():\n        {METAS[meta]}\n    return t0,\n"
    check_case(src, INPUTS[inputs], modes=["grad", "no_grad"])


def test_fuzz_1019720():
    check_case(
        source='''
def f(a, k, opt):
    t0 = a.reshape(2, 2, 3)
    with torch.no_grad():
        a.t_()
    return t0,
''',
        inputs={'bases': [{'shape': [4, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[:, 1:]'}, {'kind': 'value', 'value': 2}, {'kind': 'value', 'value': 1.5}]},
    )
