"""Differential fuzzing: random view/mutation programs, eager vs the implementation.

The default run checks a fixed, derandomized budget of programs; ``-m fuzz`` runs a long one
(``AOTGRAD_FUZZ_EXAMPLES``, default 20000).  ``AOTGRAD_FUZZ_IMPL=torch`` compares eager with
torch's own AOT Autograd instead of aotgrad (useful to tell harness bugs from impl bugs).
A failure prints a ready-to-paste regression test for ``test_fuzz_regressions.py``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from .generator import cases
from .harness import default_impl, default_impl_name, import_aotgrad, run

_COMMON = dict(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)


def _impl():
    if default_impl_name() == "aotgrad":
        if not hasattr(import_aotgrad(), "aot_function"):
            pytest.skip("aotgrad.aot_function is not available yet")
    return default_impl()


def _check(case) -> None:
    res = run(case, _impl())
    if not res.ok:
        raise AssertionError(
            "eager and impl differ\n"
            + res.report()
            + "\n--- regression test ---\n"
            + case.as_test("test_new_regression")
        )


@settings(max_examples=200, derandomize=True, **_COMMON)
@given(cases())
def test_fuzz(case):
    _check(case)


@pytest.mark.fuzz
@settings(max_examples=int(os.environ.get("AOTGRAD_FUZZ_EXAMPLES", "20000")), **_COMMON)
@given(cases())
def test_fuzz_long(case):
    _check(case)
