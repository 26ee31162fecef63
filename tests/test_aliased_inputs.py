"""Aliased inputs against eager: duplicates, views of one base, synthetic bases."""

from __future__ import annotations

import pytest
import torch
from eager_compare import check

import aotgrad
from aotgrad.compilers import nop

pytestmark = pytest.mark.usefixtures("shapes")

MODES = ["grad_leaf_base", "grad_nonleaf_base", "no_grad"]


def base_for(mode, *shape):
    if mode == "no_grad":
        return torch.randn(*shape)
    if mode == "grad_leaf_base":
        return torch.randn(*shape, requires_grad=True)
    return torch.randn(*shape, requires_grad=True).mul(1)


def run_check(fn, make, mode):
    return check(fn, make, grad_mode=(mode != "no_grad_mode"))


# ---------------------------------------------------------------- 1. the same tensor twice

@pytest.mark.parametrize("requires_grad", [True, False])
def test_same_tensor_twice_not_mutated(requires_grad):
    def f(a, b):
        return a * b + a

    def make():
        x = torch.randn(3, requires_grad=requires_grad)
        return (x, x)

    cf = check(f, make)
    assert cf.entries[0].layout.num_distinct == 1
    assert len([n for n in next(iter(cf.entries[0].graphs.values())).graph.nodes if n.op == "placeholder"]) == 1


@pytest.mark.parametrize("nonleaf", [True, False])
def test_same_tensor_twice_mutated(nonleaf):
    def f(a, b, c):
        a.mul_(2)
        return b + 1, c * a

    def make():
        x = torch.randn(3, requires_grad=True).mul(1) if nonleaf else torch.randn(3)
        return (x, x, x)

    check(f, make)


def test_same_tensor_three_times_grads_accumulate():
    def f(a, b, c):
        return (a * b * c).sum()

    cf = aotgrad.aot_function(f, nop)
    x = torch.randn(3, requires_grad=True)
    cf(x, x, x).backward()
    torch.testing.assert_close(x.grad, 3 * x.detach() ** 2)


# ---------------------------------------------------------------- 2. views of one base

VIEW_PAIRS = {
    "overlapping": lambda b: (b[0:3], b[1:4]),
    "disjoint": lambda b: (b[0:2], b[2:4]),
    "one_view_of_another": lambda b: (b[1:], b[1:][1:]),
    "reversed_order": lambda b: (b[2:], b[:3]),
    "base_and_view": lambda b: (b, b[1:3]),
    "view_and_base": lambda b: (b[1:3], b),
    "transposed": lambda b: (b.view(2, 2).t(), b[0:2]),
}


