"""``requires_grad_()`` (and ``t.requires_grad = ...``) called inside the compiled program:
on an input, on a view of an input, on an intermediate, on a ``detach()``ed alias, under
grad mode and under ``no_grad``, with later views and outputs computed from the new leaf.
Each is compared with eager (``eager_compare.check``: outputs' values, ``requires_grad``,
``grad_fn``, aliasing, the inputs after the call, gradients); what a compiled graph cannot
reproduce is refused at compile time, naming the user's line (found by torch's
test_aotdispatch ``test_some_output_requires_grad_input_doesnt``: the output's
``requires_grad`` differed silently)."""

from __future__ import annotations

import pytest
import torch

import aotgrad
from aotgrad.compilers import nop
from aotgrad.errors import AotgradCompileError
from eager_compare import check

pytestmark = pytest.mark.usefixtures("shapes")


def view_of_input(a, b):
    v = a.view(-1)
    v.requires_grad_(True)
    return v


def view_of_input_used(a, b):
    v = a.view(-1)
    v.requires_grad_(True)
    return v * b.view(-1)


def view_of_new_leaf_not_returned(a, b):
    v = a.view(-1)
    v.requires_grad_()
    return v.view(a.shape), b * 2


def input_itself(a, b):
    a.requires_grad_(True)
    return a * b


def input_flag_set_after_use(a, b):
    y = a * 2
    a.requires_grad_(True)
    return y, a * 3, a.t()


def input_returned(a, b):
    a.requires_grad_()
    return a


def intermediate_used(a, b):
    t = a * 2
    t.requires_grad_()
    return t * 3 + b


def intermediate_returned_alone(a, b):
    t = a * 2
    t.requires_grad_()
    return t, b + 1


def intermediate_base_of_views(a, b):
    t = a * 2
    t.requires_grad_()
    return t.view(-1), t[0]


def detach_then_requires_grad(a, b):
    t = b.detach().requires_grad_()
    return t * 2


def detach_then_requires_grad_returned(a, b):
    return b.detach().requires_grad_(), a + 1


def under_no_grad_used(a, b):
    with torch.no_grad():
        t = a * 2
        t.requires_grad_()
    return t * 3


def attribute_set(a, b):
    v = a.view(-1)
    v.requires_grad = True
    return v


def flag_off_on_intermediate(a, b):
    t = b * 2
    return t.detach().requires_grad_(False), t


def already_requires_grad(a, b):
    b.requires_grad_(True)
    c = b.view(-1)
    c.requires_grad_()
    return c * 2


def leaf_returned_and_used(a, b):
    t = a * 2
    t.requires_grad_()
    return t, t * 3 + b


def detached_leaf_returned_and_used(a, b):
    t = b.detach().requires_grad_()
    return t, t * 2


def no_grad_leaf_used_after(a, b):
    with torch.no_grad():
        t = a * 2
        t.requires_grad_()
    return t * 3, t


def input_view_leaf_returned_and_used(a, b):
    v = a.view(-1)
    v.requires_grad_(True)
    return v, v * 2


def leaf_base_of_a_view_and_used(a, b):
    t = a * 2
    t.requires_grad_()
    return t.view(-1), (t * b).sum()


def leaf_feeds_an_input_mutation(a, b):
    t = a * 2
    t.requires_grad_()
    b.mul_(t)
    return t


PROGRAMS = [
    leaf_returned_and_used, detached_leaf_returned_and_used, no_grad_leaf_used_after,
    input_view_leaf_returned_and_used, leaf_base_of_a_view_and_used, leaf_feeds_an_input_mutation,
    view_of_input, view_of_input_used, view_of_new_leaf_not_returned, input_itself,
    input_flag_set_after_use, input_returned, intermediate_used, intermediate_returned_alone,
    intermediate_base_of_views, detach_then_requires_grad, detach_then_requires_grad_returned,
    under_no_grad_used, attribute_set, flag_off_on_intermediate, already_requires_grad,
]


def _b_requires_grad():
    return [torch.randn(3, 3), torch.randn(3, 3, requires_grad=True)]


def _none_requires_grad():
    return [torch.randn(3, 3), torch.randn(3, 3)]


def _b_non_leaf():
    return [torch.randn(3, 3), torch.randn(3, 3, requires_grad=True) * 1]


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize(
    "make", [_b_requires_grad, _none_requires_grad, _b_non_leaf], ids=["b_requires_grad", "none_requires_grad", "b_non_leaf"]
)
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_requires_grad_inside_the_program_matches_eager(fn, make, grad_mode):
    check(fn, make, grad_mode=grad_mode)


def test_torchs_some_output_requires_grad_input_doesnt():
    def f(a, b):
        a_view = a.view(-1)
        a_view.requires_grad_(True)
        return a_view

    a = torch.randn(3, 3)
    out = aotgrad.aot_function(f, nop)(a, torch.randn(3, 3, requires_grad=True))
    assert out.requires_grad and out.is_leaf and out._base is a and not a.requires_grad
    out.sum().backward()
    torch.testing.assert_close(out.grad, torch.ones(9))


def test_returned_new_leaf_accumulates_its_own_grad():
    def f(a):
        t = a * 2
        t.requires_grad_()
        return t

    a = torch.randn(4)
    out = aotgrad.aot_function(f, nop)(a)
    assert out.is_leaf and out.requires_grad and out.grad_fn is None
    (out * 3).sum().backward()
    torch.testing.assert_close(out.grad, torch.full((4,), 3.0))


