"""In-place writes through memory that overlaps itself (core/overlapping_writes.py).

Eager writes memory: a write through an ``expand()``ed view, an overlapping ``as_strided`` or
``unfold`` view, or a view taken through one, reaches every element sharing a location.
Functionalization's inverses of those views sum the copies (``expand``) or keep one writer
(``as_strided_scatter``), so these were refused ("functionalization cannot express a write
through memory that overlaps itself"; fuzz seeds 400048, 400058, 400409, 400501, 400588,
401215, 401269, 401560, 401785, 401788, 402091, 402282, 402371, 402454, 402498, 402700,
402901, 402971). They are now written into the root's memory locations; where eager's result
is its kernel's loop order, they stay refused; where eager raises, its error is raised.
"""

from __future__ import annotations

import pytest
import torch
from eager_compare import SHAPES, check

import aotgrad
from aotgrad.compilers import nop
from tests.fuzz.harness import check_case

pytestmark = pytest.mark.usefixtures("shapes")


def _intermediate_expanded(write):
    def f(a, b):
        t = a * 2
        e = t.expand(3, 4)
        write(e, b)
        return t, e, (e * b).sum()

    return f


# writes eager defines through a stride-0 dim: one value per location
CONSTANT_WRITES = {
    "fill_": lambda e, b: e.fill_(0.5),
    "zero_": lambda e, b: e.zero_(),
    "masked_fill_ (a location written where any element's mask holds)": lambda e, b: e.masked_fill_(b > 0, -1.0),
    "masked_fill_ of a one-element tensor": lambda e, b: e.masked_fill_(b > 0, b[0, 0]),
    "copy_ of its own data": lambda e, b: e.copy_(e.detach()),
}
# writes into a part that does not overlap itself, taken through the expand
PART_WRITES = {
    "element add_": lambda e, b: e[1].add_(1),
    "row copy_": lambda e, b: e[0].copy_(b[0]),
    "view of a view mul_": lambda e, b: e[1][2:].mul_(2),
    "setitem of a scalar": lambda e, b: e.__setitem__(2, 3.0),
    "setitem of a tensor": lambda e, b: e.__setitem__((1, slice(1, 3)), b[0, :2]),
    # eager's copy returns at once: the value, expanded, is the region's own memory
    "setitem of its own data over a stride-0 dim": lambda e, b: e.__setitem__(slice(None, None, 2), e[0]),
    "addcmul_ after squeeze_": lambda e, b: e.unsqueeze_(0).squeeze_(0)[1].addcmul_(b[0], b[0]),
}


@pytest.mark.parametrize("write", sorted(CONSTANT_WRITES) + sorted(PART_WRITES))
@pytest.mark.parametrize("grad_mode", [True, False])
def test_write_through_expanded_intermediate(write, grad_mode):
    fn = {**CONSTANT_WRITES, **PART_WRITES}[write]
    check(_intermediate_expanded(fn), lambda: (torch.randn(4, requires_grad=True), torch.randn(3, 4, requires_grad=True)),
          grad_mode=grad_mode)


@pytest.mark.parametrize("write", sorted(CONSTANT_WRITES) + sorted(PART_WRITES))
def test_write_into_expanded_input(write):
    """Was refused ("writes into input 0, whose elements overlap in memory"): the input is
    merged into a synthetic base over its storage and written there."""
    fn = {**CONSTANT_WRITES, **PART_WRITES}[write]

    def f(c, b):
        fn(c, b)
        return c, b * 2

    def make():
        x = torch.randn(4, requires_grad=True).mul(1)  # not a leaf: its views may be written
        return x.expand(3, 4), torch.randn(3, 4)

    check(f, make)


def test_write_into_detached_expanded_input():
    """An expanded input detach()ed: its root overlaps itself, the storage is the base."""

    def f(c, y):
        c.fill_(2.0)
        c[0].mul_(y)
        return c + 1

    check(f, lambda: (torch.randn(4).expand(3, 4).detach(), torch.randn(4)))


def test_expanded_alias_among_inputs():
    """Fuzz seed 400048: ``d = x.expand(2)`` passed with ``x`` itself, ``d.fill_(0.5)``."""

    def f(a, d):
        d.fill_(0.5)
        return a + 1, d

    def make():
        x = torch.randn(1)
        return x, x.expand(2)

    check(f, make)


