"""The OpInfo sweep engine: each operator in ``op_db``, through an ``aot_function``, against eager.

For every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db``, for its
function variant and (when it has one) its in-place variant, in float32 and float64 on CPU, and
for each of its first ``MAX_SAMPLES`` sample inputs, the sweep

1. calls the op eagerly (the reference);
2. compiles ``fn`` with the implementation under test (``aot_function(fn, nop)``) and calls it;
3. compares the outputs: pytree structure, and per tensor shape, dtype, requires_grad, which
   input (if any) it shares storage with, and values (``torch.testing.assert_close`` with the
   op's own CPU tolerance overrides where it has any, assert_close's defaults otherwise);
4. for an in-place variant, compares the mutated input after the call (values, shape, strides,
   requires_grad) and checks that the op returned that very input object as eager does;
5. if the op supports autograd and some output requires grad, compares
   ``torch.autograd.grad(outputs, differentiable_inputs, cotangents)`` with the same random
   cotangents on both sides (a ``None`` gradient equals an all-zero one).

How the op is called. The tensors of a sample are the inputs of the compiled function; its
non-tensor arguments (ints, floats, strings, dtypes, None, ...) are constants captured in the
closure, which is how ``torch.compile`` hands an op to AOT Autograd. A top-level argument that
is a container holding tensors (a TensorList such as ``torch.cat``'s, or ``index_put``'s tuple
of indices with ``None`` in it) is passed whole, as a pytree input. Keyword arguments holding
tensors are passed positionally after the positional ones.

An in-place variant mutates its first input. Eager forbids in-place ops on a leaf that
requires grad, so when the sample's input is such a leaf the sweep mutates ``leaf.clone()``
(made outside the compiled function, identically on both sides) and differentiates with respect
to the leaf.

Randomness. Samples are regenerated from the same seed for every side (so each side gets its
own, identical, fresh inputs, views and non-leaf inputs included), and the global RNGs are
reseeded before each call. An op whose eager output changes with the seed (dropout, bernoulli,
...) or that OpInfo marks ``has_nondeterministic_output`` (empty_like, ...) is compared on
metadata only.

Outcomes, per (op variant, dtype):

* ``pass``        every tested sample agreed with eager;
* ``fail``        some sample produced a wrong result (a bug); reported before ``error``;
* ``error``       the implementation raised where eager did not (forward or backward);
* ``unsupported`` eager itself rejects every sample (or the op lacks the dtype, or every
  sample was too large): nothing to compare.

The reason of a non-pass outcome is the first line of the error or mismatch, prefixed by the
sample index and stage (``s2/backward: ...``).

Command line (run from the repository root)::

    python -m tests.opinfo.sweep --report [--json PATH] [--jobs 2] [--slice] [--ops REGEX]
    python -m tests.opinfo.sweep --write-expected [--jobs 2]

Wall times on 2 cores (torch 2.13 CPU, aotgrad at dbf0b5a): the whole sweep, aotgrad only,
``--jobs 2``: 2.5-4 min; aotgrad and torch's (``--report --jobs 2``): 10-14 min; one
(op variant, dtype) costs 0.1-1.5 s per implementation, mostly tracing.

``--report`` runs aotgrad and torch's own ``torch._functorch.aot_autograd.aot_function`` in the
same process and prints the counts of each and the ops whose outcomes differ, grouped by reason.
``--write-expected`` rewrites ``expected_failures.json`` from aotgrad's current outcomes (for a
partial run, ``--ops``/``--slice``, only the entries of the variants that ran are replaced).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import multiprocessing
import os
import random
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[2]
EXPECTED_PATH = Path(__file__).with_name("expected_failures.json")

DTYPES = (torch.float32, torch.float64)
#: Samples tried per (op variant, dtype): the first ones the OpInfo yields.
MAX_SAMPLES = 5
#: A sample whose tensors hold more elements than this in total is skipped.
MAX_SAMPLE_NUMEL = 1 << 18
#: The default (CI) slice: every SLICE_STEP-th OpInfo, all its variants, both dtypes.
SLICE_STEP = 10

PASS, FAIL, ERROR, UNSUPPORTED = "pass", "fail", "error", "unsupported"
OUTCOMES = (PASS, FAIL, ERROR, UNSUPPORTED)
#: Implementations the sweep knows; "aotgrad" is the one under test.
IMPL_NAMES = ("aotgrad", "torch")

_SAMPLE_SEED = 0
_RUN_SEED = 1234
_COTANGENT_SEED = 4321


# --------------------------------------------------------------------------------------------
# Implementations


def _aotgrad_factory() -> Callable[[Callable], Callable]:
    try:
        import aotgrad
    except ImportError:  # running from a checkout that is not pip-installed
        src = str(REPO / "src")
        if src not in sys.path:
            sys.path.insert(0, src)
        import aotgrad
    from aotgrad.compilers import nop

    aot_function = aotgrad.aot_function  # AttributeError here: the core has not landed

    return lambda fn: aot_function(fn, nop)


def _torch_factory() -> Callable[[Callable], Callable]:
    from torch._functorch.aot_autograd import aot_function
    from torch._functorch.compilers import nop

    return lambda fn: aot_function(fn, nop)


_FACTORIES = {"aotgrad": _aotgrad_factory, "torch": _torch_factory}


def load_impls(names: Iterable[str]) -> dict[str, Callable[[Callable], Callable]]:
    """``{name: compile}`` where ``compile(fn)`` returns the compiled callable."""
    return {name: _FACTORIES[name]() for name in names}


# --------------------------------------------------------------------------------------------
# What is swept


def load_op_db() -> list:
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


@dataclasses.dataclass(frozen=True)
class Variant:
    """One callable of an OpInfo: its function variant or its in-place variant."""

    op: Any
    inplace: bool

    @property
    def name(self) -> str:
        base = self.op.name + (f".{self.op.variant_test_name}" if self.op.variant_test_name else "")
        return base + ("[inplace]" if self.inplace else "")

    @property
    def fn(self) -> Callable:
        return self.op.inplace_variant if self.inplace else self.op.op

    @property
    def supports_autograd(self) -> bool:
        if self.inplace:
            return bool(self.op.supports_autograd and self.op.supports_inplace_autograd)
        return bool(self.op.supports_autograd)


def variants_of(op) -> list[Variant]:
    out = [Variant(op, False)]
    if op.inplace_variant is not None:
        out.append(Variant(op, True))
    return out


def all_variants(op_db: Sequence | None = None) -> list[Variant]:
    op_db = load_op_db() if op_db is None else op_db
    return [v for op in op_db for v in variants_of(op)]


def slice_variants(op_db: Sequence | None = None, step: int = SLICE_STEP) -> list[Variant]:
    """The default CI slice: every ``step``-th OpInfo of op_db (op_db's order), all variants."""
    op_db = load_op_db() if op_db is None else op_db
    return [v for op in op_db[::step] for v in variants_of(op)]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def key_of(variant: Variant, dtype: torch.dtype) -> str:
    return f"{variant.name}|{dtype_name(dtype)}"


# --------------------------------------------------------------------------------------------
# Running one sample


class Mismatch(AssertionError):
    """A result that differs from eager's."""


class _Stage(Exception):
    """An exception raised by the implementation under test, tagged with where."""

    def __init__(self, stage: str, exc: BaseException):
        super().__init__(stage)
        self.stage, self.exc = stage, exc


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    line = re.sub(r"0x[0-9a-fA-F]+", "0x…", line)
    if len(line) > 240:
        line = line[:237] + "..."
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _reseed(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def _snapshot(t: torch.Tensor) -> torch.Tensor:
    """A detached copy of ``t``'s value (sparse layouts densified)."""
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    return t.clone()


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def make_samples(variant: Variant, dtype: torch.dtype, max_samples: int = MAX_SAMPLES) -> list:
    """The first ``max_samples`` samples, freshly made from a fixed seed (so: identical per call)."""
    _reseed(_SAMPLE_SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen = variant.op.sample_inputs("cpu", dtype, requires_grad=variant.supports_autograd)
        return list(islice(gen, max_samples))


@dataclasses.dataclass
class Prepared:
    """A sample made ready to call: ``fn(*inputs)`` runs the op."""

    fn: Callable
    inputs: list
    diff: list[torch.Tensor]  # what gradients are taken with respect to
    mutated: torch.Tensor | None  # the tensor an in-place variant mutates
    process: Callable  # the sample's output_process_fn_grad
    leaves: list[torch.Tensor]  # every input tensor, to check samples are identical per side


def prepare(variant: Variant, sample) -> Prepared:
    op_fn = variant.fn
    first = sample.input
    diff_override = None
    if variant.inplace and isinstance(first, torch.Tensor) and first.requires_grad and first.is_leaf:
        # Eager forbids mutating a leaf that requires grad: mutate a non-leaf copy of it.
        diff_override = first
        first = first.clone()
    entries = [first, *sample.args]
    kwargs = dict(sample.kwargs)

    def has_tensor(v: Any) -> bool:
        return any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves(v))

    pos_idx = [i for i, v in enumerate(entries) if has_tensor(v)]
    kw_keys = [k for k, v in kwargs.items() if has_tensor(v)]
    inputs = [entries[i] for i in pos_idx] + [kwargs[k] for k in kw_keys]
    # The closure keeps only the non-tensor arguments: tensors come in as inputs.
    entries_tpl = [None if i in pos_idx else v for i, v in enumerate(entries)]
    kwargs_tpl = {k: (None if k in kw_keys else v) for k, v in kwargs.items()}
    n_pos = len(pos_idx)

    def fn(*xs):
        args = list(entries_tpl)
        kw = dict(kwargs_tpl)
        for i, x in zip(pos_idx, xs[:n_pos]):
            args[i] = x
        for k, x in zip(kw_keys, xs[n_pos:]):
            kw[k] = x
        return op_fn(*args, **kw)

    leaves = _tensors(inputs)
    diff = [t for t in leaves if t.requires_grad]
    if diff_override is not None:
        diff = [diff_override if t is first else t for t in diff]
    return Prepared(
        fn=fn,
        inputs=inputs,
        diff=diff,
        mutated=first if variant.inplace else None,
        process=sample.output_process_fn_grad,
        leaves=[diff_override if (diff_override is not None and t is first) else t for t in leaves],
    )


@dataclasses.dataclass
class SideResult:
    out: Any
    aliases: list  # per output leaf: index of the input tensor it shares storage with, or None
    inputs_after: list[torch.Tensor]  # every input tensor's value after the call (batch_norm's stats, ...)
    returns_mutated: bool  # the output is the mutated input object itself
    mutated_after: torch.Tensor | None
    mutated_meta: tuple | None  # (shape, stride, requires_grad) of the mutated input after
    grad_outs: list[torch.Tensor]
    grads: Any = None  # list of grads, or None when not computed
    cotangents: Any = None
    seeded: bool = False  # (eager, when asked) some op that ran used the RNG
    grad_error: BaseException | None = None


def _storage_key(t: torch.Tensor):
    try:
        if t.numel() == 0:
            return None
        return t.untyped_storage().data_ptr()
    except Exception:
        return None


def _alias_pattern(out: Any, inputs: list) -> list:
    keys = {}
    for i, t in enumerate(_tensors(inputs)):
        k = _storage_key(t)
        if k is not None:
            keys.setdefault(k, i)
    return [keys.get(_storage_key(t)) if isinstance(t, torch.Tensor) else None for t in pytree.tree_leaves(out)]


class _SeededOpDetector(TorchDispatchMode):
    """Notes whether any ATen op tagged ``nondeterministic_seeded`` (uses the RNG) ran."""

    def __init__(self):
        super().__init__()
        self.seen = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            self.seen = True
        return func(*args, **(kwargs or {}))


def run_side(
    p: Prepared, call: Callable, run_seed: int, want_grads: bool, cotangents=None, detect_rng: bool = False
) -> SideResult:
    """Call ``call(*p.inputs)`` and take gradients. Exceptions propagate, tagged with the stage."""
    _reseed(run_seed)
    detector = _SeededOpDetector() if detect_rng else None
    try:
        if detector is not None:
            with detector:
                out = call(*p.inputs)
        else:
            out = call(*p.inputs)
    except Exception as e:
        raise _Stage("forward", e) from e
    aliases = _alias_pattern(out, p.inputs)
    inputs_after = [_snapshot(t) for t in _tensors(p.inputs)]
    mutated_after = mutated_meta = None
    if p.mutated is not None:
        m = p.mutated
        mutated_after = _snapshot(m)
        mutated_meta = (tuple(m.shape), tuple(m.stride()), m.requires_grad)
    try:
        processed = p.process(out)
    except Exception as e:
        raise _Stage("output_process_fn_grad", e) from e
    grad_outs = [t for t in _tensors(processed) if t.requires_grad]
    res = SideResult(
        out=out,
        aliases=aliases,
        inputs_after=inputs_after,
        returns_mutated=p.mutated is not None and out is p.mutated,
        mutated_after=mutated_after,
        mutated_meta=mutated_meta,
        grad_outs=grad_outs,
        seeded=bool(detector and detector.seen),
    )
    if want_grads and grad_outs and p.diff:
        if cotangents is None:
            _reseed(_COTANGENT_SEED)
            cotangents = [torch.randn_like(t) for t in grad_outs]
        res.cotangents = cotangents
        try:
            res.grads = list(torch.autograd.grad(grad_outs, p.diff, cotangents, allow_unused=True))
        except Exception as e:
            res.grad_error = e
    return res


def _tolerance(op, dtype: torch.dtype) -> tuple[float, float] | None:
    """(rtol, atol): the op's CPU toleranceOverride for ``dtype``, if it declares one."""
    try:
        from torch.testing._internal.common_device_type import toleranceOverride
    except Exception:
        return None
    found = None
    for info in getattr(op, "decorators", ()) or ():
        if getattr(info, "device_type", None) not in (None, "cpu"):
            continue
        for dec in getattr(info, "decorators", None) or [info]:
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                t = dec.d[dtype]
                found = (max(found[0], t.rtol), max(found[1], t.atol)) if found else (t.rtol, t.atol)
    return found


def _canon(x: Any) -> Any:
    """Lists, tuples and torch.Size as plain tuples (named tuples and return_types stay)."""
    if type(x) in (list, tuple) or isinstance(x, torch.Size):
        return tuple(_canon(y) for y in x)
    if type(x) is dict:
        return {k: _canon(v) for k, v in x.items()}
    return x


def compare(
    expected: Any,
    actual: Any,
    what: str,
    tol,
    values: bool = True,
    requires_grad: bool = True,
    soft: list | None = None,
) -> None:
    """Raise Mismatch unless ``actual`` matches ``expected`` (eager's).

    A container that differs only in kind (a list where eager returns a tuple) is a mismatch
    too, but a softer one: when ``soft`` is given it is appended there and the leaves are still
    compared, so that a deeper difference is the one reported.
    """
    e_leaves, e_spec = pytree.tree_flatten(expected)
    a_leaves, a_spec = pytree.tree_flatten(actual)
    if e_spec != a_spec:
        msg = f"{what}: structure {_spec_str(a_spec)} != eager {_spec_str(e_spec)}"
        e_leaves, e_canon = pytree.tree_flatten(_canon(expected))
        a_leaves, a_canon = pytree.tree_flatten(_canon(actual))
        if soft is None or e_canon != a_canon:
            raise Mismatch(msg)
        soft.append(msg)
    for i, (e, a) in enumerate(zip(e_leaves, a_leaves)):
        where = f"{what}[{i}]" if len(e_leaves) > 1 else what
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise Mismatch(f"{where}: got {type(a).__name__}, eager a Tensor")
            if a.shape != e.shape:
                raise Mismatch(f"{where}: shape {tuple(a.shape)} != eager {tuple(e.shape)}")
            if a.dtype != e.dtype:
                raise Mismatch(f"{where}: dtype {a.dtype} != eager {e.dtype}")
            if a.layout != e.layout:
                raise Mismatch(f"{where}: layout {a.layout} != eager {e.layout}")
            if requires_grad and a.requires_grad != e.requires_grad:
                raise Mismatch(f"{where}: requires_grad {a.requires_grad} != eager {e.requires_grad}")
            if values:
                kw = {"rtol": tol[0], "atol": tol[1]} if tol else {}
                try:
                    torch.testing.assert_close(
                        a.detach().resolve_conj().resolve_neg(),
                        e.detach().resolve_conj().resolve_neg(),
                        equal_nan=True,
                        check_stride=False,
                        **kw,
                    )
                except AssertionError as err:
                    msg = " ".join(str(err).split("\n")[:3])
                    raise Mismatch(f"{where}: values differ: {msg}") from None
        elif isinstance(a, torch.Tensor):
            raise Mismatch(f"{where}: got a Tensor, eager {type(e).__name__}")
        elif values and not _same_scalar(e, a):
            raise Mismatch(f"{where}: {a!r} != eager {e!r}")


def _same_scalar(e: Any, a: Any) -> bool:
    if isinstance(e, float) and isinstance(a, float) and math.isnan(e) and math.isnan(a):
        return True
    try:
        return bool(e == a)
    except Exception:
        return e is a


def _spec_str(spec) -> str:
    s = " ".join(str(spec).split())
    return s if len(s) < 80 else s[:77] + "..."


def _compare_grads(e_grads: list, a_grads: list, tol, values: bool) -> None:
    if len(e_grads) != len(a_grads):
        raise Mismatch(f"grads: {len(a_grads)} != eager {len(e_grads)}")
    for i, (e, a) in enumerate(zip(e_grads, a_grads)):
        where = f"grad[{i}]"
        if e is None and a is None:
            continue
        if e is None or a is None:
            present = a if e is None else e
            if values and not bool((present == 0).all()):
                raise Mismatch(f"{where}: {'None' if a is None else 'nonzero'} != eager {'None' if e is None else 'nonzero'}")
            continue
        compare(e, a, where, tol, values=values, requires_grad=False)


def _same_inputs(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        x = _snapshot(x)
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        x, y = x.resolve_conj().resolve_neg(), y.resolve_conj().resolve_neg()
        if not torch.equal(x, y) and not (
            (x.is_floating_point() or x.is_complex()) and torch.allclose(x, y, equal_nan=True, rtol=0, atol=0)
        ):
            return False
    return True


def _outputs_equal(a: Any, b: Any) -> bool:
    try:
        compare(a, b, "out", (0.0, 0.0), values=True, requires_grad=False)
        return True
    except Exception:
        return False


# --------------------------------------------------------------------------------------------
# Running one (op variant, dtype)


@dataclasses.dataclass
class Outcome:
    key: str
    impl: str
    outcome: str
    reason: str = ""
    tested: int = 0  # samples compared
    seconds: float = 0.0

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def _sample_numel(sample) -> int:
    return sum(t.numel() for t in _tensors((sample.input, sample.args, sample.kwargs)))


def run_variant(
    variant: Variant,
    dtype: torch.dtype,
    impls: dict[str, Callable[[Callable], Callable]],
    max_samples: int = MAX_SAMPLES,
) -> dict[str, Outcome]:
    """Run every implementation on one (op variant, dtype); one Outcome per implementation."""
    key = key_of(variant, dtype)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = _run_variant(variant, dtype, impls, max_samples)
        except Exception as e:  # a bug in the harness or in sample generation: say so
            result = {name: (UNSUPPORTED, f"harness: {first_line(e)}", 0) for name in impls}
    seconds = (time.perf_counter() - t0) / max(1, len(impls))
    return {
        name: Outcome(key, name, outcome, reason, tested, round(seconds, 3))
        for name, (outcome, reason, tested) in result.items()
    }


def _run_variant(variant, dtype, impls, max_samples):
    op = variant.op
    if dtype not in op.supported_dtypes("cpu"):
        return {name: (UNSUPPORTED, f"dtype {dtype_name(dtype)} not supported by the op", 0) for name in impls}
    if variant.inplace and variant.op.inplace_variant is None:
        return {name: (UNSUPPORTED, "no in-place variant", 0) for name in impls}

    ref_samples = make_samples(variant, dtype, max_samples)
    impl_samples = {name: make_samples(variant, dtype, max_samples) for name in impls}
    tol = _tolerance(op, dtype)
    want_grads = variant.supports_autograd
    per_impl: dict[str, list] = {name: [] for name in impls}  # (sample idx, outcome, reason)
    eager_skips: list[str] = []

    for i, sample in enumerate(ref_samples):
        if _sample_numel(sample) > MAX_SAMPLE_NUMEL:
            eager_skips.append(f"s{i}: sample too large")
            continue
        ref_p = prepare(variant, sample)
        ref_before = [_snapshot(t) for t in ref_p.leaves]  # the call may mutate them
        try:
            ref = run_side(ref_p, ref_p.fn, _RUN_SEED, want_grads, detect_rng=True)
        except _Stage as st:
            eager_skips.append(f"s{i}: eager {st.stage}: {first_line(st.exc)}")
            continue
        # Values that depend on the RNG (dropout, bernoulli, ...; OpInfo's wrapper_set_seed
        # reseeds inside the op, which no trace can replay) or on uninitialized memory
        # (empty_like, ...) cannot be compared: only metadata is.
        values = not (op.has_nondeterministic_output or ref.seeded)
        grads_ok = ref.grads is not None

        for name, compile_fn in impls.items():
            samples = impl_samples[name]
            if i >= len(samples):
                per_impl[name].append((i, UNSUPPORTED, "sample generation is not deterministic"))
                continue
            p = prepare(variant, samples[i])
            if not _same_inputs(p.leaves, ref_before):
                per_impl[name].append((i, UNSUPPORTED, "sample generation is not deterministic"))
                continue
            check = _check_sample_isolated if _needs_isolation(p) else _check_sample
            per_impl[name].append((i, *check(p, ref, compile_fn, tol, values, grads_ok)))

    result = {}
    for name in impls:
        recs = per_impl[name]
        tested = [r for r in recs if r[1] != UNSUPPORTED]
        fails = [r for r in recs if r[1] == FAIL]
        errors = [r for r in recs if r[1] == ERROR]
        if fails:
            i, _, reason = fails[0]
            result[name] = (FAIL, f"s{i}/{reason}", len(tested))
        elif errors:
            i, _, reason = errors[0]
            result[name] = (ERROR, f"s{i}/{reason}", len(tested))
        elif tested:
            result[name] = (PASS, "", len(tested))
        else:
            why = eager_skips[0] if eager_skips else (recs[0][2] if recs else "no samples")
            result[name] = (UNSUPPORTED, why, 0)
    return result


def _needs_isolation(p: Prepared) -> bool:
    """Samples with sparse (non-strided) inputs have aborted the whole process (C++ terminate)."""
    return any(t.layout != torch.strided for t in p.leaves)


def _check_sample_isolated(*args) -> tuple[str, str]:
    """:func:`_check_sample` in a forked child, so that a crash is an outcome, not the end."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            # The child may abort: keep its fatal-error dumps out of the parent's output.
            import faulthandler

            faulthandler.disable()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            torch.set_num_threads(1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = _check_sample(*args)
            os.write(w, json.dumps(res).encode())
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if chunks:
        outcome, reason = json.loads(b"".join(chunks))
        return outcome, reason
    how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
    return ERROR, f"crash: the process died ({how})"


def _check_sample(p: Prepared, ref: SideResult, compile_fn, tol, values: bool, grads_ok: bool):
    """(outcome, reason) of one sample for one implementation."""
    try:
        compiled = compile_fn(p.fn)
    except Exception as e:
        return ERROR, f"compile: {first_line(e)}"
    cotangents = None
    if grads_ok:
        cotangents = [c.clone() for c in ref.cotangents]
    try:
        got = run_side(p, compiled, _RUN_SEED, want_grads=grads_ok, cotangents=cotangents)
    except _Stage as st:
        return ERROR, f"{st.stage}: {first_line(st.exc)}"
    except Exception as e:
        return ERROR, f"forward: {first_line(e)}"
    soft: list[str] = []  # container-kind differences, reported only if nothing worse is wrong
    try:
        compare(ref.out, got.out, "out", tol, values=values, soft=soft)
        if got.aliases != ref.aliases:
            raise Mismatch(f"out: aliases inputs {got.aliases} != eager {ref.aliases}")
        if ref.mutated_meta is not None:
            if got.mutated_meta != ref.mutated_meta:
                raise Mismatch(
                    f"mutated input: (shape, stride, requires_grad) {got.mutated_meta} != eager {ref.mutated_meta}"
                )
            compare(ref.mutated_after, got.mutated_after, "mutated input", tol, values=values, requires_grad=False)
            if got.returns_mutated != ref.returns_mutated:
                raise Mismatch(f"in-place op returned the input object: {got.returns_mutated} != eager {ref.returns_mutated}")
        compare(ref.inputs_after, got.inputs_after, "inputs after the call", tol, values=values, requires_grad=False)
        if len(got.grad_outs) != len(ref.grad_outs):
            raise Mismatch(f"outputs requiring grad: {len(got.grad_outs)} != eager {len(ref.grad_outs)}")
    except Mismatch as m:
        return FAIL, f"forward: {m}"
    if grads_ok:
        if got.grad_error is not None:
            return ERROR, f"backward: {first_line(got.grad_error)}"
        try:
            _compare_grads(ref.grads, got.grads, tol, values)
        except Mismatch as m:
            return FAIL, f"backward: {m}"
    if soft:
        return FAIL, f"forward: {soft[0]}"
    return PASS, ""


# --------------------------------------------------------------------------------------------
# Running many


def _worker_init() -> None:
    torch.set_num_threads(1)


_WORKER_IMPLS: dict | None = None
_WORKER_VARIANTS: list | None = None


def _worker_run(job: tuple[int, str]) -> list[Outcome]:
    global _WORKER_IMPLS
    idx, dname = job
    if _WORKER_IMPLS is None:
        _WORKER_IMPLS = load_impls(_WORKER_NAMES)
    res = run_variant(_WORKER_VARIANTS[idx], getattr(torch, dname), _WORKER_IMPLS)
    return list(res.values())


_WORKER_NAMES: tuple = ()


def run_sweep(
    variants: Sequence[Variant],
    impl_names: Sequence[str] = IMPL_NAMES,
    dtypes: Sequence[torch.dtype] = DTYPES,
    jobs: int = 1,
    progress: Callable[[str], None] | None = None,
) -> list[Outcome]:
    """Run every (variant, dtype) through every implementation; outcomes in a stable order."""
    global _WORKER_VARIANTS, _WORKER_NAMES
    load_impls(impl_names)  # fail loudly now if an implementation cannot be imported
    jobs_list = [(i, dtype_name(d)) for i in range(len(variants)) for d in dtypes]
    results: list[Outcome] = []
    if jobs <= 1:
        impls = load_impls(impl_names)
        for n, (i, dname) in enumerate(jobs_list):
            res = run_variant(variants[i], getattr(torch, dname), impls)
            results.extend(res.values())
            if progress:
                progress(_progress_line(n, len(jobs_list), res))
    else:
        _WORKER_VARIANTS, _WORKER_NAMES = list(variants), tuple(impl_names)
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(jobs, initializer=_worker_init, maxtasksperchild=50) as pool:
            for n, res in enumerate(pool.imap(_worker_run, jobs_list, chunksize=1)):
                results.extend(res)
                if progress:
                    progress(_progress_line(n, len(jobs_list), {o.impl: o for o in res}))
    return results


def _progress_line(n: int, total: int, res: dict[str, Outcome]) -> str:
    first = next(iter(res.values()))
    outs = " ".join(f"{name}={o.outcome}" for name, o in res.items())
    return f"[{n + 1}/{total}] {first.key}: {outs} ({first.seconds:.2f}s)"


# --------------------------------------------------------------------------------------------
# Expected failures


def load_expected(path: Path = EXPECTED_PATH) -> dict[str, dict]:
    """``{key: {"outcome": ..., "reason": ...}}`` for each (op, dtype) aotgrad does not pass."""
    if not path.exists():
        return {}
    return json.loads(path.read_text())["failures"]


def write_expected(outcomes: Iterable[Outcome], path: Path = EXPECTED_PATH, keys_run: Iterable[str] = ()) -> dict:
    """Replace the entries of ``keys_run`` with these aotgrad outcomes; keep the others."""
    failures = load_expected(path)
    for k in keys_run:
        failures.pop(k, None)
    for o in outcomes:
        if o.impl == "aotgrad" and o.outcome in (FAIL, ERROR):
            failures[o.key] = {"outcome": o.outcome, "reason": o.reason}
    doc = {
        "_about": (
            "Each (op variant|dtype) of the OpInfo sweep that aotgrad does not pass yet, with the "
            "first line of its reason. Regenerate with `python -m tests.opinfo.sweep "
            "--write-expected`; tests/opinfo/test_opinfo.py fails on a regression from pass and on an "
            "entry here that now passes."
        ),
        "torch_version": torch.__version__,
        "max_samples": MAX_SAMPLES,
        "failures": dict(sorted(failures.items())),
    }
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    return failures


def verdict(outcome: Outcome, expected: dict[str, dict]) -> str | None:
    """None when ``outcome`` is what expected_failures.json says; otherwise why it is not."""
    exp = expected.get(outcome.key)
    if exp is None:
        if outcome.outcome in (PASS, UNSUPPORTED):
            return None
        return f"REGRESSION {outcome.key}: {outcome.outcome}: {outcome.reason} (not in expected_failures.json)"
    if outcome.outcome == exp["outcome"]:
        return None
    if outcome.outcome in (PASS, UNSUPPORTED):
        return (
            f"UNEXPECTED {outcome.outcome.upper()} {outcome.key}: listed as {exp['outcome']} ({exp['reason']}); "
            "remove it from expected_failures.json (python -m tests.opinfo.sweep --write-expected)"
        )
    return f"CHANGED {outcome.key}: {outcome.outcome}: {outcome.reason} (listed as {exp['outcome']}: {exp['reason']})"


# --------------------------------------------------------------------------------------------
# Reports


def summarize(outcomes: Sequence[Outcome]) -> dict:
    by_impl: dict[str, dict[str, Outcome]] = collections.defaultdict(dict)
    for o in outcomes:
        by_impl[o.impl][o.key] = o
    counts = {name: dict(collections.Counter(o.outcome for o in res.values())) for name, res in by_impl.items()}
    diffs = []
    if "aotgrad" in by_impl and "torch" in by_impl:
        ours, theirs = by_impl["aotgrad"], by_impl["torch"]
        for k in ours:
            if k in theirs and ours[k].outcome != theirs[k].outcome:
                diffs.append(
                    {
                        "key": k,
                        "aotgrad": ours[k].outcome,
                        "aotgrad_reason": ours[k].reason,
                        "torch": theirs[k].outcome,
                        "torch_reason": theirs[k].reason,
                    }
                )
    return {"counts": counts, "differ": diffs, "by_impl": by_impl}


def cause_of(reason: str) -> str:
    """A coarse failure cause for grouping: the reason without sample index, numbers, names."""
    r = re.sub(r"^s\d+/", "", reason)
    r = re.sub(r"\[[0-9]+\]", "[i]", r)
    r = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", r)
    r = re.sub(r"\(.*?\)", "(…)", r)
    return r[:160]


def format_report(outcomes: Sequence[Outcome], wall: float | None = None) -> str:
    s = summarize(outcomes)
    lines = []
    total = {name: sum(c.values()) for name, c in s["counts"].items()}
    for name, c in s["counts"].items():
        parts = ", ".join(f"{k} {c.get(k, 0)}" for k in OUTCOMES)
        lines.append(f"{name:8s}: {c.get(PASS, 0)}/{total[name]} (op variant, dtype) pass  [{parts}]")
    if wall is not None:
        lines.append(f"wall time: {wall:.0f}s")
    diffs = s["differ"]
    worse = [d for d in diffs if d["torch"] == PASS]
    better = [d for d in diffs if d["aotgrad"] == PASS]
    other = [d for d in diffs if d not in worse and d not in better]
    if worse:
        lines.append(f"\n{len(worse)} where torch passes and aotgrad does not, by cause:")
        groups = collections.defaultdict(list)
        for d in worse:
            groups[(d["aotgrad"], cause_of(d["aotgrad_reason"]))].append(d)
        for (outcome, cause), ds in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  [{len(ds)}] {outcome}: {cause}")
            for d in ds:
                lines.append(f"      {d['key']}: {d['aotgrad_reason']}")
    if better:
        lines.append(f"\n{len(better)} where aotgrad passes and torch does not:")
        for d in better:
            lines.append(f"  {d['key']}: torch {d['torch']}: {d['torch_reason']}")
    if other:
        lines.append(f"\n{len(other)} where both do not pass, differently:")
        for d in other:
            lines.append(f"  {d['key']}: aotgrad {d['aotgrad']}: {d['aotgrad_reason']} | torch {d['torch']}: {d['torch_reason']}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Command line


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.opinfo.sweep", description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", action="store_true", help="run aotgrad and torch, print counts and differing ops")
    ap.add_argument("--json", metavar="PATH", help="with --report: also write every outcome and the summary as JSON")
    ap.add_argument("--write-expected", action="store_true", help="rewrite expected_failures.json from aotgrad's outcomes")
    ap.add_argument("--check", action="store_true", help="compare aotgrad's outcomes with expected_failures.json")
    ap.add_argument("--impl", action="append", choices=IMPL_NAMES, help="implementations to run (default: both for --report)")
    ap.add_argument("--slice", action="store_true", help=f"only the default CI slice (every {SLICE_STEP}-th OpInfo)")
    ap.add_argument("--ops", metavar="REGEX", help="only variants whose name matches (re.search)")
    ap.add_argument("--dtype", action="append", choices=[dtype_name(d) for d in DTYPES])
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (fork); default 1")
    ap.add_argument(
        "--from-json",
        metavar="PATH",
        help="with --write-expected/--check/--report: take the outcomes from an earlier --json report instead of running",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print one line per (op variant, dtype)")
    args = ap.parse_args(argv)
    if not (args.report or args.write_expected or args.check):
        ap.error("say what to do: --report, --write-expected and/or --check")

    variants = slice_variants() if args.slice else all_variants()
    if args.ops:
        variants = [v for v in variants if re.search(args.ops, v.name)]
    dtypes = [getattr(torch, d) for d in args.dtype] if args.dtype else list(DTYPES)
    impls = args.impl or (list(IMPL_NAMES) if args.report else ["aotgrad"])
    if (args.write_expected or args.check) and "aotgrad" not in impls:
        impls = ["aotgrad", *impls]

    progress = (lambda line: print(line, file=sys.stderr, flush=True)) if args.verbose else None
    t0 = time.perf_counter()
    if args.from_json:
        doc = json.loads(Path(args.from_json).read_text())
        wanted = {key_of(v, d) for v in variants for d in dtypes}
        outcomes = [Outcome(**o) for o in doc["outcomes"] if o["key"] in wanted and o["impl"] in impls]
        wall = doc.get("wall_seconds", 0.0)
    else:
        outcomes = run_sweep(variants, impls, dtypes, jobs=args.jobs, progress=progress)
        wall = time.perf_counter() - t0
    rc = 0
    if args.report:
        print(format_report(outcomes, wall))
        if args.json:
            s = summarize(outcomes)
            Path(args.json).write_text(
                json.dumps(
                    {
                        "torch_version": torch.__version__,
                        "max_samples": MAX_SAMPLES,
                        "wall_seconds": round(wall, 1),
                        "variants": len(variants),
                        "dtypes": [dtype_name(d) for d in dtypes],
                        "counts": s["counts"],
                        "differ": s["differ"],
                        "outcomes": [o.as_json() for o in outcomes],
                    },
                    indent=1,
                    ensure_ascii=False,
                )
                + "\n"
            )
    if args.check:
        expected = load_expected()
        problems = [m for o in outcomes if o.impl == "aotgrad" for m in [verdict(o, expected)] if m]
        for m in problems:
            print(m)
        print(f"check: {len(problems)} differences from expected_failures.json")
        rc = 1 if problems else 0
    if args.write_expected:
        keys = [o.key for o in outcomes if o.impl == "aotgrad"]
        failures = write_expected(outcomes, keys_run=keys)
        print(f"wrote {EXPECTED_PATH.relative_to(REPO)}: {len(failures)} entries (wall {wall:.0f}s)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
