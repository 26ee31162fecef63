"""A write through a view that functionalization records as ``as_strided`` (an
``as_strided`` view, or a view whose metadata an in-place op changed), into an input that
requires grad and is laid out densely but not contiguously (issue 12, fuzz seeds 30000167,
29002168, 34000127, ...).

Functionalization writes such a view back into its base's value with ``as_strided_scatter``,
below autograd. ATen's ``as_strided_scatter`` asserts that its ``self`` is contiguous where it
requires grad (its derivative formula's assumption), and the analysis's base value is the
caller's fake input, which carries the input's ``requires_grad``: the analysis raised an
internal assert where eager runs. Each case compares with eager (outputs, inputs after the
call, gradients, later mutation of the outputs), under grad mode and under ``no_grad``.
"""

from __future__ import annotations

import pytest
import torch
from eager_compare import check
from matrix import half_product

import aotgrad
from aotgrad.compilers import nop

# (name, make the input): dense, not contiguous, requiring grad
INPUTS = {
    "view_of_leaf_t": lambda: torch.randn(4, 3, requires_grad=True).t(),
    "non_leaf_t": lambda: (torch.randn(4, 3, requires_grad=True) * 1).t(),
    "non_leaf_permuted": lambda: (torch.randn(3, 2, 2, requires_grad=True) * 1).permute(2, 0, 1),
    "leaf_strided": lambda: torch.randn(4, 3).t().detach().requires_grad_(),
    "leaf_view_t": lambda: torch.randn(4, 3).detach().t().requires_grad_(),
}

# in-place ops writing data, each applied to a view ``v``
WRITES = {
    "clamp_": lambda v: v.clamp_(-0.5, 0.5),
    "relu_": lambda v: v.relu_(),
    "sigmoid_": lambda v: v.sigmoid_(),
    "copy_": lambda v: v.copy_(torch.ones_like(v) * 3),
    "masked_fill_": lambda v: v.masked_fill_(v > 0, 0.0),
    "fill_": lambda v: v.fill_(0.5),
    "zero_": lambda v: v.zero_(),
    "add_": lambda v: v.add_(1),
    "sub_alpha": lambda v: v.sub_(torch.ones_like(v), alpha=2),
    "mul_": lambda v: v.mul_(2),
    "setitem_step": lambda v: v.__setitem__(slice(None, None, 2), 1.0),
}

# how the program reaches a view functionalization records as as_strided
VIEWS = {
    "detach_as_strided": lambda a: a.detach().as_strided((3,), (3,), 0),
    "detach_as_strided_offset": lambda a: a.detach().as_strided((2, 2), (1, 3), 1),
    "detach_unsqueeze_": lambda a: a.detach()[0].unsqueeze_(0),
    "detach_t_": lambda a: a.detach()[:2, :2].t_(),
    "detach_as_strided_": lambda a: a.detach()[1:].as_strided_((2,), (2,), 1),
}


def _program(view_name: str, write_name: str, no_grad_write: bool = False):
    view, write = VIEWS[view_name], WRITES[write_name]

    def f(a):
        if no_grad_write:
            with torch.no_grad():
                v = view(a)
                write(v)
        else:
            v = view(a)
            write(v)
        return a, v, a * 2

    return f


def _make(input_name: str):
    """The input, built in grad mode (a view built under ``no_grad`` is another case)."""

    def make():
        with torch.enable_grad():
            return (INPUTS[input_name](),)

    return make


#: deliberate refusals (docs/user-guide.md): a leaf view requiring grad of a tensor that does
#: not, its storage addressed by as_strided and written; a write into a storage re-strided by
#: as_strided_ through a detach()ed alias of a view
_LEAF_VIEW_REFUSAL = "autograd leaf that requires grad and is a view"
_RESTRIDED_REFUSAL = "re-strided by as_strided_"


def _refusal(input_name: str, view_name: str) -> str | None:
    """The refusal aotgrad raises for this case, or None where it runs as eager."""
    if input_name == "leaf_view_t" and "as_strided" in view_name:
        return _LEAF_VIEW_REFUSAL
    if view_name == "detach_as_strided_":
        return _RESTRIDED_REFUSAL
    return None


def _check_or_refused(f, input_name: str, refusal: str | None, grad_mode: bool = True) -> None:
    """``check`` against eager, or: the refusal, at compile time, the input untouched."""
    if refusal is None:
        check(f, _make(input_name), grad_mode=grad_mode)
        return
    (a,) = _make(input_name)()
    before = a.detach().clone()
    with torch.set_grad_enabled(grad_mode), pytest.raises(aotgrad.AotgradCompileError, match=refusal):
        aotgrad.aot_function(f, nop)(a)
    assert torch.equal(a.detach(), before)


# (half of the product by default: tests/matrix.py)
@pytest.mark.parametrize("input_name,write_name,grad_mode", half_product(INPUTS, WRITES, (True, False)))
def test_write_through_detached_as_strided(input_name, write_name, grad_mode):
    f = _program("detach_as_strided", write_name)
    _check_or_refused(f, input_name, _refusal(input_name, "detach_as_strided"), grad_mode)


@pytest.mark.parametrize("view_name", sorted(VIEWS))
@pytest.mark.parametrize("write_name", ["clamp_", "copy_", "setitem_step"])
@pytest.mark.parametrize("input_name", sorted(INPUTS))
def test_write_through_each_view(input_name, write_name, view_name):
    _check_or_refused(_program(view_name, write_name), input_name, _refusal(input_name, view_name))


@pytest.mark.parametrize("write_name", ["relu_", "masked_fill_", "add_"])
@pytest.mark.parametrize("input_name", sorted(INPUTS))
def test_no_grad_write_through_as_strided_of_input(input_name, write_name):
    """``a.as_strided(...)`` written under ``no_grad``: autograd does not record it."""

    def f(a):
        with torch.no_grad():
            v = a.as_strided((3,), (3,), 0)
            WRITES[write_name](v)
        return a * 2, v

    _check_or_refused(f, input_name, _refusal(input_name, "as_strided"))


@pytest.mark.parametrize("write_name", ["clamp_", "sigmoid_", "copy_"])
@pytest.mark.parametrize("view_name", ["squeeze_unsqueeze_", "as_strided"])
def test_recorded_write_into_non_leaf_input(view_name, write_name):
    """A write autograd records, through a view of a non-leaf input (seed 29002168)."""

    def f(b):
        if view_name == "as_strided":
            v = b.as_strided((2,), (3,), 1)
        else:
            v = b.squeeze(1)
            v.unsqueeze_(-3)
        WRITES[write_name](v)
        return v, v, b

    check(f, lambda: ((torch.randn(2, 3, requires_grad=True) * 1).t(),))


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("self_of", ["input", "intermediate", "contiguous_intermediate"])
def test_programs_as_strided_scatter_raises_eagers_error(self_of, grad_mode):
    """The program's own ``as_strided_scatter`` of a non-contiguous ``self`` requiring grad
    raises in eager, in grad mode or not (ATen's assert); aotgrad raises it too, before anything
    runs. Of a contiguous one it runs."""

    def f(a):
        if self_of == "input":
            s = a
        elif self_of == "intermediate":
            s = (a * 1).t().t()[:, :2]
        else:
            s = a * 1
        return torch.as_strided_scatter(s, torch.zeros(3), (3,), (3,), 0) * 2

    check(f, _make("non_leaf_t"), grad_mode=grad_mode)
