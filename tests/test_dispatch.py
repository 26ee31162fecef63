"""The positional-only fast path of AotFunction (dispatch.py + EntryGuard.fast_call)."""

from __future__ import annotations

import torch

import aotgrad
from aotgrad.compilers import nop
from aotgrad.core.frontend import MISS


def _counting():
    graphs = []

    def compiler(gm, example_inputs):
        graphs.append(gm)
        return gm

    return compiler, graphs


def test_duplicated_input_through_the_fast_path():
    def f(a, b, c):
        return a * 2 + b * 3 + c

    fw, graphs = _counting()
    cf = aotgrad.aot_function(f, fw, nop, inference_compiler=fw)
    x, y = torch.randn(3), torch.randn(3)
    for _ in range(3):
        torch.testing.assert_close(cf(x, y, x), f(x, y, x))
    assert len(graphs) == 1 and len(cf.entries) == 1
    # not the same object any more: another entry, right values
    torch.testing.assert_close(cf(x, y, x.clone()), f(x, y, x))
    assert len(cf.entries) == 2
    torch.testing.assert_close(cf(y, x, y), f(y, x, y))  # the first entry again
    assert len(cf.entries) == 2


def test_several_flat_entries_each_hit_without_recompiling():
    cf = aotgrad.aot_function(lambda x: x.sin() * 2, nop)
    xs = [torch.randn(2), torch.randn(3, 2), torch.randn(4, dtype=torch.float64)]
    for x in xs:
        cf(x)
    assert len(cf.entries) == 3
    for _ in range(2):
        for x in xs:
            torch.testing.assert_close(cf(x), x.sin() * 2)
    assert len(cf.entries) == 3


def test_fast_path_misses_on_grad_mode_arity_and_non_tensor():
    def f(*xs):
        return sum(x * 2 for x in xs)

    cf = aotgrad.aot_function(f, nop)
    x = torch.randn(2, requires_grad=True)
    assert cf(x).requires_grad
    entry = cf.entries[0]
    fast = entry.guard.fast_call(entry.run_flat)
    assert fast((x,)) is not MISS
    assert fast((x, x)) is MISS  # wrong arity: TensorGuards raises, the fast path misses
    assert fast((1.0,)) is MISS
    with torch.no_grad():
        assert fast((x,)) is MISS
        assert not cf(x).requires_grad
    assert cf(x, x).requires_grad  # another arity compiles another entry
    assert len(cf.entries) == 3


def test_mutated_input_leafness_and_storage_are_rechecked():
    def f(a, b):
        a.add_(1)
        return a * b

    cf = aotgrad.aot_function(f, nop)
    a, b = torch.zeros(3), torch.ones(3)
    cf(a, b)
    cf(a, b)
    assert torch.equal(a, torch.full((3,), 2.0))
    assert len(cf.entries) == 1
    # the mutated input now aliases the other one: the entry may not be reused
    base = torch.zeros(3)
    out = cf(base, base)
    ref_base = torch.zeros(3)
    ref = f(ref_base, ref_base)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(base, ref_base)
    assert len(cf.entries) == 2
    # the mutated input is a view (its storage has other holders): the O(n) storage check
    # runs, and passes for views of unrelated bases
    n = len(cf.entries)
    for _ in range(3):
        big = torch.zeros(6)
        cf(big[:3], b)
        assert torch.equal(big, torch.tensor([1.0, 1, 1, 0, 0, 0]))
    assert len(cf.entries) == n + 1


def test_duplicated_input_through_the_pytree_path():
    def f(a, b, *, c, scale):
        return a * scale + b + c

    cf = aotgrad.aot_function(f, nop)
    x, y = torch.randn(3), torch.randn(3)
    for _ in range(3):
        torch.testing.assert_close(cf(x, y, c=x, scale=2.0), f(x, y, c=x, scale=2.0))
    assert len(cf.entries) == 1
    torch.testing.assert_close(cf(x, y, c=x.clone(), scale=2.0), f(x, y, c=x, scale=2.0))
    assert len(cf.entries) == 2
