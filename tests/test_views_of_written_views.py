"""Views of a view written in place: their layout is eager's in the analysis too.

A view op does not bring its input up to date in functionalization: after ``t0`` (a view of
an input) is written in place, ``t0``'s functional value is the out-of-place op's result
(``masked_fill`` lays it out contiguously) until it is regenerated off its base's new value.
A view of ``t0`` taken meanwhile got strides eager's tensor does not have, so the analysis
(not the trace, whose proxy mode syncs) decided ``reshape``/``flatten``/``contiguous`` of it
otherwise than eager: a copying ``reshape`` became an output rebuilt as a view of the input
(wrong values), ``contiguous()`` returned the wrong strides (fuzz seed 14003992;
``analysis._SyncedFunctionalTensorMode``). Every case runs a program eagerly and through
aotgrad and compares all the fuzz harness observes, over written views of every kind, in-place
ops of every kind, later views and reshapes, aliased and lone inputs, and calls with and
without grad.
"""

from __future__ import annotations

import functools

import pytest

from tests.fuzz import harness

check_case = functools.partial(harness.check_case, impl=harness.aotgrad_impl)

#: (input shape, the view ``t0`` of the input ``c`` that is written)
VIEWS = {
    "transpose": ([2, 3, 3], "c.transpose(0, 1)"),
    "permute": ([2, 3, 4], "c.permute(2, 0, 1)"),
    "t": ([3, 4], "c.t()"),
    "diagonal": ([2, 3, 3], "c.diagonal(0, 1, 2)"),
    "step_slice": ([2, 4, 3], "c[:, ::2]"),
    "unsqueeze": ([2, 3, 3], "c.transpose(0, 1).unsqueeze(1)"),
}

#: in-place statements writing ``t0``
WRITES = {
    "masked_fill_": "t0.masked_fill_(t0 > 0, 0.0)",
    "mul_": "t0.mul_(2)",
    "copy_": "t0.copy_(t0.sin())",
    "setitem": "t0[0] = 1.0",
    "zero_": "t0.zero_()",
    "fill_": "t0.fill_(0.5)",
    "index_fill_": "t0.index_fill_(0, torch.tensor([0]), 1.0)",
    "clamp_": "t0.clamp_(-0.5, 0.5)",
}

#: the view ``t1`` taken of ``t0`` after the write
LATER = {
    "itself": "t0",
    "narrow": "t0.narrow(1, 0, 2)",
    "select": "t0.select(0, 1)",
    "step": "t0[::2]",
}


def _source(view: str, write: str, later: str, finish: str, *, no_grad_write: bool) -> str:
    written = f"    with torch.no_grad():\n        {write}\n" if no_grad_write else f"    {write}\n"
    return f"def f(a, c):\n    t0 = {view}\n{written}    t1 = {later}\n    return {finish}, a * 1\n"


def _aliased(shape: list[int], rg: bool) -> dict:
    """``a`` a view of ``c``'s base, which ``c`` is: a synthetic base over both."""
    return {
        "bases": [{"shape": shape, "dtype": "float32", "rg": rg}],
        "args": [{"kind": "tensor", "base": 0, "expr": "x[0]"}, {"kind": "tensor", "base": 0, "expr": "x"}],
    }


@pytest.mark.parametrize("rg", [False, True], ids=["no_rg", "rg_no_grad_write"])
@pytest.mark.parametrize("later", sorted(LATER))
@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_reshape_of_view_of_written_view_aliased(view: str, write: str, later: str, rg: bool) -> None:
    """Inputs sharing storage (a synthetic base): ``reshape``/``contiguous`` of a view of the
    written view copy where eager copies, with eager's strides. With ``rg`` the base is a
    leaf requiring grad (written under no_grad, as eager allows a view of a leaf)."""
    shape, expr = VIEWS[view]
    finish = "t1.reshape(-1), t1.contiguous()"
    check_case(
        source=_source(expr, WRITES[write], LATER[later], finish, no_grad_write=rg),
        inputs=_aliased(shape, rg),
        modes=["grad", "no_grad"],
        seed=1,
    )


@pytest.mark.parametrize("recorded", [False, True], ids=["no_rg", "recorded_write"])
@pytest.mark.parametrize("later", sorted(LATER))
@pytest.mark.parametrize("write", ["masked_fill_", "mul_", "setitem"])
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_reshape_of_view_of_written_view_lone(view: str, write: str, later: str, recorded: bool) -> None:
    """An input alone on its storage; with ``recorded`` a non-leaf requiring grad, the write
    recorded by autograd (gradients compared)."""
    shape, expr = VIEWS[view]
    check_case(
        source=_source(expr, WRITES[write], LATER[later], "t1.reshape(-1), t1.flatten(), t1.contiguous()", no_grad_write=False),
        inputs={
            "bases": [{"shape": shape, "dtype": "float32", "rg": recorded}, {"shape": shape, "dtype": "float32", "rg": False}],
            "args": [{"kind": "tensor", "base": 1, "expr": "x[0]"}, {"kind": "tensor", "base": 0, "expr": "x * 1" if recorded else "x"}],
        },
        modes=["grad", "no_grad"],
        seed=1,
    )


