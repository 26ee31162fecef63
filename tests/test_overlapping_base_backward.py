"""Gradients of writes autograd records through a view of a tensor whose own layout overlaps
itself (issue 12, "never silently wrong"; fuzz seed 19003932).

``t.as_strided_((2, 2), (2, 2), 0)`` of a tensor that is no view lays it out so that two of
its elements share one memory location. A write autograd records through a view of it puts
eager's ``CopySlices`` on it, whose backward copies the incoming gradient into that
overlapping layout (one value per memory location: the last element's in its loop order),
and regenerates the view's ``grad_fn`` as one ``AsStridedBackward0`` off it, whose backward
divides a location's gradient by the number of its elements there. The traced program
differentiates the dense functional value instead. Each program below gets eager's
gradients and errors (a stride-0 layout: eager's backward raises), or is refused at compile
time naming the write."""

from __future__ import annotations

import pytest
import torch
from eager_compare import check
from matrix import half_product
from test_offset_view_backward import _eager_or_refused

# (how the tensor gets its overlapping layout; whether it requires grad)
BASES = {
    "intermediate": lambda a, w: a.cumsum(1),
    "intermediate_requiring_grad": lambda a, w: a.cumsum(1) * w,
}

OVERLAPPING = {
    "shared_element": ((2, 2), (2, 2), 0),
    "offset": ((2, 2), (1, 1), 1),
}

VIEWS = {
    "row": lambda t: t[0:1, 0:2],
    "column": lambda t: t[:, 0],
    "second_row": lambda t: t[1],
    "diagonal": lambda t: t.diagonal(),
    "transposed_row": lambda t: t.t()[0],
}

WRITES = {
    "copy_": lambda v, w: v.copy_(w.expand(v.shape)),
    "mul_": lambda v, w: v.mul_(w),
    "add_": lambda v, w: v.add_(w, alpha=2),
    "setitem": lambda v, w: v.__setitem__(Ellipsis, w),
}

RETURNS = {
    "view": lambda t, v: (v,),
    "base": lambda t, v: (t,),
    "both": lambda t, v: (v * 2, t.sum()),
}


def _program(base, geometry, view, write, returns):
    def f(a, w):
        t = base(a, w)
        t.as_strided_(*geometry)
        v = view(t)
        write(v, w)
        return returns(t, v)

    return f


def _make():
    return torch.randn(3, 2), torch.randn((), requires_grad=True)


# (half of each product by default: tests/matrix.py)
@pytest.mark.parametrize("base,geometry,view,write,returns", half_product(BASES, OVERLAPPING, VIEWS, WRITES, RETURNS))
def test_recorded_write_through_view_of_overlapping_tensor(base, geometry, view, write, returns):
    f = _program(BASES[base], OVERLAPPING[geometry], VIEWS[view], WRITES[write], RETURNS[returns])
    _eager_or_refused(f, _make, f'"{write}": lambda v, w:')


@pytest.mark.parametrize("returns", sorted(RETURNS))
@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("base", sorted(BASES))
def test_unrecorded_write_through_view_of_overlapping_tensor_is_exact(base, view, returns):
    """Under no_grad autograd records no ``CopySlices``: nothing is refused."""

    def f(a, w):
        t = BASES[base](a, w)
        t.as_strided_((2, 2), (2, 2), 0)
        v = VIEWS[view](t)
        with torch.no_grad():
            v.mul_(w)
        return RETURNS[returns](t, v)

    check(f, _make)


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_recorded_write_through_view_of_non_overlapping_restrided_tensor_is_exact(view):
    """A layout whose elements are all apart: eager's gradients are the traced ones."""

    def f(a, w):
        t = a.cumsum(1)
        t.as_strided_((2, 2), (1, 2), 0)
        v = VIEWS[view](t)
        v.mul_(w)
        return v, t

    check(f, _make)


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_read_of_view_of_overlapping_tensor_is_exact(view):
    """No write: the views keep their own backward, which sums each location's gradient."""

    def f(a, w):
        t = a.cumsum(1) * w
        t.as_strided_((2, 2), (2, 2), 0)
        v = VIEWS[view](t)
        return v * 3, t.as_strided((2,), (2,), 0) * 2

    check(f, _make)


def test_recorded_write_through_view_of_expanded_layout_raises_in_backward():
    """A stride-0 layout: eager's backward of the write raises (its ``CopySlices`` copies the
    gradient into the tensor's layout, which ``copy_`` refuses); so does aotgrad's."""

    def f(a, w):
        t = a.cumsum(1)
        t.as_strided_((2, 2), (0, 1), 0)
        v = t[0:1]
        v.mul_(w)
        return v

    _eager_or_refused(f, _make, "v.mul_(w)")


def test_seed_19003932_shape():
    def f(a, b):
        t1 = (b * 3).sum(0, keepdim=True)
        t2 = a.cumsum(1)
        t2.as_strided_((2, 2), (2, 2), 0)
        t5 = t2[0:1, 0:2]
        t5.copy_(t1)
        return (t5,)

    _eager_or_refused(f, lambda: (torch.randn(3, 2), torch.randn(3, requires_grad=True)), "t5.copy_(t1)")


