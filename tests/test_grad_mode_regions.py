"""Grad mode switched inside the function (issue 12, class 3): the graph is chosen by what the
program records, not only by the caller's mode.

Every program runs under both caller modes; outputs must require grad exactly when eager's do,
and gradients flow through the regions where eager records them.
"""

from __future__ import annotations

import pytest
import torch
from eager_compare import check
from tests.fuzz.harness import check_case

import aotgrad
from aotgrad.compilers import nop


def _inputs():
    return (torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True))


def enable_grad_region(x, w):
    y = x * 2
    with torch.enable_grad():
        z = (y * w).sin()
    return z, y


def set_grad_enabled_call(x, w):
    prev = torch.is_grad_enabled()
    torch.set_grad_enabled(True)
    z = x.exp() * w
    torch.set_grad_enabled(prev)
    return z, x + w


def set_grad_enabled_ctx(x, w):
    with torch.set_grad_enabled(True):
        a = x.cos()
        with torch.no_grad():
            b = a * w  # recorded nowhere
        c = a * b
    return c, b


def no_grad_region(x, w):
    with torch.no_grad():
        y = x * w
    return (y + x).tanh(), y


def enable_grad_view_and_mutation(x, w):
    h = x.clone()
    with torch.enable_grad():
        v = h[0]
        v.mul_(w[0])
        r = h.sum(0)
    return r, v, h


def enable_grad_alias_of_input(x, w):
    with torch.enable_grad():
        v = x.view(-1)
    return v, w.t()


def enable_grad_inner_only_unused(x, w):
    with torch.enable_grad():
        _ = x * w
    return (x + w),


def enable_grad_mutates_nonleaf_input(x, w):
    # the input is a non-leaf (see _nonleaf_inputs): its in-place update inside the region
    # gives it a grad_fn in eager
    with torch.enable_grad():
        x.mul_(w)
    return x.sum(),


def inference_mode_region(x, w):
    # inference tensors track no version: views, a write and an op returning its input
    # itself (flatten() of a 1-D tensor) inside the region
    with torch.inference_mode():
        y = x * 2
        z = y.view(-1)
        z.add_(1)
        u = z.flatten()
    return u.clone().view(3, 4) * w, x.sin()


PROGRAMS = [
    enable_grad_region,
    set_grad_enabled_call,
    set_grad_enabled_ctx,
    no_grad_region,
    enable_grad_view_and_mutation,
    enable_grad_alias_of_input,
    enable_grad_inner_only_unused,
    inference_mode_region,
]


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_grad_mode_region(fn, grad_mode):
    check(fn, _inputs, grad_mode=grad_mode)


def _nonleaf_inputs():
    a = torch.randn(3, 4, requires_grad=True)
    return (a * 1, torch.randn(3, 4, requires_grad=True))


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
def test_enable_grad_region_mutates_nonleaf_input(grad_mode):
    check(enable_grad_mutates_nonleaf_input, _nonleaf_inputs, grad_mode=grad_mode)


def test_no_grad_caller_compiles_a_training_entry_only_where_the_program_records():
    x, w = _inputs()
    cf = aotgrad.aot_function(enable_grad_region, nop)
    with torch.no_grad():
        z, y = cf(x, w)
    assert z.requires_grad and not y.requires_grad
    assert cf.entries[0].training
    z.sum().backward()
    assert x.grad is None and w.grad is not None  # y was made under no_grad: no path to x

    plain = aotgrad.aot_function(no_grad_region, nop)
    with torch.no_grad():
        plain(x, w)
    assert not plain.entries[0].training


def test_enable_grad_region_gradient_matches_eager_under_no_grad_call():
    def f(x, w):
        with torch.enable_grad():
            return (x * w).pow(2).sum()

    x, w = _inputs()
    with torch.no_grad():
        expected = torch.autograd.grad(f(x, w), (x, w))
        got = torch.autograd.grad(aotgrad.aot_function(f, nop)(x, w), (x, w))
    for a, b in zip(expected, got):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("view", ["unbind", "select", "t", "narrow"])
