"""``as_strided_`` of an input (or a view or ``detach()``ed alias of one) onto elements of
its caller's storage past the input's own extent (issue 12; fuzz seeds 33000290, 34006600,
28001079 and their class).

Functionalization sizes an input's storage by the input's own extent (``x[0]`` of a
``(4, 4)`` tensor holds four elements), eager's is the caller's whole storage. An input
neither it nor its caller's base requires grad is merged into a synthetic base, the caller's
storage, whose run decides (``EagerViewGeometry._restride_left_to_base_run``): also where a
view or ``detach()``ed alias of it is re-strided (``InputInfo.readdressed_past_extent``), and
where the new layout has more elements than the input's extent holds (the first run then
lends the wrapper a storage for the one op, ``functional_storage.storage_for_layout``). A
``detach()``ed alias is outside autograd: re-strided and read, it is exact where the input
requires grad too. Every variant here either matches eager (values, inputs after the call,
strides, view-ness, gradients, a post-call write into returned aliases) or is refused at
compile time: never silently wrong.
"""

from __future__ import annotations

import itertools
import os

import pytest

from tests.fuzz.harness import check_case, run_case
from test_restrided_views import _eager_or_refused

#: the input, as the caller passes it (of a (4, 4) base): none is its whole storage
INPUTS = {
    "slice": "x[1:]",
    "step_slice": "x[::2]",
    "diagonal": "x.diagonal()",
    "as_strided": "x.as_strided((2, 2), (1, 4), 1)",
    "transpose": "x.t()",
    "row": "x[0]",
    "row_view": "x[0].view(-1)",
    "column": "x[:, 1]",
}
#: the new layout (absolute storage offsets within the 16 elements): inside the input's
#: extent for some inputs, past it for others, more elements than the input's extent holds
RESTRIDES = {
    "past_row_major": "((2, 3), (4, 1), 5)",
    "whole": "((16,), (1,), 0)",
    "first_two": "((2,), (1,), 0)",
    "transposed": "((2, 2), (1, 4), 9)",
    "scalar": "((), (), 15)",
    "keyword_offset": "((2, 3), (4, 1), storage_offset=5)",
    "own_offset": "((3, 3), (4, 1))",
}
#: what the program does after the as_strided_ (``w`` a scalar requiring grad)
ACTIONS = {
    "read": "    return a.sin(), w * 2\n",
    "return_input": "    return a, w * 2\n",
    "unrecorded_write": "    a.add_(1)\n    return a.cos(), w * 2\n",
    "write_of_view": "    v = a.view(-1)[:1]\n    v.zero_()\n    return a * w, v * 1\n",
    "reduce": "    return (a * w).sum(), a.shape[0] * w\n",
    "recorded_write": "    a.mul_(w)\n    return a * 1, w * 2\n",
    "no_grad_write": "    with torch.no_grad():\n        a.mul_(2)\n    return a * w,\n",
}
#: actions that write nothing autograd records into the caller's storage: exact where nothing
#: on the storage requires grad
UNRECORDED = {"read", "return_input", "unrecorded_write", "write_of_view", "reduce", "no_grad_write"}


def _case(arg: str, restride: str, action: str, rg: bool) -> tuple[str, dict]:
    source = f"def f(a, w):\n    a.as_strided_{RESTRIDES[restride]}\n" + ACTIONS[action]
    inputs = {
        "bases": [{"shape": [4, 4], "dtype": "float32", "rg": rg}, {"shape": [], "dtype": "float32", "rg": True}],
        "args": [{"kind": "tensor", "base": 0, "expr": INPUTS[arg]}, {"kind": "tensor", "base": 1, "expr": "x"}],
    }
    return source, inputs


#: every input kind, new layout and action without grad; with the caller's base requiring
#: grad, every third of them (each input kind, layout and action still appears). The default
#: run takes half of these (those whose axis indices sum to an even number); the full set
#: with ``AOTGRAD_FULL_MATRIX=1``
_FULL = os.environ.get("AOTGRAD_FULL_MATRIX") == "1"
CASES = [
    (arg, restride, action, rg)
    for k, ((a, arg), (b, restride), (c, action)) in enumerate(
        itertools.product(enumerate(sorted(INPUTS)), enumerate(sorted(RESTRIDES)), enumerate(sorted(ACTIONS)))
    )
    for rg in ((False, True) if k % 3 == 0 else (False,))
    if _FULL or (a + b + c + rg) % 2 == 0
]


