"""core/frame_stack.py: a compile runs on a data-stack chunk of its own.

The probe: at each depth of a range wider than one default chunk (16 KiB), make many
short calls. At the depth where a call's frame crosses into a new chunk, CPython 3.11+
maps that chunk on each call and unmaps it on return, a fresh page fault every time; on a
chunk of its own, nothing is mapped.
"""

from __future__ import annotations

import resource

import pytest
import torch

import aotgrad
from aotgrad.core.frame_stack import in_fresh_chunk

CALLS_PER_DEPTH = 300


def _leaf() -> int:
    return 1


def _probe(depth: int) -> int:
    """Recurse to ``depth``, then make ``CALLS_PER_DEPTH`` short calls there."""
    if depth:
        return _probe(depth - 1)
    total = 0
    for _ in range(CALLS_PER_DEPTH):
        total += _leaf()
    return total


def _all_depths() -> None:
    """``_probe`` at each depth 0..399 (~400 frames: more than a default chunk holds, so
    some depth sits at its boundary)."""
    for depth in range(400):
        assert _probe(depth) == CALLS_PER_DEPTH


def _faults(run) -> int:
    """Minor page faults of ``run(_all_depths)``."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    run(_all_depths)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_calls_in_a_fresh_chunk_map_no_chunks():
    plain = _faults(lambda f: f())
    if plain < CALLS_PER_DEPTH:
        pytest.skip(f"this Python does not map a data-stack chunk per call at a boundary ({plain} faults)")
    fresh = _faults(in_fresh_chunk)
    # a handful of faults for the chunk itself and the pages the frames touch, not one per call
    assert fresh < CALLS_PER_DEPTH // 2, (plain, fresh)


def test_returns_and_raises_as_the_function():
    assert in_fresh_chunk(lambda a, b=0: a + b, 2, b=3) == 5

    def fails():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        in_fresh_chunk(fails)


def test_nested_fresh_chunks():
    assert in_fresh_chunk(in_fresh_chunk, in_fresh_chunk, lambda: 7) == 7


def test_compile_results_unchanged():
    """A compile (which runs through in_fresh_chunk) gives eager's outputs and gradients."""
    def f(x, w):
        return torch.relu(x @ w).sum(0)

    x = torch.randn(3, 4)
    w = torch.randn(4, 5, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    compiled = aotgrad.aot_function(f, aotgrad.compilers.nop, cache=False)
    out = compiled(x, w)
    expected = f(x, w2)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(w.grad, w2.grad)