def test_grad_mode_view_of_no_grad_view_of_input(view):
    """A view taken in grad mode of a view made under no_grad: it requires grad and has a
    grad_fn, but its gradient stops at the no_grad view (eager), none reaches the input."""
    views = {
        "unbind": lambda t: t.unbind(0)[0],
        "select": lambda t: t[0],
        "t": lambda t: t.t(),
        "narrow": lambda t: t.narrow(1, 0, 2),
    }

    def f(a):
        with torch.no_grad():
            t0 = a.unsqueeze(0)
        return views[view](t0), a.relu()

    check(f, lambda: (torch.randn(3, 4, requires_grad=True) * 1,))


MUTATIONS_UNDER_NO_GRAD = {
    "transpose_": lambda t: t.transpose_(0, 1),
    "transpose_same_dim": lambda t: t.transpose_(1, 1),
    "t_": lambda t: t.t_(),
    "unsqueeze_": lambda t: t.unsqueeze_(0),
    "as_strided_": lambda t: t.as_strided_((4, 3), (1, 4)),
    "mul_": lambda t: t.mul_(2),
    "t_then_add_": lambda t: t.t_().add_(1),
}


@pytest.mark.parametrize("leaf", [True, False], ids=["leaf", "non_leaf"])
@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("mutation", sorted(MUTATIONS_UNDER_NO_GRAD))
def test_input_mutated_under_no_grad_then_used_in_grad_region(mutation, grad_mode, leaf):
    """An input used in an enable_grad region, then changed (data or geometry) under no_grad,
    with the function called under either mode: eager's gradient reaches the input through
    the grad-mode uses. (aotgrad's own alias/clone of such an input was made in the caller's
    mode: under a no_grad caller the gradient was cut and came back None, silently.)"""

    def f(x, w):
        y = x.sigmoid()
        with torch.enable_grad():
            z = y + x + w  # add saves nothing: the later mutation is legal in eager
        with torch.no_grad():
            MUTATIONS_UNDER_NO_GRAD[mutation](x)
        return z, w

    def inputs():
        x = torch.randn(3, 4, requires_grad=True)
        return (x if leaf else x * 1, torch.randn(3, 4, requires_grad=True))

    check(f, inputs, grad_mode=grad_mode)


NO_GRAD_RELAYOUT = {"unsqueeze_": lambda v: v.unsqueeze_(0), "t_": lambda v: v.t_(), "squeeze_": lambda v: v.squeeze_()}
GRAD_RELAYOUT = {"transpose_": lambda v: v.transpose_(0, 0), "unsqueeze_": lambda v: v.unsqueeze_(-1)}


@pytest.mark.parametrize("then", sorted(GRAD_RELAYOUT))
@pytest.mark.parametrize("op", sorted(NO_GRAD_RELAYOUT))
@pytest.mark.parametrize("root", ["intermediate", "input", "cumsum_of_expanded"])
def test_view_relaid_under_no_grad_then_with_grad(root, op, then):
    """``t4 = t1.t(); with no_grad: t4.t_(); t4.transpose_(0, 0); return t4``: the no_grad op
    leaves eager's view stale, and the grad-mode op regenerates its grad_fn off its base
    first, so its gradient reaches the base; rebuilt with the whole chain as a no_grad prefix
    it had none (fuzz seed 2016759)."""

    def f(x):
        if root == "cumsum_of_expanded":
            t1 = x[0].as_strided((2, 3), (0, 1), 0).cumsum(0)
        else:
            t1 = x * 1 if root == "intermediate" else x
        v = t1[0]
        with torch.no_grad():
            NO_GRAD_RELAYOUT[op](v)
        GRAD_RELAYOUT[then](v)
        return v, x.sum()

    check(f, lambda: (torch.randn(2, 3, requires_grad=True) * 1,))


#: views of an input taken inside the program's grad-mode region
GRAD_REGION_VIEWS = {
    "select": lambda t: t[0],
    "diagonal": lambda t: t.diagonal(),
    "unsqueeze": lambda t: t.unsqueeze(-1),
    "flatten_unsqueeze": lambda t: t.flatten().unsqueeze(-1),
    "unbind": lambda t: t.unbind(1)[0],
}