@pytest.mark.parametrize("pair", list(VIEW_PAIRS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("which", ["first", "second", "both"])
def test_views_of_one_base_mutated(pair, mode, which):
    def f(a, b):
        if which in ("first", "both"):
            a.mul_(2)
        if which in ("second", "both"):
            b.add_(1)
        return a + 0, b * 3

    def make():
        base = base_for(mode, 4)
        return VIEW_PAIRS[pair](base)

    cf = check(f, make)
    if cf.entries and mode != "grad_leaf_base":
        assert cf.entries[0].input_aliasing is not None


@pytest.mark.parametrize("mode", MODES)
def test_aliased_mixed_with_unrelated_and_non_tensor_inputs(mode):
    def f(x, a, n, y, b, name):
        a.add_(n)
        out = x * b + y.sum()
        if name == "double":
            out = out * 2
        return out, b.clone()

    def make():
        base = base_for(mode, 6)
        return (torch.randn(3), base[:3], 2, torch.randn(2), base[2:5], "double")

    cf = check(f, make)
    ia = cf.entries[0].input_aliasing if cf.entries else None
    if ia is not None:
        assert len(ia.bases) == 1
        assert ia.bases[0].members == (1, 3)  # distinct tensor inputs: x, a, y, b
        assert ia.unmerged == (0, 2)


def test_view_whose_base_is_not_passed():
    def f(a, b):
        a.zero_()
        return b.sum()

    def make():
        base = torch.randn(5)
        return (base[:3], base[2:])

    check(f, make)


def test_aliases_without_common_base():
    def f(a, b):
        a.mul_(2)
        return b + 1

    def make():
        base = torch.randn(6)
        return (base[:4], base.detach()[2:])

    check(f, make, backward=False)


def test_metadata_mutation_of_aliased_input():
    def f(a, b):
        a.mul_(2)
        b.t_()
        return b + 0

    def make():
        base = torch.randn(4, 4)
        return (base[0], base[1:3])

    check(f, make)


def test_two_disjoint_sets_of_bases():
    def f(a, b, c, d):
        a.add_(1)
        d.mul_(2)
        return b + c

    def make():
        b1, b2 = torch.randn(4), torch.randn(4)
        return (b1[:2], b1[1:3], b2[1:3], b2)

    cf = check(f, make)
    assert len(cf.entries[0].input_aliasing.bases) == 2


# ---------------------------------------------------------------- 3. not mutated: no synthetic base

def test_aliased_inputs_not_mutated_need_no_synthetic_base():
    def f(a, b):
        return a * 2 + b

    def make():
        base = torch.randn(4, requires_grad=True)
        return (base[:2], base[2:])

    cf = check(f, make)
    entry = cf.entries[0]
    assert entry.input_aliasing is None
    graph = entry.graphs["forward"]
    assert len([n for n in graph.graph.nodes if n.op == "placeholder"]) == 2


# ---------------------------------------------------------------- 4. outputs aliasing merged inputs

def test_output_aliasing_merged_input_regenerated_off_real_input():
    def f(a, b):
        a.add_(1)
        return b.view(-1), a

    base = torch.randn(4, 4)
    a, b = base[0], base[1:3]
    cf = aotgrad.aot_function(f, nop)
    out_b, out_a = cf(a, b)
    assert out_a is a
    assert out_b._base is base
    out_b.fill_(5)
    assert torch.equal(base[1:3], torch.full((2, 4), 5.0))


@pytest.mark.parametrize("mode", MODES)
def test_outputs_alias_merged_inputs(mode):
    def f(a, b):
        b.mul_(3)
        return a.t(), b[0], a

    def make():
        base = base_for(mode, 4, 4)
        return (base[:2], base[1:3])

    check(f, make)


# ---------------------------------------------------------------- 5. autograd

def test_mutation_visible_to_autograd_changes_sibling_grad_fn():
    def f(a, b, w):
        a.mul_(w)
        return b.sum()

    def make():
        base = torch.randn(4, requires_grad=True).mul(1)
        w = torch.randn(2, requires_grad=True)
        return (base[:2], base[1:3], w)

    check(f, make)


def test_grads_of_members_match_eager():
    def f(a, b, c):
        a.add_(c)
        return (a * b).sum(), (b ** 2).sum()

    def make():
        leaf = torch.randn(5, requires_grad=True)
        base = leaf * 1
        c = torch.randn(3, requires_grad=True)
        return (base[:3], base[2:], c)

    check(f, make)


def test_mutating_view_of_leaf_raises_like_eager():
    def f(a, b):
        a.add_(1)
        return b

    cf = aotgrad.aot_function(f, nop)
    base = torch.randn(4, requires_grad=True)
    with pytest.raises(RuntimeError):
        cf(base[:2], base[1:])


# ---------------------------------------------------------------- 6. cache

def test_aliasing_pattern_is_part_of_the_key():
    def f(a, b):
        a.add_(1)
        return a + b

    cf = aotgrad.aot_function(f, nop)
    a, b = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(cf(a, b), f(a.clone(), b.clone()) if False else a + b)
    assert cf.entries[0].input_aliasing is None

    base = torch.randn(4)
    ref = base.clone()
    out = cf(base[:3], base[1:])
    eager_out = f(ref[:3], ref[1:])
    torch.testing.assert_close(out, eager_out)
    torch.testing.assert_close(base, ref)
    assert len(cf.entries) == 2 and cf.entries[0].input_aliasing is not None

    # and back: separate tensors again reuse the first entry
    a2, b2 = torch.randn(3), torch.randn(3)
    ra, rb = a2.clone(), b2.clone()
    torch.testing.assert_close(cf(a2, b2), f(ra, rb))
    assert len(cf.entries) == 2


def test_different_offsets_recompile():
    def f(a, b):
        a.add_(1)
        return b * 1

    cf = aotgrad.aot_function(f, nop)
    for lo in (1, 2):
        base = torch.randn(6)
        ref = base.clone()
        out = cf(base[:3], base[lo:lo + 3])
        exp = f(ref[:3], ref[lo:lo + 3])
        torch.testing.assert_close(out, exp)
        torch.testing.assert_close(base, ref)
    assert len(cf.entries) == 2


def test_duplicate_then_distinct_recompiles():
    def f(a, b):
        a.add_(1)
        return b * 1

    cf = aotgrad.aot_function(f, nop)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x, x), x * 1)
    y, z = torch.randn(3), torch.randn(3)
    ref = z.clone()
    torch.testing.assert_close(cf(y, z), ref)
    assert len(cf.entries) == 2


# ---------------------------------------------------------------- 7. metadata

def test_metadata_says_which_inputs_were_merged():
    def f(x, a, b):
        a.add_(1)
        return x + b

    cf = aotgrad.aot_function(f, nop)
    base = torch.randn(4)
    cf(torch.randn(2), base[:2], base[1:3])
    entry = cf.entries[0]
    text = repr(entry.input_aliasing)
    assert "members=[1, 2]" in text and "synthetic base 0" in text
    assert "synthetic_bases=1" in repr(entry)


