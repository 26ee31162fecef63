"""Views keep eager's geometry (issue 12, class 1): a view of an input taken after a data
mutation of a sliced or non-contiguous input, or before a metadata mutation of the input,
comes back with eager's size, stride, storage offset and values; writes through it after the
call land where eager's land."""

from __future__ import annotations

import itertools

import pytest
import torch
from eager_compare import check

import aotgrad

INPUTS = {
    "contiguous": lambda: torch.randn(4, 3),
    "transposed": lambda: torch.randn(3, 4).t(),
    "row_slice": lambda: torch.randn(5, 3)[1:],
    "column_slice": lambda: torch.randn(4, 5)[:, 2:],
    "every_other_row": lambda: torch.randn(8, 3)[::2],
}

DATA_MUTATIONS = {
    "mul_": lambda a: a.mul_(2),
    "masked_fill_": lambda a: a.masked_fill_(a > 0, 0.0),
    "setitem": lambda a: a.__setitem__(0, 1.0),
    "none": lambda a: None,
}

VIEWS = {
    "select": lambda a: a[1],
    "column": lambda a: a[:, 1],
    "narrow": lambda a: a.narrow(0, 1, 2),
    "t": lambda a: a.t(),
    "unbind": lambda a: a.unbind(1)[2],
    "diagonal": lambda a: a.diagonal(),
    "unflatten": lambda a: a.unsqueeze(0).expand(2, -1, -1)[1],
}

METADATA_MUTATIONS = {
    "t_": lambda a: a.t_(),
    "unsqueeze_": lambda a: a.unsqueeze_(0),
    "transpose_": lambda a: a.transpose_(0, 1),
    "as_strided_": lambda a: a.as_strided_((2, 2), (1, 2), a.storage_offset()),
    "none": lambda a: None,
}


def _program(data, view, meta):
    def f(a):
        DATA_MUTATIONS[data](a)
        v = VIEWS[view](a)
        METADATA_MUTATIONS[meta](a)
        return v, a.sum()

    return f


CASES = [
    c for c in itertools.product(sorted(INPUTS), sorted(DATA_MUTATIONS), sorted(VIEWS), sorted(METADATA_MUTATIONS))
    if c[1] != "none" or c[3] != "none"
]


@pytest.mark.parametrize("inputs,data,view,meta", CASES, ids=lambda v: str(v))
def test_view_keeps_eager_geometry(inputs, data, view, meta):
    """Eager's results, or -- only for ``as_strided_`` of an input that functionalization
    has re-laid out by an in-place op (a slice, a transposed input) -- a clear refusal that
    names the line and changes nothing."""
    make = INPUTS[inputs]
    try:
        check(_program(data, view, meta), lambda: (make(),), backward=False)
    except AssertionError as exc:
        refused = isinstance(exc.__cause__, aotgrad.AotgradCompileError)
        if not (refused and meta == "as_strided_" and data != "none" and inputs != "contiguous"):
            raise
        assert "as_strided_" in str(exc.__cause__) and "test_view_geometry.py" in str(exc.__cause__)


@pytest.mark.parametrize("inputs", sorted(INPUTS))
def test_view_of_input_requiring_grad_after_data_mutation(inputs):
    make = INPUTS[inputs]

    def f(a):
        a.mul_(2)
        return a[1], a[:, 0]

    check(f, lambda: (make().requires_grad_() * 1,))


def test_detach_then_view_as_after_data_mutation_of_sliced_input():
    def f(a):
        a.zero_()
        d = a.detach()
        return d.view_as(d), d.expand_as(d)

    check(f, lambda: (torch.randn(2, 2, 3)[1:],))


def test_contiguous_of_strided_input_mutated_later_is_a_copy():
    """``b.contiguous()`` copies a non-dense input in eager; the clone that protects a mutated
    input requiring grad inside the graph keeps its strides, so it copies there too."""

    def f(b):
        t = b.contiguous().view(1, 3)
        with torch.no_grad():
            b.mul_(3)
        return t, b.sum()

    check(f, lambda: (torch.randn(4, 3, requires_grad=True).as_strided((3,), (3,), 0),))


def test_as_strided__of_non_contiguous_view_then_write_is_eagers():
    """Functionalization records the re-strided view as as_strided of its base
    (eager_rewrites.rebase_restrided_view; formerly refused)."""
    def f(b):
        t = b.diagonal()
        t.as_strided_((2,), (2,), 1)
        t.mul_(2)
        return b.sum()

    check(f, lambda: (torch.randn(3, 3),))


@pytest.mark.parametrize("inputs", ["every_other_row", "column_slice", "row_slice"])
@pytest.mark.parametrize("data", ["mul_", "masked_fill_", "setitem"])
@pytest.mark.parametrize("strided", ["as_strided", "as_strided_"])
def test_as_strided_reads_the_callers_gaps_after_a_write(inputs, data, strided):
    """An input with gaps between its elements (``x[::2]``), written in place, then
    ``as_strided`` onto locations in the gaps: eager reads the caller's values there. The
    traced value, re-laid out as the input after the write, holds the input's elements only
    (a regression of b5b2040, whose layout-keeping write made the old refusal pass by: sums
    of garbage in the gaps)."""

    def f(a):
        DATA_MUTATIONS[data](a)
        if strided == "as_strided_":
            a.as_strided_((2, 2), (1, 2), a.storage_offset())
            return a.sum(), a * 1
        return a.as_strided((4,), (1,), a.storage_offset()) * 1

    check(f, lambda: (INPUTS[inputs](),), backward=False)
