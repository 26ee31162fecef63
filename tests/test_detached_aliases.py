"""Outputs eager makes through ``detach()`` (issue 12, class 2): a detached alias of an input
is no autograd view (``_base`` None), a view of it has it as ``_base``; neither must come back
as a view of the input, or a later write or ``detach_()`` by the caller would act differently
(the harness mutates every returned alias after the call and compares)."""

from __future__ import annotations

import pytest
import torch
from eager_compare import check

MAKE = {
    "detach": lambda a: a.detach(),
    "detach_view": lambda a: a.detach()[1:],
    "detach_t": lambda a: a.detach().t(),
    "dtype_view": lambda a: a.view(torch.int32),
    "detach_dtype_view": lambda a: a.detach().view(torch.int32),
}

AFTER = {
    "none": lambda a, t: None,
    "input_t_": lambda a, t: a.t_(),
    "output_unsqueeze_": lambda a, t: t.unsqueeze_(0),
    "input_mul_": lambda a, t: a.mul_(2) if a.dtype.is_floating_point else None,
}


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "grad"])
@pytest.mark.parametrize("after", sorted(AFTER))
@pytest.mark.parametrize("make", sorted(MAKE))
def test_detached_alias_output(make, after, requires_grad):
    def f(a):
        t = MAKE[make](a)
        AFTER[after](a, t)
        return t, a.sum()

    def inputs():
        x = torch.randn(3, 4, requires_grad=requires_grad)
        return (x * 1 if requires_grad else x,)

    check(f, inputs)


@pytest.mark.parametrize("make", ["detach", "dtype_view"])
def test_view_of_a_returned_detached_alias_has_it_as_base(make):
    """``d = a.detach(); return d, d[1:]``: eager's second output has the first as ``_base``."""

    def f(a):
        d = MAKE[make](a)
        return d, d[1:], d.split(1, 0)[0]

    check(f, lambda: (torch.randn(3, 4),))


VIEW_OF_ALIAS = {
    "unbind": lambda t: t.unbind(0)[0],
    "select": lambda t: t[0],
    "t": lambda t: t.t(),
}


@pytest.mark.parametrize("no_grad", [False, True], ids=["grad", "no_grad"])
@pytest.mark.parametrize("view", sorted(VIEW_OF_ALIAS))
def test_view_of_a_returned_detached_alias_returned_twice(view, no_grad):
    """Was None for the second return (fuzz seed 401581): the duplicate was filled in before
    the view it duplicates, which is rebuilt off another user output (the detached alias)."""

    def f(a):
        with torch.set_grad_enabled(not no_grad):
            t0 = a.detach()
            t1 = VIEW_OF_ALIAS[view](t0)
        return t0, t1, t1

    check(f, lambda: (torch.randn(2, 4),))


# --------------------------------------------------------------------------- overlapping views

OVERLAPPING = {
    "as_strided_overlap": lambda t: t.as_strided((2, 2), (1, 1), 0),
    "as_strided_overlap_offset": lambda t: t.as_strided((3, 2), (1, 2), 1),
    "as_strided_stride0": lambda t: t.as_strided((2, 3), (0, 1), 1),
    "expand": lambda t: t[0].expand(3, 2),
    "unfold": lambda t: t.flatten().unfold(0, 3, 1),
    "slice": lambda t: t[1:],
}

HISTORY = {
    "copy_": lambda t, a: t.copy_(a),
    "mul_": lambda t, a: t.mul_(a),
}


@pytest.mark.parametrize("history", sorted(HISTORY))
@pytest.mark.parametrize("view", sorted(OVERLAPPING))
@pytest.mark.parametrize("order", ["after", "before", "with_alias", "sliced_input"])
def test_overlapping_view_of_detached_alias_with_history(view, history, order):
    """``t0 = a.detach(); t0.copy_(a); return t0.as_strided((2, 2), (1, 1), 0)``: the
    output's elements share memory locations. Copying the graph's value into such a view
    gave one location's gradient once per element there, which the compiled backward summed
    again (doubled, fuzz seed 1009480), or raised for a stride-0 view."""

    def f(a):
        t0 = a.detach()
        if order == "before":
            v = OVERLAPPING[view](t0)
        HISTORY[history](t0, a)
        if order != "before":
            v = OVERLAPPING[view](t0)
        return (v, t0) if order == "with_alias" else (v, a * 2)

    rows = 4 if order == "sliced_input" else 3
    check(f, lambda: (torch.randn(rows, 2, requires_grad=True)[rows - 3:],))