OVERLAPPING_AS_STRIDED = {
    "fill_": lambda v, s: v.fill_(0.25),
    "zero_": lambda v, s: v.zero_(),
    "copy_ of one element": lambda v, s: v.copy_(s[:1, :1]),
    "copy_ of its own data": lambda v, s: v.copy_(v.detach()),
    "setitem of a scalar": lambda v, s: v.__setitem__(0, 3.0),
    "setitem of a one-element tensor": lambda v, s: v.__setitem__(slice(None), s[1, 1]),
}


@pytest.mark.parametrize("write", sorted(OVERLAPPING_AS_STRIDED))
@pytest.mark.parametrize("grad_mode", [True, False])
def test_write_through_overlapping_as_strided(write, grad_mode):
    """Fuzz seeds 400788, 402091: eager lets these through ("too hard" to detect)."""

    def f(a, s):
        t = a.sin()
        v = t.as_strided((3, 2), (1, 1), 1)
        OVERLAPPING_AS_STRIDED[write](v, s)
        return t, (v * 2).sum()

    check(f, lambda: (torch.randn(6, requires_grad=True), torch.randn(3, 2, requires_grad=True)),
          grad_mode=grad_mode)


@pytest.mark.parametrize("grad_mode", [True, False])
def test_masked_fill_through_overlapping_as_strided(grad_mode):
    """Without autograd recording it: a location is written where any element's mask holds."""

    def f(a, s):
        t = a.sin()
        t.as_strided((3, 2), (1, 1), 1).masked_fill_(s > 0, 7.0)
        return t

    check(f, lambda: (torch.randn(6), torch.randn(3, 2)), grad_mode=grad_mode)


def test_masked_fill_through_overlapping_as_strided_recorded_is_refused():
    """Eager's backward copies the masked gradient into the overlapping view: a location
    masked for one of its elements and not another gets the last one written."""

    def f(a, s):
        t = a.sin()
        t.as_strided((3, 2), (1, 1), 1).masked_fill_(s > 0, 7.0)
        return t

    with pytest.raises(aotgrad.errors.AotgradCompileError, match="loop order"):
        aotgrad.aot_function(f, nop)(torch.randn(6, requires_grad=True), torch.randn(3, 2))


def test_write_through_overlapping_unfold():
    def f(a):
        t = a * 3
        w = t.unfold(0, 3, 1)
        w.fill_(1.0)
        t.unfold(0, 2, 1)[1].mul_(4)
        return t

    check(f, lambda: (torch.randn(6, requires_grad=True),))


def test_write_through_overlapping_input_as_strided():
    """Fuzz seed 400788's input, ``x.as_strided((3, 2), (1, 1), 0)``, written in place."""

    def f(a):
        a.masked_fill_(a > 0, 0.0)
        a[0] = 1.0
        return a, a.t()

    check(f, lambda: (torch.randn(2, 3, 4).as_strided((3, 2), (1, 1), 0),))


@pytest.mark.parametrize("op", ["neg_", "sub_", "copy_ of varying values", "setitem of a row"])
def test_loop_order_dependent_write_is_refused(op):
    """Eager's result is its loop order's (a location shared by two elements is written
    twice, the second reading the first's result): refused, naming the line."""
    writes = {
        "neg_": lambda v, s: v.neg_(),
        "sub_": lambda v, s: v.sub_(s, alpha=2),
        "copy_ of varying values": lambda v, s: v.copy_(s),
        "setitem of a row": lambda v, s: v.__setitem__(slice(None), s[0]),
    }

    def f(a, s):
        t = a.clone()
        writes[op](t.as_strided((2, 2), (1, 1)), s)
        return t

    with pytest.raises(aotgrad.errors.AotgradCompileError, match="loop order|visits the elements"):
        aotgrad.aot_function(f, nop)(torch.randn(4), torch.randn(2, 2))


@pytest.mark.parametrize("op", ["add_", "copy_", "setitem", "fill_ of a tensor", "out="])
def test_eager_refusal_of_stride0_output_is_raised(op):
    """Eager's TensorIterator refuses an output with a stride-0 dim of size > 1: its error."""
    writes = {
        "add_": lambda e: e.add_(1),
        "copy_": lambda e: e.copy_(torch.ones(3, 4)),
        "setitem": lambda e: e.__setitem__(slice(None), 1.0),
        "fill_ of a tensor": lambda e: e.fill_(torch.tensor(1.0)),
        "out=": lambda e: torch.mul(torch.ones(3, 4), 2, out=e),
    }

    def f(a):
        t = a * 2
        writes[op](t.expand(3, 4))
        return t

    a = torch.randn(4)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor") as eager:
        f(a)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor") as compiled:
        aotgrad.aot_function(f, nop)(a)
    assert type(compiled.value) is type(eager.value)