@pytest.mark.parametrize("arg,restride,action,rg", CASES)
def test_restride_of_input(arg, restride, action, rg):
    source, inputs = _case(arg, restride, action, rg)
    post = [(0, "mul_(3)")] if action == "return_input" else []
    if not rg and action in UNRECORDED:
        check_case(source, inputs, post=post, modes=["grad", "no_grad"])
    else:
        _eager_or_refused(source, inputs, post)


#: views and detach()ed aliases of such an input re-strided past its extent (a detach()ed
#: alias also of an input with autograd history: fuzz seeds 33000510, 34010623)
ALIASES = {
    "detached": "a.detach()",
    "view": "a.view(a.shape)",
    "slice_of_input": "a[:1]",
    "unsqueezed": "a.unsqueeze(0)",
    "slice_of_detached": "a.detach()[1:]",
}
#: the inputs those are taken of
ALIASED_INPUTS = ("row", "step_slice", "diagonal")


@pytest.mark.parametrize("alias,arg,restride,action,rg", [
    (alias, arg, restride, action, k % 2 == 1)
    for k, (alias, arg, restride, action) in enumerate(itertools.product(
        sorted(ALIASES), ALIASED_INPUTS, ("past_row_major", "first_two", "whole"), ("read", "unrecorded_write", "return_input")
    ))
])
def test_restride_of_alias_of_input(alias, arg, restride, action, rg):
    source = (
        f"def f(a, w):\n    b = {ALIASES[alias]}\n    b.as_strided_{RESTRIDES[restride]}\n"
        + ACTIONS[action].replace("a.", "b.").replace("return a,", "return b, a,")
    )
    inputs = {
        "bases": [{"shape": [4, 4], "dtype": "float32", "rg": rg}, {"shape": [], "dtype": "float32", "rg": True}],
        "args": [{"kind": "tensor", "base": 0, "expr": INPUTS[arg]}, {"kind": "tensor", "base": 1, "expr": "x"}],
    }
    # A write through a re-strided detach()ed alias of a view stays refused where the new
    # layout reaches outside the view (functionalization replays it onto the view's old
    # layout), and so does any write into a storage with autograd history after it; a
    # detach()ed alias is outside autograd, so reading it is exact with grad too.
    detached = "detached" in alias
    if (detached and action == "unrecorded_write") or (rg and not detached):
        _eager_or_refused(source, inputs)
    else:
        check_case(source, inputs, modes=["grad", "no_grad"])


def test_input_with_history_refused_naming_the_line():
    """The input itself re-strided past its extent where its caller's base requires grad:
    refused at compile time, naming the ``as_strided_`` line (the gradient of the elements
    outside the input would not be eager's)."""
    source, inputs = _case("row", "whole", "read", True)
    inputs["args"][0]["expr"] = "(x * 1)[0]"  # (a view of a leaf: eager raises at the op)
    res = run_case(source, inputs, None, modes=["grad"], seed=0)
    assert not res.ok and all(
        "AotgradCompileError" in d and 'a.as_strided_((16,), (1,), 0)' in d for d in res.diffs
    ), res.report()


#: several inputs on one caller storage, one re-strided past its extent (``a``); ``w``
#: requires grad
SHARED = {
    "rows": ("x[0]", "x[1]"),
    "row_and_whole": ("x[0]", "x"),
    "detached_row_and_whole": ("x.detach()[0]", "x"),
    "slices": ("x[::2]", "x[1::2]"),
}
SHARED_ACTIONS = {
    "read_both": "    a.as_strided_((2, 3), (4, 1), 5)\n    return a * w, b * 2\n",
    "write_other": "    a.as_strided_((2, 3), (4, 1), 5)\n    b.add_(1)\n    return a * w, b * 2\n",
    "write_restrided": "    a.as_strided_((16,), (1,), 0)\n    a.add_(1)\n    return a * w, b * 2\n",
    "recorded_write_other": "    a.as_strided_((2, 3), (4, 1), 5)\n    b.mul_(w)\n    return a * 1, b * 2\n",
}


