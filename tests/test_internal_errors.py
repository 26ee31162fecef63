"""Programs eager runs where aotgrad failed with an internal error (a crash in torch's
functionalization or fake kernels, an error naming no user line) instead of eager's result
or a clear refusal (issue 12). Compared with eager through the fuzz harness; a deliberate
refusal is asserted to name the op's line."""

from __future__ import annotations

import re

import pytest
import torch

import aotgrad
from aotgrad.compilers import nop
from aotgrad.errors import AotgradCompileError
from tests.fuzz.harness import check_case

# --------------------------------------------------------------------------- as_strided_ of a detach()ed view


def _restrided_detached_view(c):
    t = torch.zeros(4)
    v = t.as_strided((3,), (0,), 0).detach()
    v.as_strided_((2, 2), (2, 1), 0)
    v.addcmul_(c, c)
    return v


def test_write_into_restrided_detached_view_is_refused_naming_the_line():
    """A detach()ed alias of a view, re-strided past its own elements, then written: the
    functional write lands on a copy of the alias's old elements (it crashed in setStorage,
    fuzz seed 422996); refused naming the write."""
    c = torch.randn(2, 4).diagonal()
    _restrided_detached_view(c)  # eager runs it
    with pytest.raises(AotgradCompileError, match=r"v\.addcmul_\(c, c\)"):
        aotgrad.aot_function(_restrided_detached_view, nop)(c)


_DETACHED_ALIAS_INPUTS = {
    "bases": [{"shape": [2, 4], "dtype": "float32", "rg": False}],
    "args": [{"kind": "tensor", "base": 0, "expr": "x.diagonal()"}],
}


@pytest.mark.parametrize(
    "prefix",
    [
        "t.detach()",  # the root's own alias: its elements are the whole storage
        "t[0:4].detach()",  # a contiguous run from the root's start
        "t[1:5].detach()",  # the new layout names only the alias's own elements
    ],
)
def test_write_into_restrided_detached_alias_within_its_elements(prefix):
    offset = 1 if prefix.startswith("t[1") else 0
    check_case(
        source=f"""
def f(c):
    t = torch.zeros(6)
    v = {prefix}
    v.as_strided_((2, 2), (2, 1), {offset})
    v.addcmul_(c, c)
    return v, t
""",
        inputs=_DETACHED_ALIAS_INPUTS,
        modes=["grad", "no_grad"],
    )


def test_read_of_restrided_detached_view():
    """Only a write through it is refused: reading the re-strided alias is exact."""
    check_case(
        source="""
def f(c):
    t = torch.zeros(4)
    v = t.as_strided((3,), (0,), 0).detach()
    v.as_strided_((2, 2), (2, 1), 0)
    return v * c
""",
        inputs=_DETACHED_ALIAS_INPUTS,
        modes=["grad", "no_grad"],
    )


# --------------------------------------------------------------------------- saved tensors of a write through a view

_ONE_INPUT = {
    "bases": [{"shape": [3], "dtype": "float64", "rg": True}, {"shape": [3, 1], "dtype": "float64", "rg": True}],
    "args": [{"kind": "tensor", "base": 0, "expr": "x.clone()"}],
}
_TWO_INPUTS = {
    "bases": [{"shape": [3], "dtype": "float64", "rg": True}, {"shape": [3, 1], "dtype": "float64", "rg": True}],
    "args": [{"kind": "tensor", "base": 0, "expr": "x.clone()"}, {"kind": "tensor", "base": 1, "expr": "x.clone()"}],
}


@pytest.mark.parametrize("post", [[(0, "unsqueeze_(0)")], [(0, "mul_(2)")], []])
def test_saved_output_of_write_through_view_changed_by_caller(post):
    """sigmoid_ through a view saves its result, which autograd wraps in the base's
    CopySlices; the caller changing the base after the call makes eager's backward raise
    (fuzz seed 422024: the check did not see the wrapped node's saved tensors)."""
    check_case(
        source="""
def f(a):
    t0 = a.unsqueeze(-1)
    t0.sigmoid_()
    return a
""",
        inputs=_ONE_INPUT,
        post=post,
    )