@pytest.mark.parametrize("write", ["fill_", "masked_fill_", "zero_"])
def test_backward_through_recorded_stride0_write_raises_eagers_error(write):
    """Eager's forward writes; its backward (CopySlices copying the gradient into the
    expanded view's geometry) raises. The compiled forward writes, its backward raises too."""

    def f(a):
        t = a * 2
        e = t.expand(3, 4)
        {"fill_": lambda: e.fill_(1.0), "zero_": e.zero_,
         "masked_fill_": lambda: e.masked_fill_(torch.tensor([True, False, True, False]), 1.0)}[write]()
        return t

    a = torch.randn(4, requires_grad=True)
    eager_out = f(a)
    compiled_out = aotgrad.aot_function(f, nop)(a)
    assert torch.equal(eager_out, compiled_out)
    for out in (eager_out, compiled_out):
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            out.sum().backward()


def test_exact_values_where_sum_to_would_round():
    """Functionalization's expand inverse, ``b + sum_to(new - b)``, is off by rounding for a
    large ``b``; the location write is exact."""

    def f(a):
        t = a.clone()
        t.expand(2, 3)[0].fill_(0.5)
        return t

    a = torch.full((3,), 1e8)
    assert torch.equal(aotgrad.aot_function(f, nop)(a), f(a))


def test_setitem_through_dtype_view_of_expanded_input():
    """``a.expand(3).view(torch.int32)[0] = 1``: functionalization's view(dtype) is an alias
    (``detach``) of the expanded tensor, without an autograd base; the write reaches ``a``'s
    location through it (was refused; silently lost before that: fuzz regression
    test_setitem_through_int32_view_of_expanded_input)."""

    def f(a):
        t = a.expand(3).view(torch.int32)
        t[0] = 1
        return t, a

    check(f, lambda: (torch.randn(1),))


def test_no_grad_write_through_expanded_view_returned():
    """The view was made and written under no_grad: reading its grad_fn raises eager's error,
    lazily (in the backward here), as eager's does; the compiled call itself does not."""

    def f(a):
        with torch.no_grad():
            e = a.unsqueeze(0).expand(2, 4)
            e.fill_(1.0)
        return e, a * 2

    check(f, lambda: (torch.randn(4, requires_grad=True).mul(1),))


def test_augmented_assignment_into_part_of_expanded_view():
    def f(a):
        e = a.expand(2, 4)
        e[1] += 1
        return e, a * 2

    check(f, lambda: (torch.randn(4, requires_grad=True).mul(1),))


def test_detached_expanded_input_given_history_is_refused():
    """A detach()ed expanded input written with an operand requiring grad gets an autograd
    history of its own in eager, which the compiled call would copy into memory that overlaps
    itself: refused (by the analysis, as a value requiring grad written into a tensor that is no
    view and whose elements share memory: its gradient would count locations, not elements)."""

    def f(c, v):
        c.masked_fill_(torch.tensor([True, False, True, False]), v)
        return c * 1

    c = torch.randn(4).expand(3, 4).detach()
    with pytest.raises(aotgrad.errors.AotgradCompileError, match="writes a value that requires grad"):
        aotgrad.aot_function(f, nop)(c, torch.tensor(2.0, requires_grad=True))


