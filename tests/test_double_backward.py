"""Higher-order gradients through compiled functions match eager (issue 13).

Each program is run eagerly and through aotgrad on identical inputs; gradients are taken
with ``create_graph=True`` and differentiated again (second and third order, with respect to
the inputs, the parameters and the ``grad_outputs``), and every value and requires_grad is
compared. Then the uses the issue names: a WGAN-GP gradient-penalty training loop, a
Hessian-vector product, a MAML inner step, a third derivative; the interactions (dropout,
input mutations, aliased outputs, retain_graph, no_grad regions, custom Functions); and the
combinations that are refused, with the message they raise.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn

import aotgrad
from aotgrad.backend import aotgrad_backend
from aotgrad.compilers import nop
from aotgrad.module import aot_module
from aotgrad.partition import min_cut_rematerialization_partition

D = torch.float64


def _close(a, b, what: str) -> None:
    if a is None or b is None:
        assert a is None and b is None, f"{what}: {a!r} vs {b!r}"
        return
    assert a.requires_grad == b.requires_grad, f"{what}: requires_grad {a.requires_grad} vs {b.requires_grad}"
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10, msg=lambda m: f"{what}: {m}")


def _orders(fn: Callable, make: Callable[[], list], seed: int = 0) -> list:
    """Output, first, second and third derivatives of ``fn`` on fresh inputs, every gradient
    taken with create_graph=True (the last one without), each a list of tensors or None."""
    xs = make()
    torch.manual_seed(seed)
    out = fn(*xs)
    outs = out if isinstance(out, tuple) else (out,)
    wrt = [x for x in xs if x.requires_grad]
    v = [torch.linspace(-1, 1, o.numel(), dtype=o.dtype).reshape(o.shape) for o in outs]
    g1 = torch.autograd.grad(outs, wrt, v, create_graph=True, allow_unused=True)
    s1 = sum((g * g).sum() + g.sin().sum() for g in g1 if g is not None)
    g2 = torch.autograd.grad(s1, wrt, create_graph=True, allow_unused=True)
    s2 = sum((g.cos() * torch.arange(g.numel(), dtype=g.dtype).reshape(g.shape)).sum() for g in g2 if g is not None)
    g3 = torch.autograd.grad(s2, wrt, allow_unused=True) if s2.requires_grad else [None] * len(wrt)
    return [list(outs), list(g1), list(g2), list(g3)]


def _compare(fn: Callable, make: Callable[[], list], compiled: Callable | None = None) -> None:
    e = _orders(fn, make)
    c = _orders(compiled or aotgrad.aot_function(fn, nop), make)
    for order, (ev, cv) in enumerate(zip(e, c, strict=True)):
        assert len(ev) == len(cv)
        for k, (a, b) in enumerate(zip(ev, cv, strict=True)):
            _close(a, b, f"order {order}, value {k}")


def _inputs(*shapes, grad=True):
    def make():
        torch.manual_seed(1)
        return [torch.randn(*s, dtype=D, requires_grad=grad) for s in shapes]

    return make


def _mlp_fn(x, w1, w2):
    return torch.tanh(x @ w1).mm(w2).sigmoid().sum()


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


def _no_grad_region(x, w):
    with torch.no_grad():
        scale = (x * w).sum()  # a constant, as eager sees it
    return (x * w).sin() * scale


def _detached(x, w):
    y = (x * w).exp()
    return y * y.detach()


def _softmin(x):
    return F.softmin(x, dim=0, dtype=D)


def _mish_layernorm(x, w):
    return F.layer_norm(F.mish(x * w), (x.shape[-1],))


def _inplace_intermediate(x, w):
    y = x * w
    y.sin_()
    y.mul_(x)
    return y


def _aliased_output(x, w):
    y = (x * w).exp()
    return y.t(), y[0]


def _custom_function(x, w):
    # the gradients need the Function's backward (twice differentiable), not its output
    return _Square.apply(x * w) * 3 + x.exp()


def _matmul_chain(x, w1, w2):
    return (x @ w1).relu().pow(2) @ w2


def _circular_pad(x, w):
    # functionalization's copy (no derivative formula) in the graph
    return F.pad((x * w).view(1, 1, -1), (2, 2), mode="circular").sin()


def _rfft(x, w):
    # a complex slice_scatter in the backward (autograd differentiates it in place only)
    return torch.fft.irfft(torch.fft.rfft(x * w).exp(), n=6)


PROGRAMS = {
    "circular_pad": (_circular_pad, _inputs((5,), (5,))),
    "rfft": (_rfft, _inputs((6,), (6,))),
    "mlp": (_mlp_fn, _inputs((4, 3), (3, 5), (5, 2))),
    "no_grad_region": (_no_grad_region, _inputs((3,), (3,))),
    "detach": (_detached, _inputs((3,), (3,))),
    "softmin_dtype": (_softmin, _inputs((4,))),
    "mish_layer_norm": (_mish_layernorm, _inputs((2, 3), (3,))),
    "inplace_on_intermediate": (_inplace_intermediate, _inputs((3,), (3,))),
    "aliased_outputs": (_aliased_output, _inputs((2, 3), (2, 3))),
    "custom_function": (_custom_function, _inputs((3,), (3,))),
    "matmul_relu": (_matmul_chain, _inputs((3, 4), (4, 4), (4, 2))),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_higher_orders_match_eager(name):
    fn, make = PROGRAMS[name]
    _compare(fn, make)


@pytest.mark.parametrize("name", ["mlp", "no_grad_region", "matmul_relu", "custom_function"])
def test_higher_orders_with_min_cut_partitioner(name):
    fn, make = PROGRAMS[name]
    _compare(fn, make, aotgrad.aot_function(fn, nop, partition_fn=min_cut_rematerialization_partition))


def test_first_order_call_builds_nothing():
    """A plain backward never traces the differentiable backward."""
    fn, make = PROGRAMS["mlp"]
    cf = aotgrad.aot_function(fn, nop)
    xs = make()
    cf(*xs).backward()
    spec = cf.entries[0].runtime.backward.differentiable
    assert spec is not None and spec.compiled is None
    xs = make()
    torch.autograd.grad(cf(*xs), xs, create_graph=True)
    assert spec.compiled is not None and len(spec.compiled.entries) == 1
    xs = make()
    torch.autograd.grad(cf(*xs), xs, create_graph=True)
    assert len(spec.compiled.entries) == 1, "the differentiable backward is cached"


def test_grad_of_grad_outputs():
    """Second derivative with respect to the tangent (grad_outputs) itself."""
    def run(fn):
        x = torch.linspace(-1, 1, 6, dtype=D).reshape(2, 3).requires_grad_()
        v = torch.linspace(0.5, 1, 6, dtype=D).reshape(2, 3).requires_grad_()
        (g,) = torch.autograd.grad(fn(x), x, v, create_graph=True)
        gx, gv = torch.autograd.grad((g * g).sum(), (x, v))
        return g, gx, gv

    fn = lambda x: (x.exp() * x).cumsum(1)
    for a, b in zip(run(fn), run(aotgrad.aot_function(fn, nop)), strict=True):
        _close(a, b, "grad wrt grad_outputs")


def test_backward_create_graph_then_grad_grad():
    """``loss.backward(create_graph=True)``: ``.grad`` requires grad and differentiates."""
    def run(fn):
        x = torch.linspace(-1, 1, 5, dtype=D).requires_grad_()
        fn(x).backward(create_graph=True)
        g = x.grad
        (gg,) = torch.autograd.grad(g.pow(2).sum(), x)
        return g, gg

    fn = lambda x: (x.sin() * x.exp()).sum()
    for a, b in zip(run(fn), run(aotgrad.aot_function(fn, nop)), strict=True):
        _close(a, b, "backward(create_graph=True)")


def test_third_order_of_scalar_function():
    fn = lambda x: (x.sin() * x.pow(3)).sum()
    cf = aotgrad.aot_function(fn, nop)
    for f in (fn,):
        x = torch.tensor([0.3, -1.2, 2.0], dtype=D, requires_grad=True)
        d1 = torch.autograd.grad(f(x), x, create_graph=True)[0]
        d2 = torch.autograd.grad(d1.sum(), x, create_graph=True)[0]
        d3 = torch.autograd.grad(d2.sum(), x)[0]
    y = torch.tensor([0.3, -1.2, 2.0], dtype=D, requires_grad=True)
    c1 = torch.autograd.grad(cf(y), y, create_graph=True)[0]
    c2 = torch.autograd.grad(c1.sum(), y, create_graph=True)[0]
    c3 = torch.autograd.grad(c2.sum(), y)[0]
    # d3/dx3 (x^3 sin x) = 6 sin x + 18 x cos x - 9 x^2 sin x - x^3 cos x
    x0 = y.detach()
    closed = 6 * x0.sin() + 18 * x0 * x0.cos() - 9 * x0**2 * x0.sin() - x0**3 * x0.cos()
    torch.testing.assert_close(d3, closed)
    torch.testing.assert_close(c3, closed)
    for a, b in ((d1, c1), (d2, c2)):
        _close(a, b, "lower order")


def test_hessian_vector_product_of_mlp_loss():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).double()
    compiled_model = copy.deepcopy(model)
    cm = aot_module(compiled_model, nop)
    x, y = torch.randn(16, 4, dtype=D), torch.randn(16, 1, dtype=D)
    vec = [torch.randn_like(p) for p in model.parameters()]

    def hvp(m, params):
        loss = F.mse_loss(m(x), y)
        grads = torch.autograd.grad(loss, params, create_graph=True)
        dot = sum((g * v).sum() for g, v in zip(grads, vec))
        return torch.autograd.grad(dot, params)

    eager = hvp(model, list(model.parameters()))
    ours = hvp(cm, list(compiled_model.parameters()))
    for a, b in zip(eager, ours, strict=True):
        _close(a, b, "hvp")
    # against autograd.functional's Hessian of the same loss, flattened
    names = [n for n, _ in model.named_parameters()]
    params = tuple(p.detach() for p in model.parameters())

    def loss_of(*ps):
        out = torch.func.functional_call(model, dict(zip(names, ps)), (x,))
        return F.mse_loss(out, y)

    flat = torch.cat([h.reshape(-1) for h in ours])
    hess = torch.autograd.functional.hessian(loss_of, params)
    sizes = [p.numel() for p in params]
    rows = [torch.cat([hess[i][j].reshape(sizes[i], sizes[j]) for j in range(len(params))], 1) for i in range(len(params))]
    full = torch.cat(rows, 0)
    torch.testing.assert_close(flat, full @ torch.cat([v.reshape(-1) for v in vec]))


def _maml_step(model_fn, params, x, y, inner_lr=0.1):
    loss = F.mse_loss(model_fn(params, x), y)
    grads = torch.autograd.grad(loss, params, create_graph=True)
    return [p - inner_lr * g for p, g in zip(params, grads)]


def test_maml_inner_step_through_aot_module():
    """Meta-gradient: the outer loss after one inner SGD step, differentiated with respect
    to the initial parameters (a second derivative through the inner step)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 6), nn.Softplus(), nn.Linear(6, 1)).double()
    cmodel = copy.deepcopy(model)
    cm = aot_module(cmodel, nop)
    xs, ys = torch.randn(8, 3, dtype=D), torch.randn(8, 1, dtype=D)
    xq, yq = torch.randn(8, 3, dtype=D), torch.randn(8, 1, dtype=D)
    names = [n for n, _ in model.named_parameters()]

    def meta_grads(m):
        params = list(m.parameters())
        # the inner step differentiates the module's call; the outer call runs on the
        # adapted (non-leaf) parameters through the same compiled module
        grads = torch.autograd.grad(F.mse_loss(m(xs), ys), params, create_graph=True)
        adapted = {n: p - 0.1 * g for n, p, g in zip(names, params, grads)}
        outer = F.mse_loss(torch.func.functional_call(m, adapted, (xq,)), yq)
        return torch.autograd.grad(outer, params)

    eager, ours = meta_grads(model), meta_grads(cm)
    for a, b in zip(eager, ours, strict=True):
        _close(a, b, "meta-gradient")


