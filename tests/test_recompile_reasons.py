"""Recompile reasons: a call that misses every entry says which guard check failed, with the
entry's value and the call's (``AotFunction.recompile_reasons``, INFO log), and a function
that recompiles too often warns once. Each program is compared with eager on both calls."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import aotgrad
from aotgrad.compilers import nop
from eager_compare import check


def _two_calls(fn, first, second, *, grad_modes=(True, True), **options):
    """Compile ``fn`` on ``first()``'s inputs, then call it on ``second()``'s: both compared
    with eager. Returns the compiled function, which must have compiled twice."""
    cf = aotgrad.aot_function(fn, nop, **options)
    check(fn, first, compiled=cf, grad_mode=grad_modes[0])
    check(fn, second, compiled=cf, grad_mode=grad_modes[1])
    assert len(cf.entries) == 2 and len(cf.recompile_reasons) == 1, cf.recompile_reasons
    return cf


def _only_reason(cf):
    (reason,) = cf.recompile_reasons
    assert reason.number == 1
    (mismatch,) = reason.mismatches  # one entry was there to miss
    return mismatch


def _mul(x, y):
    return x * y


def test_shape():
    cf = _two_calls(_mul, lambda: (torch.randn(2, 3, requires_grad=True), torch.randn(2, 3)),
                    lambda: (torch.randn(4, 3, requires_grad=True), torch.randn(4, 3)))
    m = _only_reason(cf)
    assert (m.kind, m.what, m.old, m.new) == ("shape", "argument leaf 0", "(2, 3)", "(4, 3)")
    assert "argument leaf 0: shape was (2, 3), now (4, 3)" in str(cf.recompile_reasons[0])


def test_stride():
    cf = _two_calls(_mul, lambda: (torch.randn(2, 3, requires_grad=True), torch.randn(2, 3)),
                    lambda: (torch.randn(3, 2).t().requires_grad_(), torch.randn(2, 3)))
    m = _only_reason(cf)
    assert (m.kind, m.old, m.new) == ("stride", "(3, 1)", "(1, 2)")


def test_dtype():
    cf = _two_calls(_mul, lambda: (torch.randn(3, requires_grad=True), torch.randn(3)),
                    lambda: (torch.randn(3, requires_grad=True), torch.randn(3, dtype=torch.float64)))
    m = _only_reason(cf)
    assert (m.kind, m.what, m.old, m.new) == ("dtype", "argument leaf 1", "torch.float32", "torch.float64")


def test_requires_grad():
    cf = _two_calls(_mul, lambda: (torch.randn(3), torch.randn(3)),
                    lambda: (torch.randn(3), torch.randn(3, requires_grad=True)))
    m = _only_reason(cf)
    assert (m.kind, m.what, m.old, m.new) == ("requires_grad", "argument leaf 1", "False", "True")


def test_grad_mode():
    make = lambda: (torch.randn(3, requires_grad=True), torch.randn(3))  # noqa: E731
    cf = _two_calls(_mul, make, make, grad_modes=(True, False))
    m = _only_reason(cf)
    assert (m.kind, m.old, m.new) == ("grad_mode", "True", "False")


def test_constant_value_and_type():
    def f(x, k):
        return x * k

    cf = aotgrad.aot_function(f, nop)
    check(f, lambda: (torch.randn(3, requires_grad=True), 2), compiled=cf)
    check(f, lambda: (torch.randn(3, requires_grad=True), 3), compiled=cf)
    check(f, lambda: (torch.randn(3, requires_grad=True), 3.0), compiled=cf)
    first, second = cf.recompile_reasons
    assert (first.mismatches[0].kind, first.mismatches[0].old, first.mismatches[0].new) == ("constant", "2", "3")
    assert first.mismatches[0].what == "non-tensor argument leaf 1"
    # 3 == 3.0 in Python: the reason names the types
    assert (second.mismatches[0].old, second.mismatches[0].new) == ("3 (int)", "3.0 (float)")
    assert second.kinds == ("constant", "constant")


def test_structure():
    def f(xs):
        return sum(x.sin() for x in xs)

    cf = _two_calls(f, lambda: ([torch.randn(3, requires_grad=True)] * 1,),
                    lambda: ([torch.randn(3, requires_grad=True), torch.randn(3)],))
    m = _only_reason(cf)
    assert m.kind == "structure" and "TreeSpec" in m.old and m.old != m.new


@pytest.mark.parametrize("first_twice", [True, False])
def test_same_tensor_passed_twice_or_distinct(first_twice):
    def f(a, b):
        return a * b

    twice = lambda: (lambda t: (t, t))(torch.randn(3, requires_grad=True))  # noqa: E731
    distinct = lambda: (torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True))  # noqa: E731
    cf = _two_calls(f, *((twice, distinct) if first_twice else (distinct, twice)))
    m = _only_reason(cf)
    old, new = ("the same tensor", "distinct tensors") if first_twice else ("distinct tensors", "the same tensor")
    assert (m.kind, m.what, m.old, m.new) == ("duplicates", "argument leaf 0 and argument leaf 1", old, new)


def test_storage_sharing_of_a_mutated_input():
    def f(a, b):
        a.add_(1)
        return a + b

    cf = aotgrad.aot_function(f, nop)
    check(f, lambda: (torch.zeros(8)[:4], torch.ones(8)[4:]), compiled=cf)

    def aliased():
        base = torch.zeros(8)
        return base[:4], base[4:]

    check(f, aliased, compiled=cf)
    m = _only_reason(cf)
    assert (m.kind, m.old, m.new) == ("storage", "(0, 1)", "(0, 0)")


def test_leafness_of_a_mutated_input():
    def f(a, b):
        a.mul_(2)
        return a + b

    cf = aotgrad.aot_function(f, nop)
    check(f, lambda: (torch.randn(3), torch.randn(3, requires_grad=True)), compiled=cf)
    # same metadata, but now a non-leaf (it has a grad_fn): eager allows the in-place op
    check(f, lambda: (torch.randn(3, requires_grad=True) * 1, torch.randn(3, requires_grad=True)), compiled=cf)
    m = _only_reason(cf)
    assert m.kind in ("requires_grad", "leafness")  # requires_grad changes first
    assert cf.recompile_reasons[0].mismatches[0].new != cf.recompile_reasons[0].mismatches[0].old


def test_shape_guard_of_a_symbolic_entry():
    cf = _two_calls(_mul, lambda: (torch.randn(3, requires_grad=True), torch.randn(3)),
                    lambda: (torch.randn(1, requires_grad=True), torch.randn(1)), dynamic=True)
    m = _only_reason(cf)
    assert m.kind == "shape_guard" and "t0.size(0)" in m.what
    assert (m.old, m.new) == ("t0=(3,)", "t0=(1,)") or ("t0=(3,)" in m.old and "t0=(1,)" in m.new)


def test_subclass_type():
    """A tensor subclass where the entry had a plain tensor (the subclass's flatten structure
    itself is tested with DTensor placements in test_subclasses.py)."""

    def f(x):
        return x * 2

    cf = aotgrad.aot_function(f, nop)
    check(f, lambda: (TwoTensor(torch.randn(3), torch.randn(3)),), compiled=cf, backward=False, mutate_outputs=False)
    check(f, lambda: (torch.randn(3),), compiled=cf, backward=False, mutate_outputs=False)
    m = _only_reason(cf)
    assert (m.kind, m.old, m.new) == ("type", "TwoTensor", "Tensor")


def test_reasons_are_logged_at_info(caplog):
    cf = aotgrad.aot_function(_mul, nop)
    with caplog.at_level(logging.INFO, logger="aotgrad"):
        cf(torch.randn(2), torch.randn(2))
        cf(torch.randn(5), torch.randn(5))
    (record,) = [r for r in caplog.records if "recompiling" in r.getMessage()]
    assert record.levelno == logging.INFO
    assert "shape was (2,), now (5,)" in record.getMessage()


def test_warns_once_past_the_limit():
    cf = aotgrad.aot_function(_mul, nop, recompile_warn_limit=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 4):  # the first compile and two recompiles: no warning
            cf(torch.randn(n), torch.randn(n))
        assert not [w for w in caught if "recompiled" in str(w.message)]
        for n in range(4, 8):  # recompiles 3..6: one warning
            x, y = torch.randn(n), torch.randn(n)
            torch.testing.assert_close(cf(x, y), x * y)
    warned = [w for w in caught if "recompiled" in str(w.message)]
    assert len(warned) == 1, [str(w.message) for w in warned]
    assert warned[0].category is RuntimeWarning
    assert "recompiled 3 times (recompile_warn_limit=2)" in str(warned[0].message)
    assert warned[0].filename == __file__  # points at the caller's line
    assert len(cf.recompile_reasons) == 6


def test_default_limit_and_module_option():
    assert aotgrad.AotConfig(nop).recompile_warn_limit == 8
    model = torch.nn.Linear(3, 2)
    cmodel = aotgrad.aot_module(model, nop, recompile_warn_limit=0)
    cmodel(torch.randn(2, 3))
    with pytest.warns(RuntimeWarning, match="recompiled 1 times"):
        cmodel(torch.randn(5, 3))


def test_hit_records_nothing():
    cf = aotgrad.aot_function(_mul, nop)
    x, y = torch.randn(3), torch.randn(3)
    for _ in range(3):
        cf(x, y)
    assert cf.recompile_reasons == [] and len(cf.entries) == 1


def test_synthetic_base_layout():
    """Aliased inputs, one mutated, merged into a synthetic base: another offset of the
    second view within the base recompiles, and the reason says so."""

    def f(a, b):
        a.add_(1)
        return b * 1

    def views(lo):
        def make():
            base = torch.randn(6)
            return base[:3], base[lo:lo + 3]

        return make

    cf = _two_calls(f, views(1), views(2))
    m = _only_reason(cf)
    assert m.kind == "aliasing" and "synthetic base" in m.what


def test_symint_input_of_a_dynamic_entry():
    def f(x, n):
        return x * n

    cf = _two_calls(f, lambda: (torch.randn(3, requires_grad=True), 3),
                    lambda: (torch.randn(3, requires_grad=True), 2.5), dynamic=True)
    m = _only_reason(cf)
    assert (m.kind, m.what, m.old, m.new) == ("symint", "argument leaf 1", "an int", "a float")
