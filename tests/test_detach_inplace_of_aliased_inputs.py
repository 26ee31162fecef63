"""``detach_()`` (or ``requires_grad_(False)``) of an input that shares its storage with
another input the program writes (issue 12; fuzz seeds 33001073, 33001903, 33002974,
34003677, 34006984, 34007923, 34013094, 29001128, 29006545, 29014135, 29017606, 28011989,
28014293, 28015845, 28017931, ...). The inputs are merged into a synthetic base. Where the
detached input ``c`` is the root ``x`` the others view (the members' common base, passed
itself), it is regenerated as the base itself, so the program's ``detach_()`` detaches the
base, as eager's detaches the root: the views taken before keep their history, the runtime
detaches the caller's ``x`` (a call input: ``ViewAndMutationMetadata.detached_call_inputs``).
Elsewhere (``c`` beside a ``detach()``ed alias of it, no common base) the program would
detach a view of the base: refused at compile time, as is an error only the run over the
bases raises; never eager's error where eager runs, never a silent difference."""

from __future__ import annotations

import pytest
import torch

import aotgrad
from eager_compare import check

from tests.fuzz import harness

#: the other input ``a``, sharing ``x``'s storage
VIEWS = ["x[1:]", "x.t()", "x[0]", "x.unsqueeze(0)", "x.view(-1)", "x.as_strided((2, 2), (1, 2), 1)",
         "x.detach()", "x.detach()[1:]"]
#: ``detach()``ed aliases: no common base, ``c`` is a view of the synthetic base
DETACHED_ALIASES = {"x.detach()", "x.detach()[1:]"}

PROGRAMS = {
    "detach_then_write_view": "c.detach_()\n    a.mul_(2)\n    return a * 1, c * 1, a",
    "use_detach_write_root": "y = a * 2\n    c.detach_()\n    c.add_(1)\n    return y, a * 1, c",
    "no_grad_detach_write_view": "with torch.no_grad():\n        c.detach_()\n    a.add_(1)\n    return a.sum(), c",
    "uses_detach_zero_view": "y = c * 2\n    z = a * 3\n    c.detach_()\n    a.zero_()\n    return y, z, a.sum(), c",
    "detach_setitem_root": "c.detach_()\n    c[0] = 1.0\n    return a + 1, c, a",
    "requires_grad_false": "c.requires_grad_(False)\n    a.add_(c)\n    return a, c * 2",
    "use_detach_no_grad_write": "y = a.sin()\n    c.detach_()\n    with torch.no_grad():\n        a.mul_(2)\n    return y, a, a * c",
    "detach_no_grad_view_written": "c.detach_()\n    with torch.no_grad():\n        t = a[..., :1]\n    t.sin_()\n    return t, c.sum()",
    "detach_relayout_root_write_view": "c.detach_()\n    c.unsqueeze_(0)\n    a.add_(1)\n    return a, c",
}
#: programs refused with grad on (the analysis's own errors, see the module docstring)
REFUSED_WITH_GRAD = {"use_detach_write_root", "detach_no_grad_view_written"}


@pytest.mark.parametrize("rg", [True, False], ids=["x_requires_grad", "x_plain"])
@pytest.mark.parametrize("modes", [["grad"], ["no_grad"], ["grad", "no_grad"]], ids="-".join)
@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_detach_of_input_sharing_storage_with_written_input(program, view, modes, rg):
    body = PROGRAMS[program]
    outputs = body.split("return")[-1].count(",") + 1
    res = harness.run_case(
        f"\ndef f(a, c):\n    {body}\n",
        {"bases": [{"shape": [3, 4], "dtype": "float32", "rg": rg}],
         "args": [{"kind": "tensor", "base": 0, "expr": view}, {"kind": "tensor", "base": 0, "expr": "x"}]},
        post=[(outputs - 1, "mul_(2)")],
        modes=modes,
    )
    may_refuse = rg and (view in DETACHED_ALIASES or program in REFUSED_WITH_GRAD and modes[0] == "grad")
    if res.ok:
        return
    report = res.report()
    assert may_refuse, report
    first = report.splitlines()[0]
    assert "impl raised, eager did not: AotgradCompileError" in first, report