class _Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.LeakyReLU(0.2), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)


def _wgan_gp_losses(critic: nn.Module, steps: int = 10) -> tuple[list[float], list[torch.Tensor]]:
    opt = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
    g = torch.Generator().manual_seed(3)
    losses = []
    for _ in range(steps):
        real = torch.randn(8, 6, generator=g)
        fake = torch.randn(8, 6, generator=g) * 0.5 + 1
        eps = torch.rand(8, 1, generator=g)
        x_hat = (eps * real + (1 - eps) * fake).requires_grad_()
        (grad,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
        penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in critic.parameters()]


@pytest.mark.parametrize("entry", ["aot_module", "torch_compile"])
def test_wgan_gp_training_loop_matches_eager(entry):
    torch.manual_seed(0)
    eager = _Critic()
    ours = copy.deepcopy(eager)
    if entry == "aot_module":
        compiled = aot_module(ours, nop)
    else:
        torch._dynamo.reset()
        compiled = torch.compile(ours, backend=aotgrad_backend)
    e_losses, e_params = _wgan_gp_losses(eager)
    c_losses, c_params = _wgan_gp_losses(compiled)
    torch.testing.assert_close(torch.tensor(c_losses), torch.tensor(e_losses), rtol=1e-4, atol=1e-5)
    for a, b in zip(c_params, e_params, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_dropout_second_derivative_uses_the_forward_mask():
    """The differentiable backward reuses the mask the forward drew (it is not drawn again:
    the generator's state after the double backward is eager's too)."""
    def fn(x, w):
        return F.dropout(x * w, 0.5, training=True).pow(3).sum()

    def run(f):
        torch.manual_seed(7)
        x = torch.linspace(-1, 1, 12, dtype=D).requires_grad_()
        w = torch.linspace(0.5, 2, 12, dtype=D).requires_grad_()
        gx, gw = torch.autograd.grad(f(x, w), (x, w), create_graph=True)
        hx, hw = torch.autograd.grad((gx * gw).sum(), (x, w))
        return gx, gw, hx, hw, torch.rand(3)

    e, c = run(fn), run(aotgrad.aot_function(fn, nop))
    for a, b in zip(e, c, strict=True):
        _close(a, b, "dropout")


def test_retain_graph_then_create_graph():
    fn = lambda x: (x.tanh() * x).sum()

    def run(f):
        x = torch.linspace(-1, 1, 4, dtype=D).requires_grad_()
        out = f(x)
        (g0,) = torch.autograd.grad(out, x, retain_graph=True)
        (g1,) = torch.autograd.grad(out, x, create_graph=True)
        (h,) = torch.autograd.grad(g1.sum(), x)
        return g0, g1, h

    for a, b in zip(run(fn), run(aotgrad.aot_function(fn, nop)), strict=True):
        _close(a, b, "retain_graph")


def test_batch_norm_training_with_running_stats():
    """The call writes BatchNorm's running statistics; the second derivative does not read
    them, so it works (and the buffers are eager's)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh()).double()
    cmodel = copy.deepcopy(model)
    cm = aot_module(cmodel, nop)
    x = torch.randn(6, 3, dtype=D)

    def run(m):
        xi = x.clone().requires_grad_()
        (g,) = torch.autograd.grad(m(xi).pow(2).sum(), xi, create_graph=True)
        return g, torch.autograd.grad(g.pow(2).sum(), list(m.parameters()))

    (eg, eh), (cg, ch) = run(model), run(cm)
    _close(eg, cg, "grad")
    for a, b in zip(eh, ch, strict=True):
        _close(a, b, "second order")
    for a, b in zip(model.buffers(), cmodel.buffers(), strict=True):
        torch.testing.assert_close(a, b)


def test_input_mutation_not_read_by_the_gradients():
    """A mutated buffer that the gradients do not read: double backward works."""
    def fn(x, counter):
        counter.add_(1)
        return (x.exp() * x).sum()

    def run(f):
        x = torch.linspace(-1, 1, 4, dtype=D).requires_grad_()
        c = torch.zeros(())
        (g,) = torch.autograd.grad(f(x, c), x, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), x)
        return g, h, c

    for a, b in zip(run(fn), run(aotgrad.aot_function(fn, nop)), strict=True):
        _close(a, b, "mutation")


def test_mutated_buffer_the_gradients_read_is_refused_clearly():
    """The recomputed forward would read a buffer the call overwrote (eager keeps what it
    saved, ``x + buf``): refused, naming the input."""
    def fn(x, buf):
        y = (x + buf).sin()
        buf.mul_(3)
        return y.sum()

    cf = aotgrad.aot_function(fn, nop)
    x = torch.linspace(-1, 1, 4, dtype=D).requires_grad_()
    buf = torch.linspace(1, 2, 4, dtype=D)
    (g,) = torch.autograd.grad(cf(x, buf), x)
    torch.testing.assert_close(g, (x.detach() + buf / 3).cos())
    with pytest.raises(RuntimeError, match=r"needs graph input 1 as it was at the call, but the call writes it"):
        torch.autograd.grad(cf(x, buf), x, create_graph=True)


def test_custom_function_output_the_gradients_differentiate_is_refused_clearly():
    """log1p's derivative reads the Function's output, whose derivative is the Function's
    backward: refused (eager differentiates through that backward)."""
    cf = aotgrad.aot_function(lambda x: _Square.apply(x).log1p().sum(), nop)
    x = torch.linspace(-1, 1, 4, dtype=D).requires_grad_()
    with pytest.raises(RuntimeError, match=r"custom autograd.Function's forward"):
        torch.autograd.grad(cf(x), x, create_graph=True)


def test_mutation_of_a_differentiated_input_is_refused_clearly():
    """x.sin_() inside: the second derivative needs x's value at the call, which the call
    overwrote. Refused (eager computes it from its saved tensor); first order still works."""
    def fn(x):
        x.sin_()
        return (x * x).sum()

    cf = aotgrad.aot_function(fn, nop)
    base = torch.linspace(-1, 1, 4, dtype=D).requires_grad_()
    x = base * 1
    (g,) = torch.autograd.grad(cf(x), base)
    xe = base * 1
    (ge,) = torch.autograd.grad(fn(xe), base)
    _close(g, ge, "first order")
    x = base * 1
    with pytest.raises(RuntimeError, match=r"double backward \(create_graph=True\) through fn needs graph input 0.*writes it in place"):
        torch.autograd.grad(cf(x), base, create_graph=True)


def test_torch_compile_backend_double_backward():
    torch._dynamo.reset()

    def fn(x, w):
        return (x @ w).tanh().pow(2).sum()

    compiled = torch.compile(fn, backend=aotgrad_backend)
    _compare(fn, _inputs((3, 4), (4, 2)), compiled)


@pytest.mark.slow
def test_inductor_double_backward():
    from aotgrad.compilers import inductor

    fn, make = PROGRAMS["mlp"]
    cf = aotgrad.aot_function(fn, inductor)
    e, c = _orders(fn, make), _orders(cf, make)
    for ev, cv in zip(e, c, strict=True):
        for a, b in zip(ev, cv, strict=True):
            if a is not None:
                torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)
