"""A custom autograd.Function whose backward changes a forward input in place (found by
torch's test_aotdispatch ``test_backward_mutation_*``). Eager's backward writes into the
caller's tensor; the compiled backward returns the input's new value and the runtime
writes it in after the compiled backward. A change of size or stride in the backward, an
input the forward changes too, and ``create_graph=True`` are refused with a clear error."""

from __future__ import annotations

import pytest
import torch

import aotgrad
from aotgrad.compilers import nop
from aotgrad.errors import AotgradCompileError


class ScaleSavedInBackward(torch.autograd.Function):
    """out = a * b; its backward doubles the saved ``b`` in place."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        (b,) = ctx.saved_tensors
        grad_a = g * b
        b.mul_(2)
        return grad_a, g.clone()


class WriteViewInBackward(torch.autograd.Function):
    """Saves a view (row 0) of ``b`` and adds 1 to it in its backward."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(b[0])
        return a * 2

    @staticmethod
    def backward(ctx, g):
        (row,) = ctx.saved_tensors
        row.add_(1)
        return g * 2, None


class TransposeInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(b)
        return a.clone(), b.clone()

    @staticmethod
    def backward(ctx, ga, gb):
        (b,) = ctx.saved_tensors
        b.transpose_(1, 0)
        return ga.clone(), gb.clone()


def scale(a, b):
    return ScaleSavedInBackward.apply(a, b).sin()


def scale_then_more(a, b):
    return ScaleSavedInBackward.apply(a, b).sum() + (b * 3).sum()


def write_view(a, b):
    return WriteViewInBackward.apply(a, b) + 1


def _inputs(kind):
    torch.manual_seed(0)
    a = torch.randn(3, 3, requires_grad=True)
    if kind == "plain":
        b = torch.randn(3, 3)
    elif kind == "leaf":
        b = torch.randn(3, 3, requires_grad=True)
    else:  # a non-leaf that requires grad
        b = torch.randn(3, 3, requires_grad=True) * 1
    return a, b


def _run(fn, kind, backwards=1):
    a, b = _inputs(kind)
    out = fn(a, b)
    before = b.detach().clone()
    error = None
    for k in range(backwards):
        try:
            out.sum().backward(retain_graph=k + 1 < backwards)
        except RuntimeError:  # a second backward reads the saved, since changed b: eager raises
            error = True
    leaf_b = b if b.is_leaf else None
    return out.detach(), before, b.detach().clone(), a.grad, None if leaf_b is None else leaf_b.grad, error


@pytest.mark.parametrize("backwards", [1, 2])
@pytest.mark.parametrize("kind", ["plain", "leaf", "non_leaf"])
@pytest.mark.parametrize("fn", [scale, scale_then_more, write_view], ids=lambda f: f.__name__)
def test_backward_writes_into_the_callers_input_as_eager(fn, kind, backwards):
    eager = _run(fn, kind, backwards)
    compiled = _run(aotgrad.aot_function(fn, nop), kind, backwards)
    assert eager[-1] == compiled[-1], f"backward error: eager {eager[-1]}, compiled {compiled[-1]}"
    for what, e, c in zip(["output", "b before backward", "b after backward", "a.grad", "b.grad"], eager, compiled):
        assert (e is None) == (c is None), what
        if e is not None:
            torch.testing.assert_close(c, e, msg=lambda m: f"{what}: {m}")
    assert not torch.equal(eager[1], eager[2])  # the backward did change b


def test_signature_names_the_input_the_backward_mutates():
    compiled = aotgrad.aot_function(scale, nop)
    a, b = _inputs("plain")
    compiled(a, b).sum().backward()
    (entry,) = compiled.entries
    assert entry.signature.backward_mutated_inputs == (1,)
    assert "mutated by the backward" in repr(entry.signature)


def test_metadata_mutation_in_backward_is_refused_in_torchs_words():
    def f(a, b):
        x, y = TransposeInBackward.apply(a, b)
        return x * y

    a, b = _inputs("plain")
    with pytest.raises(AssertionError, match="metadata mutated in the backward") as info:
        aotgrad.aot_function(f, nop)(a, b)
    assert isinstance(info.value, AotgradCompileError)
    assert a.grad is None and b.stride() == (3, 1)


def test_input_mutated_by_forward_and_backward_is_refused():
    def f(a, b):
        b.add_(1)
        return ScaleSavedInBackward.apply(a, b)

    a, b = _inputs("plain")
    before = b.clone()
    with pytest.raises(AotgradCompileError, match="forward and again by the backward"):
        aotgrad.aot_function(f, nop)(a, b)
    assert torch.equal(b, before)


def test_create_graph_backward_with_a_backward_mutation_raises():
    a, b = _inputs("plain")
    out = aotgrad.aot_function(scale, nop)(a, b)
    with pytest.raises(RuntimeError, match="create_graph=True"):
        torch.autograd.grad(out.sum(), a, create_graph=True)


def test_export_of_a_joint_with_a_backward_mutation_is_refused():
    def f(a, b):
        return (ScaleSavedInBackward.apply(a, b).sum(),)

    a, b = _inputs("plain")
    with pytest.raises(AotgradCompileError, match="backward changes inputs"):
        aotgrad.aot_export_joint_simple(f, [a, b], trace_joint=True)
