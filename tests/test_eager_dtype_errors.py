"""Eager's per-dtype kernel errors (:mod:`aotgrad.core.kernel_checks`): an in-place or
``out=`` op whose result dtype cannot be cast to the written integer tensor's, and a kernel
not built for a dtype (``softmax`` of an integer tensor). The traced ops raised neither
(functionalization's copy casts; meta functions have no per-dtype kernels), so aotgrad
returned values where eager raised at the call. Ops eager allows on the same dtypes run.
"""

from __future__ import annotations

import pytest
import torch

from tests.fuzz.harness import check_case

INPUTS = {
    "bases": [{"shape": [3, 4], "dtype": "float32", "rg": False}, {"shape": [3, 4], "dtype": "float32", "rg": True}],
    "args": [{"kind": "tensor", "base": 0, "expr": "x"}, {"kind": "tensor", "base": 1, "expr": "x"}],
}

#: statements on ``i`` (an integer view of the input ``a``) and ``w`` (float, requires grad)
STATEMENTS = {
    # eager raises: result type Float can't be cast to the desired output type Int
    "mul_float_tensor": "i.mul_(w)",
    "add_float_scalar": "i.add_(1.5)",
    "addcmul_float": "i.addcmul_(w, w)",
    "sigmoid_": "i.sigmoid_()",
    "clamp_float": "i.clamp_(0.5)",
    "mul_out": "torch.mul(w, 2, out=i)",
    "sin_out": "torch.sin(i, out=i)",
    "iadd_float": "i += w",
    # eager raises: "..." not implemented for 'Int'
    "softmax": "u = i.softmax(1)",
    "log_softmax": "u = i.log_softmax(0)",
    # eager runs these
    "mul_int": "i.mul_(2)",
    "add_int_tensor": "i.add_(i)",
    "copy_float": "i.copy_(w)",
    "masked_fill_float": "i.masked_fill_(i > 0, 1.5)",
    "setitem_float": "i[0] = w[1]",
    "sin": "u = i.sin()",
    "float_div": "u = i / 2",
    "where_mixed": "u = torch.where(i > 0, w, i)",
}


@pytest.mark.parametrize("view", ["a.view(torch.int32)", "a.t().view(torch.int32)", "(a * 100).int()"])
@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_integer_tensor_ops(name, view):
    src = f"def f(a, w):\n    i = {view}\n    {STATEMENTS[name]}\n    return i, w * 2\n"
    check_case(src, INPUTS, modes=["grad", "no_grad"])


def test_empty_integer_softmax_runs():
    """Eager's softmax of an empty integer tensor returns before its kernel's dtype check."""
    src = "def f(a, w):\n    i = a[:0].int()\n    return i.softmax(1), w * 2\n"
    check_case(src, INPUTS)


def test_fuzz_1002927():
    check_case(
        source='''
def f(a, flag, opt):
    t0 = a.view(torch.int32)
    t2 = torch.zeros((3, 4))
    t3 = t2 * a
    t0.addcmul_(t3, t3)
    return [a]
''',
        inputs={'bases': [{'shape': [4, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.t()'}, {'kind': 'value', 'value': True}, {'kind': 'value', 'value': None}]},
    )


def test_fuzz_2009884():
    check_case(
        source='''
def f(a, b, c, d):
    with torch.no_grad():
        with torch.enable_grad():
            t0 = d.clone()
            t1 = t0.permute(2, 1, 0)
    t2 = t1.view(torch.int32)
    t3 = t2.softmax(2)
    return t0,
''',
        inputs={'bases': [{'shape': [1, 4, 1], 'dtype': 'float32', 'rg': False}, {'shape': [], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'same', 'arg': 0}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
    )


def test_collectives_are_not_run_on_small_tensors():
    """A collective on an integer tensor is never run by the dtype check: run on one rank's
    small tensors alone, it would wait for the other ranks (or talk to them out of turn)."""
    import torch.distributed._functional_collectives as fc

    from aotgrad.core.kernel_checks import raise_eager_dtype_error

    calls = []

    def all_reduce(t, op, group):  # stands in for the collective: records being run
        calls.append(t)
        return t

    ints = torch.ones(3, dtype=torch.int64)
    for module in (fc.all_reduce.__module__, torch.ops._c10d_functional.all_reduce.__module__,
                   torch.distributed.all_reduce.__module__):
        all_reduce.__module__ = module
        raise_eager_dtype_error(all_reduce, (ints, "sum", "0"), {})
    assert calls == []
    all_reduce.__module__ = "torch"
    raise_eager_dtype_error(all_reduce, (ints, "sum", "0"), {})
    assert len(calls) == 1  # (the check does run other ops on integer tensors)


def test_remembered_outcomes_follow_scalars_and_default_dtype():
    """Each small run's outcome is remembered (by op, argument structure, dtypes, small
    sizes, each scalar's type and value, the default dtype): programs that differ only in a
    scalar or in the default dtype, run after one another, still get eager's outcome."""
    def src(statement: str) -> str:
        return f"def f(a, w):\n    i = (a * 100).int()\n    {statement}\n    return i, w * 2\n"

    for statement in ("i.add_(1)", "i.add_(1.5)", "i.add_(1)", "i.add_(True)", "i.mul_(2.0)", "i.mul_(2)",
                      "i.add_(i, alpha=2)", "torch.add(i, 1.5, out=i)", "torch.add(i, 1, out=i)"):
        check_case(src(statement), INPUTS, modes=["grad", "no_grad"])


def test_remembered_outcome_follows_default_dtype():
    """The dtype eager's error names follows the default dtype (``int_tensor.add_(1.5)``):
    an outcome remembered under one default dtype is not reused under another."""
    import aotgrad
    from aotgrad import compilers

    def f(a):
        i = (a * 100).int()
        i.add_(1.5)
        return i

    previous = torch.get_default_dtype()
    try:
        for dtype in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(dtype)
            a = torch.randn(3, 4, dtype=torch.float32)
            with pytest.raises(RuntimeError) as eager:
                f(a)
            with pytest.raises(RuntimeError) as ours:
                aotgrad.aot_function(f, compilers.nop)(a)
            assert str(ours.value) == str(eager.value)
    finally:
        torch.set_default_dtype(previous)
