"""In-place metadata ops where functionalization's wrapper addresses past its own storage
(issue 12, fuzz seeds 28000947, 28002749, 28008994, 28010451 and the older setStorage
seeds): aotgrad raised "setStorage: ... out of bounds" where eager runs.

``FunctionalTensor`` sizes its (data-less) storage from the wrapped tensor's geometry, and an
in-place metadata op re-strides the wrapper, checking the new layout against it
(``core/functional_storage.py``):

- an input passed as a view of a larger tensor (``x[1]``, ``x[::2]``): a view of it taken
  with ``as_strided`` past its elements (inside the caller's storage, as eager allows) raised
  when transposed or unsqueezed in place;
- an expanded input (or intermediate) written in place: functionalization's value is the
  dense result, a view taken of it then addresses more locations than eager's stride-0
  tensor, and raised when transposed in place.

Each program is compared with eager by the fuzz harness (outputs with their strides and
aliasing, inputs after the call, mutation of returned views, gradients, errors).
"""

from __future__ import annotations

import pytest

from tests.fuzz.harness import check_case

#: views of a 4 x 3 base passed as the input: offsets, a step, a diagonal; none is its whole
#: storage
INPUT_VIEWS = ["x[0]", "x[1]", "x[::2]", "x.diagonal()", "x[1:, 1]"]

#: an ``as_strided`` view of the input reaching past its elements (inside the 12 locations),
#: then an in-place metadata op on it that keeps its locations (``as_strided_`` past the
#: input stays refused: tests/test_as_strided_chains.py)
RESTRIDED = {
    "t_": ("(2, 3), (3, 1), 3", "t0.t_()"),
    "transpose_": ("(2, 3), (3, 1), 3", "t0.transpose_(0, 1)"),
    "swapdims_": ("(2, 3), (1, 2), 1", "t0.swapdims_(1, 0)"),
    "swapaxes_": ("(2, 3), (3, 1), 6", "t0.swapaxes_(0, 1)"),
    "unsqueeze_": ("(2, 3), (3, 1), 3", "t0.unsqueeze_(1)"),
    "squeeze_dim": ("(2, 1, 3), (3, 3, 1), 3", "t0.squeeze_(1)"),
    "squeeze_all": ("(1, 2, 1, 3), (6, 3, 3, 1), 0", "t0.squeeze_()"),
}


def _input_view_case(op: str, view: str, requires_grad: bool, returns: str) -> dict:
    geometry, metadata_op = RESTRIDED[op]
    return dict(
        source=f"def f(a):\n    t0 = a.as_strided({geometry})\n    {metadata_op}\n    return {returns}\n",
        inputs={
            "bases": [{"shape": [4, 3], "dtype": "float32", "rg": requires_grad}],
            "args": [{"kind": "tensor", "base": 0, "expr": view}],
        },
        post=[(0, "mul_(2)")] if returns.startswith("t0,") else [],
        modes=["grad", "no_grad"],
    )


@pytest.mark.parametrize("returns", ["t0, t0.sum()", "(t0 * 2).sum(),"], ids=["view", "computed"])
@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "grad"])
@pytest.mark.parametrize("view", INPUT_VIEWS)
@pytest.mark.parametrize("op", sorted(RESTRIDED))
def test_metadata_op_on_as_strided_past_input_view(op, view, requires_grad, returns):
    check_case(**_input_view_case(op, view, requires_grad, returns))


#: writes into an expanded tensor that eager runs (they write each location once or with
#: one value)
WRITES = ["b.masked_fill_(b > 0, 0.0)", "b.fill_(0.5)", "b.zero_()", "b[0] = 1.0"]

#: (view of the written 2 x 3 x 4 tensor, an in-place metadata op on it)
VIEW_OPS = [
    ("b.squeeze(1)", "t0.transpose_(0, 2)"),
    ("b.squeeze(1)", "t0.swapaxes_(2, 1)"),
    ("b.permute(2, 0, 1)", "t0.swapdims_(0, 1)"),
    ("b[:, 1:]", "t0.transpose_(0, 1)"),
    ("b.unsqueeze(0)", "t0.transpose_(0, 3)"),
    ("b.unsqueeze(2)", "t0.squeeze_(2)"),
    ("b.view(2, 12)", "t0.t_()"),
    ("b[0]", "t0.t_()"),
    ("b.squeeze(1)", "t0.unsqueeze_(-1)"),
]

#: the expanded tensor: an input, an intermediate
EXPANDED = {
    "input": ("", {"kind": "tensor", "base": 0, "expr": "x.expand(2, 3, 4)"}),
    "intermediate": ("    b = (b * 1).expand(2, 3, 4)\n", {"kind": "tensor", "base": 0, "expr": "x"}),
}


def _expanded_case(write: str, view: str, op: str, expanded: str, returns: str) -> dict:
    make, arg = EXPANDED[expanded]
    return dict(
        source=f"def f(b):\n{make}    {write}\n    t0 = {view}\n    {op}\n    return {returns}\n",
        inputs={"bases": [{"shape": [3, 4], "dtype": "float32", "rg": False}], "args": [arg]},
        modes=["grad", "grad"],
    )


@pytest.mark.parametrize("returns", ["t0, b", "t0 * 2,"], ids=["views", "computed"])
@pytest.mark.parametrize("expanded", sorted(EXPANDED))
@pytest.mark.parametrize("view,op", VIEW_OPS, ids=[f"{v}-{o}" for v, o in VIEW_OPS])
@pytest.mark.parametrize("write", WRITES)
def test_metadata_op_on_view_of_written_expanded_tensor(write, view, op, expanded, returns):
    check_case(**_expanded_case(write, view, op, expanded, returns))


def test_seed_28008994_view_of_written_expanded_0d_input():
    """An expanded 0-dim input written, viewed and transposed (fuzz seed 28008994)."""
    check_case(
        source="def f(c):\n    c[0] = 1.0\n    t0 = c.view(1, 2)\n    t0.transpose_(1, 0)\n    return t0\n",
        inputs={"bases": [{"shape": [], "dtype": "float32", "rg": False}],
                "args": [{"kind": "tensor", "base": 0, "expr": "x.expand(2, *())"}]},
        modes=["grad"],
    )


def test_seed_28010451_reshape_of_detached_as_strided_of_expanded_input():
    """A reshape of a detached ``as_strided`` past an expanded input's elements, transposed
    with grad enabled (fuzz seed 28010451)."""
    check_case(
        source='''
def f(a, b):
    t0 = b.expand(2)
    t1 = t0.as_strided((3,), (1,), 0)
    t2 = t1.detach()
    t3 = t0[0:2]
    with torch.set_grad_enabled(True):
        t4 = t2.reshape(3, 1)
        t5 = t4 - b
        t4.t_()
    t4.transpose_(1, 0)
    return t5, t1
''',
        inputs={"bases": [{"shape": [3, 1], "dtype": "float32", "rg": False}],
                "args": [{"kind": "tensor", "base": 0, "expr": "x[::2]"},
                         {"kind": "tensor", "base": 0, "expr": "x.diagonal()"}]},
        post=[(0, "add_(1)"), (0, "unsqueeze_(0)")],
        modes=["grad"],
    )