@pytest.mark.parametrize(
    "write", ["t0.sigmoid_()", "t0.mul_(w)", "t0 *= w", "t0.addcmul_(w, w)", "t0.exp_()"]
)
@pytest.mark.parametrize("after", ["", "a.add_(1)", "w.mul_(3)", "t0.zero_()"])
def test_saved_tensors_of_write_through_view_changed_by_program(write, after):
    check_case(
        source=f"""
def f(a, w):
    t0 = a.unsqueeze(-1)
    {write}
    {after or 'pass'}
    return a, w
""",
        inputs=_TWO_INPUTS,
    )


# --------------------------------------------------------------------------- write back through a stride-0 layout

_EXPANDED_INPUT = {
    "bases": [{"shape": [1], "dtype": "float32", "rg": False}],
    "args": [{"kind": "tensor", "base": 0, "expr": "x.expand(2, 1)"}],
}


@pytest.mark.parametrize(
    "body",
    [
        "a.detach().fill_(0.5)",
        "t = a.detach(); a[1:] = 1.0; t.fill_(0.5)",  # fuzz seed 420373
        "a.detach().zero_()",
        "a.detach()[0].fill_(2.0)",
        "a.detach().masked_fill_(torch.ones(2, 1, dtype=torch.bool), 3.0)",
    ],
)
@pytest.mark.parametrize("modes", [["no_grad"], ["grad"]])
def test_one_value_write_through_detached_expanded_input(body, modes):
    """Functionalization writes the detach()ed alias back into the input's base with an
    as_strided_scatter over the stride-0 layout, which copies into memory that overlaps
    itself: the real op raised eager's internal-overlap error where eager wrote."""
    check_case(
        source="def f(a):\n" + "".join(f"    {s.strip()}\n" for s in body.split(";")) + "    return a\n",
        inputs=_EXPANDED_INPUT,
        modes=modes,
    )


# --------------------------------------------------------------------------- a gradient autograd itself cannot take


def _reshaped_under_no_grad_then_written(a):
    with torch.no_grad():
        a.unsqueeze_(-1)
    a.add_(1)
    return a


def test_untraceable_gradient_names_the_forward_line():
    """A non-leaf input re-shaped in place under no_grad, then written with grad recording:
    autograd's shape check fails in the backward (eager raises it there too), with no user
    frame on the stack; the refusal named '<unknown location>' (fuzz seed 422467) and now
    names the line whose gradient failed."""
    x = torch.randn(3, 4, requires_grad=True)
    _reshaped_under_no_grad_then_written(x.clone())  # eager's forward runs
    with pytest.raises(AotgradCompileError, match=r'gradient of .*:\d+ in _reshaped_under_no_grad_then_written: "a\.add_\(1\)".*invalid gradient'):
        aotgrad.aot_function(_reshaped_under_no_grad_then_written, nop)(x.clone())


# --------------------------------------------------------------------------- as_strided of a detach()ed alias


@pytest.mark.parametrize(
    "source",
    [
        # fuzz seed 422630: a detach()ed input, written through as_strided of it
        """
def f(a):
    t1 = a.detach()
    t2 = t1.as_strided((3,), (1,), 0)
    t2.clamp_(-0.5, 0.5)
    t3 = a.abs()
    return t3, a, t2, t2
""",
        # a detach()ed view of an input (fuzz seed 422519)
        """
def f(a):
    t0 = a.reshape(3)
    t1 = t0.detach()
    t2 = t1.as_strided((1,), (1,), 1)
    t2.add_(1.5)
    return t1, t2
""",
        # read only, returned; and a detach()ed intermediate
        """
def f(a):
    t0 = a * 2
    t2 = t0.detach().as_strided((2,), (1,), 1)
    t3 = a.detach().as_strided((2,), (1,))
    return t2 * 3, t3, t0
""",
        # returned, or read through a property (``__get__``: ``_base``, ``mT``), where the
        # program's grad mode records its intermediate (fuzz seed 13008278: the property read
        # was taken for an in-place op, name ending in "_", and answered off the write proxy)
        """
def f(a):
    t1 = (a * 2).detach()
    t2 = t1.as_strided((2,), (1,), 1)
    t3 = t1.as_strided((2, 1), (1, 1), 0)
    return t2, t3.mT, t3.T, t2._base * 1
""",
        # its offset moved by as_strided_ of the alias first
        """
def f(a):
    t1 = a.detach()
    t1.as_strided_((2,), (1,), 1)
    t2 = t1.as_strided((1,), (1,))
    t2.mul_(2)
    return a * 1, t1
""",
    ],
)
@pytest.mark.parametrize("modes", [["grad"], ["no_grad"]])
def test_as_strided_of_detached_alias(source, modes):
    """A detach()ed alias is a view in functionalization's chain: an as_strided of it was no
    first view of the chain, and a write through it was refused ('as_strided() is
    non-compositional'); it is taken off the alias's root now."""
    check_case(
        source=source,
        inputs={
            "bases": [{"shape": [3, 1, 1], "dtype": "float32", "rg": True}],
            "args": [{"kind": "tensor", "base": 0, "expr": "x"}],
        },
        modes=modes,
    )


