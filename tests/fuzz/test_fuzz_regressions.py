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


@XFAIL('aotgrad returns a view (_base set)')
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


@XFAIL("aotgrad raises 'a leaf Variable that requires grad is being used in an in-place operation'")
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


@XFAIL("aotgrad's output has a grad_fn; backward succeeds where eager raises")
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


@XFAIL("aotgrad raises 'a view of a leaf Variable that requires grad is being used in an in-place operation'")
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


@XFAIL('aotgrad leaves the inputs requiring grad')
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


@XFAIL('aotgrad gives the input a gradient through the no_grad view')
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


@XFAIL('aotgrad sets a (zero) .grad')
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


@XFAIL('out[0]._base is a hidden tensor and out[1] is a view')
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


@XFAIL('AotgradCompileError: inputs share storage ... no common ._base; not supported')
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


@XFAIL("aotgrad's backward succeeds")
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


@XFAIL("aotgrad's output does not require grad")
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


@XFAIL("aotgrad's output is usable; no error")
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


@XFAIL('aotgrad leaves the input with strides (4, 1) (a different memory layout)')
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


@XFAIL("out.zero_() raises 'Output 0 of View is a view and is being modified inplace'")
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


@XFAIL("out.add_(1) raises 'Output 0 of AsStrided is a view and is being modified inplace'")
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


@XFAIL('aotgrad returns views for the matmul result; detach_() raises')
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


@XFAIL('aotgrad does not raise')
def test_overlapping_inplace_add_raises():
    """t1 = t0.view(1, 1); t1.add_(t0) raises an internal-overlap error in eager."""
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


@XFAIL('wrong output values')
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


@XFAIL('aotgrad does not raise')
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


@XFAIL('AotgradCompileError at call time: version counter error while tracing the backward (at <unknown location>)')
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


