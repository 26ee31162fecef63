"""``.is_leaf`` of an input read inside the program (issue 12, "never silently wrong"): the
traced program sees a functional tensor, which is no leaf where the caller's tensor is one
that requires grad; a program branching on it would silently compute something else. Refused
there naming the line; read as eager's value where the two agree."""

from __future__ import annotations

import pytest
import torch
from eager_compare import check

import aotgrad


def _branching(a):
    return (a * (2 if a.is_leaf else 3),)


@pytest.mark.parametrize(
    "make",
    [lambda: torch.randn(2), lambda: torch.randn(2, requires_grad=True) * 1, lambda: torch.randn(3, 2)[1:]],
    ids=["leaf_without_grad", "non_leaf", "view_of_leaf_without_grad"],
)
def test_is_leaf_of_input_read_as_eagers(make):
    check(_branching, lambda: (make(),))


def test_is_leaf_of_leaf_requiring_grad_is_refused():
    with pytest.raises(aotgrad.AotgradCompileError, match=r"\.is_leaf of input 0 read at .*test_is_leaf_reads\.py"):
        aotgrad.aot_function(_branching, aotgrad.nop)(torch.randn(2, requires_grad=True))


def test_is_leaf_of_intermediate_is_eagers():
    def f(a):
        t = a * 1
        return (t * (2 if t.is_leaf else 3),)

    check(f, lambda: (torch.randn(2, requires_grad=True),))
