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


@XFAIL("aotgrad refuses detach_() of an input whose storage another input shares, one of them mutated (synthetic bases): the member is a view of the base in the program, which eager's detach_() refuses")
def test_detach__of_input_sharing_storage_with_mutated_alias():
    """c (the leaf x) detached in place, then written, with a (x.detach()) sharing its storage: legal in eager."""
    check_case(
        source='''
def f(a, b, c):
    c.detach_()
    c.pow_(2)
    c.copy_(a)
    return c, a, c, c
''',
        inputs={'bases': [{'shape': [2, 2, 4], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=494,
    )


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


def test_t__on_noncontiguous_input_strides():
    """t_() on an input with strides (1, 1): eager keeps stride (1, 1) for the size-1 dim.
    (Fixed: the traced program's alias of an input whose geometry it changes was a
    ``view(shape)``, which recomputes the strides of size-1 dims.)"""
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


def test_dtype_view_of_no_grad_views_of_input():
    """view(torch.int32) of no_grad views of an input whose metadata was mutated; eager's output is not a view."""
    check_case(
        source='''
def f(a):
    with torch.no_grad():
        t1, = a.split(1, 0)
    a.squeeze_(0)
    with torch.no_grad():
        t4 = t1[0]
    t9 = t4.view(torch.int32)
    return t9,
''',
        inputs={'bases': [{'shape': [1, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad'],
        seed=10065,
    )


def test_inplace_on_detach_of_leaf():
    """a.detach().add_(k) on a leaf requiring grad is legal in eager (the mutation bypasses autograd)."""
    check_case(
        source='''
def f(a, k):
    t0 = a.detach()
    t0.add_(k)
    return a,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 2}]},
        seed=10044,
    )


def test_view_of_input_created_under_no_grad_has_no_grad_fn():
    """A view of a leaf input made under no_grad is returned: eager gives it no grad_fn, so backward through it raises."""
    check_case(
        source='''
def f(a):
    with torch.no_grad():
        t0 = a.view(1, 1)
    return t0,
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=10102,
    )


def test_copy_into_dtype_view_of_leaf_view():
    """copy_ into x.view(torch.int32) (a non-differentiable view) of a view of a leaf requiring grad is legal in eager."""
    check_case(
        source='''
def f(c):
    t0, t1 = c.unbind(0)
    t2 = t1.view(torch.int32)
    t2.copy_(t1)
    t3 = t2[:, 1:2]
    return t3,
''',
        inputs={'bases': [{'shape': [2, 4, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.permute(2, 0, 1)'}]},
        seed=10081,
    )


def test_detach__on_input_under_no_grad_call():
    """a.detach_() inside a call made under no_grad: afterwards the input (and its aliases) no longer require grad."""
    check_case(
        source='''
def f(a, b):
    t1 = b.mT @ b
    a.detach_()
    return [t1]
''',
        inputs={'bases': [{'shape': [1, 2, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad'],
        seed=10045,
    )


def test_no_grad_view_chain_blocks_gradient():
    """Views made under no_grad of an intermediate do not propagate gradient to the input in eager (.grad stays None)."""
    check_case(
        source='''
def f(b):
    t0 = b[0:1]
    t1 = torch.tanh(t0)
    with torch.no_grad():
        t2 = t1.view_as(t1)
        t3 = t2.narrow(0, 0, 1)
    t4 = t3.narrow(0, 0, 1)
    return t4,
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=10322,
    )


def test_input_grad_stays_none_when_output_does_not_depend_on_it():
    """b is mutated with copy_ but no output depends on it: eager leaves b's base .grad as None."""
    check_case(
        source='''
def f(a, b):
    t0 = b.sum(0, keepdim=True)
    t1 = a.mT @ a
    b.copy_(t0)
    t2 = t1 @ t1.mT
    t3 = t2.reshape(2, 2)
    return t3,
''',
        inputs={'bases': [{'shape': [4, 2], 'dtype': 'float32', 'rg': True}, {'shape': [2, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x.clone().t()'}]},
        seed=10758,
    )


def test_output_base_is_other_output():
    """t2 = t1.view(1, 1) mutated, return [t2, t1]: out[0]._base is out[1], and out[1] is not a view."""
    check_case(
        source='''
def f(a):
    t0 = a.sin()
    t1 = t0.cumsum(0)
    t2 = t1.view(1, 1)
    t2.mul_(a)
    return [t2, t1]
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=10686,
    )


def test_aliased_inputs_without_common_base():
    """x, x.unsqueeze(0) and x.detach() passed together, one mutated: legal in eager."""
    check_case(
        source='''
def f(a, b, d):
    t0 = d.t()
    d.add_(1)
    return [t0]
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.unsqueeze(0)'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        seed=10298,
    )


def test_unsqueeze__under_no_grad_then_backward_shape_error():
    """unsqueeze_() of a non-leaf input under no_grad: eager's backward through the returned input raises a gradient shape error."""
    check_case(
        source='''
def f(a):
    with torch.no_grad():
        a.unsqueeze_(1)
    return [a]
''',
        inputs={'bases': [{'shape': [4, 4, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=10119,
    )


def test_detach_then_inplace_with_grad_operands_requires_grad():
    """t1 = b.detach(); t1.addcmul_(b, b): t1 requires grad afterwards in eager."""
    check_case(
        source='''
def f(b):
    t1 = b.detach()
    t1.addcmul_(b, b)
    return t1,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=10142,
    )


def test_multi_output_view_chain_invalidated_by_base_mutation():
    """t1 = c.unbind(0)[1].view(1), then c.sin_(): reading t1.grad_fn (and backward) raises in eager."""
    check_case(
        source='''
def f(a, c):
    t0 = c.unbind(0)[1]
    t1 = t0.view(1)
    c.sin_()
    return t1,
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}, {'kind': 'same', 'arg': 0}]},
        seed=10448,
    )


def test_t__then_data_mutation_of_input_keeps_strides():
    """a.t_(); a.masked_fill_(...): the input keeps eager's transposed strides (1, 2)."""
    check_case(
        source='''
def f(a):
    a.t_()
    a.masked_fill_(a > 0, 0.0)
    return a
''',
        inputs={'bases': [{'shape': [4, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=10454,
    )


def test_mutating_returned_view_of_intermediate_mutated_through_deeper_view():
    """t2 = t1.view(1) is mutated through t2.narrow(...).select(...), returned, then zero_()ed by the caller: legal in eager."""
    check_case(
        source='''
def f(a):
    t0 = a + a
    t1 = t0.sin()
    t2 = t1.view(1)
    t3 = t2.narrow(0, 0, 1)
    t4 = t3.select(0, -1)
    t4.sin_()
    return [t2]
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        post=[(0, 'zero_()')],
        seed=10464,
    )


def test_mutating_returned_view_of_metadata_mutated_intermediate():
    """t4 = t0.view_as(t0).squeeze() where t0 is later t_()ed; the caller's t4.add_(1) is legal in eager."""
    check_case(
        source='''
def f(a):
    t0 = a.sum()
    t1 = t0.view_as(t0)
    t2 = a.unbind(0)[0]
    t4 = t1.squeeze()
    t0.t_()
    return t2, a, t4
''',
        inputs={'bases': [{'shape': [1, 2, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        post=[(2, 'add_(1)')],
        seed=10609,
    )


def test_matmul_of_aliased_inputs_is_not_a_view():
    """d @ c where inputs alias each other returns a fresh tensor; the caller may detach_() it."""
    check_case(
        source='''
def f(a, b, c, d):
    t1 = d @ c
    return a, t1, t1
''',
        inputs={'bases': [{'shape': [3, 4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.diagonal()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'same', 'arg': 1}]},
        post=[(2, 'detach_()')],
        seed=10785,
    )


def test_overlapping_inplace_add_raises():
    """t1 = t0.view(1, 1); t1.add_(t0) raises eager's partial-overlap error (the same element
    in layouts of other strides: core/kernel_checks.raise_eager_overlap_error)."""
    check_case(
        source='''
def f(b):
    t0 = b.prod()
    t1 = t0.view(1, 1)
    t1.add_(t0)
    return t1,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad'],
        seed=11087,
    )


def test_mutation_through_view_of_input_after_as_strided_():
    """t0 = a.reshape(...) taken before a.as_strided_(...); t0.mul_(...) under no_grad must use t0's own metadata."""
    check_case(
        source='''
def f(a):
    t0 = a.reshape(2, -1)
    a.as_strided_((2,), (3,), 0)
    t1 = t0.mT @ t0
    t2 = t1.as_strided((3,), (3,), 0)
    with torch.no_grad():
        t0.mul_(t2)
        t3 = t0.reshape(6)
    return t3,
''',
        inputs={'bases': [{'shape': [2, 1, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=11291,
    )


def test_no_grad_views_then_as_strided_on_detached_alias():
    """Views of an input made under no_grad, then as_strided_ on a detach of one of them: eager's backward through them raises."""
    check_case(
        source='''
def f(a, b):
    with torch.no_grad():
        t0 = b.reshape(3)
        t1 = b.permute(0, 1)
    with torch.no_grad():
        t3 = t0.detach()
        t3.as_strided_((1, 2), (2, 1), 1)
    return t1,
''',
        inputs={'bases': [{'shape': [1, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'same', 'arg': 0}]},
        seed=11293,
    )


def test_unneeded_backward_with_version_error_does_not_raise_at_call():
    """sigmoid_ then masked_fill_ on a view of an input; no output requires grad, so eager never runs the backward that would fail."""
    check_case(
        source='''
def f(s, c):
    t0 = c.squeeze(0)
    t1 = t0 + s
    with torch.no_grad():
        t2 = t1.detach()
    t3 = t2.t()
    t0.sigmoid_()
    t0.masked_fill_(t0 > 0, 0.0)
    return t3,
''',
        inputs={'bases': [{'shape': [4, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'value', 'value': 2.0}, {'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=11336,
    )


@XFAIL("refused at compile time: the write t1.add_(k) goes through a view whose chain no longer applies to t0's as_strided_ geometry (was: IndexError replaying the select)")
def test_view_of_intermediate_mutated_after_base_as_strided_():
    """t1 = t0.select(0, 1) taken before t0.as_strided_(...); t1.add_(k) uses t1's own metadata in eager."""
    check_case(
        source='''
def f(a, k):
    t0 = a.pow(2)
    t1 = t0.select(0, 1)
    t0.as_strided_((1, 3), (6, 3), 0)
    t1.add_(k)
    return [a]
''',
        inputs={'bases': [{'shape': [4, 4, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 2}]},
        seed=20281,
    )


def test_inplace_on_unbind_output_of_non_grad_alias():
    """b = x.detach() passed next to x; b.unbind(0)[2].sigmoid_() is legal (b does not require grad)."""
    check_case(
        source='''
def f(a, b):
    t0, t1, t2 = b.unbind(0)
    t2.sigmoid_()
    t4 = t2.flatten()
    return t4
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        seed=20444,
    )


def test_no_grad_inplace_on_split_output_of_detached_alias():
    """b = x.detach().transpose(0, 1); b.split(2, 1)[0].add_(1) under no_grad, then b.t().narrow(...) returned: legal in eager."""
    check_case(
        source='''
def f(a, b):
    t0 = b.t()
    t2 = b.split(2, 1)[0]
    with torch.no_grad():
        t2.add_(1)
    t3 = t2.sum(-2)
    t8 = t0.narrow(0, 0, 1)
    return t8
''',
        inputs={'bases': [{'shape': [2, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach().transpose(0, 1)'}]},
        seed=20592,
    )


def test_grad_mode_view_of_no_grad_view_of_input_corrupts_input_grad():
    """t0 = a.view(3) under no_grad is a leaf of its own in eager (requires_grad, no grad_fn), so t0[1]'s gradient stops there: a.grad is just the cotangent of a * 1; aotgrad's differs at index 1."""
    check_case(
        source='''
def f(a):
    with torch.no_grad():
        t0 = a.view(3)
    return t0[1], a * 1
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_grad_mode_view_of_no_grad_view_of_intermediate_corrupts_input_grad():
    """t1 = a * 2; t2 = t1.view(-1) under no_grad (a leaf of its own in eager); t2[1] returned next to t1: a.grad must be 2 * cotangent(t1)."""
    check_case(
        source='''
def f(a):
    t1 = a * 2
    with torch.no_grad():
        t2 = t1.view(-1)
    return t2[1], t1
''',
        inputs={'bases': [{'shape': [1, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_view_of_transposed_input_after_masked_fill__and_metadata_mutation():
    """a = x.t(); a.masked_fill_(...); t0 = a[1]; a.unsqueeze_(0): eager's t0 has stride (3,), offset 1; aotgrad's (1,), offset 2 (other elements)."""
    check_case(
        source='''
def f(a):
    a.masked_fill_(a > 0, 0.0)
    t0 = a[1]
    a.unsqueeze_(0)
    return t0,
''',
        inputs={'bases': [{'shape': [2, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.t()'}]},
        seed=0,
    )


def test_metadata_mutated_detach_of_input_is_not_a_view():
    """t0 = a.detach(); t0.unsqueeze_(0); return t0: detach() output is no view in eager (_is_view() False, _base None)."""
    check_case(
        source='''
def f(a):
    t0 = a.detach()
    t0.unsqueeze_(0)
    return t0,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_split_of_detached_alias_base_after_input_t_():
    """t5 = c.detach().split(1, 0)[0], then c.t_(): eager's t5._base is the detached tensor, not c."""
    check_case(
        source='''
def f(a, c):
    t4 = c.detach()
    t5 = t4.split(1, 0)[0]
    c.t_()
    return t5,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'same', 'arg': 0}]},
        seed=156,
    )


def test_inplace_add_on_intermediate_of_strided_input_keeps_strides():
    """a has shape (3, 1), strides (1, 3); t1 = a * 2 has eager strides (1, 3); t1.add_(a) keeps them."""
    check_case(
        source='''
def f(a):
    t1 = a * 2
    t1.add_(a)
    return t1,
''',
        inputs={'bases': [{'shape': [3, 1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.as_strided((3, 1), (1, 3))'}]},
        seed=0,
    )


def test_detach_then_mul__by_input_requires_grad():
    """t0 = c.detach(); t0.mul_(c): t0 requires grad afterwards in eager."""
    check_case(
        source='''
def f(c):
    t0 = c.detach()
    t0.mul_(c)
    return t0,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=1411,
    )


def test_as_strided__on_input_view_reaching_past_its_extent():
    """b = x[0] of a (3, 4) base; b.as_strided_((1, 3), (1, 2), 0) needs 5 elements of the 12 in storage: legal in eager.
    (Refused at compile time before: functionalization sizes the input's storage by the input
    view; the input, without autograd history, now gets a synthetic base over its caller's
    storage.)"""
    check_case(
        source='''
def f(b):
    b.as_strided_((1, 3), (1, 2), 0)
    return b + 1,
''',
        inputs={'bases': [{'shape': [3, 4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[0]'}]},
        seed=0,
    )


def test_setitem_on_row_of_expanded_input():
    """b = x.expand(2, 3); b[1] = 1.0 writes x once (b[1] does not overlap itself): legal in eager."""
    check_case(
        source='''
def f(b):
    b[1] = 1.0
    return b.sum(),
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, 3)'}]},
        seed=0,
    )


def test_metadata_mutation_of_no_grad_view_of_detached_alias():
    """a = x.detach(), b = x (requires grad); t0 = a.flatten() + zero_ under no_grad, then t0.squeeze_(0) with grad on: legal in eager (a does not require grad)."""
    check_case(
        source='''
def f(a, b):
    with torch.no_grad():
        t0 = a.flatten()
        t0.zero_()
    t0.squeeze_(0)
    return b
''',
        inputs={'bases': [{'shape': [1, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=659,
    )


def test_detach__then_unsqueeze__of_leaf_input_with_unbind_views():
    """a.detach_() then a.expand(3).unbind(0) and a.unsqueeze_(-1): legal in eager."""
    check_case(
        source='''
def f(a):
    a.detach_()
    t0 = a.expand(3)
    t1, t2, t3 = t0.unbind(0)
    a.unsqueeze_(-1)
    t4 = t1.mean(0)
    return t4,
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=1066,
    )


def test_views_of_intermediate_replayed_after_unsqueeze_():
    """Views t1, t2 of t0 taken before t0.unsqueeze_(-3): eager keeps them as they were."""
    check_case(
        source='''
def f(b):
    t0 = b - b
    t1 = t0.narrow(1, 1, 1)
    t2 = t1.permute(0, 1)
    t0.unsqueeze_(-3)
    t3 = t2.expand(1, 2, 1)
    return t1,
''',
        inputs={'bases': [{'shape': [2, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=1278,
    )


def test_backward_after_detach__of_output_saved_for_backward():
    """Output t1 is saved by t2 = t1.cos(); detaching t1 in place after the call makes eager's backward raise ('Trying to use a saved tensor that has been detached in-place')."""
    check_case(
        source='''
def f(a):
    t1 = a * 2
    t2 = t1.cos()
    return t1, t2
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        post=[(0, 'detach_()')],
        seed=0,
    )


def test_data_mutation_through_view_of_input_moved_by_as_strided_():
    """t0 = a[1:]; t0.as_strided_((2,), (1,), 0) makes t0 cover a[0:2]; t0.mul_(2) must double a[0] and a[1]."""
    check_case(
        source='''
def f(a):
    t0 = a[1:]
    t0.as_strided_((2,), (1,), 0)
    t0.mul_(2)
    return a,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_data_mutation_then_as_strided__of_detached_input():
    """b = x.detach(); b.mul_(2); b.as_strided_((1,), (1,), 0): all four elements of x are doubled in eager."""
    check_case(
        source='''
def f(b):
    b.mul_(2)
    b.as_strided_((1,), (1,), 0)
    return b + 1,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        seed=0,
    )


def test_mutation_of_alias_after_as_strided__of_other_alias():
    """a = x, b = x[:]; a.as_strided_((1,), (1,), 0); b.mul_(2): all of b is doubled in eager."""
    check_case(
        source='''
def f(a, b):
    a.as_strided_((1,), (1,), 0)
    b.mul_(2)
    return a + 1,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x[:]'}]},
        seed=0,
    )


def test_grad_shape_of_leaf_unsqueezed_under_no_grad():
    """A one-element leaf unsqueezed in place under no_grad, then a * 2 returned: eager's a.grad has the new shape (1, 1)."""
    check_case(
        source='''
def f(a):
    with torch.no_grad():
        a.unsqueeze_(0)
    return a * 2,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_grad_shape_of_leaf_unsqueezed_under_no_grad_through_flatten_alias():
    """t0 = a.flatten() (a itself for a 1-d a); t0.unsqueeze_(0) under no_grad; a.permute(1, 0) returned."""
    check_case(
        source='''
def f(a):
    t0 = a.flatten()
    t1 = a.narrow(0, 0, 1)
    with torch.no_grad():
        t0.unsqueeze_(0)
    t6 = a.permute(1, 0)
    return t6,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=1368,
    )


def test_t__on_non_leaf_input_then_matmul_backward():
    """a = x.clone() (1-d, requires grad); a.t_(); a @ a: backward is fine in eager."""
    check_case(
        source='''
def f(a):
    a.t_()
    return a @ a,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=0,
    )


def test_backward_after_mutating_returned_input_saved_by_relu_():
    """d = x.clone(); d.relu_(); return d; then d.mul_(2): eager's backward raises a version-counter error."""
    check_case(
        source='''
def f(d):
    d.relu_()
    return d,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        post=[(0, 'mul_(2)')],
        seed=0,
    )


@XFAIL("aotgrad's backward succeeds")
def test_backward_through_reshape_of_input_unsqueezed_under_no_grad():
    """t0 = d.reshape(4, 3, 4, 1) (a view), d.unsqueeze_(2) under no_grad, t1 = t0.detach(); eager's backward raises 'AsStridedBackward0 returned an invalid gradient'."""
    check_case(
        source='''
def f(d):
    t0 = d.reshape(4, 3, 4, 1)
    t1 = t0.detach()
    with torch.no_grad():
        d.unsqueeze_(2)
    t11 = t1.add(t0, alpha=2)
    return t11,
''',
        inputs={'bases': [{'shape': [4, 3, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=618,
    )


def test_mul__through_t__mutated_view_of_intermediate_grad():
    """t1 = (b * 1)[:]; t1.t_(); t1.mul_(a): the gradient of mul_ must see t1's transposed layout."""
    check_case(
        source='''
def f(a, b):
    t0 = b * 1
    t1 = t0[:]
    t1.t_()
    t1.mul_(a)
    return t0,
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': False}, {'shape': [2, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}]},
        seed=0,
    )


def test_view_of_returned_detach_has_it_as_base():
    """t0 = b.detach(); return t0.unsqueeze(-1), t0: eager's out0._base is out1."""
    check_case(
        source='''
def f(b):
    t0 = b.detach()
    return t0.unsqueeze(-1), t0
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_masked_fill__on_transposed_view_of_input():
    """t2 = a.view(2, 2).t(); t2.masked_fill_(t2 > 0, 0.0): legal in eager."""
    check_case(
        source='''
def f(a):
    t2 = a.view(2, 2).t()
    t2.masked_fill_(t2 > 0, 0.0)
    return a + 1,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_metadata_mutation_of_view_of_leaf_raises():
    """t0 = a.view_as(a); t0.t_() with a a leaf requiring grad: eager raises 'a view of a leaf Variable that requires grad is being used in an in-place operation'."""
    check_case(
        source='''
def f(a):
    t0 = a.view_as(a)
    t0.t_()
    return a,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_backward_through_no_grad_view_of_input_mutated_later():
    """t0 = a.view(1) under no_grad, t5 = t0.cos(), then a.add_(...) with grad on: eager's backward raises 'A view was created in no_grad mode and its base ... has been modified inplace'."""
    check_case(
        source='''
def f(a):
    with torch.no_grad():
        t0 = a.view(1)
    t5 = t0.cos()
    a.add_(a.detach())
    return t5
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=0,
    )


def test_metadata_mutation_of_expanded_view_is_not_a_write():
    """t0 = a.expand(2, 3); t0.unsqueeze_(0): only t0's metadata changes (the same holds for t_, transpose_, squeeze_, as_strided_)."""
    check_case(
        source='''
def f(a):
    t0 = a.expand(2, 3)
    t0.unsqueeze_(0)
    return t0 + 1,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_grad_of_view_of_intermediate_taken_before_t_():
    """t1 = t0[1:] is taken before t0.t_(); t1 keeps its own metadata, so c.grad is nonzero only in row 1."""
    check_case(
        source='''
def f(c):
    t0 = c * 1
    t1 = t0[1:]
    t0.t_()
    return t1[0] * 1,
''',
        inputs={'bases': [{'shape': [2, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


@XFAIL("deliberately refused (docs/user-guide.md): eager's add_ through a self-overlapping as_strided input is its kernel's loop order (the shared element gets 1 added twice); aotgrad raises AotgradCompileError naming the line (core/overlapping_writes.py); the generator no longer writes such programs")
def test_inplace_add_on_self_overlapping_as_strided_input():
    """c = x.as_strided((2, 2), (1, 1), 0): c[0, 1] and c[1, 0] are the same element; eager does not reject the in-place op (no stride 0), it writes element by element."""
    check_case(
        source='''
def f(c):
    c.add_(1)
    return c + 0,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.as_strided((2, 2), (1, 1), 0)'}]},
        seed=0,
    )


def test_out_into_detached_alias_of_grad_input():
    """a = x (requires grad), b = x.detach(): torch.mul(b, 2, out=b) is legal in eager (nothing involved requires grad)."""
    check_case(
        source='''
def f(a, b):
    torch.mul(b, 2, out=b)
    return b + 1,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        seed=0,
    )


def test_no_grad_view_and_mutation_of_detached_alias_of_grad_input():
    """a = x (requires grad), b = x.detach(); t1 = b.t() and b.sub_(1) under no_grad; t1 + 1 returned: legal in eager (b does not require grad)."""
    check_case(
        source='''
def f(a, b):
    with torch.no_grad():
        t1 = b.t()
        b.sub_(1)
    return t1 + 1,
''',
        inputs={'bases': [{'shape': [3, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        seed=0,
    )


def test_detach__of_detached_alias_after_mutation_of_other_alias():
    """a = x.detach(), d = x; d.pow_(2), then a.detach_() under no_grad: a is no view in eager, so detach_ is legal."""
    check_case(
        source='''
def f(a, d):
    d.pow_(2)
    with torch.no_grad():
        a.detach_()
    t0 = d.reshape(1, 6)
    t1 = t0.t()
    return t1,
''',
        inputs={'bases': [{'shape': [2, 3, 1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad'],
        seed=434,
    )


def test_expand_view_of_intermediate_replayed_after_two_unsqueeze_():
    """t3 = t2.expand(1, 3) is taken before t2.unsqueeze_(-1); t2.unsqueeze_(1): eager keeps t3 as it was."""
    check_case(
        source='''
def f(a):
    t2 = a.softmax(-1)
    t3 = t2.expand(1, 3)
    t2.unsqueeze_(-1)
    t2.unsqueeze_(1)
    t6 = t3.cumsum(0)
    return a,
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.unsqueeze(0)'}]},
        seed=1254,
    )


def test_dtype_view_of_input_then_input_t_():
    """t0 = a.view(torch.int32), then a.t_(): eager's t0 is no view (_is_view() False, _base None)."""
    check_case(
        source='''
def f(a):
    t0 = a.view(torch.int32)
    a.t_()
    return t0,
''',
        inputs={'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_detach__of_dtype_view_output_after_input_t_():
    """As above, then the caller detaches the output in place: legal in eager (it is no view)."""
    check_case(
        source='''
def f(a):
    t0 = a.view(torch.int32)
    a.t_()
    return t0,
''',
        inputs={'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        post=[(0, 'detach_()')],
        seed=0,
    )


def test_t_view_of_intermediate_replayed_after_unsqueeze_():
    """t2 = t0.t() and t3 = t2.reshape(2, 1) of an intermediate that requires grad, with t0.unsqueeze_(0) in between: eager keeps t2 as it was."""
    check_case(
        source='''
def f(a):
    t0 = a * 2
    t2 = t0.t()
    t0.unsqueeze_(0)
    t3 = t2.reshape(2, 1)
    return a,
''',
        inputs={'bases': [{'shape': [1, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_detach__of_view_input_raises():
    """a = x.unsqueeze(0) is a view: eager's a.detach_() raises 'Can't detach views in-place'."""
    check_case(
        source='''
def f(a):
    a.detach_()
    return a + 1,
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.unsqueeze(0)'}]},
        seed=0,
    )


def test_split_view_invalidated_by_no_grad_inplace_on_aliased_input():
    """t0 = b.split(1, 0)[0]; then a.sin_() under no_grad, a = x[::2] aliasing b = x: eager raises 'Output 0 of Split is a view and its base ... has been modified inplace' on use."""
    check_case(
        source='''
def f(a, b):
    t0 = b.split(1, 0)[0]
    with torch.no_grad():
        a.sin_()
    return t0,
''',
        inputs={'bases': [{'shape': [2, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[::2]'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=784,
    )


def test_setitem_on_unbind_output_of_no_grad_view_of_detached_alias():
    """b = x.detach() (a = x requires grad); t0 = b.unbind(0)[2] under no_grad; t0.unbind(0)[2][-1] = 1.0: legal in eager."""
    check_case(
        source='''
def f(a, b):
    with torch.no_grad():
        t0 = b.unbind(0)[2]
    t4, t5, t6 = t0.unbind(0)
    t6[-1] = 1.0
    t9 = t6.unbind(0)[1]
    return t9,
''',
        inputs={'bases': [{'shape': [4, 3, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        seed=1459,
    )


def test_matmul_of_as_strided_and_view_of_input_under_no_grad():
    """Called under no_grad: t8 = a.as_strided((1, 2), (6, 1), 0) @ a.view(4, 1, 2, 1) is a plain (broadcast matmul) result in eager. (Crashed with an AttributeError in runtime.regenerate_alias at 56c7a09; fixed since.)"""
    check_case(
        source='''
def f(a):
    t0 = a.view(4, 1, 2, 1)
    t8 = a.as_strided((1, 2), (6, 1), 0)
    return t8 @ t0,
''',
        inputs={'bases': [{'shape': [4, 1, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad'],
        seed=0,
    )


def test_mutation_through_expand_of_int32_view_of_0d_intermediate():
    """t1 = (b * 1).view(torch.int32) (0-d); t1.expand(3)[0].mul_(2) writes t1 (one element): legal in eager."""
    check_case(
        source='''
def f(b):
    t0 = b * 1
    t1 = t0.view(torch.int32)
    t3 = t1.expand(3)[0]
    t3.mul_(2)
    return t1,
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


@XFAIL(".grad stride (1, 1) where eager has (4, 1) (a size-1 dim, but observable)")
def test_grad_strides_of_where_on_transposed_input():
    """a = x.t() with x of shape (1, 4); torch.where(a > 0, a, a): no mutation at all; eager's x.grad is contiguous (4, 1)."""
    check_case(
        source='''
def f(a):
    return torch.where(a > 0, a, a),
''',
        inputs={'bases': [{'shape': [1, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.t()'}]},
        seed=0,
    )


def test_unbind_view_invalidated_by_no_grad_inplace_on_aliased_input():
    """b = x.expand(2) aliases a = x; t2 = b.view(1, 2).unbind(0)[0]; a.mul_(2) under no_grad: eager raises 'Output 0 of Unbind is a view and its base ... has been modified inplace' on use."""
    check_case(
        source='''
def f(a, b):
    t2, = b.view(1, 2).unbind(0)
    with torch.no_grad():
        a.mul_(2)
    return t2,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2)'}]},
        seed=0,
    )


def test_view_of_no_grad_view_of_output_invalidated_by_post_call_mutation():
    """t6 = t2[1] under no_grad, t8 = t6.view(1); the caller zeroes t2 after the call: eager's backward through t8 raises 'Output 0 of View is a view of a view which was created in no_grad mode ...'."""
    check_case(
        source='''
def f(a):
    t2 = a * 2
    with torch.no_grad():
        t6 = t2[1]
    t8 = t6.view(1)
    return t2, t8
''',
        inputs={'bases': [{'shape': [3, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        post=[(0, 'zero_()')],
        seed=0,
    )


def test_select_of_no_grad_view_of_output_invalidated_by_post_call_mutation():
    """Longer variant of the above, as found: t8 = t2.unbind(0)[1] (no_grad).view(1).select(0, -1)."""
    check_case(
        source='''
def f(a):
    t0 = torch.tanh(a)
    t1 = t0.detach()
    t2 = t1 - a
    t3 = a.mT @ a
    t4 = t3.unsqueeze(2)
    with torch.no_grad():
        t6 = t2.unbind(0)[1]
    t7 = t6.view(1)
    t8 = t7.select(0, -1)
    return t4, t2, t8
''',
        inputs={'bases': [{'shape': [3, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        post=[(1, 'zero_()')],
        seed=1213,
    )


def test_view_of_no_grad_view_invalidated_by_unsqueeze__of_input():
    """t3 = a.unbind(1)[1] under no_grad, t4 = t3[-2], then a.unsqueeze_(3) with grad on: eager's backward through t4 raises 'Output 0 of Select is a view of a view which was created in no_grad mode ...'."""
    check_case(
        source='''
def f(a):
    with torch.no_grad():
        t3 = a.unbind(1)[1]
    t4 = t3[-2]
    t5 = torch.maximum(t4, t4)
    a.unsqueeze_(3)
    return t5,
''',
        inputs={'bases': [{'shape': [2, 4, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=185,
    )


def test_slice_of_leaf_input_replayed_after_no_grad_squeeze_():
    """t0 = a[0:1] is taken before a.squeeze_(0) (under no_grad, legal for a leaf); t0.expand(1, 1) uses t0 as it was."""
    check_case(
        source='''
def f(a):
    t0 = a[0:1]
    with torch.no_grad():
        a.squeeze_(0)
    t6 = t0.expand(1, 1)
    return a,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=710,
    )


def test_detached_alias_input_requires_grad_after_inplace_with_grad_operand():
    """a = x (requires grad), b = x.detach(); b.add_(a): eager's b now requires grad and has a grad_fn (AddBackward0), as for an intermediate (test_detach_then_inplace_with_grad_operands_requires_grad)."""
    check_case(
        source='''
def f(a, b):
    b.add_(a)
    return a * 1,
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        seed=0,
    )


def test_detached_alias_mutated_with_grad_operand_sibling_stays_leaf():
    """b, c = x.detach() twice (neither requires grad), a = x.clone(); c.mul_(a): eager gives c a
    grad_fn and leaves b a leaf (the synthetic base was taken off b, whose write back gave b
    the grad_fn instead; seed 754)."""
    check_case(
        source='''
def f(a, b, c):
    c.mul_(a)
    with torch.no_grad():
        t0 = a.expand(2)
    return t0, c, c + 1
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        seed=754,
    )


def test_detached_alias_mutated_with_grad_operand_then_t_():
    """b = x.detach(), a = x (a leaf); b.add_(a) then b.t_(): b requires grad after the call,
    with its new geometry, and a gradient through the caller's b reaches a (seed 575)."""
    check_case(
        source='''
def f(a, b):
    b.add_(a)
    b.t_()
    return a * 2, b.sum()
''',
        inputs={'bases': [{'shape': [2, 3], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        post=[(1, 'mul_(2)')],
        seed=575,
    )


def test_detached_alias_of_non_leaf_mutated_through_view_with_grad_operand():
    """c = a.detach() of a non-leaf a = x.clone() (requires grad); c[0].mul_(a[1]) through a view:
    c gets a grad_fn, a keeps its own (seed 589's kind, through a select view)."""
    check_case(
        source='''
def f(a, c):
    c[0].mul_(a[1])
    return c.view_as(c), a * 3
''',
        inputs={'bases': [{'shape': [2, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.clone().detach()'}]},
        seed=589,
    )


def test_no_grad_metadata_mutation_of_view_input_of_leaf():
    """a = x.t(), x a leaf requiring grad; a.unsqueeze_(0) under no_grad is legal in eager (so are t_, as_strided_)."""
    check_case(
        source='''
def f(a):
    with torch.no_grad():
        a.unsqueeze_(0)
    return a * 1,
''',
        inputs={'bases': [{'shape': [2, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.t()'}]},
        seed=0,
    )


def test_no_grad_inplace_through_as_strided_of_diagonal_input():
    """a = x.diagonal() (x a leaf requiring grad); t0 = a.as_strided((1,), (2,), 0); t0.pow_(2) under no_grad: legal in eager."""
    check_case(
        source='''
def f(a):
    t0 = a.as_strided((1,), (2,), 0)
    with torch.no_grad():
        t0.pow_(2)
    return a,
''',
        inputs={'bases': [{'shape': [2, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.diagonal()'}]},
        seed=0,
    )


def test_view_of_non_leaf_input_taken_before_its_unsqueeze__keeps_grad_fn():
    """b = x.clone() requires grad; t0 = b.t(), then b.unsqueeze_(0): eager's t0 is a TBackward view that requires grad."""
    check_case(
        source='''
def f(b):
    t0 = b.t()
    b.unsqueeze_(0)
    return t0,
''',
        inputs={'bases': [{'shape': [4, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=0,
    )


def test_unused_op_that_raises_in_eager_still_raises():
    """t9 = a.long().softmax(0) is never used, but eager raises NotImplementedError ('softmax_lastdim_kernel_impl' not implemented for 'Long') when it runs."""
    check_case(
        source='''
def f(a):
    t9 = a.long().softmax(0)
    return a * 1,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_float_result_out_into_int32_view_raises():
    """torch.mul(t1, 2, out=t1.view(torch.int32)): eager raises 'result type Float can't be cast to the desired output type Int'."""
    check_case(
        source='''
def f(a):
    t1 = a * 1
    t2 = t1.view(torch.int32)
    torch.mul(t1, 2, out=t2)
    return a,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


@XFAIL("aotgrad's backward succeeds")
def test_backward_of_view_after_no_grad_t__between_metadata_mutations():
    """b = x.clone(); b.unsqueeze_(0); b.t_() under no_grad; t1 = b.view(-1); b.t_(): eager's backward raises 'TBackward1 returned an invalid gradient ... got [3, 1] but expected shape compatible with [1, 3]'."""
    check_case(
        source='''
def f(b):
    b.unsqueeze_(0)
    with torch.no_grad():
        b.t_()
    t1 = b.view(-1)
    b.t_()
    return t1,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=10410,
    )


def test_unsqueeze_view_of_intermediate_replayed_after_as_strided_():
    """t1 = t0.unsqueeze(3) is taken before t0.as_strided_((1, 1), (2, 1), 7); eager keeps t1 as it was."""
    check_case(
        source='''
def f(a, b):
    t0 = b + a
    t1 = t0.unsqueeze(3)
    t2 = b.t()
    t0.as_strided_((1, 1), (2, 1), 7)
    t3 = t2 @ t1
    return t3,
''',
        inputs={'bases': [{'shape': [4, 4, 1], 'dtype': 'float32', 'rg': True}, {'shape': [1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}]},
        seed=16093,
    )


def test_grad_of_as_strided_of_column_view_after_no_grad_mutation_of_leaf():
    """t2 = a[:, 2].as_strided((2,), (1,), 2) covers storage offsets 2, 3 (a[0, 2], a[1, 0]); a no_grad a.mul_(2) afterwards does not change where t2's gradient goes."""
    check_case(
        source='''
def f(a):
    t1 = a[:, 2]
    t2 = t1.as_strided((2,), (1,), 2)
    with torch.no_grad():
        a.mul_(2)
    return t2,
''',
        inputs={'bases': [{'shape': [4, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_setitem_through_int32_view_of_expanded_input():
    """t1 = a.expand(3).view(torch.int32); t1[0] = 1.0 writes a's one element, so every t1[i] reads 1 in eager.
    Functionalization makes view(dtype) an alias (detach) of the expanded tensor; the write
    reaches a's locations through it (overlapping_writes.write_root; was refused)."""
    check_case(
        source='''
def f(a):
    t1 = a.expand(3).view(torch.int32)
    t1[0] = 1.0
    return t1,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_view_of_detach_of_leaf_after_no_grad_unsqueeze__of_leaf():
    """t2 = a.detach()[1:], then a.unsqueeze_(0) under no_grad (legal for a leaf): t2 stays a non-differentiable view of the detached tensor."""
    check_case(
        source='''
def f(a):
    t2 = a.detach()[1:]
    with torch.no_grad():
        a.unsqueeze_(0)
    return t2,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_caller_metadata_mutation_of_view_of_detach_after_no_grad_unsqueeze__of_leaf():
    """As above, then the caller does t2.unsqueeze_(0): legal in eager (t2 does not require grad)."""
    check_case(
        source='''
def f(a):
    t2 = a.detach()[1:]
    with torch.no_grad():
        a.unsqueeze_(0)
    return t2,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        post=[(0, 'unsqueeze_(0)')],
        seed=0,
    )


def test_caller_unsqueeze__of_view_of_intermediate_then_backward():
    check_case(
        source='''
def f(a, k):
    t0 = a + a
    t1 = t0 + a
    t2 = t1[0:1]
    t3 = t2 @ t0
    return t3, t2, a, t3
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 0}]},
        post=[(0, 'detach_()'), (1, 'unsqueeze_(0)')],
        modes=['grad'],
        seed=2630,
    )


def test_no_grad_view_of_input_invalidated_by_no_grad_mul_():
    """Called under no_grad: t1 = a.reshape (a no_grad view), written through t2 = t1.select; eager's t1 is a stale no_grad view: reading its grad_fn / is_leaf raises, and so does backward. aotgrad's rebuilt t1 was a fresh view (is_leaf True)."""
    check_case(
        source='''
def f(a):
    t1 = a.reshape(3, 1)
    t2 = t1.select(0, -1)
    with torch.no_grad():
        t2.mul_(2)
    return t1,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad'],
        seed=173,
    )


def test_view_of_aliased_input_invalidated_by_no_grad_write_through_other_alias():
    """Two args on one base; t1 = d.flatten()[-1] (call under no_grad), then b.mul_(2): eager's t1 is stale."""
    check_case(
        source='''
def f(b, d):
    t0 = d.flatten()
    t1 = t0[-1]
    with torch.no_grad():
        b.mul_(2)
    return t1,
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad'],
        seed=2397,
    )


def test_grad_mode_view_of_no_grad_view_of_intermediate_invalidated():
    """t9 = (t3.expand under no_grad).unsqueeze(0) in grad mode, then t4.add_(1) on a sibling view: eager's t9 raises 'Output 0 of Unsqueeze is a view of a view which was created in no_grad mode ...' (its grad_fn is the grad-mode unsqueeze, so the chain's last step must be replayed in grad mode)."""
    check_case(
        source='''
def f(a):
    with torch.set_grad_enabled(True):
        t0 = a.amax(0)
        t2 = -t0
    with torch.no_grad():
        with torch.enable_grad():
            t3 = t2[1:2]
            t4 = t3.t()
    with torch.no_grad():
        t8 = t3.expand(2, 2)
    t9 = t8.unsqueeze(0)
    t4.add_(1)
    return t9,
''',
        inputs={'bases': [{'shape': [4, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=1746,
    )


def test_split_view_of_intermediate_t__under_no_grad_is_stale():
    """t7 from a no_grad split of an intermediate, then t7.t_() under no_grad: the t_ is a no_grad step of t7's chain and bumps its version; eager's t7 raises 'A view was created in no_grad mode ...' on grad_fn."""
    check_case(
        source='''
def f(b):
    t0 = b @ b
    t2 = t0.squeeze()
    t4 = t2.flatten()
    with torch.no_grad():
        t6, t7 = t4.split(2, 0)
        t7.t_()
    return t7,
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(2,))'}]},
        seed=1930,
    )


def test_pow__on_intermediate_transposed_in_place_keeps_strides():
    """t4 = zeros((1, 2)); t4.t_() under no_grad; t4.pow_(2): eager's t4 keeps the strides (1, 2) of its t_(); the functional pow's output was laid out (1, 1)."""
    check_case(
        source='''
def f(a):
    t4 = torch.zeros((1, 2))
    with torch.no_grad():
        t4.t_()
    t4.pow_(2)
    return t4,
''',
        inputs={'bases': [{'shape': [4, 1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=763,
    )


def test_setitem_through_view_of_intermediate_keeps_its_strides():
    """t0 = where(...) of an expanded input, written through a transposed, squeezed view: eager's t0 keeps the strides (4, 1, 1) it was made with; the functional scatter came back (4, 1, 4)."""
    check_case(
        source='''
def f(a):
    t0 = torch.where(a > 0, a, a)
    t1 = t0.transpose(2, 0)
    t2 = t1.squeeze()
    t2[1:] = 1.0
    return t0,
''',
        inputs={'bases': [{'shape': [4, 1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(4, 1))'}]},
        seed=2291,
    )


def test_stale_view_of_input_regenerates_grad_fn_off_base():
    """t0 = c.t() of an input, then the same input is changed under no_grad: eager's t0 is stale and its grad_fn is regenerated as AsStridedBackward0 off the leaf, so the leaf's .grad has the leaf's strides (2, 1); aotgrad's TBackward0 gave (1, 1)."""
    check_case(
        source='''
def f(b, c):
    t0 = c.t()
    with torch.no_grad():
        b.sin_()
    return t0,
''',
        inputs={'bases': [{'shape': [1, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=828,
    )


def test_data_op_under_no_grad_is_no_no_grad_step_of_a_view():
    """t4 = t2[0:2] in grad mode, t4.pow_(2) under no_grad, then t8 = t4.t() in grad mode: the no_grad pow_ writes data, it adds no no_grad step to t4's view chain, so t8's gradient reaches b through t4 (a regression of the no_grad-prefix tracking: b.grad was wrong)."""
    check_case(
        source='''
def f(a, b, s):
    t0 = a.squeeze(0)
    t2 = torch.where(b > 0, b, t0)
    t4 = t2[0:2]
    with torch.no_grad():
        t4.pow_(2)
    t8 = t4.t()
    t8.mul_(s)
    return [b, t8]
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': -1.5}]},
        seed=1159,
    )


def test_no_grad_view_of_aliased_input_invalidated_by_write_through_sibling():
    """Called under no_grad with b = x.unsqueeze(0) and d = x: t1 = d[1:] is a no_grad view, then b.mul_(2) writes the shared storage (a synthetic base): eager's t1 is stale (its grad_fn raises). Only the run over the synthetic base sees the sibling's write."""
    check_case(
        source='''
def f(b, d):
    t1 = d[1:]
    b.mul_(2)
    return t1,
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.unsqueeze(0)'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad'],
        seed=2397,
    )


def test_detached_view_of_input_mul__by_grad_value_has_own_history():
    """t2 = b.reshape(1, 4, 1).detach(), then t2.mul_(t4) with t4 computed from b: eager's t2 shares b's storage, is no view, requires grad through the mul_ (its gradient reaches b only through t4); aotgrad rebuilt it as a view of b that did not require grad."""
    check_case(
        source='''
def f(b):
    with torch.set_grad_enabled(True):
        t1 = b.reshape(1, 4, 1)
        t2 = t1.detach()
    t3 = b @ b.mT
    t4 = t3.sum(-1, keepdim=True)
    t2.mul_(t4)
    return [t2]
''',
        inputs={'bases': [{'shape': [1, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=192,
    )


def test_detached_alias_of_transposed_input_mul__by_grad_value():
    """u = b.detach() of a transposed input, u.mul_(t) with t = a * 1 requiring grad; the caller then mutates u and calls again under no_grad: u keeps b's storage and geometry, and its gradient reaches a through t."""
    check_case(
        source='''
def f(a, b):
    t = a * 1
    u = b.detach()
    u.mul_(t)
    return u, t.sum()
''',
        inputs={'bases': [{'shape': [2, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.clone().t()'}]},
        post=[(0, 'mul_(2)')],
        modes=['grad', 'no_grad'],
        seed=7,
    )


def test_stale_no_grad_view_stays_stale_after_caller_t_():
    """t1 = a.unsqueeze(-1) under no_grad, then a.add_(1): t1 is stale; the caller's a.t_() after the call bumps the shared version once more, and eager's t1 stays stale (the rebuilt view was made at the counter's value plus one, so one more bump made it look fresh)."""
    check_case(
        source='''
def f(a):
    with torch.no_grad():
        t1 = a.unsqueeze(-1)
    a.add_(1)
    return a, t1
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        post=[(0, 't_()')],
        seed=5384,
    )


def test_detached_input_written_with_grad_operand_through_same_storage_input():
    """a = x.detach() and c = x: t1 = a.contiguous() (a itself) is written by sub_ with an operand requiring grad; only the run over the synthetic base sees a detached alias with a history of its own, the call's run sees the input itself: returned as the input (regressed to a compile-time refusal for a while)."""
    check_case(
        source='''
def f(a, b, k, c):
    t0 = c.squeeze(1)
    t1 = a.contiguous()
    t2 = torch.where(b > 0, b, a)
    t1.sub_(t0, alpha=2)
    t3 = t2.abs()
    t4 = t0 * k
    return t1, t1, t1
''',
        inputs={'bases': [{'shape': [3, 2, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}, {'kind': 'same', 'arg': 0}, {'kind': 'value', 'value': 3}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=253,
    )


def test_view_of_masked_filled_intermediate_keeps_eager_geometry():
    """Seed 200055 (minimized): t1, an expand of an intermediate written through and then
    unsqueeze_d, came back contiguous with its values permuted (the intermediate keeps the
    transposed input's layout in eager; views of intermediates are shadowed now)."""
    check_case(
        source='''
def f(a):
    t0 = a.sin()
    t0.masked_fill_(t0 > 0, 0.0)
    t1 = t0.expand(1, 2, 2, 4)
    t1.add_(1)
    t1.unsqueeze_(0)
    return t1, t0
''',
        inputs={'bases': [{'shape': [2, 4, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone().transpose(-1, -2)'}]},
        modes=['grad'],
        seed=55,
    )


def test_mul__through_view_changed_by_t__is_refused():
    """Seed 200276 (minimized): t1 = t0.transpose(1, 0); t1.t_(); t1.mul_(a): the gradients
    of a and b were wrong; refused naming the write."""
    check_case(
        source='''
def f(a, b):
    t0 = b @ b.mT
    t1 = t0.transpose(1, 0)
    t1.t_()
    t1.mul_(a)
    return t1 + 1, t0, t1
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float64', 'rg': True}, {'shape': [2, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}]},
        modes=['grad'],
        seed=276,
    )


def test_view_of_detach_returned_before_it_has_it_as_base():
    """Seed 200539 (minimized): t1 = t0.unsqueeze(-1) of t0 = b.detach(), returned before t0:
    eager's t1._base is t0 (output 1); it was rebuilt as a view of another tensor."""
    check_case(
        source='''
def f(b):
    t0 = b.detach()
    t1 = t0.unsqueeze(-1)
    return t1, t0
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        modes=['grad'],
        seed=539,
    )


def test_zero__of_alias_beside_as_strided_input_and_squeeze_():
    """Aliased inputs (one as_strided of the base), one written, one squeeze_d: the members' as_strided is taken off the synthetic base itself, not tracing's view alias of it (functionalization refused the write). (fuzz seed 401136)"""
    check_case(
        source='''
def f(a, b, c, s):
    b.squeeze_(0)
    c.zero_()
    t0 = a @ a
    t1 = t0.view(1)
    t0.unsqueeze_(0)
    return c, a, t1, t0
''',
        inputs={'bases': [{'shape': [1, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.as_strided((1,), (1,), 0)'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x[:1]'}, {'kind': 'value', 'value': 0.5}]},
        post=[(3, 'unsqueeze_(0)')],
        modes=['grad'],
        seed=1136,
    )


def test_sin__of_strided_alias_beside_unsqueeze__of_other_alias():
    """Aliased inputs, both written, one unsqueeze_d: members regenerated off the graph input, not its view alias (functionalization refused the write). (fuzz seed 401623)"""
    check_case(
        source='''
def f(a, b, c, k, mode):
    a.sin_()
    c.fill_(0.5)
    t0, = a.unbind(0)
    t1 = c @ c
    t2 = t1.view_as(t1)
    t3 = t1.t()
    t4 = t3.expand(1)
    t5 = t1.t()
    t6 = t5.squeeze()
    t7 = t4 @ t4
    c.mul_(t7)
    c.unsqueeze_(0)
    return a, c, t1, k
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[::2]'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 2}, {'kind': 'value', 'value': 'sum'}]},
        post=[],
        modes=['grad', 'no_grad'],
        seed=1623,
    )


def test_clamp__of_alias_then_unsqueeze__of_its_base():
    """x and x.view(-1) passed together, the view written, x unsqueeze_d: members regenerated off the graph input (functionalization refused the write). (fuzz seed 402414)"""
    check_case(
        source='''
def f(a, b, mode):
    b.clamp_(-0.5, 0.5)
    a.unsqueeze_(1)
    t0, = a.unbind(1)
    if mode == "sum":
        t1 = b.sum()
    else:
        t1 = b.mean()
    t2 = t1.contiguous()
    return t1,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float64', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.view(-1)'}, {'kind': 'value', 'value': 'mean'}]},
        post=[(0, 'mul_(2)'), (0, 't_()')],
        modes=['grad'],
        seed=2414,
    )


def test_fill__of_slice_alias_then_squeeze__of_base():
    """x[1:], x, x passed, the slice written, x squeeze_d: members regenerated off the graph input (functionalization refused the write). (fuzz seed 402611)"""
    check_case(
        source='''
def f(a, opt, b, c, k):
    with torch.no_grad():
        t0 = c.t()
        c.relu_()
        a.fill_(0.5)
    c.squeeze_(1)
    t1 = t0.permute(1, 0)
    return t1, t1, t0, t1
''',
        inputs={'bases': [{'shape': [4, 1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[1:]'}, {'kind': 'value', 'value': None}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 0}]},
        post=[],
        modes=['grad', 'grad'],
        seed=2611,
    )


def test_as_strided_after_write_relaying_only_size1_strides():
    """as_strided of an input written in place whose functional value differs from eager's layout only in a size-1 dim's stride: the same elements (was refused). (fuzz seed 401974)"""
    check_case(
        source='''
def f(a, k, b):
    t0 = b.select(1, 0)
    t1 = torch.where(t0 > 0, t0, a)
    t2 = b.unsqueeze(k % 2)
    t2.clamp_(-0.5, 0.5)
    t3 = t2 @ t2.mT
    t4 = t2.as_strided((1, 2), (2, 3), 0)
    a.transpose_(0, 2)
    t4.clamp_(-0.5, 0.5)
    t5 = a.prod()
    t6 = torch.arange(8, dtype=t0.dtype).view(t0.shape)
    t7 = torch.maximum(t0, t1)
    b.pow_(2)
    return t1, t6
''',
        inputs={'bases': [{'shape': [1, 4, 2], 'dtype': 'float32', 'rg': False}, {'shape': [1, 4, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.transpose(0, 1)'}, {'kind': 'value', 'value': 3}, {'kind': 'same', 'arg': 0}]},
        post=[],
        modes=['grad'],
        seed=1974,
    )


def test_as_strided__after_write_relaying_only_size1_strides():
    """as_strided_ of an input written in place whose functional value differs from eager's layout only in a size-1 dim's stride (was refused). (fuzz seed 402783)"""
    check_case(
        source='''
def f(a, b, c):
    c.add_(a)
    t0 = torch.maximum(c, a)
    c.as_strided_((1, 2), (4, 1), 0)
    t1 = torch.ones_like(c)
    c.as_strided_((2, 1), (1, 1), 9)
    t1.neg_()
    with torch.set_grad_enabled(True):
        t2 = t1.reshape(1, 2)
        t3 = t2 * a
    return t1, a
''',
        inputs={'bases': [{'shape': [2, 1], 'dtype': 'float32', 'rg': True}, {'shape': [1, 2], 'dtype': 'float32', 'rg': True}, {'shape': [4, 1, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[0]'}, {'kind': 'tensor', 'base': 1, 'expr': 'x[:1]'}, {'kind': 'tensor', 'base': 2, 'expr': 'x.clone().transpose(-1, -2)'}]},
        post=[(0, 't_()')],
        modes=['grad'],
        seed=2783,
    )


def test_as_strided_of_diagonal_input_after_out_write_reaches_outside_it():
    """as_strided of a view of an input (x.diagonal()) that an out= write re-laid out, naming elements of the storage outside the input: the input gets a synthetic base over its whole storage (was refused). (fuzz seed 400015)"""
    check_case(
        source='''
def f(a, b, c):
    t0 = c.diagonal(0, 0, 1)
    a.add_(1)
    t1 = c.expand(2, 2, 4)
    torch.mul(b, 2, out=t0)
    torch.mul(t0, 2, out=b)
    with torch.no_grad():
        t2 = torch.zeros((2, 2, 4))
    t3 = t1 @ t1.mT
    t0.squeeze_(0)
    t4 = t3.relu()
    t6, t7 = t4.split(1, 0)
    t8 = b[0]
    t9 = t8.as_strided((1, 3), (9, 2), 0)
    return a, t2, t9
''',
        inputs={'bases': [{'shape': [2, 4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.diagonal()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        post=[],
        modes=['grad'],
        seed=15,
    )


# --------------------------------------------------------------------------- found against torch's aot_function
# (AOTGRAD_FUZZ_IMPL=torch); checked here against aotgrad.


def test_torch_divergence_5003_0():
    """torch's aot_function differs from eager here: call.output.is_view"""
    check_case(
        source='''
def f(a):
    t1 = a.t()
    t2 = t1.sigmoid()
    t3 = t2.view(1)
    t6, = t3.unbind(0)
    return t6,
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=5003,
    )


def test_torch_divergence_5008_1():
    """torch's aot_function differs from eager here: call.output.same_object_as"""
    check_case(
        source='''
def f(a, s):
    t0 = a - a
    t3 = t0 @ t0
    t4 = t3 + s
    t5 = t4.t()
    return t5, t5
''',
        inputs={'bases': [{'shape': [2, 3, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.view(-1)'}, {'kind': 'value', 'value': -1.5}]},
        seed=5008,
    )


def test_torch_divergence_5010_2():
    """torch's aot_function differs from eager here: call: impl raised, eager did not: RuntimeError: a leaf Variable that requires grad is being used"""
    check_case(
        source='''
def f(a, c):
    t2 = c.narrow(0, 1, 1)
    with torch.no_grad():
        t2.pow_(2)
    return [t2]
''',
        inputs={'bases': [{'shape': [4, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[0]'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.diagonal()'}]},
        seed=5010,
    )


def test_torch_divergence_5020_3():
    """torch's aot_function differs from eager here: call.output.requires_grad"""
    check_case(
        source='''
def f(a, flag):
    if flag:
        t5 = a.clone()
    else:
        t5 = a.clone()
    return t5,
''',
        inputs={'bases': [{'shape': [3, 1, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': False}]},
        modes=['grad', 'no_grad'],
        seed=5020,
    )


def test_torch_divergence_5025_4():
    """torch's aot_function differs from eager here: backward: impl raised, eager did not: RuntimeError: element N of tensors does not require grad and d"""
    check_case(
        source='''
def f(b):
    t0 = b[-1]
    t2 = t0.clone()
    return t2,
''',
        inputs={'bases': [{'shape': [4, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad', 'grad'],
        seed=5025,
    )


def test_torch_divergence_5059_5():
    """torch's aot_function differs from eager here: post: impl raised, eager did not: RuntimeError: Can't detach views in-place. Use detach() instea"""
    check_case(
        source='''
def f(a, b):
    b.masked_fill_(b > 0, 0.0)
    return a,
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        post=[(0, 'detach_()')],
        seed=5059,
    )


def test_data_then_noop_squeeze__on_as_strided_input():
    """a = x.as_strided((1, 2), (2, 3), 0); a.mul_(2); a.squeeze_(1): the write-back must hit x[0] and x[3]."""
    check_case(
        source='''
def f(a):
    a.mul_(2)
    a.squeeze_(1)
    t0 = a.diagonal()
    t1 = t0.sigmoid()
    t2 = t1.sigmoid()
    return t2,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.as_strided((1, 2), (2, 3), 0)'}]},
        seed=5085,
    )


def test_torch_divergence_5092_7():
    """torch's aot_function differs from eager here: call: impl raised, eager did not: IndexError: Dimension out of range (expected to be in range of"""
    check_case(
        source='''
def f(a, b):
    t3 = a.select(1, -1)
    with torch.no_grad():
        a.addcmul_(b, b)
    return t3,
''',
        inputs={'bases': [{'shape': [1, 3, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        seed=5092,
    )


def test_detach__on_leaf_input_then_used():
    """a.detach_() on a leaf requiring grad: afterwards it no longer requires grad."""
    check_case(
        source='''
def f(a):
    a.detach_()
    t0 = a.mT @ a
    t1 = t0 + t0
    return t1,
''',
        inputs={'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=5098,
    )


def test_torch_divergence_5149_9():
    """torch's aot_function differs from eager here: call: impl raised, eager did not: AssertionError: outs_to_grad length (N) != tangents length (N)"""
    check_case(
        source='''
def f(a, b, c, d):
    with torch.no_grad():
        d.sigmoid_()
    t0 = -d
    t3 = torch.where(t0 > 0, t0, b)
    with torch.no_grad():
        torch.mul(a, 2, out=c)
    return t3,
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': False}, {'shape': [1, 3, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x[::2]'}, {'kind': 'same', 'arg': 0}, {'kind': 'tensor', 'base': 1, 'expr': 'x.transpose(0, 1)'}]},
        seed=5149,
    )


def test_torch_divergence_5169_10():
    """torch's aot_function differs from eager here: backward: eager raised, impl did not: RuntimeError: one of the variables needed for gradient computa"""
    check_case(
        source='''
def f(a, s):
    t0 = a - a
    t1 = t0 * s
    t2 = a * s
    t3 = t2 @ t2.mT
    t4 = t3 @ t1
    t6 = t4 + s
    t7 = t6 + t1
    t8 = torch.maximum(t7, t2)
    return a, t3, t8
''',
        inputs={'bases': [{'shape': [1, 2, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': -1.5}]},
        post=[(1, 'zero_()')],
        seed=5169,
    )


def test_torch_divergence_5179_11():
    """torch's aot_function differs from eager here: call.output.stride"""
    check_case(
        source='''
def f(a, b):
    t0 = b * a
    t1 = t0.unsqueeze(-1)
    t2 = t1.clone()
    t4 = b.reshape(-1)
    t8 = torch.where(t4 > 0, t4, t2)
    t9 = t8.transpose(2, 1)
    return t9,
''',
        inputs={'bases': [{'shape': [2, 2], 'dtype': 'float32', 'rg': False}, {'shape': [4, 1, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[::2]'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}]},
        seed=5179,
    )


def test_torch_divergence_5180_12():
    """torch's aot_function differs from eager here: call: eager raised, impl did not: RuntimeError: a view of a leaf Variable that requires grad is """
    check_case(
        source='''
def f(a, b):
    t0 = torch.mm(a, a)
    t1 = torch.mm(t0, a)
    b[0] = 1.0
    return t1,
''',
        inputs={'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': False}, {'shape': [4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.as_strided((2, 2), (2, 1), 0)'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}]},
        seed=5180,
    )


def test_torch_divergence_5193_13():
    """torch's aot_function differs from eager here: call: impl raised, eager did not: RuntimeError: a view of a leaf Variable that requires grad is """
    check_case(
        source='''
def f(a, b, k):
    t0 = b.narrow(0, 0, 1)
    t1 = t0.unsqueeze(k % 2)
    t5 = t1[:, 0:1]
    t6 = t5.mT @ t5
    t7 = t6.view(torch.int32)
    with torch.no_grad():
        b.addcmul_(t0, t0)
    with torch.no_grad():
        t8 = t7.as_strided((2,), (1,), 0)
        t9 = t8.sum(-1, keepdim=True)
    return t9
''',
        inputs={'bases': [{'shape': [4, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.unsqueeze(0)'}, {'kind': 'same', 'arg': 0}, {'kind': 'value', 'value': 0}]},
        seed=5193,
    )


def test_unsqueeze__on_detached_alias_of_input_passed_twice():
    """c = x.detach() is unsqueeze_()d while x is passed twice and multiplied: eager's backward is fine (metadata mutation of a detached alias does not bump x's version)."""
    check_case(
        source='''
def f(a, b, c, d):
    c.unsqueeze_(0)
    t0 = d * b
    return t0,
''',
        inputs={'bases': [{'shape': [3, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'same', 'arg': 0}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=5247,
    )


def test_torch_divergence_5324_15():
    """torch's aot_function differs from eager here: call: impl raised, eager did not: AssertionError: incorrect out shape after application of ViewM"""
    check_case(
        source='''
def f(a, c):
    t1 = a.detach()
    torch.mul(a, 2, out=t1)
    return t1
''',
        inputs={'bases': [{'shape': [3, 4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.t()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=5324,
    )


def test_torch_divergence_5434_16():
    """torch's aot_function differs from eager here: call: impl raised, eager did not: AssertionError: any_leaf=True != all_leaf=False for outer_indi"""
    check_case(
        source='''
def f(b, c):
    with torch.no_grad():
        t2 = b.t()
        t2[1:] = 1.0
    t4 = t2.detach()
    return t4,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x[::2]'}]},
        seed=5434,
    )


def test_torch_divergence_5439_17():
    """torch's aot_function differs from eager here: call.output._base"""
    check_case(
        source='''
def f(a):
    t5 = a.mT @ a
    t6 = t5.select(2, 1)
    return t6, t5
''',
        inputs={'bases': [{'shape': [3, 3, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=5439,
    )


@XFAIL('.grad strides (1, 1, 1) where eager has (2, 2, 1)')
def test_grad_strides_of_permuted_input_with_no_grad_metadata_mutation():
    """Input x.permute(2, 0, 1); a no_grad unsqueeze_ on a view of it; the leaf's .grad keeps the leaf's strides."""
    check_case(
        source='''
def f(c):
    t0 = c.unsqueeze(0)
    with torch.no_grad():
        t0.unsqueeze_(2)
    t3 = c.unbind(0)[1]
    return t3,
''',
        inputs={'bases': [{'shape': [1, 1, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.permute(2, 0, 1)'}]},
        seed=5449,
    )


def test_detach__on_non_leaf_input():
    """b.detach_() on a non-leaf input requiring grad: afterwards b is a leaf that does not require grad."""
    check_case(
        source='''
def f(a, b):
    b.detach_()
    return a,
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=5550,
    )


def test_torch_divergence_5568_20():
    """torch's aot_function differs from eager here: call: impl raised, eager did not: RuntimeError: more than one element of the written-to tensor r"""
    check_case(
        source='''
def f(a):
    t0 = a.expand(3, 3, 2, 3)
    with torch.no_grad():
        t0[::2] = a
    return t0,
''',
        inputs={'bases': [{'shape': [3, 2, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=5568,
    )


def test_torch_divergence_5828_21():
    """torch's aot_function differs from eager here: backward.baseN.grad"""
    check_case(
        source='''
def f(a, b):
    with torch.no_grad():
        b.pow_(2)
        t1 = a * a
    t2 = torch.arange(3, dtype=t1.dtype).view(t1.shape)
    t6 = torch.arange(3, dtype=t2.dtype).view(t2.shape)
    t7 = t6.t()
    t9 = a.narrow(0, 0, 1)
    t10 = t9 @ t7
    return t10,
''',
        inputs={'bases': [{'shape': [1, 3], 'dtype': 'float32', 'rg': True}, {'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}]},
        seed=5828,
    )


def test_torch_divergence_5848_22():
    """torch's aot_function differs from eager here: call: eager raised, impl did not: RuntimeError: a leaf Variable that requires grad is being used"""
    check_case(
        source='''
def f(a):
    t0 = a.softmax(0)
    a.pow_(2)
    return t0,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=5848,
    )


def test_torch_divergence_6155_23():
    """torch's aot_function differs from eager here: call: impl raised, eager did not: RuntimeError: Can't detach views in-place. Use detach() instea"""
    check_case(
        source='''
def f(a, b, c):
    b.sin_()
    c.detach_()
    t1 = a[2:3:2]
    return t1,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': False}, {'shape': [4, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x.diagonal()'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}]},
        seed=6155,
    )


def test_views_between_two_unsqueeze__of_intermediate():
    """t6 = t0.transpose(1, 0) taken between two t0.unsqueeze_() calls; backward through t6 is fine in eager."""
    check_case(
        source='''
def f(c):
    t0 = c * 2
    t0.unsqueeze_(0)
    t6 = t0.transpose(1, 0)
    t0.unsqueeze_(2)
    t8 = t6.reshape(1, 1, 1)
    t9 = t8 @ t8.mT
    t10 = t9.reshape(1, 1)
    return t10,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=6338,
    )


def test_torch_divergence_6422_25():
    """torch's aot_function differs from eager here: backward: impl raised, eager did not: RuntimeError: Boolean value of Tensor with more than one value"""
    check_case(
        source='''
def f(a):
    t0 = a.squeeze()
    t1 = torch.where(t0 > 0, t0, a)
    return t1, t0, t0
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        post=[(2, 'unsqueeze_(0)')],
        seed=6422,
    )


def test_torch_divergence_6552_26():
    """torch's aot_function differs from eager here: call: impl raised, eager did not: RuntimeError: permute(sparse_coo): number of dimensions in the"""
    check_case(
        source='''
def f(a, mode, b):
    t3 = b.permute(1, 2, 0)
    if mode == "sum":
        t4 = t3.sum()
    t5 = t4.view(1)
    t6 = t5[0:1]
    b.sub_(t6, alpha=2)
    return t3,
''',
        inputs={'bases': [{'shape': [3, 4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 'sum'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.unsqueeze(0)'}]},
        seed=6552,
    )


@XFAIL(".grad stride in a size-1 dim (was: 'could not trace' on a version-counter error while tracing the backward, traced since core/saved_tensors.py)")
def test_backward_of_mutated_input_not_traced_unless_needed():
    """sigmoid_ of an intermediate then used to mutate input b; the output depends only on a.t().clone(), so eager's backward never touches the sigmoid."""
    check_case(
        source='''
def f(a, b):
    t0 = a.unsqueeze(-2)
    t1 = torch.tanh(t0)
    t2 = t1.squeeze(2)
    t2.sigmoid_()
    t4 = a.t()
    t6 = t4.clone()
    b.sub_(t2, alpha=2)
    t7 = t6.mean(0)
    return t7
''',
        inputs={'bases': [{'shape': [2, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=6825,
    )


def test_torch_divergence_6845_28():
    """torch's aot_function differs from eager here: call: eager raised, impl did not: RuntimeError: A view was created in no_grad mode and is being """
    check_case(
        source='''
def f(c):
    t0 = c.contiguous()
    with torch.no_grad():
        t1 = t0.view_as(t0)
        t2 = t1.logsumexp(0)
    t1.t_()
    return t2,
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad', 'grad'],
        seed=6845,
    )


def test_torch_divergence_6895_29():
    """torch's aot_function differs from eager here: call: impl raised, eager did not: RuntimeError: invalid gradient at index N - got [..] but expec"""
    check_case(
        source='''
def f(a):
    t5 = a.reshape(1, 12)
    t6 = t5.unsqueeze(2)
    t5.unsqueeze_(-1)
    return t6,
''',
        inputs={'bases': [{'shape': [4, 2, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[::2]'}]},
        seed=6895,
    )


def test_torch_divergence_6964_30():
    """torch's aot_function differs from eager here: call.output.storage_offset"""
    check_case(
        source='''
def f(a, c):
    t0 = c.narrow(0, 1, 1)
    t1 = t0.squeeze(0)
    t1.mul_(2)
    t2 = t1.detach()
    t3 = t2.view(1)
    return t3,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x[1:]'}]},
        seed=6964,
    )


def test_torch_divergence_49_31():
    """torch's aot_function differs from eager here: call.output.storage_offset"""
    check_case(
        source='''
def f(a, b):
    b.relu_()
    t4, t5, t6 = a.unbind(0)
    return t6,
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[1:]'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=49,
    )


def test_transpose__then_clamp__on_strided_input():
    """a = x[::2]; a.transpose_(0, 2); a.clamp_(...): the clamp must land on x's rows 0 and 2, and a keeps strides (1, 3, 6)."""
    check_case(
        source='''
def f(a):
    a.transpose_(0, 2)
    a.clamp_(-0.5, 0.5)
    return a,
''',
        inputs={'bases': [{'shape': [3, 1, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[::2]'}]},
        seed=215,
    )


def test_masked_fill__through_expand_of_as_strided__input():
    """In-place masked_fill_ through an expanded view of an input that was as_strided_()d."""
    check_case(
        source='''
def f(a):
    a.as_strided_((1, 1), (1, 0), 0)
    t0 = a.expand(1, 3, 1)
    a.neg_()
    t0.masked_fill_(t0 > 0, 0.0)
    t1 = t0.sum(1, keepdim=True)
    return t1,
''',
        inputs={'bases': [{'shape': [1, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=2199,
    )


def test_fill__through_expanded_view_of_input():
    """c.expand(2, 3).fill_(0.5) must fill the input c."""
    check_case(
        source='''
def f(b, c):
    t0 = c.expand(2, 3)
    t0.fill_(0.5)
    t2 = b + b
    return t2,
''',
        inputs={'bases': [{'shape': [3, 2, 1], 'dtype': 'float32', 'rg': False}, {'shape': [1, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x.clone().t()'}]},
        modes=['no_grad'],
        seed=1049,
    )


def test_torch_divergence_7_35():
    """torch's aot_function differs from eager here: call.output.requires_grad"""
    check_case(
        source='''
def f(a):
    t0 = a.pow(2)
    a.squeeze_(0)
    t4 = t0.narrow(1, 0, 1)
    return t4,
''',
        inputs={'bases': [{'shape': [4, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        seed=7,
    )


def test_torch_divergence_97_36():
    """torch's aot_function differs from eager here: call: eager raised, impl did not: RuntimeError: a view of a leaf Variable that requires grad is """
    check_case(
        source='''
def f(a, b):
    a[0] = 1.0
    return b,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'same', 'arg': 0}]},
        seed=97,
    )


def test_detach__then_view_of_leaf_input():
    """a.detach_() on a leaf then a.t(): the input and the output do not require grad."""
    check_case(
        source='''
def f(a):
    a.detach_()
    t5 = a.t()
    return t5
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=1124,
    )


def test_inplace_on_detach_input_alias_of_leaf():
    """b = x.detach() is passed next to x (a leaf requiring grad); b.add_(1) is legal in eager and a is returned as-is."""
    check_case(
        source='''
def f(a, b):
    b.add_(1)
    return a,
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        seed=0,
    )


def test_return_same_tensor_twice_is_same_object():
    """torch's aot_function differs from eager here: ok"""
    check_case(
        source='''
def f(a):
    t0 = a * 2
    return t0, t0
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        seed=0,
    )


def test_compiled_with_grad_then_called_under_no_grad():
    """torch's aot_function differs from eager here: call.output.requires_grad"""
    check_case(
        source='''
def f(a):
    return a.sin(),
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['grad', 'no_grad'],
        seed=0,
    )


def test_compiled_under_no_grad_then_called_with_grad():
    """torch's aot_function differs from eager here: backward: impl raised, eager did not: RuntimeError: element N of tensors does not require grad and d"""
    check_case(
        source='''
def f(a):
    return a.sin(),
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['no_grad', 'grad'],
        seed=0,
    )


# --------------------------------------------------------------------------- found by the dynamic mode (--dynamic)

@XFAIL("dynamic: an empty diagonal of an intermediate is rebuilt by as_strided at fake-tensor storage_offset")
def test_dynamic_empty_diagonal_alias_of_intermediate_storage_offset():
    check_case(
        impl=harness.aotgrad_dynamic_impl,
        source='''
def f(a, b):
    t0 = a.unsqueeze(-2)
    t2 = torch.arange(12, dtype=t0.dtype).view(t0.shape)
    t3 = t2.diagonal(-1, 1, 2)
    return b, t3
''',
        inputs={'bases': [{'shape': [4, 3], 'dtype': 'float32', 'rg': True}],
                'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'same', 'arg': 0}]},
        modes=['grad'],
        seed=16373,
    )


def test_dynamic_view_of_detached_alias_mutated_by_source():
    """A view of a detach()ed alias mutated by its requiring-grad source (was wrong
    gradients: the view was rebuilt off the input; now a view of the alias with its history)."""
    check_case(
        impl=harness.aotgrad_dynamic_impl,
        source='''
def f(a, opt, k):
    t0 = a.detach()
    t0.mul_(a)
    t1 = t0.view_as(t0)
    return a, t1, a, t1
''',
        inputs={'bases': [{'shape': [2, 1], 'dtype': 'float32', 'rg': True}],
                'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone().t()'}, {'kind': 'value', 'value': None},
                         {'kind': 'value', 'value': 1}]},
        modes=['grad'],
        seed=13386,
    )


def test_setitem_after_as_strided__of_offset_input_to_storage_start():
    """a = x[1:]; a.as_strided_((2, 1), (3, 2), 0) makes a cover x[0] and x[3]; a[0] = 1 writes x[0].
    (Refused at compile time before; x requires no grad: a synthetic base over x now.)"""
    check_case(
        source='''
def f(a):
    a.as_strided_((2, 1), (3, 2), 0)
    t0 = torch.maximum(a, a)
    a[0] = 1.0
    return t0.softmax(-1),
''',
        inputs={'bases': [{'shape': [4, 1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[1:]'}]},
        modes=['grad'],
        seed=3053,
    )


def test_out_write_into_view_restrided_past_its_extent():
    """t5 = a.select(1, 0) (one element); as_strided_ makes it cover a[0, 0:2]; mul(out=t5) writes both."""
    check_case(
        source='''
def f(a, s):
    t5 = a.select(1, 0)
    t5.as_strided_((2, 1), (2, 1), 0)
    t6 = t5 + s
    torch.mul(t6, 2, out=t5)
    return a,
''',
        inputs={'bases': [{'shape': [1, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': -1.5}]},
        modes=['grad'],
        seed=19131,
    )


def test_stale_unbind_view_after_no_grad_transpose__of_base():
    """Crashed the process (a segfault in autograd's replay of unbind's view chain on a base
    that transpose_ re-shaped; fuzz seed 412400): multi-output views are never replayed."""
    check_case(
        source='''
def f(k, a):
    t0, t1, t2 = a.unbind(0)
    with torch.no_grad():
        a.transpose_(0, 2)
    t11 = t2.detach()
    t12 = t11 - t11
    return [t11, t11, t12 + t1.detach()]
''',
        inputs={'bases': [{'shape': [3, 1, 2], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'value', 'value': 1}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        post=[(1, 'add_(1)')],
        modes=['grad', 'grad'],
        seed=12400,
    )


def test_unbind_of_view_of_intermediate_restrided_by_as_strided_():
    """Fuzz seed 412052 (seed 410000 run)."""
    check_case(
        source='''
def f(a, s, flag):
    t0 = torch.where(a > 0, a, a)
    t1 = t0.t()
    t0.as_strided_((1,), (1,), 0)
    t2 = t1.unbind(1)[3]
    return t1, a
''',
        inputs={'bases': [{'shape': [4, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': -1.5}, {'kind': 'value', 'value': False}]},
        post=[],
        modes=['grad'],
        seed=12052,
    )


def test_mul__into_squeezed_view_input_grad():
    """Fuzz seed 3007054 (final 20k run at 09ce625), minimized: a view input not requiring grad squeeze_()d, then written with an operand requiring grad; the operand's gradient differed (silent, pre-existing at 7706f3e): the joint wrote through a view alias of the input whose chain autograd replays without the squeeze_ (now a copy, tracing._functional_forward)."""
    check_case(
        source='''
def f(k, a, b):
    b.squeeze_(1)
    t0 = a.view(-1)
    t1 = t0.cos()
    t2 = t1[0:1]
    b.mul_(t2)
    return b,
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}, {'shape': [2, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'value', 'value': 2}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x[:, 1:]'}]},
        post=[],
        modes=['grad'],
        seed=7054,
    )


def test_permute_of_view_transposed_under_no_grad_grad():
    """Fuzz seed 4005060 (final 20k run at 09ce625), minimized: a view of a leaf t_()d under no_grad, then viewed and used with grad; the leaf's gradient differed (silent, pre-existing at 7706f3e): the rebuilt t3 replayed the whole chain under no_grad, eager's t0 regenerates its grad_fn off the leaf (now EagerViewGeometry._note_no_grad_views adds no no_grad step to a view made with grad recording)."""
    check_case(
        source='''
def f(a):
    t0 = a.unsqueeze(0)
    with torch.no_grad():
        t0.t_()
    t3 = t0.permute(0, 1)
    t4 = t3 * 2
    t5 = t4.narrow(0, 0, 1)
    return t5, t3
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        post=[],
        modes=['grad'],
        seed=5060,
    )


def test_no_grad_view_of_written_input_used_with_grad_grad_is_none():
    """Fuzz seed 4006405 (final 20k run at 09ce625), minimized: eager's gradient of the input is None (the no_grad view has no grad_fn); aotgrad's was zeros (d0f1af2's forward-graph dependencies missed the no_grad view functionalization regenerates; now read off the joint's autograd graph, tracing.reached_inputs)."""
    check_case(
        source='''
def f(a, s, b):
    a.relu_()
    with torch.no_grad():
        t0 = a.split(1, 0)[0]
        t1 = t0[0]
    t3 = t1.cos()
    return t3,
''',
        inputs={'bases': [{'shape': [1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}, {'kind': 'value', 'value': -1.5}, {'kind': 'same', 'arg': 0}]},
        post=[],
        modes=['grad'],
        seed=6405,
    )


def test_unbind_of_detached_alias_written_with_grad_base():
    """Fuzz seed 3010527 (final 20k run at 09ce625), minimized: eager's unbind output of a detach()ed alias given history by mul_ has the alias as its _base; aotgrad's had the input (same memory; pre-existing at 7706f3e); eager's since the graph returns the alias and the runtime makes the view off a detached alias given its history."""
    check_case(
        source='''
def f(a, b, c):
    t0 = b.detach()
    t1, t2, t3 = t0.unbind(0)
    t0.mul_(b)
    return t2,
''',
        inputs={'bases': [{'shape': [4, 4], 'dtype': 'float32', 'rg': False}, {'shape': [3, 4], 'dtype': 'float32', 'rg': True}, {'shape': [2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}, {'kind': 'tensor', 'base': 2, 'expr': 'x'}]},
        post=[],
        modes=['grad'],
        seed=10527,
    )


def test_unbind_of_detached_alias_copied_into_base():
    """Fuzz seed 4003646 (final 20k run at 09ce625), minimized: as test_unbind_of_detached_alias_written_with_grad_base, through copy_."""
    check_case(
        source='''
def f(a, b, mode, s, flag):
    t0 = b.detach()
    t1 = t0.unbind(0)[0]
    t0.copy_(b)
    return t1,
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 'sum'}, {'kind': 'value', 'value': 0.5}, {'kind': 'value', 'value': False}]},
        post=[],
        modes=['grad'],
        seed=3646,
    )


def test_overlapping_as_strided__of_transposed_select_of_clone_input_grad():
    """Fuzz seed 4002862 (final 20k run at 09ce625), as found: a select of a transposed clone input, clamp_ and t_() under no_grad, then as_strided_ onto an overlapping layout and returned three times; gradient values differed (at 7706f3e: None where eager has a tensor); eager's since 2bbabe3."""
    check_case(
        source='''
def f(a, b, c):
    t0 = c @ c
    t1 = torch.where(b > 0, b, t0)
    t2 = b.select(2, 0)
    t3 = a - a
    with torch.no_grad():
        t2.clamp_(-0.5, 0.5)
        t2.t_()
        t4 = a.sum()
    t4.zero_()
    t2.as_strided_((3, 2), (2, 2), 0)
    t5, t6 = t3.unbind(1)
    t7 = t4.expand(3)
    t8 = t7.view(torch.int32)
    return t2, t2, t2, t4
''',
        inputs={'bases': [{'shape': [4], 'dtype': 'float32', 'rg': False}, {'shape': [4, 2, 4], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.as_strided((3, 2), (1, 1), 0)'}, {'kind': 'tensor', 'base': 1, 'expr': 'x.clone().transpose(-1, -2)'}, {'kind': 'tensor', 'base': 0, 'expr': 'x[1:]'}]},
        post=[],
        modes=['grad'],
        seed=2862,
    )


#: fuzz seeds of the final 20k runs (and the 7M run) refused before: an input that is part of
#: its caller's storage, without autograd history, re-strided by ``as_strided_`` onto
#: locations outside its own elements (between them, or past its extent), or after an
#: in-place op re-laid out its functional value; minimized. The input now gets a synthetic
#: base over its caller's root (view_geometry's ``unrecorded_partial_storages``).
RESTRIDED_OUTSIDE_UNRECORDED_INPUT = {
    "3008153": (
        "def f(a, b, k):\n    b.as_strided_((2,), (2,), 0)\n    b.pow_(2)\n    t1 = b.t()\n    return t1,\n",
        {'bases': [{'shape': [4, 4, 1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.as_strided((2,), (3,), 0)'}, {'kind': 'same', 'arg': 0}, {'kind': 'value', 'value': 2}]},
    ),
    "3009828": (
        "def f(a, b):\n    a.as_strided_((2, 3), (2, 1), 3)\n    t1 = b.t().logsumexp(0)\n    a.zero_()\n    return t1.mean(0).unsqueeze(0), a\n",
        {'bases': [{'shape': [3, 4], 'dtype': 'float32', 'rg': False}, {'shape': [4, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[::2]'}, {'kind': 'tensor', 'base': 1, 'expr': 'x.t()'}]},
    ),
    "4007150": (
        "def f(a, s):\n    a.as_strided_((3,), (1,), 2)\n    t0 = a.split(2, 0)[1]\n    t6 = (t0 * s).detach()\n    a.sigmoid_()\n    return a - t6,\n",
        {'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[:, 1:]'}, {'kind': 'value', 'value': -1.5}]},
    ),
    "4016699": (
        "def f(a, k):\n    t0, = a.unbind(1)\n    t1 = t0 + a\n    a.as_strided_((1, 3), (1, 1), 0)\n    t3 = a.mean(-2)\n    a.addcmul_(t3, t3)\n    return t1, a\n",
        {'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.as_strided((2, 1), (2, 2), 0)'}, {'kind': 'value', 'value': 3}]},
    ),
    "3001555": (
        "def f(a, b):\n    b.sin_()\n    t0 = b.abs()\n    b.as_strided_((2, 3), (0, 1), 4)\n    return t0, b * a.sum()\n",
        {'bases': [{'shape': [3, 1], 'dtype': 'float32', 'rg': True}, {'shape': [2, 4, 4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x[:, 1:]'}]},
    ),
    "3001882": (
        "def f(d):\n    d.clamp_(-0.5, 0.5)\n    d.as_strided_((3, 1), (1, 2), 3)\n    return d,\n",
        {'bases': [{'shape': [2, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[1:]'}]},
    ),
    "3003354": (
        "def f(b):\n    b.as_strided_((3,), (3,), 26)\n    return b, b * 2\n",
        {'bases': [{'shape': [4, 4, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[0]'}]},
    ),
    "4002479": (
        "def f(a, b):\n    b.as_strided_((2, 1), (1, 3), 2)\n    return b\n",
        {'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x[0]'}]},
    ),
    "7001460": (
        "def f(a, b, flag):\n    b.as_strided_((1,), (3,), 12)\n    t0 = b + 1\n    return b, t0\n",
        {'bases': [{'shape': [4, 4], 'dtype': 'float32', 'rg': False}, {'shape': [4, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[::2]'}, {'kind': 'same', 'arg': 0}, {'kind': 'value', 'value': True}]},
    ),
}


@pytest.mark.parametrize("seed", sorted(RESTRIDED_OUTSIDE_UNRECORDED_INPUT))
def test_restrided_outside_unrecorded_input(seed):
    source, inputs = RESTRIDED_OUTSIDE_UNRECORDED_INPUT[seed]
    check_case(source=source, inputs=inputs, post=[], modes=['grad', 'no_grad'], seed=int(seed))


def test_seed_10015469():
    """A sliced input's detach()ed alias, written through as_strided with an operand
    requiring grad and returned: autograd's backward of the write replays the as_strided at
    its absolute offset on a buffer for the alias starting at 0 (eager's at the offset from
    the alias's start), so the gradient reached the wrong element (silent since b5b2040). The
    write now goes through a copy of the alias's storage starting at offset 0
    (StaleViewUses._relocated_write; tests/test_offset_view_backward.py)."""
    check_case(
        source='''
def f(a, b):
    t0 = b.detach()
    t2 = a.squeeze()
    t4 = t0.as_strided((1,), (1,), 1)
    t4.sub_(t2, alpha=2)
    return t0
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}, {'shape': [3, 1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x[1:]'}]},
        post=[],
        modes=['grad'],
        seed=15469,
    )


def test_seed_10004958():
    """A view of one aliased input (as_strided reaching outside it), stale after a write into
    its sibling under no_grad: eager regenerates its grad_fn as as_strided off the shared
    root; the run over the synthetic base saw it (OutputInfo.off_root), the rebuilt output
    did not take it (aliasing.outputs_on_call_inputs)."""
    check_case(
        source='''
def f(a, b, mode):
    t0 = b.as_strided((3, 1), (2, 1), 2)
    with torch.no_grad():
        t2 = torch.zeros((1, 3))
        t3 = torch.mm(t2, t0)
    with torch.no_grad():
        a.add_(t3)
    return [t0]
''',
        inputs={'bases': [{'shape': [2, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x[:, 1:]'}, {'kind': 'value', 'value': 'sum'}]},
        post=[],
        modes=['grad'],
        seed=4958,
    )


def test_seed_12006332():
    """A returned view of a detach()ed alias, re-strided by as_strided_ with an offset and
    stale once the alias is written with an operand requiring grad: eager's backward reads it
    as as_strided off the alias; autograd on the traced program replayed its recorded chain,
    which misses the as_strided_ (StaleViewUses.read_by_backward)."""
    check_case(
        source='''
def f(a, mode):
    t0 = a.detach()
    t1 = t0.view_as(t0)
    t1.as_strided_((2, 2), (4, 0), 1)
    t2 = t1[:, 0:1]
    t0.add_(a)
    return t2,
''',
        inputs={'bases': [{'shape': [2, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 'sum'}]},
        post=[],
        modes=['grad'],
        seed=6332,
    )


def test_seed_9015656():
    """A 0-d float written through t().expand(1).view(int32) (pow_, copy_): functionalization's
    view(dtype) is an alias without an autograd base, and the expand's inverse,
    base + sum_to(new - base), gave 0 for INT_MIN (overlapping_writes.write_root)."""
    check_case(
        source='''
def f(a, b):
    b.masked_fill_(b > 0, 0.0)
    with torch.no_grad():
        t0 = b.t()
        t1 = t0.expand(1)
        t2 = t1.view(torch.int32)
    t2.pow_(2)
    t2.copy_(t1)
    t0.relu_()
    t3 = t2.sum(-1, keepdim=True)
    with torch.no_grad():
        t4 = t3.as_strided((1,), (1,), 0)
    t5 = t4.sigmoid()
    t0.sigmoid_()
    return t4, b, b
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.unsqueeze(0)'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        post=[],
        modes=['grad', 'no_grad'],
        seed=15656,
    )


def test_seed_18000437():
    """A write with an operand requiring grad through an as_strided view (offset 0: outside
    the sliced input ``b``'s own elements) of a view of ``b``, returned: eager's write
    regenerates the view's grad_fn as as_strided off the caller's root; the output was
    rebuilt off ``b`` by its chain, whose as_strided step kept the gradient to ``b``'s
    elements (an earlier write into ``b`` had hidden the write's refusal in the run over
    ``b`` alone). EagerViewGeometry.regenerated: OutputInfo.off_root."""
    check_case(
        source='''
def f(a, b, opt):
    t0 = a.as_strided((1, 1), (3, 1), 0)
    t1 = a[2:3:2]
    t3 = b[0:1]
    with torch.set_grad_enabled(True):
        b.relu_()
    t3.t_()
    t5 = t3.as_strided((1, 2), (2, 2), 0)
    t6 = t5.permute(0, 1)
    t6.addcmul_(t0, t0)
    t7 = t3 * 2
    t8 = t7.reshape(-1)
    t9 = t8.unsqueeze(-1)
    t10 = t1.add(t7, alpha=2)
    return [t6, t6]
''',
        inputs={'bases': [{'shape': [4, 2, 3], 'dtype': 'float32', 'rg': True}, {'shape': [3], 'dtype': 'float32', 'rg': False}, {'shape': [3, 4, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x[1:]'}, {'kind': 'value', 'value': None}]},
        post=[],
        modes=['grad'],
        seed=437,
    )


@XFAIL("refused at compile time (docs/user-guide.md): t3.zero_() writes, recorded by autograd, through a view of t2, which as_strided_ laid out with a shared element; eager's CopySlices keeps one gradient per shared location and the view's regenerated AsStridedBackward0 divides by the count (was: a silent gradient divergence, base1.grad)")
def test_seed_19003932():
    """t2.as_strided_((2, 2), (2, 2), 0) of an intermediate (element 2 at two positions), then
    writes recorded by autograd through views of it: eager's backward differs from the traced
    program's over a dense functional value
    (overlapping_writes._refuse_recorded_write_into_overlapping_base;
    tests/test_overlapping_base_backward.py)."""
    check_case(
        source='''
def f(a, b, c, k, mode):
    with torch.set_grad_enabled(True):
        t0 = b.add(b, alpha=2)
        t1 = t0.sum(0, keepdim=True)
        c.sub_(t1, alpha=2)
    t2 = a.cumsum(1)
    c.squeeze_(0)
    t2.as_strided_((2, 2), (2, 2), 0)
    with torch.set_grad_enabled(True):
        t2.fill_(0.5)
        t1.sin_()
    t3 = t2.narrow(0, 0, min(k, t2.shape[0]))
    t3.zero_()
    t4 = t3[:, 0:2]
    t5 = t4[0:1]
    t6 = c.detach()
    t7 = t1.sum(-1, keepdim=True)
    t5.copy_(t1)
    return t1, t5, t4
''',
        inputs={'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': True}, {'shape': [3], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x.detach()'}, {'kind': 'value', 'value': 3}, {'kind': 'value', 'value': 'mean'}]},
        post=[],
        modes=['grad', 'grad'],
        seed=3932,
    )


def test_seed_16006573():
    """A view ``t8`` of a matmul result ``t7`` (``as_strided`` of its element 2), made stale by
    ``t7.t_()``, then re-strided by ``as_strided_`` onto elements 0..2, returned: eager
    regenerates its grad_fn at the ``as_strided_`` and records ``AsStridedBackward1`` on it,
    whose input is the view's old geometry, so only element 2 gets a gradient; the output was
    rebuilt by one ``as_strided`` off ``t7``, sending it to all three.
    EagerViewGeometry.restride_chain: OutputInfo.restrided_through."""
    check_case(
        source='''
def f(a, flag):
    t0 = a.unbind(1)[1]
    t1 = t0.diagonal(0, 1, 0)
    t2 = t1.add(t1, alpha=2)
    t3 = t2.pow(2)
    t4 = a.sigmoid()
    t5 = t4.expand(3, 4, 4, 3)
    t6 = t0.unsqueeze(1)
    t7 = t6 @ t2
    t8 = t7.as_strided((1,), (2,), 2)
    t5.unsqueeze_(2)
    t7.t_()
    t8.as_strided_((3, 1), (1, 1), 0)
    return [t7, t8, flag]
''',
        inputs={'bases': [{'shape': [4, 4, 3], 'dtype': 'float32', 'rg': True}, {'shape': [3, 3], 'dtype': 'float32', 'rg': True}, {'shape': [3, 3, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': False}]},
        post=[],
        modes=['grad'],
        seed=6573,
    )


def test_seed_20016921():
    """An op that returns its input itself (``flatten()`` of the 1-D ``t6``) of a view whose
    as_strided step reaches outside the sliced ``a[1:3]``: eager records nothing, the view's
    AsStridedBackward0 (input geometry ``a[1:3]``'s) drops the gradient of storage element
    10; the analysis took the op for a write through the view (EagerViewGeometry.rebased) and
    rebuilt the output off the root, sending gradient there. stale_views.changed_in_place."""
    check_case(
        source='''
def f(a):
    with torch.set_grad_enabled(True):
        t0 = -a
        t1 = torch.arange(8, dtype=t0.dtype).view(t0.shape)
        t1.transpose_(0, 2)
    t1.mul_(2)
    t2 = t1.select(0, -1)
    t3 = a[1:3]
    t4 = t3.as_strided((3, 2), (3, 1), 4)
    t2.add_(1)
    t5 = t4.split(3, 0)[0]
    t6, t7 = t5.unbind(1)
    t8 = t6.flatten()
    t9 = torch.mm(t4, t2)
    t10 = torch.tanh(t2)
    t2.unsqueeze_(2)
    return t8,
''',
        inputs={'bases': [{'shape': [4, 3, 1], 'dtype': 'float32', 'rg': True}, {'shape': [], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[:, 1:]'}]},
        post=[],
        modes=['grad'],
        seed=16921,
    )


def test_seed_18006940():
    """`t6.flatten()` of the 1-D `t6` (a view of the no_grad view `t5`, stale after `t4.relu_()`)
    returns `t6` itself: no grad-mode in-place op on it, so eager's error for returning it
    ("a view of a view which was created in no_grad mode") stands; the analysis took it for one
    and dropped `t6`'s no_grad prefix. stale_views.changed_in_place."""
    check_case(
        source='''
def f(a, s, b):
    t0, t1, t2 = b.unbind(0)
    t3 = t1.squeeze(0)
    t4 = torch.tanh(t0)
    with torch.no_grad():
        t0.pow_(2)
        t5 = t4.narrow(0, 0, 1)
    t6 = t5.narrow(0, 0, 1)
    t4.relu_()
    t9 = t6.flatten()
    with torch.set_grad_enabled(True):
        t14 = a.unbind(0)[0]
        t15 = b.detach()
        t17 = torch.ones_like(t15)
    with torch.set_grad_enabled(True):
        t18 = t17.sum(1)
        t20 = b.select(1, -1)
        t21 = t2.detach()
    return t6, t6, t17
''',
        inputs={'bases': [{'shape': [4, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.t()'}, {'kind': 'value', 'value': -1.5}, {'kind': 'tensor', 'base': 0, 'expr': 'x[1:]'}]},
        post=[],
        modes=['grad'],
        seed=6940,
    )


def test_seed_22013348():
    """t9, returned twice, is detach_()ed after the call, so the backward reaches only some
    outputs; the path eager's engine never runs is not finite at a zero tangent (was: nan in
    base0.grad, eager -1.17); aotgrad's backward is pruned of it (core/partial_backward.py;
    tests/test_partial_backward.py)."""
    check_case(
        source='''
def f(a, b, c, d):
    t0 = b.softmax(0)
    t1 = a.view_as(a)
    t2 = t1.clone()
    t3 = b.amax(0)
    t4 = t3.t()
    t4.squeeze_()
    t5 = t4.prod()
    t6 = t5.clone()
    t7 = c.cumsum(0)
    t8 = t7.pow(2)
    t4.sin_()
    t9 = t6.contiguous()
    return t9, t2, t9, t8
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        post=[(2, 'detach_()')],
        modes=['grad'],
        seed=13348,
    )


def test_seed_33010476():
    """A view of an intermediate taken before an in-place metadata op on the intermediate
    (recorded), written through, then read as ``t4.mT``: the property read was taken for an
    attribute read and left to autograd's replay of the stale view's chain; the gradient
    differed from eager's, silently (tests/test_view_properties_of_stale_views.py)."""
    check_case(
        source='''
def f(a, s, opt):
    t0 = a[:, 1:2]
    t1 = t0.clone()
    t2 = t1.mT @ t1
    t3 = torch.tanh(a)
    t4 = t1.permute(1, 0, 2)
    t5 = t4.mT @ t4
    t1.transpose_(0, 2)
    t6 = t4 @ t5
    t4.add_(1)
    t8 = t6.add(t5, alpha=2)
    t9 = t4 @ t4.mT
    t10 = t9.contiguous()
    return t10, a, a
''',
        inputs={'bases': [{'shape': [2, 3, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.permute(2, 0, 1)'}, {'kind': 'value', 'value': -1.5}, {'kind': 'value', 'value': 1.5}]},
        post=[],
        modes=['grad'],
        seed=10476,
    )


@XFAIL("refused at compile time (docs/user-guide.md): a[0] = 1.0 writes, recorded by autograd, through a view of the input a, which as_strided_ laid out overlapping itself (was: a silent gradient divergence, base0.grad; overlapping_writes._refuse_recorded_write_into_overlapping_base missed t[i] = v of the tensor itself)")
def test_seed_34018504():
    """A recorded write through a view of an input that as_strided_ laid out overlapping itself
    (tests/test_overlapping_base_backward.py, test_recorded_setitem_into_overlapping_tensor_itself)."""
    check_case(
        source='''
def f(a):
    a.as_strided_((3, 3), (1, 1), 1)
    t0 = a.select(1, 1)
    a[0] = 1.0
    return a, t0, a
''',
        inputs={'bases': [{'shape': [4, 2], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        post=[],
        modes=['grad', 'grad'],
        seed=18504,
    )


def test_seed_33014873():
    """Issue 12: the no_grad call's entry (the second call) of a program detaching the input
    and re-laying it out: the inference trace's alias of it was a view made in no_grad mode,
    whose detach_() raised "Can't detach views in-place" (tests/test_detach_inplace_of_relaid_inputs.py)."""
    check_case(
        source='''
def f(opt, a, b, mode):
    a.detach_()
    a.unsqueeze_(-2)
    t0 = b.pow(2)
    if mode == "sum":
        t1 = t0.sum()
    else:
        t1 = t0.mean()
    return t1, b, t1
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': True}, {'shape': [1, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'value', 'value': None}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'same', 'arg': 1}, {'kind': 'value', 'value': 'mean'}]},
        post=[],
        modes=['grad', 'no_grad'],
        seed=14873,
    )


def test_seed_34002129():
    """Issue 12: an input re-laid out under the program's enable_grad() inside a no_grad call:
    the inference trace's alias of it, a view made in no_grad mode, raised "A view was created
    in no_grad mode and is being modified inplace" (tests/test_detach_inplace_of_relaid_inputs.py)."""
    check_case(
        source='''
def f(a, b, mode):
    t1 = b.cumsum(0)
    with torch.set_grad_enabled(True):
        t3 = t1.reshape(-1)
    with torch.no_grad():
        with torch.enable_grad():
            a.unsqueeze_(0)
    return t3
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 'sum'}]},
        post=[],
        modes=['grad', 'no_grad'],
        seed=2129,
    )


def test_seed_34013094():
    """Issue 12: detach_() of the root x beside its written view x.unsqueeze(0), once refused
    (tests/test_detach_inplace_of_aliased_inputs.py)."""
    check_case(
        source='''
def f(a, b, opt):
    with torch.no_grad():
        b.detach_()
    b.mul_(2)
    return a,
''',
        inputs={'bases': [{'shape': [3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.unsqueeze(0)'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': None}]},
        post=[],
        modes=['grad'],
        seed=13094,
    )


@XFAIL("open (fuzz seed 36010949): a no-op in-place metadata op under no_grad (transpose_(1, 1)) marks the input's metadata mutation as unrecorded (InputInfo.metadata_mutation_under_no_grad), so runtime.replay_metadata replays the recorded t_() unrecorded too: the returned input keeps its entry grad_fn and its backward raises 'invalid gradient' where eager's runs")
def test_seed_36010949():
    """In-place metadata ops on one input, some recorded and some not: the runtime replays
    the whole change in one mode. Open (issue 12's note: record each step with its mode)."""
    check_case(
        source='''
def f(a):
    a.transpose_(1, 1)
    with torch.set_grad_enabled(True):
        a.t_()
    return a,
''',
        inputs={'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}]},
        post=[],
        modes=['no_grad'],
        seed=10949,
    )


@XFAIL("open (fuzz seed 35017380): as_strided_ recorded, then a geometry-keeping transpose_ under no_grad: the runtime replays the input's metadata change unrecorded (InputInfo.metadata_mutation_under_no_grad), so the caller's tensor keeps its entry grad_fn; the caller's t_() then backward raises 'invalid gradient' where eager's runs")
def test_seed_35017380():
    """As test_seed_36010949, the recorded op first. Open."""
    check_case(
        source='''
def f(a, b, k):
    b.as_strided_((1, 1), (3, 3), 0)
    with torch.no_grad():
        b.transpose_(1, 0)
    with torch.no_grad():
        t0 = b.mT @ b
    return t0, b
''',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}, {'kind': 'value', 'value': 1}]},
        post=[(1, 't_()')],
        modes=['grad'],
        seed=17380,
    )
