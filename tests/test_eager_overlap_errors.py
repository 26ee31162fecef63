"""Eager's memory-overlap error for in-place writes (:func:`aotgrad.core.kernel_checks.raise_eager_overlap_error`).

An in-place (or ``out=``) pointwise op, ``copy_`` or a slice assignment whose written tensor
an input partly overlaps raises in eager (``x[1:].add_(x[:-1])``: "unsupported operation: some
elements of the input tensor and the written-to tensor refer to a single memory location").
The traced program reads its inputs' values before any write, so aotgrad computed a result
where eager raised. Writes whose input is the same elements in the same layout (``x.mul_(x)``),
disjoint elements, or a layout eager finds "too hard" (not dense: ``x[::2]``) run in both.
Where eager runs an op on a "too hard" pair and an element the op changes is read at
another position, eager's result depends on its kernel's visiting order: aotgrad refuses
that at compile time ("reads memory it writes"), and each refusal is checked to be one: the
same program reading a clone() gives eager another result.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.fuzz.harness import build_inputs, check_case, load_program

_REFUSAL = "reads memory it writes"

#: views of one 4 x 4 tensor ``x``
VIEWS = ["x", "x.t()", "x[1:]", "x[:-1]", "x[0, 0]", "x.view(-1)[2:6]", "x[::2]", "x[0]", "x[1:3]"]

#: in-place writes of ``w`` reading ``r``
OPS = {
    "add_": "w.add_(r)",
    "mul_": "w.mul_(r)",
    "sub_": "w.sub_(r, alpha=2)",
    "copy_": "w.copy_(r)",
    "addcmul_": "w.addcmul_(r, r)",
    "clamp_": "w.clamp_(min=r)",
    "lerp_": "w.lerp_(r, 0.5)",
    "atan2_": "w.atan2_(r)",
    "iadd": "w += r",
    "mul_out": "torch.mul(r, 2, out=w)",
    "maximum_out": "torch.maximum(r, r, out=w)",
    "setitem_slice": "w[:] = r",
}
#: ops checked on every pair of views; the others on a few pairs of each kind
ALL_PAIRS = ("add_", "copy_", "setitem_slice")
SOME_PAIRS = [
    ("x[1:]", "x[:-1]"),  # partial
    ("x", "x.t()"),  # same range, other strides
    ("x", "x"),  # the same tensor
    ("x[0]", "x[1]"),  # disjoint
    ("x", "x[0, 0]"),  # a 0-dim input inside
    ("x[::2]", "x[1:3]"),  # too hard (not dense): eager runs
]


def _valid(op: str, w: str, r: str) -> bool:
    """The pair fits the op (broadcast, out= shapes) on a plain 4 x 4 tensor."""
    x = torch.randn(4, 4)
    wt, rt = eval(w, {"x": x}), eval(r, {"x": x})
    if op.endswith("_out") or op == "setitem_slice":
        return wt.dim() > 0 and tuple(wt.shape) == tuple(rt.shape)
    try:
        return torch.broadcast_shapes(wt.shape, rt.shape) == wt.shape
    except RuntimeError:
        return False


CASES = [
    (op, w, r)
    for op in OPS
    for w, r in (itertools.product(VIEWS, VIEWS) if op in ALL_PAIRS else SOME_PAIRS)
    if _valid(op, w, r)
]

#: where ``x`` comes from: an input, an intermediate, a view of an input requiring grad
ROOTS = {
    "input": ("a", {"shape": [4, 4], "dtype": "float32", "rg": False}, "x"),
    "intermediate": ("a * 1", {"shape": [4, 4], "dtype": "float32", "rg": True}, "x"),
    "view of a non-leaf": ("a", {"shape": [4, 4], "dtype": "float32", "rg": True}, "x * 1"),
}


def _source(root: str, op: str, w: str, r: str) -> str:
    return (
        "def f(a):\n"
        f"    x = {root}\n"
        f"    w = {w}\n"
        f"    r = {r}\n"
        f"    {OPS[op]}\n"
        "    return x * 1,\n"
    )


def _eager_or_refused(source: str, reading_a_clone: str, inputs: dict) -> None:
    """``check_case``, where the only divergence allowed is the order-dependence refusal,
    and only where eager's result is order-dependent: it differs from ``reading_a_clone``'s
    (the same program, the op reading a clone of its input)."""
    try:
        check_case(source=source, inputs=inputs, modes=["grad", "no_grad"])
        return
    except AssertionError as e:
        report = str(e).split("--- program ---")[0]
    failures = [line for line in report.splitlines() if line.strip()]
    assert failures and all(_REFUSAL in line for line in failures), report
    results = []
    for program in (source, reading_a_clone):
        _, args = build_inputs(inputs, 0)
        with torch.no_grad():
            results.append(load_program(program)(*args)[0])
    assert not torch.equal(*results), "refused, but eager's result does not depend on the read order"


@pytest.mark.parametrize("root", sorted(ROOTS))
@pytest.mark.parametrize(("op", "w", "r"), CASES, ids=[f"{o}-{w}<-{r}" for o, w, r in CASES])
def test_write_reading_an_overlapping_input(op, w, r, root):
    expr, base, arg = ROOTS[root]
    _eager_or_refused(
        _source(expr, op, w, r),
        _source(expr, op, w, f"({r}).clone()"),
        {"bases": [base], "args": [{"kind": "tensor", "base": 0, "expr": arg}]},
    )


ALIASED = [("x", "x.t()"), ("x[1:]", "x[:-1]"), ("x[0]", "x[1]"), ("x[0]", "x.view(-1)[2:6]"), ("x", "x")]


@pytest.mark.parametrize("op", ["add_", "copy_", "mul_out"])
@pytest.mark.parametrize(("w", "r"), ALIASED, ids=[f"{w}<-{r}" for w, r in ALIASED])
def test_write_reading_an_aliased_input(op, w, r):
    """The two tensors passed as separate inputs aliasing one storage (a synthetic base)."""
    if not _valid(op, w, r):
        pytest.skip("the pair does not fit the op")
    check_case(
        source=f"def f(w, r):\n    {OPS[op]}\n    return w * 1,\n",
        inputs={
            "bases": [{"shape": [4, 4], "dtype": "float32", "rg": False}],
            "args": [{"kind": "tensor", "base": 0, "expr": w}, {"kind": "tensor", "base": 0, "expr": r}],
        },
        modes=["grad", "no_grad"],
    )


@pytest.mark.parametrize("dims", [(2, 3), (1, 2), (1, 3)])
def test_copy_into_itself_transposed_in_size1_dims(dims):
    """Fuzz seed 3015141: the same elements in the same positions, the layouts differing only
    in the strides of size-1 dims (which a trace's meta functions and eager's kernels may
    choose otherwise): eager runs it."""
    check_case(
        source=(
            "def f(c):\n"
            "    t0 = c.relu()\n"
            "    t0.unsqueeze_(-3)\n"
            f"    t1 = t0.transpose{dims}\n"
            "    t0.copy_(t1)\n"
            "    return [t0]\n"
        ),
        inputs={"bases": [{"shape": [1, 2, 1], "dtype": "float32", "rg": False}],
                "args": [{"kind": "tensor", "base": 0, "expr": "x.transpose(0, 1)"}]},
        modes=["grad", "no_grad"],
    )
