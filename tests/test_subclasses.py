"""Tensor subclasses (issue 11): a ``__tensor_flatten__`` wrapper subclass (``TwoTensor``)
is one tensor to analysis, autograd and the runtime, and its inner tensors to the compilers:
every graph a compiler gets takes and returns plain tensors. Compared with eager by
``check``; test_core runs its whole eager comparison with TwoTensor inputs too (the
``tensor_types`` fixture)."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from eager_compare import check
from torch.testing._internal.two_tensor import TwoTensor


def two(*shape, requires_grad=False):
    t = TwoTensor(torch.randn(*shape), torch.randn(*shape))
    return t.requires_grad_(requires_grad)


PROGRAMS = {
    "pointwise": (lambda x, w: (x * w).sin().sum(), lambda: (two(3, requires_grad=True), two(3, requires_grad=True))),
    "input mutation": (lambda x, buf: (buf.add_(1), x * buf)[1], lambda: (two(3, requires_grad=True), two(3))),
    "outputs alias": (lambda x: (x.view(-1), (x * 2).t()), lambda: (two(2, 3, requires_grad=True),)),
    "matmul": (lambda x, w: torch.relu(x @ w), lambda: (two(4, 3), two(3, 2, requires_grad=True))),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_two_tensor_inputs_match_eager(name):
    fn, make = PROGRAMS[name]
    check(fn, make, mutate_outputs=False)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_both_inner_tensors_match_eager(name):
    import torch.utils._pytree as pytree

    import aotgrad
    from aotgrad.compilers import nop

    fn, make = PROGRAMS[name]
    torch.manual_seed(0)
    eager_in = make()
    torch.manual_seed(0)
    comp_in = make()
    outs = pytree.tree_leaves(fn(*eager_in)), pytree.tree_leaves(aotgrad.aot_function(fn, nop)(*comp_in))
    for e, c in zip(*outs, strict=True):
        assert type(c) is TwoTensor
        assert torch.equal(e.a, c.a) and torch.equal(e.b, c.b)
    for e, c in zip(eager_in, comp_in):  # inputs after the call (mutations)
        assert torch.equal(e.a, c.a) and torch.equal(e.b, c.b)


class _Recording:
    def __init__(self):
        self.examples = []

    def __call__(self, gm, example_inputs):
        self.examples.append(list(example_inputs))
        return gm


def test_compilers_get_graphs_over_the_inner_tensors():
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    import aotgrad

    rec = _Recording()
    x, w = two(3, requires_grad=True), two(3, requires_grad=True)
    out = aotgrad.aot_function(lambda x, w: (x * w).sin().sum(), rec)(x, w)
    out.backward()
    assert len(rec.examples) == 2  # forward and backward
    for example in rec.examples:
        assert example and not any(is_traceable_wrapper_subclass(t) for t in example)
    assert len(rec.examples[0]) == 4  # x.a, x.b, w.a, w.b
    assert type(out) is TwoTensor and type(x.grad) is TwoTensor
    ex, ew = TwoTensor(x.a.clone(), x.b.clone()).requires_grad_(), TwoTensor(w.a.clone(), w.b.clone()).requires_grad_()
    (ex * ew).sin().sum().backward()
    assert torch.equal(ex.grad.a, x.grad.a) and torch.equal(ex.grad.b, x.grad.b)


def test_unused_subclass_output_gets_a_zero_tangent_of_its_type():
    import aotgrad
    from aotgrad.compilers import nop

    def f(x):
        return x.sin(), x.cos()

    x = two(3, requires_grad=True)
    a, _ = aotgrad.aot_function(f, nop)(x)
    a.sum().backward()  # autograd passes None for the second output's gradient
    ex = TwoTensor(x.a.clone(), x.b.clone()).requires_grad_()
    f(ex)[0].sum().backward()
    assert torch.equal(ex.grad.a, x.grad.a) and torch.equal(ex.grad.b, x.grad.b)


def test_a_plain_gradient_for_a_subclass_output_is_refused_clearly():
    import aotgrad
    from aotgrad.compilers import nop

    x = two(3, requires_grad=True)
    out = aotgrad.aot_function(lambda x: x * 2, nop)(x)
    with pytest.raises(RuntimeError, match="TwoTensor"):
        out.backward(torch.ones(3))


@pytest.mark.slow
def test_inductor_compiles_subclass_programs():
    import aotgrad
    from aotgrad.compilers import inductor

    x, w = two(4, 3, requires_grad=True), two(3, 2, requires_grad=True)
    out = aotgrad.aot_function(lambda x, w: torch.relu(x @ w).sum(), inductor)(x, w)
    out.backward()
    ex, ew = TwoTensor(x.a.clone(), x.b.clone()).requires_grad_(), TwoTensor(w.a.clone(), w.b.clone()).requires_grad_()
    e = torch.relu(ex @ ew).sum()
    e.backward()
    torch.testing.assert_close(out.a, e.a)
    torch.testing.assert_close(out.b, e.b)
    torch.testing.assert_close(x.grad.a, ex.grad.a)
    torch.testing.assert_close(w.grad.b, ew.grad.b)


@pytest.fixture
def one_rank_mesh():
    """A one-process gloo group on the loopback address (a free port) and its CPU mesh,
    torn down after the test."""
    import datetime
    import os
    import socket

    import torch.distributed as dist
    from torch.distributed.tensor import DeviceMesh

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
    try:
        yield DeviceMesh("cpu", [0])
    finally:
        dist.destroy_process_group()


def test_dtensor_inputs_values_grads_and_placements_match_eager(one_rank_mesh):
    """DTensor (flattens to its local tensor plus an opaque device mesh; a Partial output's
    gradient arrives Replicate, which the traced tangent follows) on a one-rank mesh."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import aotgrad

    rec = _Recording()
    torch.manual_seed(0)
    x = distribute_tensor(torch.randn(4, 3), one_rank_mesh, [Shard(0)]).requires_grad_()
    w = distribute_tensor(torch.randn(3, 2), one_rank_mesh, [Replicate()]).requires_grad_()
    ex, ew = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()

    def f(x, w):
        return torch.relu(x @ w).sum()

    out = aotgrad.aot_function(f, rec)(x, w)
    out.backward()
    e = f(ex, ew)
    e.backward()
    assert type(out) is type(e) and out.placements == e.placements
    torch.testing.assert_close(out.to_local(), e.to_local())
    for got, want in ((x.grad, ex.grad), (w.grad, ew.grad)):
        assert got.placements == want.placements
        torch.testing.assert_close(got.to_local(), want.to_local())
    assert all(type(t) is not type(x) for example in rec.examples for t in example)


