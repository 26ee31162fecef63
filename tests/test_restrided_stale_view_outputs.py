"""Gradients of a returned view that ``as_strided_`` re-strided with grad recording after an
in-place op on its root made it stale (issue 12, "never silently wrong"; fuzz seed 16006573).

Eager regenerates a stale view's ``grad_fn`` when an in-place op on the view itself reads it
(``AsStridedBackward0`` off the root in the view's geometry then), and ``as_strided_`` records
``AsStridedBackward1`` on top, whose input geometry is the view's before the op: the gradient
of the new layout's elements outside the old ones is dropped. A view rebuilt by one
``as_strided`` off its root in the new layout would send it there. Each program below gets
eager's gradients, or is refused at compile time naming the line."""

from __future__ import annotations

import os

import pytest
import torch
from eager_compare import check

from tests import test_offset_view_backward as offset_view_backward


def _eager_or_refused(f, make, line_text: str = __file__) -> None:
    """``f`` through aotgrad behaves as eager, or raises AotgradCompileError naming
    ``line_text`` (by default: a line of this file, the user's program) before changing any
    input."""
    offset_view_backward._eager_or_refused(f, make, line_text)


def test_seed_16006573_shape():
    """Fuzz seed 16006573 (minimized): eager's gradient reaches t7's element 2 only."""

    def f(a):
        t0 = a.unbind(1)[1]
        t1 = t0.diagonal(0, 1, 0)
        t2 = t1.add(t1, alpha=2)
        t6 = t0.unsqueeze(1)
        t7 = t6 @ t2
        t8 = t7.as_strided((1,), (2,), 2)
        t7.t_()
        t8.as_strided_((3, 1), (1, 1), 0)
        return [t8]

    def make():
        return (torch.randn(4, 4, 3, requires_grad=True),)

    check(f, make)


# the root's in-place op that makes the view stale (eager: a version bump)
ROOT_OPS = {
    "none": lambda r: None,
    "t_": lambda r: r.t_(),
    "transpose_": lambda r: r.transpose_(0, 1),
    "unsqueeze_": lambda r: r.unsqueeze_(1),
    "unsqueeze_squeeze_": lambda r: (r.unsqueeze_(0), r.squeeze_(0)),
    "as_strided_same": lambda r: r.as_strided_((3, 4), (1, 3)),
    "as_strided_flat": lambda r: r.as_strided_((12,), (1,)),
    "mul_": lambda r: r.mul_(2),
}

# a view of the (4, 3) root, taken before the root's op
VIEWS = {
    "as_strided": lambda r: r.as_strided((2,), (2,), 2),
    "select": lambda r: r[1],
    "column": lambda r: r[:, 1],
    "slice": lambda r: r[1:3],
}

# what the program does to the view afterwards
VIEW_OPS = {
    "as_strided_outside": lambda v: v.as_strided_((3,), (1,), 0),
    "as_strided_over": lambda v: v.as_strided_((4,), (1,), 2),
    "as_strided_all": lambda v: v.as_strided_((12,), (1,), 0),
    "as_strided_inside": lambda v: v.as_strided_((1,), (1,), 4),
    "as_strided_twice": lambda v: (v.as_strided_((4,), (1,), 2), v.as_strided_((2, 2), (1, 3), 0)),
    "unsqueeze_then_as_strided_": lambda v: (v.unsqueeze_(0), v.as_strided_((2, 2), (3, 1), 1)),
    "as_strided_then_t_": lambda v: (v.as_strided_((2, 2), (3, 1), 1), v.t_()),
    "as_strided_then_mul_": lambda v: (v.as_strided_((3,), (1,), 0), v.mul_(3)),
    "transpose_": lambda v: v.unsqueeze_(0).transpose_(0, 1),
    "mul_": lambda v: v.mul_(3),
}

RETURNS = {
    "view": lambda r, v: (v,),
    "view_and_root": lambda r, v: (v, r),
    "used": lambda r, v: (v * 1,),
}

#: the matrix run here (the full one, ~2000 cases, takes minutes: ``AOTGRAD_FULL_MATRIX=1``)
_FULL = os.environ.get("AOTGRAD_FULL_MATRIX") == "1"
_ROOT_OPS = sorted(ROOT_OPS) if _FULL else ["as_strided_flat", "mul_", "none", "t_", "unsqueeze_squeeze_"]
_VIEW_OPS = sorted(VIEW_OPS) if _FULL else [
    "as_strided_outside", "as_strided_inside", "as_strided_twice", "as_strided_then_mul_", "transpose_",
    "unsqueeze_then_as_strided_",
]
_RETURNS = sorted(RETURNS) if _FULL else ["used", "view"]