# --------------------------------------------------------------------------- open: an input re-shaped under no_grad, used with grad

_RESHAPED_UNDER_NO_GRAD = """
def f(a):
    with torch.no_grad():
        a.{op}
    return a * 2
"""


@pytest.mark.parametrize("op", ["unsqueeze_(-1)", "t_()"])
def test_non_leaf_input_reshaped_under_no_grad_then_used(op):
    """Eager's backward raises 'MulBackward0 returned an invalid gradient' (the non-leaf
    input's grad_fn keeps its old shape); so does aotgrad's since 85df142 (the no_grad
    metadata op is written back unrecorded; it returned a gradient before)."""
    check_case(
        source=_RESHAPED_UNDER_NO_GRAD.format(op=op),
        inputs={"bases": [{"shape": [3, 4], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": "x.clone()"}]},
    )


def test_leaf_input_transposed_under_no_grad_then_used():
    """Eager's backward accumulates the gradient in the new shape; aotgrad's raised a
    broadcast error (its gradient is laid out as at the use since InputInfo.grad_layout_at_use)."""
    check_case(
        source=_RESHAPED_UNDER_NO_GRAD.format(op="t_()"),
        inputs={"bases": [{"shape": [3, 4], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": "x"}]},
    )


@pytest.mark.parametrize("element", [0, 1])
@pytest.mark.parametrize("write", ["t.masked_fill_(t > -10, 0.0)", "t.fill_(0.25)", "t.mul_(2)"])
def test_write_through_one_element_of_a_detached_expanded_input(write, element):
    """Was a lost write (silently: the input kept its value; fuzz seed 1003146): a write
    through one element of an expanded input (``a.unbind(0)[1].detach()``) is written back
    through the stride-0 layout, where only the first element was kept."""
    check_case(
        source=f"def f(a, b):\n    t = a.unbind(0)[{element}].detach()\n    {write}\n    return b.reshape(-1).relu(),\n",
        inputs={
            "bases": [{"shape": [], "dtype": "float32", "rg": False}],
            "args": [{"kind": "tensor", "base": 0, "expr": "x.expand(2, *())"}, {"kind": "tensor", "base": 0, "expr": "x"}],
        },
        seed=3146,
    )


# --------------------------------------------------------------------------- torch's internal errors in the analysis run


def _stale_view_of_base_detached_in_place(a, b):
    t0 = b.as_strided((1, 2), (3, 3), 4)
    a.detach_()
    b.sin_()
    t1 = t0.sin()
    return t1, a.mean(-1)


def _zero_dim_grad_value_into_int_slice(x):
    t = torch.zeros(3, dtype=torch.int32)
    t[1:] = x @ x
    return t, x.sum()


@pytest.mark.parametrize(
    "fn,make,line",
    [
        # fuzz seed 28005918: a view of a leaf requiring grad, stale after the leaf (passed
        # twice) is detach_()ed and written; autograd's regeneration of the view's grad_fn on
        # the functional run fails an internal assert ("new_fn INTERNAL ASSERT FAILED")
        (_stale_view_of_base_detached_in_place,
         lambda: (lambda x: (x, x))(torch.randn(3, 4, requires_grad=True)), r"t1 = t0\.sin\(\)"),
        # fuzz seed 28007605: a 0-dim value requiring grad assigned to a slice of an int
        # tensor under grad mode; the functional run's autograd refuses the int destination
        # ("Autograd not support dtype: Int"), eager's skips it
        (_zero_dim_grad_value_into_int_slice,
         lambda: (torch.randn(3, requires_grad=True),), r"t\[1:\] = x @ x"),
    ],
    ids=["stale_view_of_detached_base", "int_slice_assigned_grad_value"],
)
def test_internal_error_of_the_functional_run_is_refused_naming_the_line(fn, make, line):
    """Eager runs these; the analysis's run on fake functional tensors hits an error inside
    torch's autograd that is no error of the program. It was raised as a bare RuntimeError,
    naming no line; it is refused at compile time, naming the user's line, and the caller's
    tensors are left untouched."""
    fn(*make())  # eager runs it
    args = make()
    before = [a.detach().clone() for a in args]
    with pytest.raises(AotgradCompileError, match=line):
        aotgrad.aot_function(fn, nop)(*args)
    assert all(torch.equal(a.detach(), b) for a, b in zip(args, before))


# --------------------------------------------------------------------------- torch's errors, said in plain words


def _as_strided_of_diagonal_written(a, b):
    """Fuzz seed 34006277, minimized: the gradient of a write through as_strided of a
    diagonal, reaching outside it."""
    t1 = b * a
    t2 = t1.diagonal(1, 1, 0)
    t3 = t2.as_strided((3, 1), (1, 2), 2)
    t3.zero_()
    return t1


def _as_strided_of_view_of_relaid_intermediate(a):
    """Fuzz seed 30018583, minimized: as_strided of a view of an intermediate that
    unsqueeze_ changed, written."""
    t1 = torch.tanh(a)
    t1.unsqueeze_(3)
    t4 = t1.view(8, 2, 1).as_strided((3, 2), (3, 1), 0)
    t4.sigmoid_()
    return t1


def _view_of_input_detached_in_place_then_written(b):
    """Fuzz seed 33001712, minimized: a view of an input that is detach_()ed and written."""
    t0 = b.t()
    b.detach_()
    b.mul_(2)
    return t0.squeeze(1)


def _grad_value_into_int_view_of_expand(b):
    """Fuzz seed 34002794, minimized: a value requiring grad assigned into an int32 view."""
    t2 = torch.zeros(4, 2).amax(0).view(torch.int32).expand(2)
    t2[1:] = b
    return b * 2


@pytest.mark.parametrize(
    "fn,make,line,plain",
    [
        (_as_strided_of_diagonal_written,
         lambda: (lambda x: (x, x))(torch.randn(1, 3, 3, requires_grad=True)),
         r"t3\.zero_\(\)", "chain of views whose as_strided"),
        (_as_strided_of_view_of_relaid_intermediate,
         lambda: (torch.randn(2, 4, 2, requires_grad=True),), r"t4\.sigmoid_\(\)", "chain of views whose as_strided"),
        (_view_of_input_detached_in_place_then_written,
         lambda: (torch.randn(3, 1, requires_grad=True) * 1,), r"t0\.squeeze\(1\)", r"detached in place \(detach_\(\)\)"),
        (_stale_view_of_base_detached_in_place,
         lambda: (lambda x: (x, x))(torch.randn(3, 4, requires_grad=True)), r"t1 = t0\.sin\(\)",
         r"detached in place \(detach_\(\)\)"),
        (_zero_dim_grad_value_into_int_slice,
         lambda: (torch.randn(3, requires_grad=True),), r"t\[1:\] = x @ x", "into an integer or bool tensor"),
        (_grad_value_into_int_view_of_expand,
         lambda: (torch.randn((), requires_grad=True),), r"t2\[1:\] = b", "into an integer or bool tensor"),
    ],
    ids=["as_strided_of_diagonal", "as_strided_of_relaid_view", "view_of_detached_input", "stale_view_of_detached_base",
         "int_slice_assigned_grad_value", "int_view_of_expand_assigned_grad_value"],
)
def test_torchs_error_on_the_traced_program_is_said_in_plain_words(fn, make, line, plain):
    """Eager runs these; aotgrad refuses them at compile time, naming the user's line and
    saying in plain words what it cannot express and what to do instead, not torch's
    internal message (which stays on the chained cause); the caller's tensors are untouched."""
    fn(*make())  # eager runs it
    args = make()
    before = [a.detach().clone() for a in args]
    with pytest.raises(AotgradCompileError, match=line) as info:
        aotgrad.aot_function(fn, nop)(*args)
    message = str(info.value)
    assert re.search(plain, message), message
    assert "INTERNAL ASSERT" not in message and "non-compositional" not in message and "not support dtype" not in message
    assert all(torch.equal(a.detach(), b) for a, b in zip(args, before))
