"""Views of a root (an input or an intermediate) that ``as_strided_`` re-strided after the view
was made, used once that made them stale (:mod:`aotgrad.core.stale_views`).

``as_strided_`` of a root bumps its version, so eager regenerates each view taken of it before
as ``AsStridedBackward0`` off the root, whose input geometry is the root's *new* layout: the
gradient reaches only the view's elements that the re-strided root still holds. The traced
program reads such a view as ``root.as_strided`` of the view's geometry; functionalization
records the root as an ``as_strided`` view of its own storage, which names eager's elements
where the root addressed its storage as eager's when it was re-strided
(``EagerViewGeometry._restrided_root_addresses_storage_as_eager``; formerly refused).
"""

from __future__ import annotations

import itertools

import pytest

from tests.fuzz.harness import check_case, run_case

#: views of the root, taken before it is re-strided
VIEWS = {
    "slice": "t[1:, :3]",
    "transpose": "t.transpose(0, 1)",
    "reshape": "t.view(12)[2:10].view(2, 4)",
    "select": "t[1].unsqueeze(0)",
    "expand": "t[0].expand(2, 4)",
    "diagonal": "t.diagonal()",
}
#: as_strided_ of the root: within its elements, an overlapping layout, one not reaching some
#: of the view's elements (their gradient is dropped in eager)
RESTRIDES = {
    "within": "t.as_strided_((2, 3), (1, 2), 1)",
    "overlapping": "t.as_strided_((3, 2), (0, 1), 4)",
    "tail": "t.as_strided_((4,), (1,), 8)",
}
#: the root: a non-leaf input requiring grad, an intermediate
ROOTS = {"input": "a", "intermediate": "a * 2"}
#: what follows the re-stride
SCENARIOS = {
    "use": "    {restride}\n    u = v * torch.arange(float(v.numel())).view(v.shape)\n    return u, t * w\n",
    "use_under_no_grad_restride": (
        "    with torch.no_grad():\n        {restride}\n    u = v.sin() * w\n    return u,\n"
    ),
    "write_root_then_use": "    {restride}\n    t.mul_(w)\n    u = v * 3\n    return u, t\n",
    "view_of_stale": "    {restride}\n    s = v[0]\n    return s * w, t\n",
    "detach_and_sum": "    {restride}\n    d = v.detach()\n    return v.sum() * w, d\n",
    # a write through the view under no_grad scatters into the root's storage first
    "no_grad_write_through_view_then_use": (
        "    {restride}\n    with torch.no_grad():\n        v.mul_(2)\n    u = v * w\n    return u, t\n"
    ),
}

INPUTS = {
    "bases": [{"shape": [3, 4], "dtype": "float32", "rg": True}, {"shape": [], "dtype": "float32", "rg": True}],
    "args": [{"kind": "tensor", "base": 0, "expr": "x * 1"}, {"kind": "tensor", "base": 1, "expr": "x"}],
}


def _source(root: str, view: str, restride: str, scenario: str) -> str:
    return f"def f(a, w):\n    t = {ROOTS[root]}\n    v = {VIEWS[view]}\n" + SCENARIOS[scenario].format(
        restride=RESTRIDES[restride]
    )


@pytest.mark.parametrize("view,restride,scenario", list(itertools.product(sorted(VIEWS), sorted(RESTRIDES), sorted(SCENARIOS))))
def test_view_of_restrided_intermediate_is_eagers(view, restride, scenario):
    check_case(_source("intermediate", view, restride, scenario), INPUTS, modes=["grad", "no_grad"])


@pytest.mark.parametrize("view,restride,scenario", list(itertools.product(sorted(VIEWS), sorted(RESTRIDES), sorted(SCENARIOS))))
def test_view_of_restrided_input_is_eagers_or_refused(view, restride, scenario):
    """An input re-strided: the joint re-strides its own alias of the input, whose views it
    does not address by ``as_strided`` (the traced autograd would replay their chains), so a
    use that eager regenerates stays refused (naming it) where it is not eager's already."""
    res = run_case(_source("input", view, restride, scenario), INPUTS, None, post=[], modes=["grad", "no_grad"], seed=0)
    report = res.report()
    assert res.ok or ("impl raised, eager did not: AotgradCompileError" in report and "differ" not in report), report


@pytest.mark.parametrize("restride", sorted(RESTRIDES))
def test_view_of_restrided_input_without_grad(restride):
    """The root needs no grad; the view's use is with a value that does."""
    inputs = {
        "bases": [{"shape": [3, 4], "dtype": "float32", "rg": False}, {"shape": [], "dtype": "float32", "rg": True}],
        "args": [{"kind": "tensor", "base": 0, "expr": "x.clone()"}, {"kind": "tensor", "base": 1, "expr": "x"}],
    }
    check_case(_source("input", "slice", restride, "use"), inputs, modes=["grad", "no_grad"])


