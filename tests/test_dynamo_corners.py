"""Programs torch's AOT Autograd is handed by Dynamo in the field (issue 11): autocast regions,
random in-place ops on inputs, saved-tensor hooks, custom autograd.Functions. Each runs
eagerly and through aotgrad (directly and under torch.compile) and is compared."""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import aotgrad
from aotgrad.compilers import nop


def rg(*shape):
    return torch.randn(*shape, requires_grad=True)


def _pair(*shapes):
    torch.manual_seed(0)
    a = [rg(*s) for s in shapes]
    return a, [t.detach().clone().requires_grad_() for t in a]


def _autocast_mm(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = (x @ w).relu()
    return y.float().sum() + (x * 2).sum()


@pytest.mark.parametrize("path", ["aot_function", "torch_compile"])
def test_autocast_region_forward_and_backward(path):
    (x, w), (xr, wr) = _pair((4, 8), (8, 3))
    if path == "aot_function":
        compiled = aotgrad.aot_function(_autocast_mm, nop)
    else:
        torch._dynamo.reset()
        compiled = torch.compile(_autocast_mm, backend="aotgrad" if "aotgrad" in torch._dynamo.list_backends()
                                 else aotgrad.backend())
    out, ref = compiled(x, w), _autocast_mm(xr, wr)
    torch.testing.assert_close(out, ref)
    out.backward()
    ref.backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)
    assert w.grad.dtype == torch.float32
    torch._dynamo.reset()


def test_rrelu_in_place_on_an_input_draws_eagers_noise():
    def f(x):
        y = F.rrelu(x, training=True, inplace=True)
        return y * 2

    cf = aotgrad.aot_function(f, nop)
    for _ in range(2):
        x = torch.randn(64)
        xr = x.clone()
        torch.manual_seed(3)
        out = cf(x)
        state = torch.get_rng_state()
        torch.manual_seed(3)
        ref = f(xr)
        assert torch.equal(state, torch.get_rng_state())
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(x, xr)  # the input mutated as in eager


class _ReturnsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_custom_function_whose_forward_returns_its_input():
    def f(x):
        return _ReturnsInput.apply(x) * 3

    (x,), (xr,) = _pair((3,))
    out, ref = aotgrad.aot_function(f, nop)(x), f(xr)
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)


def test_saved_tensor_hooks_see_the_saved_tensors_and_gradients_match():
    def f(x):
        return (x.sin() * x.cos()).sum()

    (x,), (xr,) = _pair((5,))
    packed = {"eager": 0, "aotgrad": 0}

    def run(side, fn, t):
        def pack(s):
            packed[side] += 1
            return s.clone()  # a copy: what the graph unpacks must be the tensor's value

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda s: s):
            fn(t).backward()

    run("eager", f, xr)
    run("aotgrad", aotgrad.aot_function(f, nop), x)
    torch.testing.assert_close(x.grad, xr.grad)
    assert packed["eager"] > 0 and packed["aotgrad"] > 0


class _MutatesInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, buf):
        ctx.save_for_backward(buf)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (buf,) = ctx.saved_tensors
        buf.add_(1)
        return g * 2, None


def test_backward_that_mutates_a_forward_input_writes_it_back_as_eager():
    """The Function's backward adds 1 to the saved buffer: after the compiled backward the
    caller's buffer holds what eager's does (tests/test_backward_mutations.py has more)."""
    f = lambda x, b: _MutatesInBackward.apply(x, b).sum()  # noqa: E731
    (x, xr), buf, buf_ref = _pair((3,)), torch.zeros(3), torch.zeros(3)
    cf = aotgrad.aot_function(f, nop)
    out, ref = cf(x[0], buf), f(xr[0], buf_ref)
    assert torch.equal(buf, torch.zeros(3))  # the forward leaves it alone
    out.backward()
    ref.backward()
    torch.testing.assert_close(buf, buf_ref)
    torch.testing.assert_close(x[0].grad, xr[0].grad)


def test_module_with_autocast_and_dropout_under_torch_compile():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 2))
    ref = copy.deepcopy(m)

    def step(model, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x).float().sum()

    torch._dynamo.reset()
    cm = torch.compile(m, backend=aotgrad.backend())
    x = torch.randn(4, 8)
    torch.manual_seed(5)
    out = step(cm, x)
    torch.manual_seed(5)
    e = step(ref, x)
    torch.testing.assert_close(out, e)
    out.backward()
    e.backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    torch._dynamo.reset()


def test_fake_tensor_read_from_outside_the_inputs_is_refused_at_compile_time():
    """A module that reads a fake tensor it does not take as an input (a closure, or an
    attribute of a GraphModule built on fake tensors) cannot be compiled into a graph a real
    call can run: refused when compiling, before anything runs (torch refuses it too)."""
    fake_mode = torch._subclasses.fake_tensor.FakeTensorMode()
    outside = fake_mode.from_tensor(torch.randn(4))

    class ReadsOutside(torch.nn.Module):
        def forward(self, x):
            return (x * outside,)

    example = fake_mode.from_tensor(torch.randn(4, requires_grad=True))
    compiled = aotgrad.aot_module_simplified(ReadsOutside(), (example,), nop)
    x = torch.ones(4, requires_grad=True)
    with pytest.raises(aotgrad.AotgradCompileError, match="reads a fake tensor that is not one of its inputs"):
        compiled(x)
    assert torch.equal(x, torch.ones(4)) and x.grad is None
    with pytest.raises(aotgrad.AotgradCompileError, match="fake tensor"):
        aotgrad.aot_function(lambda t: t + outside, nop)(torch.ones(4))


def test_fake_example_inputs_still_compile_and_match_eager():
    """The refusal is about fake *constants*: fake example inputs (what Dynamo hands over)
    compile as before."""
    fake_mode = torch._subclasses.fake_tensor.FakeTensorMode()
    lin = torch.nn.Linear(4, 2)
    compiled = aotgrad.aot_module_simplified(lin, (fake_mode.from_tensor(torch.randn(3, 4)),), nop)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), lin(x))


class _HalvesGradReturnsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 0.5


@pytest.mark.parametrize("view_after", [False, True])
@pytest.mark.parametrize("grad_mode", [True, False])
def test_custom_function_returning_its_input_as_the_program_output(grad_mode, view_after):
    """The Function's output *is* the program's output: eager's is a view of the input whose
    grad_fn is the Function's backward, so the gradient is halved. aotgrad returned it as a
    plain view of the input rebuilt outside the graph, bypassing that backward (the gradient
    came back 1, not 0.5)."""

    def f(x):
        out = _HalvesGradReturnsInput.apply(x)
        return out.view(-1) if view_after else out  # a view of it: no gradient reached x at all

    compiled = aotgrad.aot_function(f, nop)
    seen = []
    for fn in (f, compiled):
        leaf = torch.ones(2, 2, requires_grad=True)
        x = leaf * 1
        with torch.set_grad_enabled(grad_mode):
            out = fn(x)
        seen.append((out._base is x, out.requires_grad, out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()))
        if out.requires_grad:
            (out * 3).sum().backward()
            seen.append(leaf.grad)
        with torch.no_grad():
            out.mul_(2)  # a write through the output reaches the input, as in eager
        seen.append(x.detach().clone())
    half = len(seen) // 2
    for a, b in zip(seen[:half], seen[half:]):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(b, a)
        else:
            assert a == b
