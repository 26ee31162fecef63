"""A leaf input's AccumulateGrad checks the gradients it gets against the leaf's shape when
it was made (issue 12, class 5): eager's program makes it at its first recorded use of the
leaf, and an in-place metadata op under no_grad may change the leaf's shape after. A
backward reaching it through a view rebuilt in the new shape, or from the leaf itself
returned, then raises "invalid gradient". aotgrad rebuilds such views after the call, so the
runtime makes the accumulator before the forward, in the shape the analysis recorded
(``InputInfo.grad_accumulator_made``), and holds it until the outputs reach it."""

from __future__ import annotations

import pytest
import torch

import aotgrad
from aotgrad.compilers import nop
from tests.fuzz import harness

#: in-place metadata ops the program applies to its leaf input under no_grad
RELAYOUTS = {
    "unsqueeze_": "a.unsqueeze_(1)",
    "t_": "a.t_()",
    "transpose_": "a.transpose_(0, 1)",
    "squeeze_": "a.squeeze_()",
    "as_strided_": "a.as_strided_((2,), (1,), 1)",
    "unsqueeze_ then squeeze_": "a.unsqueeze_(0).squeeze_(0)",
}
#: the program's recorded use of the leaf before it
USES = {
    "select": "t1 = a.select(1, 0)",
    "narrow": "t1 = a.narrow(0, 0, 1)",
    "view": "t1 = a.view(-1)",
    "expand": "t1 = a.expand(2, 2, 1)",
    "sin": "t1 = a.sin()",
    "cat": "t1 = torch.cat([a, a])",
}
RETURNS = {"both": "return a, t1", "view only": "return t1,", "input only": "return a,"}


def _case(relayout: str, use: str, returned: str, mode: str, before: bool = True) -> harness.Case:
    steps = [USES[use], f"with torch.no_grad():\n        {RELAYOUTS[relayout]}"]
    body = "\n    ".join(steps if before else steps[::-1])
    source = f"\ndef f(a):\n    {body}\n    {RETURNS[returned]}\n"
    inputs = {"bases": [{"shape": [2, 1], "dtype": "float32", "rg": True}],
              "args": [{"kind": "tensor", "base": 0, "expr": "x"}]}
    return harness.Case(source=source, inputs=inputs, post=[], modes=[mode], seed=7)


@pytest.mark.parametrize("mode", ["grad", "no_grad"])
@pytest.mark.parametrize("returned", sorted(RETURNS))
@pytest.mark.parametrize("use", sorted(USES))
@pytest.mark.parametrize("relayout", sorted(RELAYOUTS))
def test_leaf_used_then_relaid_out_under_no_grad(relayout, use, returned, mode):
    """Was no error where eager's backward raises (fuzz seeds 1007039, 1008820, 1010631,
    2002740, 2012043, 1013695, 2016075, final 20k runs)."""
    result = harness.run(_case(relayout, use, returned, mode))
    assert result.ok, result.report()


@pytest.mark.parametrize("use", ["select", "narrow", "view"])
@pytest.mark.parametrize("relayout", ["unsqueeze_", "t_", "squeeze_"])
def test_leaf_relaid_out_under_no_grad_then_viewed(relayout, use):
    """The first recorded use after the change: eager's accumulator has the new shape."""
    result = harness.run(_case(relayout, use, "both", "grad", before=False))
    assert result.ok, result.report()


def test_accumulator_made_in_a_shape_between_entry_and_exit():
    """The use falls between two shape changes: eager's accumulator has neither the entry
    nor the final shape; the runtime makes it in that one."""
    source = """
def f(a):
    with torch.no_grad():
        a.unsqueeze_(0)
    t1 = a.select(0, 0)
    with torch.no_grad():
        a.squeeze_()
    return a, t1
"""
    inputs = {"bases": [{"shape": [2, 3], "dtype": "float32", "rg": True}],
              "args": [{"kind": "tensor", "base": 0, "expr": "x"}]}
    result = harness.run(harness.Case(source=source, inputs=inputs, post=[], modes=["grad"], seed=3))
    assert result.ok, result.report()
    assert "invalid gradient" in result.eager_errors.get("backward[0]", ""), "the case does not test what it says"