def _program(root_op, view, view_op, returns, of_input):
    def f(a):
        r = a if of_input else a * 2
        v = view(r)
        root_op(r)
        view_op(v)
        return returns(r, v)

    return f


@pytest.mark.parametrize("of_input", [False, True], ids=["intermediate", "input"])
@pytest.mark.parametrize("returns", _RETURNS)
@pytest.mark.parametrize("view_op", _VIEW_OPS)
@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("root_op", _ROOT_OPS)
def test_restrided_view_of_relaid_root(root_op, view, view_op, returns, of_input):
    """Every (root op, view, op on the view, what is returned) is eager's or refused. Before
    the fix, 559 of the full matrix's 1920 gave other gradients silently: 552 with an
    ``as_strided_`` of the view reaching outside its elements and the view returned (now
    eager's), 7 with a view of a flattened intermediate used after an in-place metadata op
    on it (the trace's replay of ``select``; now refused at the use, as is one case eager's
    by chance: every gradient dropped either way)."""
    f = _program(ROOT_OPS[root_op], VIEWS[view], VIEW_OPS[view_op], RETURNS[returns], of_input)

    def make():
        return ((torch.randn(4, 3, requires_grad=True) * 1),)

    _eager_or_refused(f, make)


def test_restrided_view_of_relaid_input_and_root_returned():
    """The re-strided view and its root both returned, the root an input ``t_()``-ed."""

    def f(a):
        v = a.as_strided((2,), (2,), 2)
        a.t_()
        v.as_strided_((3,), (1,), 0)
        return v, a

    check(f, lambda: ((torch.randn(4, 3, requires_grad=True) * 1),))


def test_restrided_view_of_square_root_used_is_refused():
    """A square root flattened by ``as_strided_``: the trace's replay of ``select(1)``
    runs on it but names another element; eager regenerates the view by ``as_strided``.
    Refused at the use, naming the in-place metadata op."""

    def f(a):
        r = a * 2
        v = r[1]
        r.as_strided_((9,), (1,))
        v.unsqueeze_(0)
        return v * 1

    _eager_or_refused(f, lambda: ((torch.randn(3, 3, requires_grad=True) * 1),), "v.unsqueeze_(0)")


def test_restrided_view_of_square_root_returned():
    """As above, the view returned and not used: rebuilt off the root, eager's."""

    def f(a):
        r = a * 2
        v = r[1]
        r.as_strided_((9,), (1,))
        v.unsqueeze_(0)
        return v

    check(f, lambda: ((torch.randn(3, 3, requires_grad=True) * 1),))


def test_restrided_view_overlapping_geometry_is_refused():
    """The view's geometry before ``as_strided_`` names memory locations twice (an
    ``expand``): ``as_strided``'s backward would share their gradient out; refused, naming
    the ``as_strided_``."""

    def f(a):
        r = a * 2
        v = r[0].expand(2, 3)
        r.t_()
        v.as_strided_((4,), (1,), 0)
        return v

    _eager_or_refused(f, lambda: ((torch.randn(4, 3, requires_grad=True) * 1),), "v.as_strided_((4,), (1,), 0)")


def test_restrided_view_exact_under_no_grad_restride():
    """``as_strided_`` under no_grad records nothing: the view is stale and eager
    regenerates it off the root in its new geometry (gradient reaches every new element)."""

    def f(a):
        r = a * 2
        v = r.as_strided((1,), (2,), 2)
        r.t_()
        with torch.no_grad():
            v.as_strided_((3, 1), (1, 1), 0)
        return v

    check(f, lambda: ((torch.randn(4, 3, requires_grad=True) * 1),))


def test_restrided_view_then_root_write():
    """A write into the root after the view's ``as_strided_`` makes the view stale again:
    eager regenerates it off the root in its new geometry, the dropped gradient back (refused
    at the write before this change, as now)."""

    def f(a):
        r = a * 2
        v = r.as_strided((1,), (2,), 2)
        r.t_()
        v.as_strided_((3, 1), (1, 1), 0)
        r.mul_(2)
        return v

    _eager_or_refused(f, lambda: ((torch.randn(4, 3, requires_grad=True) * 1),), "r.mul_(2)")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_restrided_view_dtypes(dtype):
    def f(a):
        r = a * 2
        v = r.as_strided((3,), (1,), 3)
        r.t_()
        v.as_strided_((4,), (1,), 2)
        return v, r.sum()

    check(f, lambda: ((torch.randn(4, 3, dtype=dtype, requires_grad=True) * 1),))
