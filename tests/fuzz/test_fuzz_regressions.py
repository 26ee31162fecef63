"""Regression tests from the differential fuzzer (``tests/fuzz``), one minimized program each.

Each test runs its program eagerly and through ``aotgrad.aot_function(f, nop)`` and compares
everything the harness observes (see ``harness.py``).  Tests marked ``xfail(strict=True)``
are known, still-open aotgrad bugs: when one gets fixed the test XPASSes and fails, so drop
its marker then.  The second group are divergences the fuzzer found in torch's own AOT
Autograd (``AOTGRAD_FUZZ_IMPL=torch``); aotgrad must get them right too.
"""

from __future__ import annotations

import functools

import pytest

from . import harness

# Pinned to aotgrad (not AOTGRAD_FUZZ_IMPL): the xfail list describes aotgrad.
check_case = functools.partial(harness.check_case, impl=harness.aotgrad_impl)


def XFAIL(reason: str):
    return pytest.mark.xfail(strict=True, reason=reason)


# --------------------------------------------------------------------------- found against aotgrad


@XFAIL('aotgrad returns a view (_base set) for an intermediate whose metadata was mutated')
def test_intermediate_metadata_mutated_output_is_not_a_view():
    """An intermediate mutated with transpose_ and returned is a plain tensor in eager, not a view (_is_view/_base)."""
    check_case(
        source='''
def f(a):
    t0 = -a
    t0.transpose_(0, 0)
    return t0,
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad'],
        seed=82,
    )


@XFAIL('aotgrad replays the input metadata mutation with grad enabled and raises the leaf in-place error')
def test_as_strided_on_leaf_under_no_grad():
    """Metadata mutation of a leaf requiring grad under no_grad is legal in eager."""
    check_case(
        source='''
def f(b):
    t0 = torch.ones_like(b)
    with torch.no_grad():
        b.as_strided_((2,), (2,), 2)
    return t0,
''',
        inputs={'bases': [{'shape': [1, 3, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=20,
    )


def test_mutation_through_detached_alias_of_aliased_inputs():
    """Inputs that alias one base; one is clamped under no_grad, another mutated through .detach(); all aliases must see both. (Failed against aotgrad at c9a65b9: input mutation through a detach() of an aliased input is lost (wrong input values); fixed since.)"""
    check_case(
        source='''
def f(a, b, d):
    t0 = b.detach()
    with torch.no_grad():
        d.clamp_(-0.5, 0.5)
        t1 = d @ a
    with torch.no_grad():
        t2 = t1.view(1, 1)
    t0.mul_(2)
    t6 = t2.add(t0, alpha=2)
    t8 = t6 @ a
    t9 = t8.relu()
    return t9,
''',
        inputs={'bases': [{'shape': [1, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.t()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.unsqueeze(0)'}]},
        seed=15,
    )


@XFAIL("aotgrad raises 'a view of a leaf Variable that requires grad is being used in an in-place operation'")
def test_inplace_on_detach_of_view_of_leaf():
    """c is a view of a leaf requiring grad; c.detach().sub_(c) is legal in eager."""
    check_case(
        source='''
def f(b, c):
    t0 = c.detach()
    t0.sub_(c, alpha=2)
    return b,
''',
        inputs={'bases': [{'shape': [4, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.view(-1)'}]},
        seed=119,
    )


def test_read_alias_after_mutating_other_alias():
    """a and c alias one base; after c.mul_(2), reading a must see the new values. (Failed against aotgrad at c9a65b9: reads of an aliased input after a mutation through another alias see stale values (wrong output); fixed since.)"""
    check_case(
        source='''
def f(a, b, c):
    t0 = b.mT @ b
    c.mul_(2)
    t0.addcmul_(a, a)
    return [t0]
''',
        inputs={'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[::2]'}, {'kind': 'same', 'arg': 0}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=50,
    )


@XFAIL('AotgradCompileError: element 0 of tensors does not require grad (at <unknown location>)')
def test_detach__on_leaf_input():
    """detach_() on a leaf input requiring grad, then using it, is legal in eager."""
    check_case(
        source='''
def f(k, a):
    a.detach_()
    a[-1] = a
    t0 = a @ a
    t1 = t0 * k
    return t1,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'value', 'value': 1}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=241,
    )


