"""Views whose recorded op chain no longer applies to their base once an in-place metadata op
(``unsqueeze_``, ``t_``, ``transpose_``, ``as_strided_``) changed the base's shape: a
``permute`` of as many dims as the base had, a ``select`` of a dim ``t_`` shortened, an
``expand`` of fewer dims.

Eager regenerates such a view's ``grad_fn`` by ``as_strided`` of its base; autograd on the
traced program replays the recorded chain, which raises (formerly an internal error at
compile time: ``permute(sparse_coo): number of dimensions ...``, ``select(): index out of
range``). A use of the view is now rewritten by :class:`~aotgrad.core.stale_views.StaleViewUses`
as for a replay that names other elements; an in-place op on such a view (a write, or a
metadata op once it is stale) is refused at compile time, naming the line.
"""

from __future__ import annotations

import pytest

from tests.fuzz.harness import check_case, run_case

ONE = {"bases": [{"shape": [3, 3], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": "x"}]}

#: (view of the intermediate t, metadata op on t, use of the view): the view's chain raises
#: when replayed on t's new shape
CASES = {
    "permute_unsqueeze": ("t.permute(0, 1)", "t.unsqueeze_(-2)", "v + t"),
    "permute_transpose_unsqueeze": ("t.permute(0, 1).transpose(1, 0)", "t.unsqueeze_(-2)", "v + t"),
    "permute_unsqueeze0": ("t.permute(1, 0)", "t.unsqueeze_(0)", "v.sin()"),
    "select_unsqueeze_t": ("t.unsqueeze(-2).select(2, -2)", "t.unsqueeze_(1)", "torch.where(v > 0, v, v).cos()"),
    "expand_unsqueeze": ("t[:1].expand(2, 3)", "t.unsqueeze_(0)", "v * 2"),
    "diagonal_unsqueeze": ("t.diagonal()", "t.unsqueeze_(2)", "v.exp()"),
    "permute_asstrided": ("t.permute(1, 0)", "t.as_strided_((9,), (1,), 0)", "v * 3"),
}


def _source(view: str, meta: str, use: str, no_grad_meta: bool) -> str:
    body = f"        {meta}\n" if no_grad_meta else f"    {meta}\n"
    guard = "    with torch.no_grad():\n" if no_grad_meta else ""
    return f"def f(a):\n    t = a @ a\n    v = {view}\n{guard}{body}    u = {use}\n    return u, t\n"


@pytest.mark.parametrize("no_grad_meta", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_use_of_view_whose_chain_no_longer_applies(name, no_grad_meta):
    check_case(_source(*CASES[name], no_grad_meta), ONE, modes=["grad", "no_grad"])


@pytest.mark.parametrize("op", ["v.mul_(2)", "v.sigmoid_()"])
def test_write_through_view_whose_chain_no_longer_applies(op):
    """A write through such a view of an intermediate: it goes through the view's ops off the
    base laid back out (``squeeze``) as it was when the view was made (formerly refused;
    tests/test_writes_through_views_of_relaid_bases.py)."""
    check_case(f"def f(a):\n    t = a @ a\n    v = t.permute(1, 0)\n    t.unsqueeze_(-2)\n    {op}\n    return v * 1, t\n", ONE, modes=["grad", "no_grad"])


@pytest.mark.parametrize("op", ["v.unsqueeze_(-2)", "v.t_()"])
def test_inplace_on_view_whose_chain_no_longer_applies_refused(op):
    """An in-place op on such a view: the traced autograd's replay would raise inside it;
    refused at compile time naming the line (eager's as_strided history cannot be recorded
    on the traced view)."""
    src = f"def f(a):\n    t = a @ a\n    v = t.permute(1, 0)\n    t.unsqueeze_(-2)\n    {op}\n    return v * 1, t\n"
    res = run_case(src, ONE, None, post=[], modes=["grad"], seed=0)
    assert not res.ok and f'"{op}"' in res.report() and "AotgradCompileError" in res.report()
    assert "Traceback" not in res.report()


def test_fuzz_1018480():
    check_case(
        source='''
def f(a):
    t0 = a @ a
    t1 = t0.permute(0, 1)
    t2 = t1.transpose(1, 0)
    t0.unsqueeze_(-2)
    t3 = t2 + t0
    return t3,
''',
        inputs=ONE,
    )


def test_fuzz_1006943():
    check_case(
        source='''
def f(a, b, s):
    t1 = b.as_strided((3, 1), (1, 3), 0)
    t3 = a.cumsum(0)
    t5 = t3.permute(0, 1)
    t3.unsqueeze_(-2)
    t6 = t5.squeeze()
    return t1, t6
''',
        inputs={'bases': [{'shape': [4, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 0.5}]},
    )


def test_fuzz_1012691():
    check_case(
        source='''
def f(a, b):
    t0 = b.pow(2)
    t0.unsqueeze_(-1)
    t1 = t0.permute(0, 1, 3, 2)
    t2 = t1.detach()
    t0.unsqueeze_(1)
    t2.add_(t1)
    return b, t2, t0
''',
        inputs={'bases': [{'shape': [3, 1, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
    )


def test_fuzz_1012314():
    check_case(
        source='''
def f(opt, a):
    t0 = a.view_as(a)
    t1 = t0.relu()
    t2 = t1.permute(1, 2, 0)
    t3 = t2 + t2
    t5 = t3.select(1, -1)
    t5.t_()
    t6 = t5.expand(1, 4, 3)
    with torch.set_grad_enabled(True):
        t5.mul_(2)
        t7 = t6.narrow(0, 0, 1)
    return a, t7
''',
        inputs={'bases': [{'shape': [4, 3, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'value', 'value': None}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
    )