MORE_VIEWS = {
    "narrow": lambda t: t.narrow(1, 1, 1),
    "select_then_slice": lambda t: t[1][1:],
    "unsqueezed": lambda t: t.unsqueeze(0)[0, 1],
    "element": lambda t: t[0, 0],
    "shared_element": lambda t: t[1, 0],
}


@pytest.mark.parametrize("returns", sorted(RETURNS))
@pytest.mark.parametrize("view", sorted(MORE_VIEWS))
@pytest.mark.parametrize("base", sorted(BASES))
def test_recorded_write_through_view_chains(base, view, returns):
    f = _program(BASES[base], OVERLAPPING["shared_element"], MORE_VIEWS[view], WRITES["mul_"], RETURNS[returns])
    _eager_or_refused(f, _make, '"mul_": lambda v, w:')


# (an input laid out by the program: a leaf without grad, a non-leaf requiring grad)
INPUTS = {
    "leaf": lambda: (torch.randn(6), torch.randn((), requires_grad=True)),
    "non_leaf": lambda: (torch.randn(6, requires_grad=True) * 1, torch.randn((), requires_grad=True)),
}


@pytest.mark.parametrize("returns", sorted(RETURNS))
@pytest.mark.parametrize("view", ["row", "diagonal", "column"])
@pytest.mark.parametrize("make", sorted(INPUTS))
def test_recorded_write_through_view_of_input_restrided_to_overlap(make, view, returns):
    def f(x, w):
        x.as_strided_((2, 2), (2, 2), 0)
        v = VIEWS[view](x)
        v.mul_(w)
        return RETURNS[returns](x, v)

    _eager_or_refused(f, INPUTS[make], "v.mul_(w)")


@pytest.mark.parametrize("write", ["mul_", "copy_"])
@pytest.mark.parametrize("view", ["row", "diagonal", "column", "whole"])
def test_write_through_view_of_overlapping_view_input_is_exact(view, write):
    """An input that is an overlapping ``as_strided`` view of the caller's tensor: eager's
    ``CopySlices`` is at the caller's root, laid out densely. Nothing is refused (``mul_``
    through the whole overlapping input: eager's loop order, refused elsewhere)."""
    if view == "whole" and write == "mul_":
        pytest.skip("eager's loop order (tests/test_overlapping_writes.py)")

    def f(x, w):
        v = x[:, :] if view == "whole" else VIEWS[view](x)
        if write == "mul_":
            v.mul_(w)
        else:
            v.copy_(w)
        return v, x

    check(f, lambda: (torch.randn(6).as_strided((2, 2), (2, 2), 0), torch.randn((), requires_grad=True)))


@pytest.mark.parametrize("second", [False, True])
def test_recorded_write_in_enable_grad_region_of_no_grad_program(second):
    def f(a, w):
        t = a.cumsum(1)
        t.as_strided_((2, 2), (2, 2), 0)
        with torch.enable_grad():
            t.diagonal().mul_(w)
            if second:
                t[0].mul_(w)
        return t.diagonal() * 1, t

    _eager_or_refused(f, _make, "t[0].mul_(w)")
    if not second:
        check(f, _make, grad_mode=False)


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("recorded", [True, False])
def test_write_through_view_of_stride0_layout(view, write, recorded):
    """A stride-0 layout: eager's backward of a recorded write raises; an unrecorded one is
    exact (a view with a stride-0 dim itself: eager's write raises). Nothing is refused."""

    def f(a, w):
        t = a.cumsum(1)
        t.as_strided_((2, 2), (0, 1), 1)
        v = VIEWS[view](t)
        with torch.set_grad_enabled(recorded):
            WRITES[write](v, w)
        return v * 1, t

    check(f, _make)


def test_as_strided_of_overlapping_leaf_input_is_exact():
    """``as_strided`` of a leaf whose elements overlap: eager's ``AsStridedBackward0`` divides
    a shared location's gradient by its count, as the traced program's does."""

    def f(x):
        return x.as_strided((2,), (2,), 0) * 2, x[1] * 3

    check(f, lambda: (torch.randn(6).as_strided((2, 2), (2, 2), 0).requires_grad_(),))


@pytest.mark.parametrize("index", ["unshared", "shared", "advanced"])
def test_recorded_item_assignment_into_view_of_overlapping_tensor(index):
    """``v[i] = w``: only the assigned part counts (the element at location 2 is shared)."""
    key = {"unshared": (0, 0), "shared": (0, 1), "advanced": (torch.tensor([0]), torch.tensor([0]))}[index]

    def f(a, w):
        t = a.cumsum(1)
        t.as_strided_((2, 2), (2, 2), 0)
        v = t[:, :]
        v[key] = w
        # (v * 1: mutating the returned v afterwards diverges without as_strided_ too,
        # another class: eager's "a leaf Variable that requires grad" error)
        return t.diagonal() * 1, v * 1

    _eager_or_refused(f, _make, "v[key] = w")