def test_input_made_to_require_grad_gets_its_gradient_and_keeps_the_flag():
    def f(a, b):
        y = a * b  # before the flag: no gradient to a from here
        a.requires_grad_()
        return y, (a * a).sum()

    for fn in (f, aotgrad.aot_function(f, nop)):
        a, b = torch.randn(3), torch.randn(3)
        y, s = fn(a, b)
        assert a.requires_grad and a.is_leaf and not y.requires_grad
        s.backward()
        torch.testing.assert_close(a.grad, 2 * a.detach())
    # the next call sees an input that requires grad: a new entry, flag a no-op
    compiled = aotgrad.aot_function(f, nop)
    a = torch.randn(3)
    compiled(a, torch.randn(3))
    compiled(a, torch.randn(3))
    assert len(compiled.entries) == 2


def _leaf_grads(fn, make):
    """Run ``fn``, backpropagate the sum of every output that requires grad, and return the
    ``.grad`` of each output (and output ``_base``) that is a leaf, and of the inputs."""
    torch.manual_seed(0)
    inputs = make()
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    total = sum(o.sum() for o in outs if o.requires_grad)
    total.backward()
    seen = [*outs, *[o._base for o in outs if o._base is not None]]
    return [t.grad for t in seen if t.is_leaf and t.requires_grad] + [
        t.grad for t in inputs if t.is_leaf and t.requires_grad
    ]


@pytest.mark.parametrize("make", [_b_requires_grad, _none_requires_grad, _b_non_leaf], ids=["b_rg", "none_rg", "b_non_leaf"])
@pytest.mark.parametrize(
    "fn",
    [leaf_returned_and_used, detached_leaf_returned_and_used, no_grad_leaf_used_after,
     input_view_leaf_returned_and_used, leaf_base_of_a_view_and_used, intermediate_returned_alone],
    ids=lambda f: f.__name__,
)
def test_returned_new_leaf_gets_the_gradients_of_what_was_computed_from_it(fn, make):
    eager = _leaf_grads(fn, make)
    compiled = _leaf_grads(aotgrad.aot_function(fn, nop), make)
    assert len(eager) == len(compiled)
    for k, (e, c) in enumerate(zip(eager, compiled)):
        assert (e is None) == (c is None), k
        if e is not None:
            torch.testing.assert_close(c, e)


def test_leaf_that_is_a_view_of_an_intermediate_feeding_another_output_is_refused():
    def f(a):
        t = a * 2
        v = t.view(-1)
        v.requires_grad_()  # the line named
        return v, v * 3

    with pytest.raises(AotgradCompileError, match=r"requires_grad_\(\) at .*v.requires_grad_\(\)"):
        aotgrad.aot_function(f, nop)(torch.randn(3, 3))


def test_view_of_returned_input_view_leaf_is_refused():
    def f(a):
        v = a.view(-1)
        v.requires_grad_()
        return v, v.view(3, 3)

    with pytest.raises(AotgradCompileError, match="new autograd leaf"):
        aotgrad.aot_function(f, nop)(torch.randn(3, 3))


def test_flag_off_on_an_input_leaf_detaches_it_as_eager():
    # (tests/test_detach_inplace.py has more cases)
    def f(a):
        y = a * 3
        a.requires_grad_(False)
        return y, a * 2

    a = torch.randn(3, requires_grad=True)
    y, z = aotgrad.aot_function(f, nop)(a)
    assert (a.requires_grad, a.is_leaf, y.requires_grad, z.requires_grad) == (False, True, True, False)


def test_flag_off_on_a_non_leaf_input_raises_eagers_error():
    def f(a):
        a.requires_grad_(False)
        return a * 2

    check(f, lambda: [torch.randn(3, requires_grad=True) * 1])


def test_input_made_to_require_grad_and_mutated_is_refused():
    def f(a):
        a.requires_grad_()
        with torch.no_grad():
            a.add_(1)
        return a * 2

    a = torch.randn(3)
    with pytest.raises(AotgradCompileError, match="made to require grad"):
        aotgrad.aot_function(f, nop)(a)
    assert not a.requires_grad


def test_export_refuses_requires_grad_inside_the_program():
    def f(a, b):
        a.requires_grad_()
        return ((a * b).sum(),)

    a = torch.randn(3, 3)
    with pytest.raises(AotgradCompileError, match="requires_grad_"):
        aotgrad.aot_export_joint_simple(f, [a, torch.randn(3, 3, requires_grad=True)], trace_joint=True)
    assert not a.requires_grad


def test_returned_subclass_leaf_feeding_another_output_is_refused():
    from torch.testing._internal.two_tensor import TwoTensor

    def f(a):
        t = a * 2
        t.requires_grad_()
        return t, t * 3

    a = TwoTensor(torch.randn(3), torch.randn(3))
    with pytest.raises(AotgradCompileError, match="tensor subclass"):
        aotgrad.aot_function(f, nop)(a)


def test_requires_grad_on_a_captured_tensor_is_refused_and_changes_nothing():
    w = torch.randn(3)

    def f(x):
        w.requires_grad_()
        return x * w

    with pytest.raises(AotgradCompileError, match="not an input of the compiled function"):
        aotgrad.aot_function(f, nop)(torch.randn(3))
    assert not w.requires_grad