@pytest.mark.parametrize("backend", ["aotgrad", pytest.param("aotgrad_inductor", marks=pytest.mark.slow)])
def test_two_tensor_inputs_under_torch_compile(backend):
    def f(x, w):
        return (x * w).sin().sum(0)

    x, w = two(3, 2, requires_grad=True), two(3, 2, requires_grad=True)
    ex, ew = TwoTensor(x.a.clone(), x.b.clone()).requires_grad_(), TwoTensor(w.a.clone(), w.b.clone()).requires_grad_()
    torch._dynamo.reset()
    out = torch.compile(f, backend=backend)(x, w)
    out.sum().backward()
    torch._dynamo.reset()
    e = f(ex, ew)
    e.sum().backward()
    assert type(out) is TwoTensor and type(x.grad) is TwoTensor
    for got, want in ((out, e), (x.grad, ex.grad), (w.grad, ew.grad)):
        torch.testing.assert_close(got.a, want.a)
        torch.testing.assert_close(got.b, want.b)


def test_aliased_mutated_subclass_inputs_are_refused_clearly():
    import aotgrad
    from aotgrad.errors import AotgradCompileError

    def f(a, b):
        a.add_(1)
        return a + b

    base = two(4)
    before = base.a.clone(), base.b.clone()
    with pytest.raises(AotgradCompileError, match="alias one another"):
        aotgrad.aot_function(f, aotgrad.nop)(base[:3], base[1:])
    assert torch.equal(base.a, before[0]) and torch.equal(base.b, before[1])  # nothing changed


def test_dtensor_with_other_placements_compiles_a_new_entry(one_rank_mesh):
    """The graph is traced for one flatten structure; a DTensor with other placements (same
    outer and local shape on one rank, so TensorGuards alone would reuse the entry) misses
    the entry's guard and compiles its own, with eager's output placements."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import aotgrad
    from aotgrad.compilers import nop

    def f(x):
        return (x * 2).sin()

    cf = aotgrad.aot_function(f, nop)
    for placements in ([Shard(0)], [Replicate()], [Shard(0)]):
        x = distribute_tensor(torch.randn(4, 3), one_rank_mesh, placements)
        out = cf(x)
        assert out.placements == f(x).placements
        torch.testing.assert_close(out.to_local(), f(x).to_local())
    assert len(cf.entries) == 2
    from aotgrad.core.frontend import flatten_call

    leaves, spec = flatten_call((x,), {})  # x is Shard(0); entries[0], the newest, is Replicate's
    assert "structure" in cf.entries[0].guard.failure(leaves, spec)
    # the recompile reason names the subclass check, with both placements
    (reason,) = cf.recompile_reasons
    assert reason.mismatches[0].kind == "subclass"
    assert "Shard" in reason.mismatches[0].old and "Replicate" in reason.mismatches[0].new