#: how the view's chain starts: in the grad region too, or with a step taken outside it
CHAIN_STARTS = {
    "in_region": lambda a: a,
    "slice_outside": lambda a: a[:, 0:2],
    "t_outside": lambda a: a.t(),
}


@pytest.mark.parametrize("inputs", ["leaf", "non_leaf"])
@pytest.mark.parametrize("start", sorted(CHAIN_STARTS))
@pytest.mark.parametrize("view", sorted(GRAD_REGION_VIEWS))
def test_view_of_input_taken_in_grad_region_of_no_grad_call(view, start, inputs):
    """Fuzz seeds 4004344, 4001796, 4018219 (called under no_grad): ``t1 = a[:, 0:1]; with
    torch.set_grad_enabled(True): t9 = t1.diagonal()``: eager's ``t9`` has a grad_fn (its
    last steps recorded); rebuilt in the caller's mode it was a leaf, and a backward from it
    raised 'element 0 of tensors does not require grad'."""

    def f(a):
        head = CHAIN_STARTS[start](a)
        with torch.set_grad_enabled(True):
            v = GRAD_REGION_VIEWS[view](head)
        return v, a.sum()

    def make():
        a = torch.randn(3, 4, requires_grad=True)
        return (a if inputs == "leaf" else a * 1,)

    check(f, make, grad_mode=False)


#: in-place metadata ops on an input, with or without grad recording
INPUT_RELAYOUTS = {
    "unsqueeze_": ["a.unsqueeze_(-2)"],
    "unsqueeze_0": ["a.unsqueeze_(0)"],
    "t_": ["a.t_()"],
    "transpose_": ["a.transpose_(0, 1)"],
    "squeeze_": ["a.unsqueeze_(0)", "a.squeeze_(1)"],
    "as_strided_": ["a.as_strided_((a.shape[1], a.shape[0]), (1, a.shape[1]))"],
}
#: writes into the input that record a grad_fn on it (the input requires grad)
RECORDED_INPUT_WRITES = {"addcmul_": "a.addcmul_(t2, t2)", "mul_": "a.mul_(t2)", "copy_": "a.copy_(t2.expand_as(a))"}


#: re-layouts before the region whose gradient eager's backward could still take (a leading
#: size-1 dim sums away); the others are refused (docs/user-guide.md: eager's backward fails)
_BEFORE = ["unsqueeze_0", "squeeze_"]


@pytest.mark.parametrize("write", sorted(RECORDED_INPUT_WRITES))
@pytest.mark.parametrize(
    "where,relayout", [("before", r) for r in _BEFORE] + [("inside", r) for r in sorted(INPUT_RELAYOUTS)]
)
def test_input_relaid_out_then_written_in_grad_region(where, relayout, write):
    """An input re-laid out in place (before an ``enable_grad`` region, or inside it) and then
    written with grad recording inside the region, in a call made under ``no_grad`` (and
    under grad). The joint reads the written input back in its entry layout; that read is the
    joint's own, and ran under the caller's mode: under ``no_grad`` the new value required no
    grad, and the trace failed ("element 0 of tensors does not require grad", fuzz seed
    35001192). (The outputs do not reach the write: where a backward would, eager's fails
    on the re-laid-out input's gradient, a documented refusal.)"""
    meta = INPUT_RELAYOUTS[relayout]
    region = ["with torch.set_grad_enabled(True):"] + ["    " + m for m in (meta if where == "inside" else [])]
    lines = ["t0 = a * 1", "t2 = t0[0].mean().detach()", *(meta if where == "before" else []), *region,
             "    " + RECORDED_INPUT_WRITES[write], "return t0[1:] * 2"]
    check_case(
        "def f(a):\n" + "".join(f"    {line}\n" for line in lines),
        {
            "bases": [{"shape": [3, 4], "dtype": "float32", "rg": True}],
            "args": [{"kind": "tensor", "base": 0, "expr": "x.clone()"}],
        },
        modes=["no_grad", "grad"],
    )
