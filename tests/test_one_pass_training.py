"""The joint graph traced in the analysis run itself (pipeline._one_pass_training,
tracing.analyze_tracing_joint) is the joint the two-run path makes (the analysis, then
tracing.trace_joint): the same metadata, signature, tangent reach and graph, node by node
with its metadata (joint_one_pass_check). Where the joint's forward would differ from the
run (an input requiring grad changed in place, a metadata mutation, detach_(), a new
leaf, a saved tensor changed afterwards, a write into a view, as_strided), the joint is traced as usual. Either way the
compiled function behaves as eager (eager_compare.check)."""

import os
import sys

import pytest
import torch

import aotgrad
import joint_one_pass_check
from aotgrad.compilers import nop
from aotgrad.core import pipeline
from eager_compare import check
from test_double_backward import _Square as Square

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
from compile_time import functional, make_model  # noqa: E402  (bench/compile_time.py's models)


def mlp(x, w1, w2):
    return (x @ w1).relu() @ w2


def no_grad_region(x, w):
    with torch.no_grad():
        s = (x * w).sum()
    return w * s, (w.detach() * 2).exp()


def enable_grad_inside_no_grad(x, w):
    with torch.no_grad():
        with torch.enable_grad():
            y = w.sin()
        z = w.cos()
    return y + z


def buffer_stats(w, rm, rv, x):
    y = torch.nn.functional.batch_norm(x, rm, rv, w, None, training=True)
    return y.relu().sum(), y.view(-1)[:3]


def views_of_intermediate(a, b):
    t = a * b
    return t.t(), t[0], t.sum()


def view_of_input(a, b):
    return a.view(-1), a[1:], (a.view(-1) * b).sum()


def outputs_without_grad(a, b):
    return a.shape[0], (a @ b).relu(), a.detach() + 1, None, (a > 0)


def dropout_and_random(a, b):
    return torch.nn.functional.dropout(a * b, 0.3, training=True) + torch.rand_like(a)


def custom_function(a, b):
    return Square.apply(a * b).sum(), Square.apply(b)


def intermediate_written(a, b):
    t = a * b
    t.add_(1)
    return t.exp()


def intermediate_written_through_view(a, b):
    t = a * b
    t[0].mul_(2)
    return t.exp()


def write_inside_an_op(a, b):
    return torch.nn.functional.pad((a * b).view(1, 1, -1), (2, 2), mode="circular").sin()


def as_strided_of_intermediate(a, b):
    t = a * b
    return t.as_strided((2,), (2,), 1).exp()


def input_requiring_no_grad_written(w, x):
    x.mul_(2)
    return (w * x).sum(), x


def output_is_input(a, b):
    return a, b, a * b


def int_and_float_inputs(a, n: int, f: float):
    return a * n + f


def leaf_written_under_no_grad(a, b):
    with torch.no_grad():
        a.mul_(2)
    return (a * b).sum()


def new_leaf_returned(a):
    t = torch.ones(3).requires_grad_()
    return t, (a * t).sum()


def G(*shape):
    return torch.randn(*shape, requires_grad=True)


