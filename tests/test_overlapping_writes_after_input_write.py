"""Writes through memory that overlaps itself (:mod:`aotgrad.core.overlapping_writes`) into a
view of an input after an earlier write gave the input a new functional value.

The new value starts at storage offset 0 (and a non-dense input's is laid out densely), while
the input's functional wrapper keeps the caller's geometry; views regenerated after the write
take their geometry from the new value. The locations written were computed from the
wrappers, one of each kind: the write landed on the wrong elements of the caller's tensor
(fuzz seed 9011353: ``diagonal(-1, 1, 0)`` of a sliced input, ``expand`` + ``split``,
``masked_fill_``).
"""

from __future__ import annotations

import pytest

from tests.fuzz.harness import check_case

#: inputs that are views of their base at a storage offset, or not dense
INPUTS = {
    "offset_1d": ([5], "x[1:]"),
    "offset_2d": ([2, 4], "x[:, 1:]"),
    "row_offset": ([3, 3], "x[1:]"),
    "strided": ([8], "x[1::2]"),
    "transposed_offset": ([3, 4], "x.t()[1:]"),
}

#: an earlier write that replaces the input's functional value
FIRST_WRITES = {
    "mul_": "b.mul_(2)",
    "no_grad_add_": "with torch.no_grad():\n        b.add_(1)",
    "through_view": "b.view(-1)[0:1].mul_(3)",
}

#: views of the (1-D after flatten) input whose write overlaps; ``v`` is taken before the first write
#: or after it (``late``)
DESTS = {
    "expand": "v[1:2].expand(3)",
    "expand_split": "v[1:2].expand(3, 3).split(3, 0)[0]",
    "expand_chunk": "v[1:2].expand(4, 2).chunk(2, 0)[1]",
    "expand_unbind": "v[1:2].expand(2, 3).unbind(0)[1]",
    "expand_tensor_split": "v[1:2].expand(3, 3).tensor_split(2, 1)[1]",
    "diagonal_expand": "v[1:].unsqueeze(0).diagonal(-1, 1, 0).expand(2, 1)",
    "select_expand": "v.select(0, -1).expand(2)",
    "expand_t": "v[0:2].unsqueeze(1).expand(2, 3).t()",
    "unfold": "v.unfold(0, 2, 1)",
}

WRITES = {
    "masked_fill_": "d.masked_fill_(d > -100, 0.5)",
    "fill_": "d.fill_(-2.0)",
    "zero_": "d.zero_()",
}


def _source(first: str, dest: str, write: str, late: bool) -> str:
    v = "    v = b.flatten() if b.is_contiguous() else b.select(0, 0)\n"
    lines = ["def f(b):"]
    if not late:
        lines.append(v.rstrip("\n"))
    lines.append(f"    {first}")
    if late:
        lines.append(v.rstrip("\n"))
    lines += [f"    d = {dest}", f"    {write}", "    return b * 1,"]
    return "\n".join(lines) + "\n"


def _input(name: str) -> dict:
    shape, expr = INPUTS[name]
    return {"bases": [{"shape": shape, "dtype": "float32", "rg": False}], "args": [{"kind": "tensor", "base": 0, "expr": expr}]}


@pytest.mark.parametrize("dest", sorted(DESTS))
@pytest.mark.parametrize("name", sorted(INPUTS))
def test_overlapping_write_after_input_write(name, dest):
    check_case(_source(FIRST_WRITES["mul_"], DESTS[dest], WRITES["masked_fill_"], False), _input(name), modes=["grad", "no_grad"])


@pytest.mark.parametrize("late", [False, True])
@pytest.mark.parametrize("dest", ["expand_split", "diagonal_expand"])
@pytest.mark.parametrize("first", sorted(FIRST_WRITES))
@pytest.mark.parametrize("name", ["offset_2d", "strided"])
def test_overlapping_write_after_other_input_write(name, first, dest, late):
    """The first write replaces the input's value whatever it is; the view written is taken
    before it (regenerated after it) or after it."""
    check_case(_source(FIRST_WRITES[first], DESTS[dest], WRITES["masked_fill_"], late), _input(name), modes=["grad", "no_grad"])


