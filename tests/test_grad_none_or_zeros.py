"""An input's gradient is None exactly where eager's is (``BackwardSpec.grad_tangent_deps``):
autograd passes None for an output the backward does not reach, and a gradient made only
from such tangents is None; one that eager's backward reaches from another output is a
tensor, zeros where the formula's value reads no incoming gradient (``pow(x, 0)``)."""

from __future__ import annotations

import pytest
import torch
from eager_compare import check

import aotgrad
from aotgrad.compilers import nop


ZERO_GRAD = {
    "pow0": lambda t: t.pow(0),
    "split_pow0": lambda t: t.split(1, 1)[0].pow(0),
    "ones_like_plus": lambda t: t.pow(0) * 3,
}


@pytest.mark.parametrize("zero", sorted(ZERO_GRAD))
@pytest.mark.parametrize("write", ["setitem", "mul_", "none"])
def test_written_input_reached_only_through_a_zero_gradient(write, zero):
    """``a[1:] = a.sum(0); return a.pow(0)`` on a non-leaf input: the backward graph's
    gradient of ``a`` reads only the tangent of its write back (None: the caller does not
    backprop through ``a``); eager's reaches ``a`` from the output with zeros (was None,
    fuzz seed 2015710)."""

    def f(a):
        if write == "setitem":
            a[1:] = a.sum(0)
        elif write == "mul_":
            a.mul_(2)
        return (ZERO_GRAD[zero](a),)

    check(f, lambda: (torch.randn(1, 3, requires_grad=True).clone().t(),))


def _grads(fn, outputs_used):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, generator=gen, requires_grad=True)
    y = torch.randn(3, 2, generator=gen, requires_grad=True)
    outs = fn(x * 1, y)
    torch.autograd.backward([outs[k] for k in outputs_used], [torch.ones_like(outs[k]) for k in outputs_used])
    return x.grad, y.grad


@pytest.mark.parametrize("outputs_used", [(0,), (1,), (0, 1)])
def test_backward_from_some_outputs(outputs_used):
    """Backward from a subset of the outputs: a gradient reached only from unused ones is
    None, one reached from a used output through a zero-gradient formula is zeros, one cut
    by ``detach()`` is None (as eager's)."""

    def f(a, b):
        a.mul_(2)
        return a.pow(0) + b.detach(), b * a.detach()

    compiled = aotgrad.aot_function(f, nop)
    for e, c in zip(_grads(f, outputs_used), _grads(compiled, outputs_used)):
        assert (e is None) == (c is None), (e, c)
        if e is not None:
            torch.testing.assert_close(c, e)


@pytest.mark.parametrize("outputs_used", [(0,), (1,), (0, 1)])
def test_backward_from_some_outputs_through_a_no_grad_region(outputs_used):
    def f(a, b):
        a.mul_(2)
        with torch.no_grad():
            c = a * 1
        return c + b, a.pow(0) * b

    compiled = aotgrad.aot_function(f, nop)
    for e, c in zip(_grads(f, outputs_used), _grads(compiled, outputs_used)):
        assert (e is None) == (c is None), (e, c)
        if e is not None:
            torch.testing.assert_close(c, e)
