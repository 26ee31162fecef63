"""Differential fuzzing: random view/mutation programs, eager vs the implementation.

The default run checks a fixed, derandomized budget of programs; ``-m fuzz`` runs a long one
(``AOTGRAD_FUZZ_EXAMPLES``, default 20000).  ``AOTGRAD_FUZZ_IMPL=torch`` compares eager with
torch's own AOT Autograd instead of aotgrad (useful to tell harness bugs from impl bugs).
A failure prints a ready-to-paste regression test for ``test_fuzz_regressions.py``.

Known open bugs: a failing program whose first difference has a signature listed in
``KNOWN`` (each tracked by strict-xfail tests in ``test_fuzz_regressions.py``) is counted
(``hypothesis`` statistics, ``--hypothesis-show-statistics``) but does not fail the run, so
the default run stays green while it still catches every *new* kind of difference.  The
signatures are coarse (e.g. any ``output.is_view`` mismatch), so a new bug of a known kind can
hide behind them: set ``AOTGRAD_FUZZ_STRICT=1`` to fail on every difference, and remove an
entry as soon as its regression tests pass.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings

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


# signature prefix -> regression tests (test_fuzz_regressions.py) that track it, grouped by likely
# root cause, most severe first.  test_known_matches_open_regressions keeps this in sync with the
# strict-xfail tests (each listed test must fail with exactly its key's signature).
KNOWN: dict[str, list[str]] = {
    # --- wrong values (outputs, inputs, gradients)
    "call.output.storage_offset": ["test_dynamic_empty_diagonal_alias_of_intermediate_storage_offset"],
    # --- wrong metadata: aliasing, requires_grad, strides, grad layout
    "backward.baseN.grad.stride": ["test_backward_of_mutated_input_not_traced_unless_needed", "test_grad_strides_of_permuted_input_with_no_grad_metadata_mutation", "test_grad_strides_of_where_on_transposed_input"],
    # --- views invalidated by a later in-place op: eager raises on use, aotgrad rebuilds them
    # --- raising where eager does not: views replayed against a base whose metadata changed since
    "call: impl raised, eager did not: RuntimeError: The expanded size": ["test_expand_view_replayed_after_base_t_"],
    # --- raising where eager does not: detach() aliases of grad-requiring inputs treated as requiring grad
    # --- raising where eager does not: detach_() / in-place on leaves and their views
    "call: impl raised, eager did not: AotgradCompileError: aotgrad: the program detaches input N in": ["test_detach__of_input_sharing_storage_with_mutated_alias"],
    # --- raising where eager does not: writes through overlapping memory, as_strided_ beyond the view
    "call: impl raised, eager did not: AotgradCompileError: aotgrad: in-place": ["test_view_of_intermediate_mutated_after_base_as_strided_", "test_inplace_add_on_self_overlapping_as_strided_input", "test_seed_19003932", "test_seed_34018504"],
    # --- refused: a view changed by an in-place metadata op, used once its storage changed
    # --- raising where eager does not: other
    "backward: impl raised, eager did not: RuntimeError: invalid gradient at index N": ["test_seed_36010949"],
    "backward: impl raised, eager did not: RuntimeError: Function TBackwardN returned an invalid gradient": ["test_seed_35017380"],
    # --- not raising where eager does
    "backward: eager raised, impl did not: RuntimeError: Function": ["test_backward_through_reshape_of_input_unsqueezed_under_no_grad", "test_backward_of_view_after_no_grad_t__between_metadata_mutations"],
}


def _known(signature: str) -> str | None:
    if os.environ.get("AOTGRAD_FUZZ_STRICT") == "1" or default_impl_name() != "aotgrad":
        return None
    for key in KNOWN:
        # attribute signatures match exactly; "...raised..." ones by prefix
        if signature == key or (": " in key and signature.startswith(key)):
            return key
    return None


def _check(case) -> None:
    res = run(case, _impl())
    if not res.ok and _known(res.signature):
        event(f"known aotgrad bug: {_known(res.signature)}")
        return
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


def test_known_matches_open_regressions(monkeypatch):
    """``KNOWN`` stays honest: every strict-xfail regression test is listed under the signature it
    fails with now, and every listed test exists, is marked xfail and fails with that signature.

    When this fails after a core change: a test that passes now has its marker dropped
    (``tools/drop_xpassed.py``) and leaves ``KNOWN`` (``python tools/fuzz.py --sync-known`` does
    that and lists the rest); one whose failure changed kind moves to its new signature (and its
    xfail reason is updated)."""
    if default_impl_name() != "aotgrad":
        pytest.skip("KNOWN describes aotgrad")
    _impl()
    from . import harness
    from . import test_fuzz_regressions as R

    xfail = {
        n for n, f in vars(R).items()
        if n.startswith("test_") and any(m.name == "xfail" for m in getattr(f, "pytestmark", []))
    }
    listed = {t: key for key, tests in KNOWN.items() for t in tests}
    problems = [f"{t}: listed under {k!r} but is not a strict-xfail test in test_fuzz_regressions.py"
                for t, k in listed.items() if t not in xfail]
    problems += [f"{t}: strict-xfail but not listed in KNOWN" for t in sorted(xfail - listed.keys())]
    problems += [f"{k!r} lists no test (an empty key still hides every failure it matches)"
                 for k, tests in KNOWN.items() if not tests]
    captured = {}

    def capture(source, inputs, post=(), modes=("grad",), seed=0, impl=None):
        # the dynamic-mode regressions pass their own impl (aotgrad with dynamic=True)
        captured["res"] = harness.run_case(
            source, inputs, impl or harness.aotgrad_impl, post=post, modes=modes, seed=seed
        )

    monkeypatch.setattr(R, "check_case", capture)
    monkeypatch.delenv("AOTGRAD_FUZZ_STRICT", raising=False)
    for t in sorted(xfail & listed.keys()):
        captured.clear()
        getattr(R, t)()
        res = captured["res"]
        got = _known(res.signature) if not res.ok else None
        if got != listed[t]:
            problems.append(f"{t}: listed under {listed[t]!r} but fails with {res.signature!r}"
                            if not res.ok else f"{t}: passes now (drop its marker and its KNOWN entry)")
    assert not problems, "KNOWN is out of date:\n" + "\n".join(problems)