@pytest.mark.parametrize("shared,action,rg", [
    (shared, action, rg) for shared, action in itertools.product(sorted(SHARED), sorted(SHARED_ACTIONS)) for rg in (False, True)
])
def test_restride_with_inputs_sharing_the_storage(shared, action, rg):
    source = "def f(a, b, w):\n" + SHARED_ACTIONS[action]
    first, second = SHARED[shared]
    inputs = {
        "bases": [{"shape": [4, 4], "dtype": "float32", "rg": rg}, {"shape": [], "dtype": "float32", "rg": True}],
        "args": [
            {"kind": "tensor", "base": 0, "expr": first}, {"kind": "tensor", "base": 0, "expr": second},
            {"kind": "tensor", "base": 1, "expr": "x"},
        ],
    }
    # (refused: a write into the storage where the inputs are a detach()ed alias and the
    # tensor it was detached from, the alias re-strided outside its elements)
    if not rg and action != "recorded_write_other" and not (shared.startswith("detached") and "write" in action):
        check_case(source, inputs, modes=["grad", "no_grad"])
    else:
        _eager_or_refused(source, inputs)


#: fuzz seeds of the class (programs as the fuzzer wrote them)
SEEDS = {
    '33000290': dict(
        source='\ndef f(a, b, opt):\n    b.as_strided_((2,), (1,), 0)\n    t0 = b.sin()\n    t1 = t0.sum(-1)\n    t2 = t1.unsqueeze(-1)\n    return b, t2\n',
        inputs={'bases': [{'shape': [], 'dtype': 'float32', 'rg': True}, {'shape': [1, 2], 'dtype': 'float32', 'rg': False}, {'shape': [4, 4, 4], 'dtype': 'float64', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x.diagonal()'}, {'kind': 'value', 'value': 1.5}]},
        post=[], modes=['grad'], seed=290,
    ),
    '33007314': dict(
        source='\ndef f(k, a, b):\n    t0 = b.clone()\n    with torch.set_grad_enabled(True):\n        t0.unsqueeze_(-2)\n        b.as_strided_((2, 1), (1, 1), 0)\n    with torch.no_grad():\n        t1 = t0.mT @ t0\n        t2 = t1.pow(2)\n        t3 = t2 * 2\n    with torch.no_grad():\n        t4 = a.select(1, 0)\n        t3.relu_()\n    t5 = b.relu()\n    b.sigmoid_()\n    return t5,\n',
        inputs={'bases': [{'shape': [4, 2, 1], 'dtype': 'float32', 'rg': False}, {'shape': [2, 1], 'dtype': 'float32', 'rg': False}, {'shape': [2, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'value', 'value': 3}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x[::2]'}]},
        post=[], modes=['grad'], seed=7314,
    ),
    '33000510': dict(
        source='\ndef f(a, b):\n    t0 = b.unbind(1)[1]\n    with torch.no_grad():\n        t0.masked_fill_(t0 > 0, 0.0)\n        t0.relu_()\n        t1 = t0.detach()\n    t1.as_strided_((3, 3), (1, 0), 6)\n    t3 = torch.mm(t1, t1)\n    t4 = a @ a\n    t6 = torch.where(t4 > 0, t4, a)\n    t7 = t6.add(t6, alpha=2)\n    t8 = a.view(2)\n    t9 = t6.t()\n    t10 = t9.sum(-1, keepdim=True)\n    return t9, b, t9, t8\n',
        inputs={'bases': [{'shape': [2], 'dtype': 'float32', 'rg': False}, {'shape': [2, 2, 3], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x[::2]'}]},
        post=[], modes=['grad'], seed=510,
    ),
    '34010623': dict(
        source='\ndef f(a, b, mode, s):\n    t0 = a.detach()\n    t1 = b.sigmoid()\n    t0.as_strided_((1, 3), (2, 1), 0)\n    t2 = t1.abs()\n    return t2,\n',
        inputs={'bases': [{'shape': [3, 2], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.as_strided((1,), (3,), 0)'}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 'mean'}, {'kind': 'value', 'value': 2.0}]},
        post=[], modes=['grad'], seed=10623,
    ),
    '30007941': dict(
        source='\ndef f(a, k, flag):\n    t0 = a.view_as(a)\n    with torch.no_grad():\n        t1 = a.unbind(1)[0]\n        t1.relu_()\n        a[::2] = 1.0\n    with torch.no_grad():\n        t2 = t1.detach()\n        t2.as_strided_((2,), (1,), 0)\n    t3 = t2.sigmoid()\n    t4 = t2.sin()\n    t5, t6 = t4.unbind(0)\n    t6.squeeze_()\n    t7 = t6 * k\n    t8 = t7.expand(3)\n    t9 = t7.abs()\n    t10 = torch.where(t9 > 0, t9, t0)\n    return t2,\n',
        inputs={'bases': [{'shape': [1, 2, 1], 'dtype': 'float64', 'rg': True}, {'shape': [], 'dtype': 'float32', 'rg': False}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.diagonal()'}, {'kind': 'value', 'value': 2}, {'kind': 'value', 'value': True}]},
        post=[(0, 'unsqueeze_(0)')], modes=['grad', 'grad'], seed=7941,
    ),
    '28001079': dict(
        source='\ndef f(a, b, flag, c, k, s):\n    t0 = c.relu()\n    c.as_strided_((1, 3), (6, 0), 1)\n    t1 = t0.narrow(0, 0, min(k, t0.shape[0]))\n    return a,\n',
        inputs={'bases': [{'shape': [2, 1], 'dtype': 'float32', 'rg': False}, {'shape': [3, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x[0]'}, {'kind': 'value', 'value': False}, {'kind': 'tensor', 'base': 0, 'expr': 'x[0]'}, {'kind': 'value', 'value': 0}, {'kind': 'value', 'value': -1.5}]},
        post=[(0, 'copy_(torch.ones_like(o))')], modes=['grad'], seed=1079,
    ),
}


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_fuzz_seed(seed):
    check_case(**SEEDS[seed])


#: the view of a written input re-strided (``a`` then laid out densely by functionalization,
#: unlike eager: view_geometry's ``_view_of_relaid_input_left_to_base_run``): as eager or
#: refused
RELAID_STEPS = {
    "in_place": "    v.as_strided_{layout}\n    return v * w, a * 1\n",
    "out_of_place": "    u = v.as_strided{layout}\n    return u * w, a * 1\n",
    "in_place_then_read_input": "    v.as_strided_{layout}\n    return a.sin(), v.sum() * w\n",
}


def _written_input_case(arg: str, layout: str, step: str, rg: bool) -> tuple[str, dict]:
    source = "def f(a, w):\n    a.mul_(2)\n    v = a[:1]\n" + RELAID_STEPS[step].format(layout=RESTRIDES[layout])
    inputs = {
        "bases": [{"shape": [4, 4], "dtype": "float32", "rg": rg}, {"shape": [], "dtype": "float32", "rg": True}],
        "args": [{"kind": "tensor", "base": 0, "expr": INPUTS[arg]}, {"kind": "tensor", "base": 1, "expr": "x"}],
    }
    return source, inputs


@pytest.mark.parametrize("arg,layout,step", itertools.product(
    ("slice", "step_slice", "diagonal", "column"), ("past_row_major", "whole", "first_two"), sorted(RELAID_STEPS)
))
def test_restride_of_view_of_written_input(arg, layout, step):
    # (a view's as_strided with more elements than the written input holds stays refused)
    _eager_or_refused(*_written_input_case(arg, layout, step, False))


@pytest.mark.parametrize("arg,layout,step", itertools.product(
    ("slice", "step_slice", "diagonal", "column"), ("past_row_major", "whole", "first_two"), sorted(RELAID_STEPS)
))
def test_restride_of_view_of_written_input_with_history(arg, layout, step):
    """The input's caller's base requires grad (a leaf: eager refuses the write with grad
    recording, so it is written under ``no_grad``; and a non-leaf, with grad recording). A
    diagonal input (a layout with gaps, at offset 0) so gave other values than eager's,
    silently: functionalization's dense value of it was re-strided, no synthetic base
    (``InputInfo.addresses_storage`` held only inputs at an offset other than 0)."""
    source, inputs = _written_input_case(arg, layout, step, True)
    _eager_or_refused(source, inputs, modes=["no_grad"])
    inputs["args"][0]["expr"] = "(x * 1)" + INPUTS[arg][1:]
    _eager_or_refused(source, inputs, modes=["grad", "no_grad"])


def test_restride_of_view_of_written_diagonal_input_with_history():
    source, inputs = _written_input_case("diagonal", "first_two", "in_place", True)
    check_case(source, inputs, modes=["no_grad"])