@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("rg", [False, True])
def test_overlapping_write_after_input_write_writes(write, rg):
    inputs = {"bases": [{"shape": [2, 4], "dtype": "float32", "rg": rg}], "args": [{"kind": "tensor", "base": 0, "expr": "x[:, 1:]"}]}
    src = _source("b.mul_(2)", DESTS["expand_split"], WRITES[write], False)
    if rg:
        src = src.replace("def f(b):", "def f(b):\n    b = b * 1\n    b = b[:, 1:]")
    check_case(src, inputs, modes=["grad", "no_grad"])


def test_fuzz_9011353():
    """The fuzzer's program, minimized: the write landed one element early."""
    check_case(
        source='''
def f(a, b, k):
    t0 = b.view(1, 2)
    t1 = t0.diagonal(-1, 1, 0)
    with torch.no_grad():
        t2 = t1[0:1]
        t2.mul_(t1)
    t3 = t2.expand(3, 3)
    t4 = t3.split(3, 0)[0]
    t4.masked_fill_(t4 > 0, 0.0)
    return t1,
''',
        inputs={'bases': [{'shape': [1, 3], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x[:, 1:]'}, {'kind': 'same', 'arg': 0}, {'kind': 'value', 'value': 3}]},
        modes=['grad', 'no_grad'],
        seed=11353,
    )


#: overlapping views of an intermediate requiring grad that eager's autograd refuses to write
#: in place with grad recording (multi-output and no_grad views, and views of them), and two
#: it lets through (``tensor_split`` views by ``slice``)
RESTRICTED_VIEWS = {
    "split": "t.expand(3, 3).split(3, 0)[0]",
    "split_second": "t.expand(4, 3).split(2, 0)[1]",
    "chunk": "t.expand(4, 3).chunk(2, 0)[1]",
    "unbind": "t.expand(2, 3).unbind(0)[1]",
    "split_with_sizes": "t.expand(4, 3).split_with_sizes([1, 3], 0)[1]",
    "slice_of_split": "t.expand(4, 3).split(2, 0)[1][0:1]",
    "no_grad": "t.expand(3, 3)",  # refused where taken under no_grad (``no_grad_view``)
    "tensor_split": "t.expand(3, 3).tensor_split(2, 1)[1]",
    "unbind_of_split": "t.expand(4, 3).split(2, 0)[1].unbind(0)[0]",
}

RESTRICTED_WRITES = {
    "fill_": "d.fill_(1.0)",
    "masked_fill_": "d.masked_fill_(d > 0, 1.0)",
    "zero_": "d.zero_()",
    "setitem": "d[0] = 1.0",
    "setitem_advanced": "d[[0]] = 1.0",
    "copy_": "d.copy_(torch.ones(()))",
}


#: (view, taken under no_grad)
RESTRICTED_CASES = [(v, False) for v in sorted(RESTRICTED_VIEWS)] + [(v, True) for v in ("no_grad", "split", "tensor_split")]


@pytest.mark.parametrize("write", sorted(RESTRICTED_WRITES))
@pytest.mark.parametrize("view, no_grad_view", RESTRICTED_CASES)
def test_overlapping_write_through_multi_output_or_no_grad_view(view, no_grad_view, write):
    """Eager's autograd refuses the write before its kernel runs ("Output 1 of Split is a view
    and is being modified inplace...", "A view was created in no_grad mode..."): the rewrite
    runs the op on a clone, so it checked nothing of the destination."""
    make = f"d = {RESTRICTED_VIEWS[view]}"
    if no_grad_view:
        make = f"with torch.no_grad():\n        {make}"
    src = f"def f(a):\n    t = a * 2\n    {make}\n    {RESTRICTED_WRITES[write]}\n    return t * 1,\n"
    inputs = {"bases": [{"shape": [3], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": "x"}]}
    check_case(src, inputs, modes=["grad", "no_grad"])
