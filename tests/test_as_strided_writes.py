"""``as_strided`` addresses a tensor's *storage* (issue 12, class 1): a write through
``v.as_strided(...)`` must land where eager's lands, also outside the elements of ``v``
(an input that is a slice of a larger tensor), and for ``v`` a view inside the program."""

from __future__ import annotations

import pytest
import torch
from eager_compare import check

import aotgrad
from aotgrad.compilers import nop

# (base shape, view of the base passed as the input): offset, non-contiguous, negative-free
INPUT_VIEWS = {
    "row_slice": ((5, 3), lambda x: x[1:]),
    "column_slice": ((3, 5), lambda x: x[:, 1:]),
    "transposed_slice": ((4, 6), lambda x: x.t()[2:]),
    "strided_rows": ((6, 3), lambda x: x[1::2]),
}

# as_strided geometries reaching before, inside and across the input's own elements
GEOMETRIES = [((2, 2), (1, 3), 0), ((3,), (2,), 1), ((2, 3), (3, 1), 2)]


def _make(shape, view, requires_grad):
    def make():
        base = torch.randn(*shape, requires_grad=requires_grad)
        return (view(base * 1 if requires_grad else base),)
    return make


def _write_through_as_strided(geometry):
    def f(a):
        t = a.as_strided(*geometry)
        t.mul_(2)
        return a.sum(), t

    return f


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "grad"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
@pytest.mark.parametrize("name", sorted(INPUT_VIEWS))
def test_write_through_as_strided_of_input_slice(name, geometry, requires_grad):
    shape, view = INPUT_VIEWS[name]
    if requires_grad:
        # The input is a view of a larger tensor that requires grad: eager's gradient of
        # as_strided reaches only the input's elements until the write, then the root's.
        # Functionalization cannot replay such a write; refused, naming the line.
        f = aotgrad.aot_function(_write_through_as_strided(geometry), nop)
        (a,) = _make(shape, view, True)()
        before = a.detach().clone()
        with pytest.raises(aotgrad.AotgradCompileError, match="t.mul_|as_strided"):
            f(a)
        assert torch.equal(a.detach(), before)
        return
    check(_write_through_as_strided(geometry), _make(shape, view, requires_grad))


def test_write_through_as_strided_of_noncontiguous_input_requiring_grad_is_refused():
    """A write autograd records through ``as_strided`` of an input at a storage offset (a
    slice of a tensor requiring grad): autograd on the traced program addresses the write's
    gradient by the storage offset, eager's by the offset from the input's start; refused at
    compile time, naming the line, the input unchanged."""
    base = torch.randn(3, 5, requires_grad=True)
    a = (base * 1)[:, 1:]
    before = a.detach().clone()
    f = aotgrad.aot_function(_write_through_as_strided(((2, 2), (1, 3), 0)), nop)
    with pytest.raises(aotgrad.AotgradCompileError, match="t.mul_"):
        f(a)
    assert torch.equal(a.detach(), before)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_write_through_as_strided_of_a_view_inside_the_program(geometry):
    def f(c):
        parts = c.unbind(1)
        t = parts[1].as_strided(*geometry)
        t.clamp_(-0.5, 0.5)
        return c.sin(), t

    check(f, lambda: (torch.randn(3, 4),))


def test_read_through_as_strided_of_input_slice_sees_whole_storage():
    def f(a):
        return a.as_strided((4,), (1,), 0) * 2

    check(f, _make((4, 2), lambda x: x[1:], False))