# Fuzz programs (seed 400000 run) that were refused ("functionalization cannot express a write
# through memory that overlaps itself"), compared with eager by the fuzz harness.
FUZZ_CASES = {
    400048: (
        '''
def f(a, b, c, d):
    d.fill_(0.5)
    t0 = d + 1
    return t0, d, t0
''',
        {'bases': [{'shape': [1], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(1,))'}]},
        ['grad'], 48,
    ),
    400058: (
        '''
def f(a):
    t0 = a.detach()
    t1 = t0.expand(2, 3, 2, 2)
    t2 = t1.split(1, 1)[1]
    t3 = a.cos()
    t4 = t3.detach()
    with torch.set_grad_enabled(True):
        t5 = t4.sigmoid()
        t6 = t5.view(-1)
        t1[::2] = 1.0
    t0.copy_(a)
    t7 = t2.sin()
    return t7, t2, t7
''',
        {'bases': [{'shape': [3, 2, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.detach()'}]},
        ['grad'], 58,
    ),
    400409: (
        '''
def f(a, k):
    a[::2] = 1.0
    a.squeeze_(1)
    t0 = torch.ones_like(a)
    t1 = a.cumsum(-2)
    t2 = t0.flatten()
    t3 = t0.sum(-1, keepdim=True)
    return a,
''',
        {'bases': [{'shape': [2], 'dtype': 'float32', 'rg': False}, {'shape': [3, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(2,))'}, {'kind': 'value', 'value': 1}]},
        ['grad'], 409,
    ),
    400588: (
        '''
def f(a, k):
    a.clamp_(-0.5, 0.5)
    t0 = a.expand(3, 2)
    t0.fill_(0.5)
    t1 = a[1:2]
    t2 = t0.squeeze()
    t3 = t2.relu()
    t4 = a @ a
    t5 = t2 @ a
    t6 = t5.sin()
    t7 = t6.prod()
    t8 = t6 @ t3
    t2.t_()
    return t2, t0
''',
        {'bases': [{'shape': [2], 'dtype': 'float64', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 1}]},
        ['grad'], 588,
    ),
    401215: (
        '''
def f(a, b, flag, c, s):
    t0 = c - c
    t0.add_(1)
    with torch.no_grad():
        t1 = t0 * t0
        t2 = t1.expand(3, 4)
        t2.fill_(0.5)
    with torch.set_grad_enabled(True):
        t3 = t2.prod()
    return a, c, t2
''',
        {'bases': [{'shape': [1], 'dtype': 'float64', 'rg': True}, {'shape': [4], 'dtype': 'float64', 'rg': True}, {'shape': [1, 4, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}, {'kind': 'value', 'value': False}, {'kind': 'same', 'arg': 1}, {'kind': 'value', 'value': 2.0}]},
        ['grad', 'grad'], 1215,
    ),
    401560: (
        '''
def f(a, k, flag):
    t0, t1 = a.unbind(0)
    a.zero_()
    t2 = t1.cos()
    with torch.set_grad_enabled(True):
        t3 = t1.squeeze()
        t4 = t3.expand(3)
    t5 = torch.ones_like(t4)
    with torch.no_grad():
        t6 = t4 - t4
        t7 = t6.sum(0)
        t8 = t5 @ t4
    t9 = t3.logsumexp(0)
    t4.t_()
    with torch.no_grad():
        t7.add_(1)
        t10 = t9.detach()
        t11 = t3.abs()
    t4.zero_()
    t11.copy_(t10)
    return t0, t10
''',
        {'bases': [{'shape': [3], 'dtype': 'float32', 'rg': False}, {'shape': [3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[1:]'}, {'kind': 'value', 'value': 2}, {'kind': 'value', 'value': True}]},
        ['grad', 'grad'], 1560,
    ),
    401788: (
        '''
def f(mode, a):
    t0 = a + a
    with torch.no_grad():
        t1 = torch.maximum(t0, t0)
        a.masked_fill_(a > 0, 0.0)
        t1.zero_()
    with torch.set_grad_enabled(True):
        t2 = t0.select(1, 1)
        t1.masked_fill_(t1 > 0, 0.0)
        t1.add_(1)
    with torch.set_grad_enabled(True):
        t1.masked_fill_(t1 > 0, 0.0)
    t3 = t2.t()
    t4 = t3 @ t1
    t3.unsqueeze_(0)
    t5 = t1[-2]
    return t5, t5
''',
        {'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}, {'shape': [2, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'value', 'value': 'mean'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(2,))'}]},
        ['grad'], 1788,
    ),
    402091: (
        '''
def f(a):
    t0 = a.permute(2, 1, 0)
    t1 = t0.mT @ t0
    t2 = a.select(2, 3)
    t3 = t2.relu()
    t3.sub_(t2, alpha=2)
    t4 = t1.as_strided((2, 2), (1, 1), 1)
    t5 = t4.permute(0, 1)
    t6 = t1 @ t1
    t5.masked_fill_(t5 > 0, 0.0)
    t7 = t6.mT @ t6
    t8 = t4.select(0, 0)
    t9 = t8.unbind(0)[1]
    return a,
''',
        {'bases': [{'shape': [1, 4, 4], 'dtype': 'float32', 'rg': True}, {'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        ['no_grad'], 2091,
    ),
    402371: (
        '''
def f(a, b, c, k):
    t0 = b + c
    t1 = a.narrow(0, 0, min(k, a.shape[0]))
    t0.unsqueeze_(1)
    t2 = torch.maximum(t0, b)
    t2.as_strided_((3, 1), (1, 1), 6)
    c.copy_(b)
    t1.transpose_(0, 0)
    with torch.no_grad():
        t1.transpose_(0, 0)
    t1.sin_()
    t3 = t2.as_strided((3, 2), (2, 1), 6)
    return t2, t2
''',
        {'bases': [{'shape': [3], 'dtype': 'float64', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(3,))'}, {'kind': 'same', 'arg': 1}, {'kind': 'value', 'value': 0}]},
        ['grad', 'no_grad'], 2371,
    ),
    402454: (
        '''
def f(a, k, b):
    b.zero_()
    t0 = b.amax(0)
    a.t_()
    t1 = a[-1]
    a.zero_()
    return a, b, t0
''',
        {'bases': [{'shape': [2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(2,))'}, {'kind': 'value', 'value': 0}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        ['grad', 'grad'], 2454,
    ),
    402498: (
        '''
def f(a, k):
    t0 = a.add(a, alpha=2)
    t1 = t0.transpose(2, 0)
    t2 = a.sum(k % a.dim())
    t3 = t1.view_as(t1)
    t4 = t3.expand(2, 2, 2)
    t4[:, 0] = t2
    t5 = t4 @ t4
    t6 = t4.detach()
    t5.transpose_(2, 1)
    t5.addcmul_(t1, t1)
    t7 = t6.sin()
    t8 = t0.clone()
    return t2, a, t8, t8
''',
        {'bases': [{'shape': [2, 1, 2], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[:, :1]'}, {'kind': 'value', 'value': 3}]},
        ['grad'], 2498,
    ),
    402700: (
        '''
def f(a):
    t0 = a.split(3, 1)[0]
    t1 = t0.detach()
    a.zero_()
    t2 = t1 + 1
    t3 = t2.narrow(2, 1, 1)
    t4 = t3.sigmoid()
    t5 = t4 @ t4.mT
    t6 = t2 @ t2.mT
    t1.transpose_(0, 2)
    t7 = torch.arange(18, dtype=t5.dtype).view(t5.shape)
    t8 = t6.view_as(t6)
    with torch.no_grad():
        a.copy_(t0)
    return t1, t1
''',
        {'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(3, 2))'}]},
        ['grad'], 2700,
    ),
    402901: (
        '''
def f(a, b, c, opt):
    t0 = c.abs()
    t1 = t0.expand(2)
    c.t_()
    t1[-1] = a
    with torch.no_grad():
        t2 = t1.unsqueeze(1)
        t0.zero_()
    t3 = t2.squeeze(1)
    t4 = t3.detach()
    t5 = t4 + t3
    t6 = t5[-2]
    t6.sigmoid_()
    t7 = t6.sin()
    t8 = t5 @ t5
    return t8,
''',
        {'bases': [{'shape': [], 'dtype': 'float32', 'rg': False}, {'shape': [], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x.detach()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': None}]},
        ['grad', 'grad'], 2901,
    ),
    402971: (
        '''
def f(a, opt, k):
    with torch.no_grad():
        t0 = a.clone()
    t1 = t0 + t0
    t3, t4 = t0.split(2, 1)
    t5 = a.add(a, alpha=2)
    t6 = t0[:, 2:3]
    if opt is None:
        t7 = t6 * 2
    else:
        t7 = t6.sigmoid()
    t8 = t7 @ t4
    t9 = t6.expand(1, 2)
    t10 = t9.detach()
    t9.copy_(t10)
    if opt is None:
        t1.mul_(2)
    t12 = t4.softmax(1)
    return a, a, a, t3
''',
        {'bases': [{'shape': [1, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': None}, {'kind': 'value', 'value': 1}]},
        ['grad'], 2971,
    ),
}


@pytest.mark.parametrize("seed", sorted(FUZZ_CASES))
def test_fuzz_program(seed):
    if SHAPES["mode"] == "dynamic":
        pytest.skip("a fuzz program is checked as the fuzzer ran it (static)")
    source, inputs, modes, case_seed = FUZZ_CASES[seed]
    check_case(source=source, inputs=inputs, modes=modes, seed=case_seed)