def _leaf_root():
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(3, 4, requires_grad=True)
    return x, w


def _non_leaf_root():
    x = torch.randn(3, 4, requires_grad=True) * 2
    w = torch.randn(3, 4, requires_grad=True)
    return x, w


def _float64_root():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    return x, w


ROOT_VIEWS = {"slice": lambda x: x[1:], "t": lambda x: x.t(), "unsqueeze": lambda x: x.unsqueeze(0)}


def _grads_through_siblings(a, c, w):
    y = a * w[: a.shape[0]] if a.dim() == 2 and a.shape[1] == 4 else a.sum() * w
    c.detach_()
    a.mul_(2)
    return y, a * 1, c * w, c


def _write_with_other_leaf_after_detach(a, c, w):
    y = c * w
    c.detach_()
    with torch.no_grad():
        a.add_(1)
    return y, a, c


@pytest.mark.parametrize("view", sorted(ROOT_VIEWS))
@pytest.mark.parametrize("root", [_leaf_root, _non_leaf_root, _float64_root], ids=["leaf", "non_leaf", "float64"])
@pytest.mark.parametrize("fn", [_grads_through_siblings, _write_with_other_leaf_after_detach])
def test_detached_root_beside_its_written_view_as_eager(fn, root, view):
    """The root ``c`` detached in place beside its view ``a``, another leaf ``w`` in the
    gradients: outputs, gradients (``w``'s, and the root's: a leaf's AccumulateGrad drops it
    once detached; a non-leaf's history before the detach reaches its leaf), the inputs after
    the call and mutations of the returned aliases, as eager."""

    def make():
        x, w = root()
        return ROOT_VIEWS[view](x), x, w

    check(fn, make)


def _detach_then_write(a, c):
    c.detach_()
    with torch.no_grad():
        a.mul_(2)
    return c * 1,


def _root_and_its_view(make_root):
    x = make_root()
    return x[1:], x


def _separate_inputs(make_root):
    return torch.randn(3, 4), make_root()


@pytest.mark.parametrize("pair", [_root_and_its_view, _separate_inputs], ids=["aliased", "separate"])
@pytest.mark.parametrize("as_view", [lambda t: t.view(3, 4), lambda t: t[:]], ids=["view", "slice"])
@pytest.mark.parametrize("root", ["leaf", "non_leaf"])
def test_later_call_detaching_a_view_raises_before_the_writes(pair, as_view, root):
    """An entry compiled for ``c`` no view, called with ``c`` a view of the same geometry:
    eager raises "Can't detach views in-place" at the ``detach_()``, before the program's
    later write. The entry guard checks the view-ness of every input the program detaches
    (``frontend.leaf_state``), so the call compiles anew and raises eager's error before
    anything runs, where the reused entry wrote ``a`` and then raised."""

    def make_root():
        w = torch.randn(3, 4, requires_grad=True)
        return w if root == "leaf" else w * 2

    compiled = aotgrad.aot_function(_detach_then_write, aotgrad.nop)
    compiled(*pair(make_root))
    unchanged = []
    for fn in (_detach_then_write, compiled):
        torch.manual_seed(0)
        a, c = pair(make_root)
        c = as_view(c)
        if pair is _root_and_its_view:
            a = c[1:]
        before = a.detach().clone()
        with pytest.raises(RuntimeError, match="Can't detach views in-place"):
            fn(a, c)
        unchanged.append(torch.equal(a.detach(), before))
    assert unchanged == [True, True]


def test_error_of_the_run_over_the_base_is_the_detach_refusal():
    """A use of ``a`` after ``c.detach_()`` and a write into ``c``: the run over the synthetic
    base regenerates ``a``'s stale history off the detached base, where autograd asserts
    ("new_fn INTERNAL ASSERT"); refused naming the detach and that use, not as a PyTorch bug."""

    def f(a, c):
        y = a * 2
        c.detach_()
        c.add_(1)
        return y, a * 1, c

    x = torch.randn(3, 4, requires_grad=True)
    f(x[1:], x)  # eager runs
    x = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(aotgrad.AotgradCompileError, match=r"detaches input 1 in place .* synthetic base raised .*a \* 1"):
        aotgrad.aot_function(f, aotgrad.nop)(x[1:], x)