@XFAIL("aotgrad's output is a plain tensor; reading its grad_fn does not raise")
def test_no_grad_view_of_input_then_base_mutated_grad_fn_raises():
    """Called under no_grad: an unbind view of an input whose base is then mutated; reading the output's grad_fn/is_leaf afterwards raises in eager."""
    check_case(
        source='''
def f(a, b):
    t0 = -b
    t1 = t0 + b
    t2 = t1 + 1
    t6 = a.unbind(0)[1]
    a.addcmul_(t2, t2)
    return t6,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad'],
        seed=54,
    )


@XFAIL("aotgrad's write-back gives the input stride (1, 2) (and so its .grad)")
def test_t__on_noncontiguous_input_strides():
    """t_() on an input with strides (1, 1): eager keeps stride (1, 1) for the size-1 dim."""
    check_case(
        source='''
def f(a):
    a.t_()
    t3 = torch.where(a > 0, a, a)
    return t3,
''',
        inputs={'bases': [{'shape': [2, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone().t()'}]},
        seed=232,
    )


def test_copy_from_alias_after_mutation_through_other_alias():
    """c = x[0] is clamped through a narrow view; b.copy_(a) with a = x must copy the clamped values. (Failed against aotgrad at c9a65b9: b gets the values of a from before the mutation through c; fixed since.)"""
    check_case(
        source='''
def f(a, b, c):
    t0 = c.narrow(0, 2, 1)
    t0.clamp_(-0.5, 0.5)
    b.copy_(a)
    return a,
''',
        inputs={'bases': [{'shape': [1, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x[0]'}]},
        seed=36,
    )


@XFAIL('aotgrad regenerates the output as a view of the input that requires grad')
def test_detach_output_of_metadata_mutated_input():
    """Returning b.detach() of an input that is then unsqueeze_()d: the output must not require grad and is not a view."""
    check_case(
        source='''
def f(b):
    t0 = b.detach()
    b.unsqueeze_(0)
    return [t0]
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=57,
    )


@XFAIL("functionalization raises 'encountered a mutation on a view chain ... as_strided()' (no user source line either)")
def test_mutation_through_as_strided_view_chain():
    """A mutation through a view chain that contains as_strided is legal in eager."""
    check_case(
        source='''
def f(a, b):
    b.transpose_(0, 1)
    t0 = a[-4]
    t1 = t0 - b
    t2 = b.unbind(0)[2]
    t3 = t2.as_strided((3,), (0,), 3)
    t5 = torch.where(t1 > 0, t1, t0)
    t3[-1] = 1.0
    return t5,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.as_strided((2, 3), (1, 1), 0)'}]},
        seed=138,
    )


@XFAIL("aotgrad's output has a grad_fn (gradient flows where eager has none)")
def test_unbind_of_input_under_no_grad_output():
    """A view of an input created under no_grad is returned: in eager it has no grad_fn, so backward through it raises."""
    check_case(
        source='''
def f(c):
    with torch.no_grad():
        t5, = c.unbind(1)
    return t5,
''',
        inputs={'bases': [{'shape': [3, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=140,
    )


@XFAIL("the copy_ write-back into the expanded input raises 'more than one element of the written-to tensor refers to a single memory location'")
def test_zero__on_expanded_input():
    """zero_() on an expanded (overlapping) input is legal in eager."""
    check_case(
        source='''
def f(a):
    t0 = a.permute(1, 0, 2)
    a.zero_()
    return t0,
''',
        inputs={'bases': [{'shape': [4, 1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(4, 1))'}]},
        seed=165,
    )


@XFAIL('aotgrad raises an expand size mismatch (the view is replayed against the transposed base)')
def test_expand_view_replayed_after_base_t_():
    """t3 = t2.expand(...), then t2.t_(), then t3.copy_(...): eager keeps t3's own metadata."""
    check_case(
        source='''
def f(c):
    t0 = c.t()
    with torch.no_grad():
        t1 = t0.softmax(-2)
    t2 = t1.detach()
    t3 = t2.expand(1, 3, 4)
    t5 = t0 @ t0.mT
    t2.t_()
    t3.copy_(t0)
    return t5,
''',
        inputs={'bases': [{'shape': [3, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone().t()'}]},
        seed=167,
    )


@XFAIL('output stride (4, 1, 1) where eager has (0, 1, 4)')
def test_ones_like_of_expanded_narrow_strides():
    """Output strides of a clone of ones_like of a view of an expanded input (size-1 dims keep stride 0)."""
    check_case(
        source='''
def f(a, k):
    t1 = a.narrow(0, 0, min(k, a.shape[0]))
    t2 = torch.ones_like(t1)
    t3 = t2.clone()
    t6 = t3.transpose(1, 2)
    t6.sin_()
    return t6,
''',
        inputs={'bases': [{'shape': [1, 4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(1, 4))'}, {'kind': 'value', 'value': 1}]},
        seed=192,
    )


@XFAIL("aotgrad raises setStorage out of bounds (the traced input's storage is only as large as the view)")
def test_as_strided_view_of_input_beyond_its_numel():
    """as_strided on an input view x[::2] may reach elements of its storage outside the view."""
    check_case(
        source='''
def f(a):
    t0 = a.as_strided((2, 3), (1, 3), 0)
    a.clamp_(-0.5, 0.5)
    t3, t4, t5 = t0.unbind(1)
    return a,
''',
        inputs={'bases': [{'shape': [3, 1, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[::2]'}]},
        seed=215,
    )


@XFAIL('aotgrad returns t1 as a view of a CompiledFunction output: out.mul_(2) raises')
def test_mutating_returned_intermediate_mutated_through_view():
    """t1 mutated through a transpose view and returned; out.mul_(2) afterwards is legal in eager."""
    check_case(
        source='''
def f(a, s):
    t1 = a * 2
    t2 = t1.transpose(1, 0)
    t2.mul_(s)
    return t1
''',
        inputs={'bases': [{'shape': [2, 1, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 0.5}]},
        post=[(0, 'mul_(2)')],
        seed=289,
    )