# ---------------------------------------------------------------- inference

@pytest.mark.parametrize("pair", list(VIEW_PAIRS))
def test_views_of_one_base_under_no_grad(pair):
    def f(a, b):
        a.mul_(2)
        return a + 0, b * 3

    def make():
        base = torch.randn(4, requires_grad=True).mul(1)
        return VIEW_PAIRS[pair](base)

    check(f, make, grad_mode=False)


# Writes into part of an expanded input (refused until fuzz seed 400409 and its kind): now
# tests/test_overlapping_writes.py::test_write_into_expanded_input.


# A tensor requiring grad, views of it and detach()ed aliases of it passed together: the
# members requiring grad share one autograd root, so one synthetic base serves them; the
# detach()ed ones are taken off it through detach(), as the caller's are.
ROOT_VIEWS_AND_DETACHED = {
    "x, x.t(), x.detach()": lambda x: (x, x.t(), x.detach()),
    "x.unsqueeze(0), x.detach(), x": lambda x: (x.unsqueeze(0), x.detach(), x),
    "x[0], x.detach()[1], x": lambda x: (x[0], x.detach()[1], x),
    "x.detach().t(), x[:, 1:], x.transpose(0, 1)": lambda x: (x.detach().t(), x[:, 1:], x.transpose(0, 1)),
}
ALIASED_MUTATIONS = {
    "detached member add_": lambda a, b, c: (c.add_(1), (a * 2, b.sin()))[1],
    "detached member under no_grad": lambda a, b, c: (torch.no_grad()(lambda: c.mul_(3))(), (a + b.sum(),))[1],
    "viewing member mul_": lambda a, b, c: (b.mul_(2), (a.exp(), b))[1],
    "root returned after a member's write": lambda a, b, c: (c.zero_(), (a, b * 1))[1],
}


@pytest.mark.parametrize("mutation", sorted(ALIASED_MUTATIONS))
@pytest.mark.parametrize("members", sorted(ROOT_VIEWS_AND_DETACHED))
def test_views_and_detached_aliases_of_one_root(members, mutation):
    """Was refused ('share storage, one is mutated, several require grad, and they have no
    common ._base'; fuzz seeds 200417, 201331, 201651, 201748): the detach()ed member has a
    root of its own, but autograd only needs the members requiring grad to share one."""

    def f(a, b, c):
        return ALIASED_MUTATIONS[mutation](a, b, c)

    check(f, lambda: ROOT_VIEWS_AND_DETACHED[members](torch.randn(3, 3, requires_grad=True) * 1))


def test_two_autograd_roots_on_one_storage_still_refused():
    """Two tensors requiring grad with separate histories on one storage (a detach()ed alias
    made to require grad again) cannot share a synthetic base."""

    def f(a, b):
        a.add_(1)
        return a * b

    x = torch.randn(3, requires_grad=True) * 1
    y = x.detach().requires_grad_()
    with pytest.raises(aotgrad.errors.AotgradCompileError, match="share storage"):
        aotgrad.aot_function(f, nop)(x, y)


# Members requiring grad where the first is a view that does not cover its root: the
# synthetic base is taken off the root, so the root's other elements get their gradient.
PARTIAL_VIEW_FIRST = {
    "x[1:], x, x.detach().t()": lambda x: (x[1:], x, x.detach().t()),
    "x[:2], x, x.detach()": lambda x: (x[:2], x, x.detach()),
    "x[:, 0], x.t(), x.detach()[2]": lambda x: (x[:, 0], x.t(), x.detach()[2]),
}


@pytest.mark.parametrize("members", sorted(PARTIAL_VIEW_FIRST))
@pytest.mark.parametrize("leaf", [True, False])
def test_root_gradient_outside_the_first_member(members, leaf):
    """Was silently wrong (fuzz seed 401658): the synthetic base was an as_strided of the
    first member requiring grad (``x[1:]``), whose backward covers only that view's elements,
    so ``x``'s row 0 got a zero gradient through the other member ``x``."""

    def f(a, c, d):
        d.mul_(2)
        return torch.tanh(c), a.sum()

    def make():
        x = torch.randn(3, 3, requires_grad=True)
        return PARTIAL_VIEW_FIRST[members](x if leaf else x * 1)

    check(f, make)


