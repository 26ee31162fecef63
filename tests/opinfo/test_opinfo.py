"""The OpInfo sweep under pytest: aotgrad against eager, op by op (see ``sweep.py``).

* ``test_opinfo_slice`` (default run): every ``SLICE_STEP``-th OpInfo of op_db, each of its
  variants (function, in-place), float32 and float64 — 176 cases. The default run of
  tests/opinfo (slice and harness tests) took 55 s wall on 2 cores (dbf0b5a).
* ``test_opinfo_full`` (``pytest -m opinfo``): every OpInfo, 1,730 cases, aotgrad only, one
  process: 8 min 10 s wall on 2 cores (dbf0b5a: 1597 passed, 80 skipped, 53 xfailed).
  The command line is faster with workers: ``python -m tests.opinfo.sweep --check --jobs 2``
  (aotgrad only) 2.5-4 min; ``--report --jobs 2`` (aotgrad and torch's) 10-14 min.

Each case compares aotgrad's outcome with ``expected_failures.json``: a case not listed must
pass (or be unsupported in eager: skipped); a listed one must fail the way it is listed
(reported as xfail). A regression from pass fails, and so does a listed case that now passes —
the list can only shrink, honestly. Regenerate it with
``python -m tests.opinfo.sweep --write-expected --jobs 2``.

``AOTGRAD_OPINFO_IMPL=torch`` runs torch's ``aot_function`` as the implementation under test
instead, with every non-pass reported as xfail: that is for debugging the harness itself.

The harness tests at the bottom check, on a few ops, that the sweep does catch wrong values,
wrong gradients, lost requires_grad, lost aliasing, a missed input mutation and a missed
buffer update.
"""

from __future__ import annotations

import functools
import os

import pytest
import torch

pytest.importorskip(
    "expecttest", reason="torch's op_db needs the expecttest package (pip install expecttest)"
)

from . import sweep

IMPL = os.environ.get("AOTGRAD_OPINFO_IMPL", "aotgrad")

_OP_DB = sweep.load_op_db()
_SLICE = [(v, d) for v in sweep.slice_variants(_OP_DB) for d in sweep.DTYPES]
_FULL = [(v, d) for v in sweep.all_variants(_OP_DB) for d in sweep.DTYPES]


def _ids(cases):
    return [sweep.key_of(v, d) for v, d in cases]


@functools.cache
def _impls():
    return sweep.load_impls([IMPL])


@functools.cache
def _expected():
    return sweep.load_expected()


def _check(variant: sweep.Variant, dtype: torch.dtype) -> None:
    outcome = sweep.run_variant(variant, dtype, _impls())[IMPL]
    if IMPL == "aotgrad":
        problem = sweep.verdict(outcome, _expected())
        if problem:
            pytest.fail(problem, pytrace=False)
    if outcome.outcome == sweep.UNSUPPORTED:
        pytest.skip(f"unsupported in eager: {outcome.reason}")
    if outcome.outcome in (sweep.FAIL, sweep.ERROR):
        pytest.xfail(f"{outcome.outcome} (listed): {outcome.reason}")


@pytest.mark.parametrize("variant,dtype", _SLICE, ids=_ids(_SLICE))
def test_opinfo_slice(variant, dtype):
    _check(variant, dtype)


@pytest.mark.opinfo
@pytest.mark.parametrize("variant,dtype", _FULL, ids=_ids(_FULL))
def test_opinfo_full(variant, dtype):
    _check(variant, dtype)


def test_expected_failures_name_real_cases():
    """Every entry of expected_failures.json names an (op variant, dtype) the sweep runs."""
    known = set(_ids(_FULL))
    stale = sorted(k for k in sweep.load_expected() if k not in known)
    assert not stale, f"entries for cases that no longer exist: {stale}"
    for k, v in sweep.load_expected().items():
        assert v["outcome"] in (sweep.FAIL, sweep.ERROR), k
        assert v["reason"], k


# --------------------------------------------------------------------------------------------
# The harness catches what it must. Each fake implementation below breaks one promise.


def _variant(name: str) -> sweep.Variant:
    for v in sweep.all_variants(_OP_DB):
        if v.name == name:
            return v
    raise LookupError(name)


def _outcome(name: str, compile_fn, dtype=torch.float64) -> sweep.Outcome:
    return sweep.run_variant(_variant(name), dtype, {"fake": compile_fn})["fake"]


def _map_outputs(fn, f):
    def wrapped(*args):
        return torch.utils._pytree.tree_map_only(torch.Tensor, f, fn(*args))

    return wrapped


def test_harness_eager_itself_passes():
    for name in ("add", "add[inplace]", "cat", "transpose", "sum", "nn.functional.dropout[inplace]"):
        o = _outcome(name, lambda fn: fn)
        assert o.outcome == sweep.PASS, (name, o)
        assert o.tested > 0


def test_harness_catches_wrong_values():
    o = _outcome("mul", lambda fn: _map_outputs(fn, lambda t: t + 1e-3))
    assert o.outcome == sweep.FAIL and "values differ" in o.reason, o


def test_harness_catches_wrong_gradients():
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g * 2

    o = _outcome("sin", lambda fn: _map_outputs(fn, Scale.apply))
    assert o.outcome == sweep.FAIL and o.reason.split("/", 1)[1].startswith("backward"), o


def test_harness_catches_lost_requires_grad():
    o = _outcome("exp", lambda fn: _map_outputs(fn, lambda t: t.detach()))
    assert o.outcome == sweep.FAIL and "requires_grad" in o.reason, o


def test_harness_catches_lost_aliasing():
    o = _outcome("transpose", lambda fn: _map_outputs(fn, lambda t: t.clone()))
    assert o.outcome == sweep.FAIL and "aliases" in o.reason, o


def test_harness_catches_missed_input_mutation():
    def functional_only(fn):
        def call(x, *rest):
            return fn(x.clone(), *rest)  # the caller's input is never mutated

        return call

    o = _outcome("mul[inplace]", functional_only)
    assert o.outcome == sweep.FAIL, o


def test_harness_reports_errors_and_eager_rejections():
    def boom(fn):
        def call(*args):
            raise NotImplementedError("no such luck\nsecond line")

        return call

    o = _outcome("neg", boom)
    assert o.outcome == sweep.ERROR and o.reason.endswith("NotImplementedError: no such luck"), o
    # float64 is not a dtype this one supports at all
    o = sweep.run_variant(_variant("bitwise_and"), torch.float64, {"fake": lambda fn: fn})["fake"]
    assert o.outcome == sweep.UNSUPPORTED, o


def test_verdict_rules():
    expected = {"a|float32": {"outcome": "error", "reason": "x"}}

    def mk(key, out):
        return sweep.Outcome(key, "aotgrad", out, "why")

    assert sweep.verdict(mk("a|float32", "error"), expected) is None
    assert "UNEXPECTED PASS" in sweep.verdict(mk("a|float32", "pass"), expected)
    assert "CHANGED" in sweep.verdict(mk("a|float32", "fail"), expected)
    assert sweep.verdict(mk("b|float32", "pass"), expected) is None
    assert sweep.verdict(mk("b|float32", "unsupported"), expected) is None
    assert "REGRESSION" in sweep.verdict(mk("b|float32", "fail"), expected)


def test_harness_catches_missed_buffer_mutation():
    def clone_inputs(fn):
        def call(*args):
            return fn(*torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.clone(), args))

        return call

    o = _outcome("nn.functional.batch_norm", clone_inputs)  # training samples update running stats
    assert o.outcome == sweep.FAIL and "inputs after the call" in o.reason, o