# (an input the caller laid out so, no view: a non-leaf requiring grad, a leaf without grad)
CALLER_LAYOUTS = {
    "non_leaf": lambda layout: (torch.randn(6, requires_grad=True) * 1).as_strided_(*layout),
    "leaf": lambda layout: torch.randn(6).as_strided_(*layout),
}


@pytest.mark.parametrize("returns", sorted(RETURNS))
@pytest.mark.parametrize("view", ["row", "diagonal", "column"])
@pytest.mark.parametrize("layout", [((2, 2), (2, 2), 0), ((2, 2), (0, 1), 1)], ids=["shared_element", "stride0"])
@pytest.mark.parametrize("caller", sorted(CALLER_LAYOUTS))
def test_recorded_write_through_view_of_input_the_caller_laid_out_to_overlap(caller, layout, view, returns):
    def f(x, w):
        v = VIEWS[view](x)
        v.mul_(w)
        return RETURNS[returns](x, v)

    def make():
        return CALLER_LAYOUTS[caller](layout), torch.randn((), requires_grad=True)

    if layout[1] == (0, 1) and view == "column":
        check(f, make)  # the view itself has a stride-0 dim: eager's mul_ raises, so does aotgrad
        return
    _eager_or_refused(f, make, ("v.mul_(w)", "input 0"))


#: ``t[i] = v`` of the overlapping tensor itself: eager writes through the view ``t[i]``,
#: whose ``CopySlices`` is at ``t`` (fuzz seed 34018504: an input was missed)
INDEXED_BASES = {
    **BASES,
    "input_requiring_grad": lambda a, w: a,
}
INDICES = {"first": 0, "second": 1, "slice": slice(0, 1), "column": (slice(None), 1)}
VALUES = {"constant": lambda w: 1.0, "requiring_grad": lambda w: w}


@pytest.mark.parametrize("value", sorted(VALUES))
@pytest.mark.parametrize("index", sorted(INDICES))
@pytest.mark.parametrize("geometry", sorted(OVERLAPPING))
@pytest.mark.parametrize("base", sorted(INDEXED_BASES))
def test_recorded_setitem_into_overlapping_tensor_itself(base, geometry, index, value):
    def f(a, w):
        t = INDEXED_BASES[base](a, w)
        t.as_strided_(*OVERLAPPING[geometry])
        t[INDICES[index]] = VALUES[value](w)
        return t * 2, t.sum()

    def make():
        a, w = _make()
        return (a.requires_grad_().clone() if base == "input_requiring_grad" else a), w

    _eager_or_refused(f, make, "t[INDICES[index]] = VALUES[value](w)")


#: writes eager allows into a tensor laid out overlapping itself (one value per location)
WRITES_OF_ITSELF = {
    "fill_": lambda t, w: t.fill_(0.5),
    "fill_tensor": lambda t, w: t.fill_(w),
    "zero_": lambda t, w: t.zero_(),
    "masked_fill_": lambda t, w: t.masked_fill_(torch.ones((), dtype=torch.bool), w),
    "copy_one_element": lambda t, w: t.copy_(w),
}
#: stride-0 layouts (an as_strided_ expand): eager's backward of a CopySlices would raise here
STRIDE0 = {"all_one_element": ((3,), (0,), 0), "rows": ((2, 3), (0, 1), 0)}


@pytest.mark.parametrize(
    "base,geometry,write,returns",
    half_product(BASES, {**STRIDE0, **OVERLAPPING}, WRITES_OF_ITSELF, ("itself", "sum")),
)
def test_recorded_write_into_overlapping_tensor_itself(base, geometry, write, returns):
    """A write autograd records into a tensor that is no view, re-strided to overlap itself:
    eager records the write's own node on it (no ``CopySlices``), whose backward runs, where
    aotgrad raised eager's stride-0 ``CopySlices`` error in the backward (fuzz seed 35010912:
    ``b.as_strided_((3,), (0,), 0); b.fill_(0.5)``; 16 of these failed so). A value that
    requires grad (``fill_(w)``, ``copy_(w)``, ``masked_fill_(m, w)``) is refused at compile
    time: eager's gradient of it counts every element, the traced write's every location (32
    of these were silently wrong, 16 raised)."""

    def f(a, w):
        t = BASES[base](a, w)
        t.as_strided_(*{**STRIDE0, **OVERLAPPING}[geometry])
        WRITES_OF_ITSELF[write](t, w)
        return (t,) if returns == "itself" else (t.sum() * w,)

    def make():
        return torch.randn(3, 2, requires_grad=True), torch.randn((), requires_grad=True)

    # (into a stride-0 layout eager's copy_ of a tensor value raises, and so does aotgrad)
    if write == "masked_fill_" or (write in ("fill_tensor", "copy_one_element") and geometry not in STRIDE0):
        _eager_or_refused(f, make, f'"{write}": lambda t, w:')
    else:
        check(f, make)