# (program, inputs, whether the joint is traced in the analysis run)
PROGRAMS = {
    "mlp": (mlp, lambda: [torch.randn(4, 5), G(5, 6), G(6, 3)], True),
    "no_grad region and detach()": (no_grad_region, lambda: [torch.randn(3), G(3)], True),
    "enable_grad inside no_grad": (enable_grad_inside_no_grad, lambda: [torch.randn(3), G(3)], True),
    "batch norm running stats": (buffer_stats, lambda: [G(4), torch.zeros(4), torch.ones(4), torch.randn(2, 4, 3, 3)], True),
    "views of an intermediate": (views_of_intermediate, lambda: [G(3, 4), torch.randn(3, 4)], True),
    "views of an input": (view_of_input, lambda: [G(3, 4), torch.randn(12)], True),
    "outputs without grad": (outputs_without_grad, lambda: [G(3, 4), G(4, 2)], True),
    "custom autograd.Function": (custom_function, lambda: [G(3), G(3)], True),
    "intermediate written in place": (intermediate_written, lambda: [G(3, 4), torch.randn(3, 4)], True),
    "input requiring no grad written": (input_requiring_no_grad_written, lambda: [G(3), torch.randn(3)], True),
    "outputs are inputs": (output_is_input, lambda: [G(3), torch.randn(3)], True),
    "int and float inputs": (int_and_float_inputs, lambda: [G(3), 3, 0.5], True),
    "new leaf used, not returned": (lambda a: (a * torch.ones(3).requires_grad_()).sum(), lambda: [G(3)], True),
    # the joint's forward differs from the run: traced as usual
    "input requiring grad written": (leaf_written_under_no_grad, lambda: [G(3), torch.randn(3)], False),
    "metadata mutation": (lambda a, b: (b.t_(), a * b.sum())[1], lambda: [G(3), torch.randn(2, 3)], False),
    "detach_ of an intermediate": (lambda a: ((t := a * 2).detach_(), a.sin() + t)[1], lambda: [G(3)], False),
    "new leaf returned": (new_leaf_returned, lambda: [G(3)], False),
    "write through a view of an intermediate": (intermediate_written_through_view, lambda: [G(3, 4), torch.randn(3, 4)], False),
    "write inside an op (circular pad)": (write_inside_an_op, lambda: [G(5), torch.randn(5)], False),
    "as_strided": (as_strided_of_intermediate, lambda: [G(5), torch.randn(5)], False),
    "saved tensor changed afterwards": (lambda a: ((t := a.exp()), t.add_(1))[0], lambda: [G(3)], False),
}


@pytest.fixture
def joints(monkeypatch):
    """Compares every joint traced in the analysis run with the two-run path's; returns the
    list of whether each training compile traced its joint in the analysis run."""
    used: list[bool] = []
    checked = joint_one_pass_check.checking(pipeline.analyze_tracing_joint)

    def spy(*args, **kwargs):
        analysis, joint = checked(*args, **kwargs)
        used.append(joint is not None)
        return analysis, joint

    monkeypatch.setattr(pipeline, "analyze_tracing_joint", spy)
    return used


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_joint_traced_in_analysis_run_is_the_two_run_joint(name, joints):
    fn, make, one_run = PROGRAMS[name]
    torch.manual_seed(0)
    check(fn, make, compiled=aotgrad.aot_function(fn, nop, cache=False))
    assert joints and all(used == one_run for used in joints), joints


def test_random_ops(joints):
    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4)
    ea = a.detach().clone().requires_grad_()
    compiled = aotgrad.aot_function(dropout_and_random, nop, cache=False)
    torch.manual_seed(1)
    out = compiled(a, b)
    out.sum().backward()
    torch.manual_seed(1)
    eager_out = dropout_and_random(ea, b)
    eager_out.sum().backward()
    assert joints == [True]
    torch.testing.assert_close(out, eager_out, rtol=0, atol=0)
    torch.testing.assert_close(a.grad, ea.grad, rtol=0, atol=0)


@pytest.mark.parametrize("model_name", ["mlp8", "transformer", "resnet"])
def test_bench_models(model_name, joints):
    model, x = make_model(model_name)
    f, values = functional(model)
    eager_values = [v.detach().clone().requires_grad_(v.requires_grad) for v in values]
    compiled = aotgrad.aot_function(f, nop, cache=False)
    out = compiled(*values, x)
    out.sum().backward()
    eager_out = f(*eager_values, x)
    eager_out.sum().backward()
    assert joints == [True]
    torch.testing.assert_close(out, eager_out)
    for v, e in zip(values, eager_values, strict=True):
        torch.testing.assert_close(v, e)  # running stats written back
        torch.testing.assert_close(v.grad, e.grad)


def test_not_used_under_no_grad_decompositions_or_source_lines(joints):
    x = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        aotgrad.aot_function(lambda a: a.sin(), nop, cache=False)(x)
    aotgrad.aot_function(lambda a: a.sin(), nop, cache=False, decompositions={})(torch.randn(3))  # nothing requires grad
    assert joints == []
    f = aotgrad.aot_function(lambda a: a.sin() * 2, nop, cache=False)
    f(torch.randn(6, requires_grad=True)[::2])  # a view input (no leaf): the two-run path
    assert joints == []