# ------------------------------------------- the caller's views of an input whose metadata changes

#: another argument, a view of the same leaf the caller made before the call
CALLER_VIEWS = {"select": "x[0]", "slice": "x[:1]", "as_strided": "x.as_strided((2,), (1,), 0)", "t": "x.t()"}
#: in-place metadata ops on the leaf itself
LEAF_RELAYOUTS = {
    "as_strided_": "b.as_strided_((1,), (1,), 2)",
    "unsqueeze_": "b.unsqueeze_(1)",
    "squeeze_": "b.squeeze_(0)",
    "t_": "b.t_()",
}


@pytest.mark.parametrize("mode", ["grad", "no_grad"])
@pytest.mark.parametrize("view", sorted(CALLER_VIEWS))
@pytest.mark.parametrize("relayout", sorted(LEAF_RELAYOUTS))
def test_caller_view_of_a_leaf_relaid_out_in_the_program(relayout, view, mode):
    """Was no error where eager's backward raises (fuzz seeds 1000288, 2000996, 2019802):
    eager's metadata op moves the leaf's version counter, so the caller's view regenerates
    its grad_fn off the leaf in the new geometry (AsStridedBackward0, whose gradient no longer
    fits the leaf's accumulator); the runtime's replay kept the counter where it was."""
    source = f"""
def f(a, b):
    with torch.no_grad():
        {LEAF_RELAYOUTS[relayout]}
    return a,
"""
    shape = [1, 3] if relayout == "squeeze_" else [3]
    if view == "t":
        shape = [1, 3]
    inputs = {"bases": [{"shape": shape, "dtype": "float32", "rg": True}],
              "args": [{"kind": "tensor", "base": 0, "expr": CALLER_VIEWS[view]},
                       {"kind": "tensor", "base": 0, "expr": "x"}]}
    result = harness.run(harness.Case(source=source, inputs=inputs, post=[], modes=[mode], seed=5))
    assert result.ok, result.report()


SAVES = {
    "before": "y = b * b\n    with torch.no_grad():\n        {op}",
    "after": "with torch.no_grad():\n        {op}\n    y = b * b",
}


@pytest.mark.parametrize("caller_writes", [False, True])
@pytest.mark.parametrize("when", sorted(SAVES))
@pytest.mark.parametrize(("who", "relayout"), [("itself", "unsqueeze_"), ("an alias", "unsqueeze_"), ("an alias", "t_")])
def test_saved_input_and_the_relayout_of_its_storage(who, relayout, when, caller_writes):
    """The counter the replay moves is also the one of what the compiled forward saved of the
    input (or of another input on its storage): saved without it, so only eager's own refusals
    remain (saved before the op), and the caller's write after the call is still refused.
    (Not ``b.t_()`` of the non-leaf input itself under no_grad then used: the trace refuses
    it, where eager's backward raises "invalid gradient".)"""
    op = {"t_": "{}.t_()", "unsqueeze_": "{}.unsqueeze_(0)"}[relayout].format("b" if who == "itself" else "c")
    namespace = {"torch": torch}
    exec(f"def f(b, c):\n    {SAVES[when].format(op=op)}\n    return y * 2\n", namespace)
    f = namespace["f"]
    outcomes = []
    for impl in (f, aotgrad.aot_function(f, nop)):
        torch.manual_seed(0)
        x = torch.randn(2, 3, requires_grad=True)
        b, c = x * 1, (x * 1).detach()
        if who == "an alias":
            c = b.detach()
        out = impl(b, c)
        if caller_writes:
            b.detach().add_(1)
        try:
            out.sum().backward()
            outcomes.append(("ok", x.grad))
        except RuntimeError as exc:
            outcomes.append(("raised", str(exc)))
    (e, e_what), (c_, c_what) = outcomes
    assert e == c_, (e_what, c_what)
    if e == "ok":
        torch.testing.assert_close(c_what, e_what)