# Inputs on the storage of a tensor that does not require grad: the tensor, views of it and a
# detach()ed alias; an in-place op with an operand requiring grad through a view rebases the
# tensor's history (eager's CopySlices), so the other views get a grad_fn; through the
# detached alias it gives that alias one of its own.
NO_GRAD_ROOT_MEMBERS = {
    "y, y.detach(), y.t()": lambda y: (y, y.detach(), y.t()),
    "y[0], y.detach(), y": lambda y: (y[0], y.detach(), y),
    "y.t(), y.detach(), y.t()": lambda y: (y.t(), y.detach(), y.t()),
}


@pytest.mark.parametrize("write", ["view", "detached"])
@pytest.mark.parametrize("members", sorted(NO_GRAD_ROOT_MEMBERS))
def test_write_with_grad_through_a_view_of_a_root_without_grad(members, write):
    """Was a view requiring grad with no grad_fn (backward: 'element 0 of tensors does not
    require grad'; fuzz seed 431894): without a common ._base every member not requiring grad
    was taken as a separate autograd family, also views of the source's own root."""
    from tests.fuzz import harness

    writer = "d" if write == "view" else "c"
    harness.check_case(
        source=f"def f(a, b, c, d):\n    t1 = b[..., :1]\n    {writer}.add_(a.mean())\n    return t1, d * 2\n",
        inputs={
            "bases": [{"shape": [2], "dtype": "float32", "rg": True}, {"shape": [2, 2], "dtype": "float32", "rg": False}],
            "args": [
                {"kind": "tensor", "base": 0, "expr": "x"},
                *({"kind": "tensor", "base": 1, "expr": e.replace("y", "x")} for e in members.split(", ")),
            ],
        },
        impl=harness.aotgrad_impl,
        seed=9,
    )


# Called under no_grad, a program that writes into a detach()ed member and then records ops
# on the members requiring grad in an enable_grad region (fuzz seeds 3001389, 3008402): the
# members regenerated from the synthetic base must carry their history as the caller's do,
# not as views made under no_grad (whose use after the write raised "A view was created in
# no_grad mode ... modified inplace").
MEMBERS_UNDER_NO_GRAD = {
    **ROOT_VIEWS_AND_DETACHED,
    "x.detach(), x, x": lambda x: (x.detach(), x, x),
    "x.detach(), x.detach(), x": lambda x: (x.detach(), x.detach(), x),
}
GRAD_REGION_AFTER_DETACHED_WRITE = {
    "copy_ into the detached member": lambda d: d.copy_(d * 2),
    "mul_ of the detached member": lambda d: d.mul_(3),
    "write through a view of it": lambda d: d.reshape(-1)[0:1].fill_(1.0),
}


@pytest.mark.parametrize("leaf", [True, False], ids=["leaf root", "non-leaf root"])
@pytest.mark.parametrize("write", sorted(GRAD_REGION_AFTER_DETACHED_WRITE))
@pytest.mark.parametrize("members", sorted(MEMBERS_UNDER_NO_GRAD))
def test_grad_region_after_write_into_detached_member_under_no_grad(members, write, leaf):
    def f(a, b, c):
        GRAD_REGION_AFTER_DETACHED_WRITE[write](next(t for t in (a, b, c) if not t.requires_grad))
        with torch.enable_grad():
            return a * 2, b.sum() * c.sum()

    def make():
        x = torch.randn(3, 3, requires_grad=True)
        return MEMBERS_UNDER_NO_GRAD[members](x if leaf else x * 1)

    check(f, make, grad_mode=False)


# The same under no_grad, the write into the detach()ed member itself recorded by autograd
# (an operand requiring grad, in an enable_grad region): eager gives the caller's tensor a
# history of its own, which the compiled call copies in (was: the copy was made without
# history, the input came back as a leaf; with the member regenerated as a view made in
# no_grad mode it raised instead, fuzz seed 3011967). A member that the caller made as a
# view in no_grad mode raises eager's error when written with grad on.
RECORDED_WRITES = {
    "mul_": lambda d, r: d.mul_(r.sum()),
    "copy_": lambda d, r: d.copy_(d * r.sum()),
    "add_ through a select": lambda d, r: d.select(0, 0).add_(r.sum()),
}


@pytest.mark.parametrize("write", sorted(RECORDED_WRITES))
@pytest.mark.parametrize("members", sorted(MEMBERS_UNDER_NO_GRAD))
def test_recorded_write_into_detached_member_under_no_grad(members, write):
    def f(a, b, c):
        d = next(t for t in (a, b, c) if not t.requires_grad)
        r = next(t for t in (a, b, c) if t.requires_grad)
        with torch.enable_grad():
            RECORDED_WRITES[write](d, r)
            return a.sum() * 1, d * 1

    def make():
        with torch.enable_grad():  # views made with grad on, as a caller outside no_grad makes them
            return MEMBERS_UNDER_NO_GRAD[members](torch.randn(3, 3, requires_grad=True))

    check(f, make, grad_mode=False)
