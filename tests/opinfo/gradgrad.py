"""gradgradcheck through ``aot_function``, OpInfo by OpInfo, against eager's own gradgradcheck.

For every OpInfo whose ``supports_gradgrad`` is set (function variant, float64, the first
``MAX_SAMPLES`` samples), ``torch.autograd.gradgradcheck`` runs on the eager op and on
``aotgrad.aot_function(op, nop)``. A sample counts for an op when eager's check passes; the op
passes when ours passes on each of those samples. Command line (the full sweep)::

    python -m tests.opinfo.gradgrad [--step 1] [--jobs 2]

prints the counts (ops eager passes, ops ours passes of those, and each failure's first
line). Under pytest, ``test_gradgrad.py`` runs a slice by default and everything with
``-m gradgrad``.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from . import sweep

MAX_SAMPLES = 2
#: the default pytest run takes every SLICE_STEP-th gradgrad OpInfo
SLICE_STEP = 25
#: samples larger than this are skipped (gradgradcheck's numerical Jacobians are quadratic)
MAX_SAMPLE_NUMEL = 256

PASS, FAIL, NO_EAGER = "pass", "fail", "eager-fails"


def gradgrad_ops(op_db: Sequence | None = None) -> list:
    op_db = sweep.load_op_db() if op_db is None else op_db
    return [
        op for op in op_db
        if op.supports_autograd and op.supports_gradgrad and torch.float64 in op.supported_dtypes("cpu")
    ]


def slice_ops(op_db: Sequence | None = None, step: int = SLICE_STEP) -> list:
    return gradgrad_ops(op_db)[::step]


def op_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


@dataclasses.dataclass
class GradGradOutcome:
    op: str
    outcome: str  # PASS, FAIL or NO_EAGER (eager's own check fails on every sample)
    samples: int  # samples eager's check passed on
    reason: str = ""


def _over_leaves(p: sweep.Prepared) -> tuple[Callable, list[torch.Tensor]]:
    """``p.fn`` as a function of its input tensors, outputs as gradgradcheck takes them:
    the sample's output processing, then the floating tensors only."""
    leaves, spec = pytree.tree_flatten(p.inputs)
    positions = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    def fn(*tensors: torch.Tensor) -> Any:
        flat = list(leaves)
        for i, t in zip(positions, tensors, strict=True):
            flat[i] = t
        return p.fn(*pytree.tree_unflatten(flat, spec))

    return fn, [leaves[i] for i in positions]


def _checked(fn: Callable, process: Callable) -> Callable:
    def out(*tensors: torch.Tensor) -> tuple:
        result = process(fn(*tensors))
        return tuple(
            t for t in pytree.tree_leaves(result)
            if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and t.requires_grad
        )

    return out


def _gradgradcheck(fn: Callable, inputs: list[torch.Tensor]) -> str | None:
    """None when gradgradcheck passes, else the first line of why not."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.autograd.gradgradcheck(fn, tuple(inputs), raise_exception=True)
    except Exception as exc:  # noqa: BLE001 - every failure is an outcome to report
        return sweep.first_line(exc)
    return None


def run_op(op) -> GradGradOutcome:
    """gradgradcheck of ``op`` eagerly and through ``aot_function(..., nop)`` on its samples."""
    import aotgrad

    name = op_name(op)
    samples = sweep.make_samples(sweep.Variant(op, False), torch.float64, MAX_SAMPLES)
    counted = 0
    for sample in samples:
        if sweep._sample_numel(sample) > MAX_SAMPLE_NUMEL:
            continue
        p = sweep.prepare(sweep.Variant(op, False), sample)
        fn, tensors = _over_leaves(p)
        if not any(t.requires_grad for t in tensors):
            continue
        eager = _checked(fn, p.process)
        try:
            if not eager(*tensors):
                continue
        except Exception:  # noqa: BLE001 - a sample eager cannot run is not counted
            continue
        if _gradgradcheck(eager, tensors) is not None:
            continue
        counted += 1
        compiled = _checked(aotgrad.aot_function(fn, aotgrad.nop), p.process)
        why = _gradgradcheck(compiled, tensors)
        if why is not None:
            return GradGradOutcome(name, FAIL, counted, why)
    return GradGradOutcome(name, PASS if counted else NO_EAGER, counted)


def _worker(index: int) -> GradGradOutcome:
    torch.set_num_threads(1)
    return run_op(gradgrad_ops()[index])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--step", type=int, default=1, help="every STEP-th gradgrad OpInfo (default: all)")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args(argv)
    ops = gradgrad_ops()
    indices = list(range(0, len(ops), args.step))
    start = time.perf_counter()
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs, maxtasksperchild=20) as pool:
            outcomes = pool.map(_worker, indices, chunksize=1)
    else:
        outcomes = [_worker(i) for i in indices]
    counted = [o for o in outcomes if o.outcome != NO_EAGER]
    failed = [o for o in counted if o.outcome == FAIL]
    print(f"gradgrad OpInfos run: {len(outcomes)} ({time.perf_counter() - start:.0f} s)")
    print(f"eager gradgradcheck passes on a sample: {len(counted)}; "
          f"aotgrad passes on all of them: {len(counted) - len(failed)}")
    for o in failed:
        print(f"  FAIL {o.op}: {o.reason}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
