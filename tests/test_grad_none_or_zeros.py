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


#: views a program takes under no_grad of a tensor requiring grad: they require grad and
#: have no grad_fn, so eager's autograd graph of what is computed from them stops there
NO_GRAD_VIEWS = {
    "split": lambda t: t.split(1, 0)[0][0],
    "chunk": lambda t: t.chunk(2, 0)[1],
    "unbind": lambda t: t.unbind(0)[1],
    "select": lambda t: t[0],
    "slice": lambda t: t[1:],
    "narrow": lambda t: t.narrow(1, 1, 2),
    "view": lambda t: t.view(-1),
    "transpose": lambda t: t.t(),
    "unsqueeze": lambda t: t.unsqueeze(0),
    "diagonal": lambda t: t.diagonal(),
    "expand": lambda t: t[:1].expand(3, 3),
    "as_strided": lambda t: t.as_strided((2,), (2,), 1),
    "detach": lambda t: t.detach(),
}

#: in-place writes autograd records into a non-leaf input
WRITES = {
    "relu_": lambda a: a.relu_(),
    "mul_": lambda a: a.mul_(2),
    "setitem": lambda a: a.__setitem__(0, a[1] * 2),
    "copy_": lambda a: a.copy_(a.flip(0)),
}


@pytest.mark.parametrize("view", sorted(NO_GRAD_VIEWS))
@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("when", ["after_write", "before_write"])
def test_no_grad_view_of_written_input_cuts_the_gradient(view, write, when):
    """``a.relu_(); with no_grad: v = a[0]; return v.cos()``: eager's graph of the output
    stops at the no_grad view, so the input's gradient is None; functionalization
    regenerates the view from the written value in the traced forward, whose data flow
    reaches the input (was zeros, fuzz seed 4006405). Also through a view taken before the
    write, and ``detach()``."""

    def f(a):
        if when == "after_write":
            WRITES[write](a)
        with torch.no_grad():
            v = NO_GRAD_VIEWS[view](a)
        if when == "before_write":
            WRITES[write](a)
        return (v.cos(),)

    check(f, lambda: (torch.randn(3, 3, requires_grad=True).clone(),))


@pytest.mark.parametrize("view", sorted(NO_GRAD_VIEWS))
@pytest.mark.parametrize("outputs_used", [(0,), (1,), (0, 1)])
def test_no_grad_view_beside_a_recorded_use(view, outputs_used):
    """Backward from a subset of the outputs, one computed from a no_grad view of the
    written input (no gradient of the input from it in eager), one from the input itself."""

    def f(a, b):
        a.mul_(2)
        with torch.no_grad():
            v = NO_GRAD_VIEWS[view](a)
        return (v * b).sum(), a.sin().sum() * b

    def grads(fn):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(3, 3, generator=gen, requires_grad=True)
        y = torch.randn((), generator=gen, requires_grad=True)
        outs = fn(x * 1, y)
        torch.autograd.backward([outs[k] for k in outputs_used], [torch.ones_like(outs[k]) for k in outputs_used])
        return x.grad, y.grad

    for e, c in zip(grads(f), grads(aotgrad.aot_function(f, nop))):
        assert (e is None) == (c is None), (e, c)
        if e is not None:
            torch.testing.assert_close(c, e)
