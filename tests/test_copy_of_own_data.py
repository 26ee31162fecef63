"""``dst.copy_(src)`` where ``src`` is ``dst``'s own data: the same storage, offset, sizes,
strides and dtype (``dst`` itself, its ``detach()``, a no-op view of it).

Eager's kernel returns at once there, writing nothing and checking no overlap, so an
``expand()``ed input copied from an alias of itself runs. The compiled call recorded a write
into the input and wrote it back at run time, which raised "more than one element of the
written-to tensor refers to a single memory location" (fuzz seed 35002142). Where autograd
records nothing, the copy into memory that overlaps itself is now dropped (its version bump
kept); elsewhere the traced copy, which writes the same values, runs as before.
"""

from __future__ import annotations

import itertools

import pytest

from tests.fuzz.harness import check_case

#: the destination: an input laid out overlapping itself, a plain input, a view, an intermediate
DESTINATIONS = {
    "expanded_input": ("b", "x.expand(2, 4)"),
    "input": ("b", "x.clone()"),
    "transposed_input": ("b", "x.clone().t()"),
    "view_of_input": ("b[1:]", "x.clone()"),
    "intermediate": ("b * 2", "x.clone()"),
}
#: the source, written in terms of the destination ``d``
SOURCES = {
    "itself": "d",
    "detach": "d.detach()",
    "squeeze": "d.detach().squeeze()",
    "full_slice": "d.detach()[:]",
    "view_as": "d.detach().view_as(d)",
}


@pytest.mark.parametrize("dest,src", list(itertools.product(sorted(DESTINATIONS), sorted(SOURCES))))
@pytest.mark.parametrize("rg", [False, True], ids=["no_grad_input", "grad_input"])
def test_copy_of_own_data_is_eagers(dest, src, rg):
    expr, arg = DESTINATIONS[dest]
    if rg and dest == "expanded_input":
        pytest.skip("eager refuses the in-place write into an expand() of a leaf requiring grad")
    source = (
        # (``v``, a view taken before the copy: eager's write bumps its version, which a view
        # made under no_grad shows when its grad_fn is read)
        f"def f(a, b):\n    d = {expr}\n    v = d[:1]\n    d.copy_({SOURCES[src]})\n    t = d * a\n    return t, b, d, v\n"
    )
    shape = [4] if dest == "expanded_input" else [2, 4]
    check_case(
        source,
        {
            "bases": [{"shape": [], "dtype": "float32", "rg": True}, {"shape": shape, "dtype": "float32", "rg": rg}],
            "args": [{"kind": "tensor", "base": 0, "expr": "x"}, {"kind": "tensor", "base": 1, "expr": arg}],
        },
        modes=["grad", "no_grad"],
    )


def test_fuzz_35002142():
    """The fuzz program, minimized: ``b`` and ``c`` are one ``expand()``ed input."""
    check_case(
        source='''
def f(a, b, c):
    c.copy_(b)
    t0 = c.detach()
    t1 = t0.squeeze()
    b.copy_(t1)
    t7 = t0.permute(0, 1)
    return t7,
''',
        inputs={'bases': [{'shape': [1, 2, 2], 'dtype': 'float32', 'rg': False}, {'shape': [4], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x.expand(2, *(4,))'}, {'kind': 'same', 'arg': 1}]},
        modes=['grad'],
    )
