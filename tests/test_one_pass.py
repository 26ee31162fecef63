"""The inference graph traced in the analysis run itself (pipeline._one_pass,
tracing.analyze_tracing_inference) is the graph the separate trace makes, with the same
metadata, and the compiled function behaves as eager: outputs, aliasing, input mutations."""

import pytest
import torch
from torch import nn

import aotgrad
from aotgrad.compilers import nop
from aotgrad.core import pipeline


def bn_block(w, rm, rv, x):
    y = torch.nn.functional.batch_norm(x, rm, rv, w, None, training=True)
    return y.relu(), y.view(-1)[:3]


def views_of_intermediate(a, b):
    t = a * b
    return t.t(), t[0], t.sum()


def aliases_input(a, b):
    b.add_(1)
    return a.view(-1), a + b, b


def mutates_through_view(a, b):
    a[0].mul_(2)
    return (a * b).sum(), a


def returns_constants(a, b):
    return a.shape[0], (a @ b).relu(), None


def dropout_train(a, b):
    return torch.nn.functional.dropout(a * b, 0.3, training=True)


PROGRAMS = {
    "batch_norm running stats": (bn_block, lambda: [torch.randn(4, requires_grad=True), torch.zeros(4),
                                                    torch.ones(4), torch.randn(2, 4, 3, 3)]),
    "views of an intermediate": (views_of_intermediate, lambda: [torch.randn(3, 4), torch.randn(3, 4)]),
    "output aliasing an input, mutated input": (aliases_input, lambda: [torch.randn(3, 4), torch.randn(3, 4)]),
    "write through a view of an input": (mutates_through_view, lambda: [torch.randn(3, 4), torch.randn(3, 4)]),
    "non-tensor outputs": (returns_constants, lambda: [torch.randn(3, 4), torch.randn(4, 2)]),
    "random op": (dropout_train, lambda: [torch.randn(3, 4), torch.randn(3, 4)]),
}


def _compile(fn, args, monkeypatch, one_pass):
    used = []
    real = pipeline.analyze_tracing_inference

    def spy(*a, **k):
        analysis, gm = real(*a, **k)
        used.append(gm is not None)
        return analysis, gm

    monkeypatch.setattr(pipeline, "analyze_tracing_inference", spy)
    if not one_pass:
        monkeypatch.setattr(pipeline, "_one_pass", lambda *a: False)
    compiled = aotgrad.aot_function(fn, nop, cache=False)
    torch.manual_seed(0)
    with torch.no_grad():
        out = compiled(*args)
    monkeypatch.undo()
    return compiled.entries[0], out, used


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_one_pass_graph_is_the_separate_trace(name, monkeypatch):
    fn, make = PROGRAMS[name]
    one_args = make()
    two_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in one_args]
    eager_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in one_args]
    one, one_out, used = _compile(fn, one_args, monkeypatch, one_pass=True)
    assert used == [True]
    two, two_out, unused = _compile(fn, two_args, monkeypatch, one_pass=False)
    assert unused == []
    assert not one.training and not two.training
    assert one.graphs["inference"].code == two.graphs["inference"].code
    assert repr(one.metadata) == repr(two.metadata) and repr(one.signature) == repr(two.signature)
    torch.manual_seed(0)
    with torch.no_grad():
        eager_out = fn(*eager_args)
    torch.testing.assert_close(one_out, eager_out, rtol=0, atol=0)
    torch.testing.assert_close(two_out, eager_out, rtol=0, atol=0)
    torch.testing.assert_close(one_args, eager_args, rtol=0, atol=0)  # input mutations
    flat_one = [t for t in torch.utils._pytree.tree_leaves(one_out) if isinstance(t, torch.Tensor)]
    flat_eager = [t for t in torch.utils._pytree.tree_leaves(eager_out) if isinstance(t, torch.Tensor)]
    for a, b in zip(flat_one, flat_eager, strict=True):  # aliasing as in eager
        assert a._is_view() == b._is_view() and a.stride() == b.stride()
        assert next((k for k, x in enumerate(one_args) if a._base is x), None) == next(
            (k for k, x in enumerate(eager_args) if b._base is x), None
        )


def test_one_pass_not_used_where_the_entry_trains_or_inputs_are_views(monkeypatch):
    calls = []
    real = pipeline.analyze_tracing_inference
    monkeypatch.setattr(pipeline, "analyze_tracing_inference", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = torch.randn(3, 4, requires_grad=True)
    f = aotgrad.aot_function(lambda a: (a * 2).sum(), nop, cache=False)
    f(x).backward()  # training: one analysis, then the joint
    with torch.no_grad():
        f(torch.randn(6, 4)[::2])  # a view input: the separate trace
    assert calls == []
    with torch.no_grad():
        f(torch.randn(5, 4))
    assert calls == [1]


def test_program_enabling_grad_under_no_grad_falls_back_to_training(monkeypatch):
    def fn(w, x):
        with torch.enable_grad():
            return (w * x).sum()

    w = torch.randn(3, requires_grad=True)
    compiled = aotgrad.aot_function(fn, nop, cache=False)
    with torch.no_grad():
        out = compiled(w, torch.randn(3))
    assert compiled.entries[0].training and out.requires_grad
    out.backward()
    assert w.grad is not None


def test_module_under_no_grad_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    eager = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    eager.load_state_dict(model.state_dict())
    compiled = aotgrad.aot_module(model, nop)
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), eager(x), rtol=0, atol=0)
    torch.testing.assert_close(model.state_dict(), eager.state_dict(), rtol=0, atol=0)
