"""A view taken under no_grad of an input that shares storage with another input an in-place
op gave an autograd history (``b.mul_(a)`` with ``c`` a view of ``b``'s storage).

Eager's ``c`` requires grad through its base from then on, so a view of it taken under
no_grad requires grad without a ``grad_fn`` (a backward from it raises "element 0 of tensors
does not require grad and does not have a grad_fn"). The analysis over the call's inputs one
by one never sees ``c`` require grad; the output's record came from that run with only
``requires_grad`` taken from the run over the synthetic base, so it was rebuilt as a view made
with grad recording, with a ``grad_fn`` (fuzz seed 7006432: ``c.split(3, 0)[0]``).
"""

from __future__ import annotations

import pytest

from tests.fuzz.harness import check_case

#: (shape of the shared base, the second input's expression over it)
ALIASES = {
    "t": ([2, 3], "x.t()"),
    "slice": ([3, 2], "x[1:]"),
    "same_geometry": ([2, 3], "x.view(2, 3)"),
    "unsqueeze": ([2, 3], "x.unsqueeze(0)"),
}

#: views of ``c`` (at least 2-D, first dim >= 2 or not) taken under no_grad
VIEWS = {
    "split": "c.split(1, 0)[0]",
    "split_whole": "c.split(3, 0)[0]",
    "chunk": "c.chunk(2, -1)[-1]",
    "unbind": "c.unbind(-1)[0]",
    "split_with_sizes": "c.split_with_sizes([1, c.shape[-1] - 1], -1)[1]",
    "tensor_split": "c.tensor_split(2, -1)[0]",
    "slice": "c[..., 1:]",
    "select": "c.select(-1, 0)",
    "transpose": "c.transpose(0, -1)",
    "expand": "c.unsqueeze(0).expand(2, *c.shape)",
    "diagonal": "c.diagonal(0, 0, -1)",
    "view_of_split": "c.split(1, -1)[1].squeeze(-1)",
}

#: what the program does after the no_grad view
AFTER = {
    "nothing": "",
    "write_with_grad": "    b.add_(1)\n",
    "write_under_no_grad": "    with torch.no_grad():\n        b.add_(1)\n",
}


def _inputs(alias: str) -> dict:
    shape, expr = ALIASES[alias]
    return {
        "bases": [{"shape": [], "dtype": "float32", "rg": True}, {"shape": shape, "dtype": "float64", "rg": False}],
        "args": [{"kind": "tensor", "base": 0, "expr": "x"}, {"kind": "tensor", "base": 1, "expr": "x"},
                 {"kind": "tensor", "base": 1, "expr": expr}],
    }


def _source(view: str, after: str, history: str = "b.mul_(a)") -> str:
    return (
        f"def f(a, b, c):\n    {history}\n    with torch.no_grad():\n        t = {VIEWS[view]}\n"
        f"{AFTER[after]}    return t,\n"
    )


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_no_grad_view_of_alias_of_input_given_history(alias, view):
    check_case(_source(view, "nothing"), _inputs(alias), modes=["grad", "no_grad"])


@pytest.mark.parametrize("after", sorted(AFTER))
@pytest.mark.parametrize("view", ["split", "unbind", "slice", "transpose"])
def test_no_grad_view_of_alias_of_input_then_written(view, after):
    """A later write invalidates the no_grad view (reading its ``grad_fn`` raises)."""
    check_case(_source(view, after), _inputs("t"), modes=["grad", "no_grad"])


@pytest.mark.parametrize("history", ["b.add_(a)", "b[0].mul_(a)", "b.copy_(a.expand(b.shape))"])
def test_no_grad_view_of_alias_of_input_other_history(history):
    check_case(_source("split", "nothing", history), _inputs("t"), modes=["grad", "no_grad"])


def test_fuzz_7006432():
    check_case(
        source='''
def f(s, a, b, c):
    b.mul_(a)
    with torch.no_grad():
        t11 = c.split(3, 0)[0]
    return [t11]
''',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}, {'shape': [2, 3], 'dtype': 'float64', 'rg': False}], 'args': [{'kind': 'value', 'value': -1.5}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x.t()'}]},
        seed=6432,
    )


#: views of ``c`` taken with grad recording before ``b`` gets its history (multi-output ones
#: are invalidated by it: reading their ``grad_fn`` raises; ordinary ones are regenerated)
BEFORE_HISTORY = {
    "split": "c.split(1, 0)[0]",
    "unbind": "c.unbind(-1)[0]",
    "chunk": "c.chunk(2, -1)[-1]",
    "slice": "c[..., 1:]",
}


@pytest.mark.parametrize("no_grad", [False, True])
@pytest.mark.parametrize("view", sorted(BEFORE_HISTORY))
def test_view_of_alias_of_input_taken_before_history(view, no_grad):
    make = f"t = {BEFORE_HISTORY[view]}"
    if no_grad:
        make = f"with torch.no_grad():\n        {make}"
    src = f"def f(a, b, c):\n    {make}\n    b.mul_(a)\n    return t,\n"
    check_case(src, _inputs("t"), modes=["grad", "no_grad"])