@pytest.mark.parametrize("finish", ["t1.view(-1)", "t1.flatten()", "t1.contiguous()", "t1"])
@pytest.mark.parametrize("later", sorted(LATER))
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_view_errors_and_returned_views(view: str, later: str, finish: str) -> None:
    """``view()`` of a view of the written view raises where eager raises and is a view where
    eager's is; ``flatten``, ``contiguous`` and the view itself returned alone."""
    shape, expr = VIEWS[view]
    check_case(
        source=_source(expr, WRITES["masked_fill_"], LATER[later], finish, no_grad_write=False),
        inputs=_aliased(shape, False),
        modes=["grad"],
        seed=1,
    )


def test_seed_14003992() -> None:
    """tools/fuzz.py seed 14003992: ``t1 @ b`` of a narrowed written transposed view raised a
    view error in the analysis where eager's ``matmul`` copies."""
    check_case(
        source='''
def f(a, b, c):
    c.mul_(2)
    t0 = c.transpose(0, 1)
    t0[::2] = 1.0
    t0.masked_fill_(t0 > 0, 0.0)
    t1 = t0.narrow(1, 0, 2)
    t1.fill_(0.5)
    t2 = t1 @ b
    c.mul_(2)
    c.masked_fill_(c > 0, 0.0)
    t3 = torch.full_like(t2, 0.5)
    t4 = c.unsqueeze(1)
    t5 = t4 * c
    return t5
''',
        inputs={'bases': [{'shape': [2, 3, 3], 'dtype': 'float64', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 0, 'expr': 'x.diagonal()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        post=[],
        modes=['grad'],
        seed=3992,
    )


def test_seed_14003992_reduced_silent() -> None:
    """The seed reduced by hand to a silently wrong value: ``reshape`` of the narrowed
    written transposed view was rebuilt as a view of the input (rows in the input's order)."""
    check_case(
        source='''
def f(a, c):
    t0 = c.transpose(0, 1)
    t0.masked_fill_(t0 > 0, 0.0)
    t1 = t0.narrow(1, 0, 2)
    return t1.reshape(6, 3)
''',
        inputs={'bases': [{'shape': [2, 3, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.diagonal()'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}]},
        modes=['grad', 'no_grad'],
        seed=1,
    )


@pytest.mark.parametrize("aliased", [False, True], ids=["lone", "aliased"])
@pytest.mark.parametrize("write", ["masked_fill_", "mul_", "index_fill_"])
@pytest.mark.parametrize("view", ["c[:, ::2]", "c", "c.transpose(0, 1)"])
def test_view_error_of_written_view_of_step_sliced_input(view: str, write: str, aliased: bool) -> None:
    """An input sliced with a step, written through a view: functionalization's value is
    laid out densely (``eager_rewrites._keeping_layout``), eager's keeps the gaps, so
    ``view(-1)`` raises eager's error from the eager layout (``view_geometry.
    _raise_eager_view_error``), also once the written view is synced off the dense base."""
    check_case(
        source=_source(view, WRITES[write], "t0", "t1.view(-1)", no_grad_write=False),
        inputs={
            "bases": [{"shape": [2, 4, 6], "dtype": "float32", "rg": False}] * (1 if aliased else 2),
            "args": [{"kind": "tensor", "base": 0 if aliased else 1, "expr": "x[0, 0]"}, {"kind": "tensor", "base": 0, "expr": "x[:, ::2, ::2]"}],
        },
        modes=["grad", "no_grad"],
        seed=1,
    )


#: inputs with gaps or offsets (expressions on a [2, 4, 6] base), which an in-place op lays
#: out densely in functionalization
GAPPED_INPUTS = {
    "step": "x[:, ::2, ::2]",
    "offset": "x[1:, 1:, :3]",
    "transposed": "x[:, :3, :3].transpose(1, 2)",
    "permuted": "x[:, :3, :3].permute(2, 0, 1)",
}


@pytest.mark.parametrize("aliased", [False, True], ids=["lone", "aliased"])
@pytest.mark.parametrize("later", ["t0.narrow(1, 0, 2)", "t0.select(0, 0)"])
@pytest.mark.parametrize("write", ["masked_fill_", "mul_", "index_fill_"])
@pytest.mark.parametrize("view", ["c", "c.transpose(0, 1)", "c[:, ::2]"])
@pytest.mark.parametrize("layout", sorted(GAPPED_INPUTS))
def test_reshape_of_written_gapped_input(layout: str, view: str, write: str, later: str, aliased: bool) -> None:
    """``reshape``/``contiguous`` of (a view of) a written input with gaps: where
    functionalization's dense layout would view where eager copies (or the other way round),
    the input is traced over a synthetic base (``view_geometry._check_layout_decision``):
    rows in eager's order, eager's strides."""
    check_case(
        source=_source(view, WRITES[write], later, "t1.reshape(-1), t1.contiguous()", no_grad_write=False),
        inputs={
            "bases": [{"shape": [2, 4, 6], "dtype": "float32", "rg": False}] * (1 if aliased else 2),
            "args": [{"kind": "tensor", "base": 0 if aliased else 1, "expr": "x[0, 0]"}, {"kind": "tensor", "base": 0, "expr": GAPPED_INPUTS[layout]}],
        },
        modes=["grad", "no_grad"],
        seed=1,
    )