def test_view_of_leaf_restrided_under_no_grad():
    """Fuzz seed 4014141: a leaf re-strided under no_grad, its earlier view used after (an
    input: refused, or eager's)."""
    res = run_case(
        '''
def f(opt, a, b):
    t0 = b.view(4, 1, 1)
    t1 = t0.unsqueeze(-2)
    with torch.no_grad():
        b.as_strided_((1, 1), (1, 1), 0)
    t4 = b @ t1
    return b,
''',
        {'bases': [{'shape': [2, 4, 3], 'dtype': 'float32', 'rg': False}, {'shape': [4, 1], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'value', 'value': None}, {'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'tensor', 'base': 1, 'expr': 'x'}]},
        impl=None, post=[], modes=['grad'], seed=4141,
    )
    report = res.report()
    assert res.ok or ("impl raised, eager did not: AotgradCompileError" in report and "differ" not in report), report


#: in-place metadata ops on the root before it is re-strided
EARLIER_METAS = {
    "t_": "t.t_()",
    "transpose_": "t.transpose_(0, 1)",
    "swapdims_": "t.swapdims_(1, 0)",
    "unsqueeze_": "t.unsqueeze_(0)",
    "squeeze_": "t.unsqueeze_(0); t.squeeze_(0)",
}


@pytest.mark.parametrize(
    "meta,view,restride,scenario",
    list(itertools.product(sorted(EARLIER_METAS), ["slice", "transpose", "expand"], sorted(RESTRIDES), ["use", "view_of_stale"])),
)
def test_view_of_intermediate_changed_then_restrided_is_eagers(meta, view, restride, scenario):
    """Another metadata op on the root before ``as_strided_``: functionalization's record of
    the root is then that op and the ``as_strided``; with no data write into the storage
    since the first, the storage is laid out as the root was (eager's)."""
    check_case(_changed_then_restrided(meta, view, restride, scenario), INPUTS, modes=["grad", "no_grad"])


@pytest.mark.parametrize("meta,restride", list(itertools.product(sorted(EARLIER_METAS), sorted(RESTRIDES))))
def test_write_into_intermediate_changed_then_restrided_is_eagers_or_refused(meta, restride):
    """A write into such a root's storage (functionalization may scatter it back laid out
    otherwise, through the other op's inverse): later uses of its earlier views are eager's
    or refused, naming the line, never different."""
    src = _changed_then_restrided(meta, "slice", restride, "write_root_then_use")
    res = run_case(src, INPUTS, None, post=[], modes=["grad", "no_grad"], seed=0)
    report = res.report()
    assert res.ok or ("impl raised, eager did not: AotgradCompileError" in report and "differ" not in report), report


def _changed_then_restrided(meta: str, view: str, restride: str, scenario: str) -> str:
    return _source("intermediate", view, restride, scenario).replace(
        "    " + RESTRIDES[restride], "    " + EARLIER_METAS[meta] + "\n    " + RESTRIDES[restride], 1
    )


def test_fuzz_3013125_squeeze__then_as_strided__of_intermediate():
    check_case(
        "def f(a):\n    t0 = a.t()\n    t1 = t0.softmax(-1)\n    t2 = a.t()\n    t5 = t1.sin()\n"
        "    t6 = t5.t()\n    t5.squeeze_(0)\n    t5.as_strided_((3,), (1,), 1)\n    t7 = torch.maximum(t6, t2)\n"
        "    return t5, t7\n",
        {'bases': [{'shape': [3, 4, 1], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.view(-1)'}]},
        modes=["grad"], seed=3013125,
    )


def test_root_transposed_then_restrided_still_refused_or_eagers():
    """A root that ``t_`` made a view of itself before ``as_strided_``: its storage's layout is
    not recorded, so the use stays refused (naming it) or is eager's, never silently wrong."""
    res = run_case(
        "def f(a, w):\n    t = a * 2\n    v = t[1:, :3]\n    t.t_()\n    t.mul_(w)\n"
        "    t.as_strided_((2, 3), (1, 2), 1)\n    u = v * w\n    return u, t\n",
        INPUTS, None, post=[], modes=["grad"], seed=0,
    )
    report = res.report()
    assert res.ok or ("impl raised, eager did not: AotgradCompileError" in report and "differ" not in report), report


# fuzz programs the refusal failed (final 20k runs at seeds 3000000, 4000000), minimized (3003813's
# root made an intermediate: its input root stays refused)
@pytest.mark.parametrize(
    "seed,source,inputs",
    [
        (3003813, "def f(a, k):\n    t = a * 1\n    t0 = t.unsqueeze(0)\n    t.as_strided_((3, 1), (1, 1), 9)\n"
         "    t3 = t0.sum(0, keepdim=True)\n    return t0, t3\n",
         {'bases': [{'shape': [4, 2, 4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone()'}, {'kind': 'value', 'value': 0}]}),
        (3010010, "def f(a, flag, mode):\n    t1 = a * 2\n    t2 = t1[1:2]\n    t1.as_strided_((3, 1), (1, 1), 0)\n"
         "    t3 = t2.detach()\n    return a, t3, t2 * 2\n",
         {'bases': [{'shape': [3, 2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': False}, {'kind': 'value', 'value': 'mean'}]}),
        (4015672, "def f(a, k):\n    t2 = a + 1\n    t3 = t2.view(2, 2)\n    t4 = t3.expand(2, 2, 2)\n"
         "    t2.as_strided_((1,), (1,), 0)\n    t5 = t4 + 1\n    return t2, t5\n",
         {'bases': [{'shape': [4], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x'}, {'kind': 'value', 'value': 1}]}),
    ],
)
def test_fuzz_use_of_view_of_restrided_root(seed, source, inputs):
    check_case(source, inputs, modes=["grad"], seed=seed)


def test_fuzz_4002573_view_of_reshaped_expanded_input_restrided():
    """Fuzz seed 4002573: the root is ``reshape`` of an expanded input (a copy); eager's, or
    refused naming the use where the analysis has no record of the copy's layout."""
    res = run_case(
        "def f(a, b):\n    t1 = a.reshape(4)\n    t2 = t1.reshape(4, 1)\n    t1.as_strided_((3, 2), (0, 2), 0)\n"
        "    t9 = t2.detach()\n    return b, t2 + 1, t9\n",
        {'bases': [{'shape': [2], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.expand(2, *(2,))'}, {'kind': 'same', 'arg': 0}]},
        None, post=[], modes=["grad"], seed=4002573,
    )
    report = res.report()
    assert res.ok or ("impl raised, eager did not: AotgradCompileError" in report and "differ" not in report), report
