"""An input whose metadata the program changes in place (``unsqueeze_``, ``t_``,
``transpose_``, ``squeeze_``, ``as_strided_``) and that it also detaches in place, or
re-lays out under its own ``enable_grad()`` inside a ``no_grad`` call (issue 12).

The traced forward hands the program an alias of such an input that absorbs the metadata
changes. Taken as a view, the alias broke two things eager's input (no view) does not:
``detach_()`` of it raised "Can't detach views in-place" (fuzz seeds 33014873, 33017181,
30002985, 30005018, 29017461: an input requiring grad, or one that gained a history from a
write, in the inference trace of a ``no_grad`` call and in the joint), and, taken under
``no_grad``, an in-place metadata op of it under the program's ``enable_grad()`` raised "A
view was created in no_grad mode and is being modified inplace" (fuzz seed 34002129). Each
program runs twice on the same compiled function, in both orders of grad modes, so that a
second call compiles its own entry for the inputs the first call left behind."""

from __future__ import annotations

import pytest

from tests.fuzz import harness

RELAYOUTS = {
    "unsqueeze_": "a.unsqueeze_(0)",
    "t_": "a.t_()",
    "transpose_": "a.transpose_(0, 1)",
    "squeeze_": "a.squeeze_(0)",
    "as_strided_": "a.as_strided_((3,), (1,))",
}

#: the program's order of events around the in-place relayout ({relayout})
PROGRAMS = {
    "detach_then_relayout": "y = a * 2\n    a.detach_()\n    {relayout}",
    "relayout_then_detach": "y = a * 2\n    with torch.no_grad():\n        {relayout}\n    a.detach_()",
    "history_from_write_then_detach": "y = b * 2\n    with torch.no_grad():\n        {relayout}\n    a.mul_(b.sum())\n    z = a * 3\n    a.detach_()\n    y = y + z.sum()",
    "relayout_under_enable_grad": "y = a * 2\n    with torch.no_grad():\n        with torch.enable_grad():\n            {relayout}",
    "requires_grad_false_then_relayout": "y = a * 2\n    a.requires_grad_(False)\n    {relayout}",
}

INPUTS = {
    "leaf": {"shape": [1, 3], "dtype": "float32", "rg": True, "expr": "x"},
    "non_leaf": {"shape": [1, 3], "dtype": "float32", "rg": True, "expr": "x * 1"},
    "no_grad": {"shape": [1, 3], "dtype": "float32", "rg": False, "expr": "x"},
}


#: what the program returns: with the input itself (an output aliasing it, rebuilt by the
#: runtime) or without (fuzz seed 34002129's raised only there)
RETURNS = {"with_input": ("y, b * 2, a", [(0, "mul_(2)"), (2, "add_(1)")]), "without_input": ("y, b * 2", [(0, "mul_(2)")])}


@pytest.mark.parametrize("returns", sorted(RETURNS))
@pytest.mark.parametrize("modes", [["grad", "no_grad"], ["no_grad", "grad"]], ids=["grad_first", "no_grad_first"])
@pytest.mark.parametrize("a", sorted(INPUTS))
@pytest.mark.parametrize("program", sorted(PROGRAMS))
@pytest.mark.parametrize("relayout", sorted(RELAYOUTS))
def test_relaid_out_input_detached_in_place_as_eager(relayout, program, a, modes, returns):
    body = PROGRAMS[program].format(relayout=RELAYOUTS[relayout])
    outputs, post = RETURNS[returns]
    source = f"\ndef f(a, b):\n    {body}\n    return {outputs}\n"
    spec = INPUTS[a]
    harness.check_case(
        source=source,
        inputs={
            "bases": [
                {k: spec[k] for k in ("shape", "dtype", "rg")},
                {"shape": [3], "dtype": "float32", "rg": True},
            ],
            "args": [
                {"kind": "tensor", "base": 0, "expr": spec["expr"]},
                {"kind": "tensor", "base": 1, "expr": "x"},
            ],
        },
        post=post,
        modes=modes,
    )