RESTRIDE = {
    "as_strided_overlap": lambda t: t.as_strided_((2, 2), (1, 1), 0),
    "as_strided_stride0": lambda t: t.as_strided_((2, 3), (0, 1), 1),
    "view_of_overlap": lambda t: t.as_strided_((2, 2), (1, 1), 0)[0],
}


@pytest.mark.parametrize("history", sorted(HISTORY))
@pytest.mark.parametrize("restride", sorted(RESTRIDE))
def test_overlapping_restride_of_detached_alias_with_history(restride, history):
    """The detached alias itself re-strided to overlapping memory after its history: a copy
    into it raised for a stride-0 dim."""

    def f(a):
        t0 = a.detach()
        HISTORY[history](t0, a)
        return RESTRIDE[restride](t0), t0.sum()

    check(f, lambda: (torch.randn(3, 2, requires_grad=True),))


NO_GRAD_VIEWS = {
    "reshape": lambda t: t.reshape(-1),
    "t": lambda t: t.t(),
    "select": lambda t: t[0],
    "as_strided": lambda t: t.as_strided((2,), (1,), 1),
}


@pytest.mark.parametrize("history", sorted(HISTORY))
@pytest.mark.parametrize("view", sorted(NO_GRAD_VIEWS))
def test_no_grad_view_of_detached_alias_with_history(view, history):
    """``t1 = a.detach(); t1.add_(a); with no_grad: t4 = t1.reshape(2)``: eager's ``t4``
    requires grad (its base does) without a grad_fn, and a backward from it raises; rebuilt
    off ``a.detach()`` it did not require grad (fuzz seed 2017300)."""

    def f(a):
        t1 = a.detach()
        HISTORY[history](t1, a)
        with torch.no_grad():
            t4 = NO_GRAD_VIEWS[view](t1)
        return t4, a * 2

    check(f, lambda: (torch.randn(2, 3, requires_grad=True),))


#: views of a 4 x 3 leaf passed as the input, none its whole storage
PARTIAL_INPUTS = {
    "row": lambda x: x[1],
    "strided_rows": lambda x: x[::2],
    "column_tail": lambda x: x[1:, 0],
    "element": lambda x: x[2, 1],
}

#: ``as_strided`` geometries inside the 12 locations, reaching past each input's elements
PAST_ELEMENTS = [((3,), (1,), 0), ((2, 2), (3, 1), 4), ((4,), (2,), 1), ((2, 3), (6, 1), 5)]


@pytest.mark.parametrize("history", sorted(HISTORY))
@pytest.mark.parametrize("geometry", PAST_ELEMENTS, ids=str)
@pytest.mark.parametrize("name", sorted(PARTIAL_INPUTS))
@pytest.mark.parametrize("order", ["after", "before", "with_alias"])
def test_view_of_detached_alias_past_its_elements_with_history(name, geometry, history, order):
    """``t4 = b.detach(); t4.add_(b); return t4.as_strided((3,), (1,), 0)`` for an input
    ``b = x[0]``: the output reaches past the alias's elements (within the caller's storage).
    Copying the graph's value into such a view recorded a ``CopySlices`` whose backward
    raised "setStorage: ... out of bounds" (fuzz seed 28012105); the gradient of the
    locations outside the alias stops there, as eager's ``as_strided`` backward stops it."""

    def f(b):
        t0 = b.detach()
        if order == "before":
            v = t0.as_strided(*geometry)
        HISTORY[history](t0, b)
        if order != "before":
            v = t0.as_strided(*geometry)
        return (v, t0) if order == "with_alias" else (v, b * 2)

    check(f, lambda: (PARTIAL_INPUTS[name](torch.randn(4, 3, requires_grad=True)),))
