"""Differential harness: run one program eagerly and through an implementation, compare.

A *case* is plain data, so a failure can be pasted into a regression test:

- ``source``: Python text defining ``def f(...)``; it is exec'd with ``torch`` in scope.
- ``inputs``: ``{"bases": [...], "args": [...]}``.  Each base is a leaf tensor
  ``{"shape": [..], "dtype": "float32", "rg": bool}`` filled with seeded random values.
  Each arg is one of

  * ``{"kind": "tensor", "base": i, "expr": "x.t()"}`` -- ``expr`` is evaluated with
    ``x`` bound to base ``i`` (``"x"`` passes the base itself; two args on one base alias);
  * ``{"kind": "same", "arg": j}`` -- the very same object as arg ``j``;
  * ``{"kind": "value", "value": 3}`` -- a non-tensor argument (int/float/bool/None/str).
- ``post``: ``[(out_index, "mul_(2)"), ...]`` -- in-place ops applied to returned outputs after
  the call (``o`` names the output inside the text).
- ``modes``: grad mode of each successive call of the *same* compiled function, e.g.
  ``["grad", "no_grad"]``; every call gets fresh inputs built from the same seed.
- ``seed``: seeds input values and backward cotangents.

For every call both sides get identical fresh inputs; the harness records everything a user
can observe after each stage (call, post-call mutation of outputs, backward) and reports the
differences.  An exception is an observation too: if eager raises at some stage the
implementation must raise at that same stage (any exception type), and vice versa; later
stages are then skipped.

An *impl* is ``impl(fn) -> compiled_fn``; see :func:`default_impl`.
"""

from __future__ import annotations

import dataclasses
import itertools
import linecache
import logging
import os
import re
import sys
import textwrap
import warnings
from typing import Any, Callable

import torch

Impl = Callable[[Callable], Callable]

_STAGES = ("call", "post", "backward")


# --------------------------------------------------------------------------- impls


def nop_compiler(gm, example_inputs):
    return gm


def torch_impl(fn: Callable) -> Callable:
    """torch's own AOT Autograd with a no-op compiler: the comparison side."""
    from torch._functorch.aot_autograd import aot_function  # comparison side only

    return aot_function(fn, nop_compiler)


# torch returns a list where eager returns a tuple (the design guide requires a tuple); do not
# report that for the comparison side, or every case would differ.
torch_impl.lenient = frozenset({"tuple_vs_list"})


def import_aotgrad():
    """``import aotgrad``, falling back to this checkout's ``src/`` when not installed."""
    try:
        import aotgrad
    except ImportError:
        src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
        sys.path.insert(0, os.path.abspath(src))
        import aotgrad
    return aotgrad


def aotgrad_impl(fn: Callable) -> Callable:
    """The implementation under test: ``aotgrad.aot_function(fn, nop)``."""
    aotgrad = import_aotgrad()
    from aotgrad.compilers import nop

    return aotgrad.aot_function(fn, nop)


def aotgrad_dynamic_impl(fn: Callable) -> Callable:
    """``aotgrad.aot_function(fn, nop, dynamic=True)``; cases also run on other sizes."""
    aotgrad = import_aotgrad()
    from aotgrad.compilers import nop

    return aotgrad.aot_function(fn, nop, dynamic=True)


#: the second call of a dynamic impl runs on inputs whose sizes of at least 2 grew by this
aotgrad_dynamic_impl.resize = 1

IMPLS: dict[str, Impl] = {"torch": torch_impl, "aotgrad": aotgrad_impl, "aotgrad-dynamic": aotgrad_dynamic_impl}


def default_impl_name() -> str:
    return os.environ.get("AOTGRAD_FUZZ_IMPL", "aotgrad")


def default_impl() -> Impl:
    """``AOTGRAD_FUZZ_IMPL`` = ``aotgrad`` (default) or ``torch``."""
    return IMPLS[default_impl_name()]


# --------------------------------------------------------------------------- cases


@dataclasses.dataclass
class Case:
    source: str
    inputs: dict
    post: list = dataclasses.field(default_factory=list)
    modes: list = dataclasses.field(default_factory=lambda: ["grad"])
    seed: int = 0

    def as_test(self, name: str = "test_case", reason: str | None = None) -> str:
        """Source of a pytest regression test reproducing this case."""
        deco = ""
        if reason is not None:
            deco = f"@pytest.mark.xfail(strict=True, reason={reason!r})\n"
        body = self.source.rstrip("\n")
        return (
            f"{deco}def {name}():\n"
            f"    check_case(\n"
            f"        source='''\n{body}\n''',\n"
            f"        inputs={self.inputs!r},\n"
            f"        post={self.post!r},\n"
            f"        modes={self.modes!r},\n"
            f"        seed={self.seed!r},\n"
            f"    )\n"
        )


@dataclasses.dataclass
class Result:
    diffs: list[str]
    eager_errors: dict[str, str]  # "call[0]" -> "RuntimeError: ..."
    impl_errors: dict[str, str]
    #: entries the impl compiled (an aotgrad impl), and the calls made
    entries: int = 0
    calls: int = 0

    @property
    def ok(self) -> bool:
        return not self.diffs

    @property
    def signature(self) -> str:
        """A short, index-free name for the failure, to group failures.

        That of the first difference, except that wrong values win: a case whose first
        difference is, say, a stride but whose values also differ is a wrong-values case (the
        most important kind), and grouping and minimization must not file it under strides."""
        if not self.diffs:
            return "ok"
        sigs = [signature_of(d) for d in self.diffs]
        return next((s for s in sigs if s.endswith(" values")), sigs[0])

    def report(self) -> str:
        lines = list(self.diffs)
        for k, v in self.eager_errors.items():
            lines.append(f"eager raised at {k}: {v}")
        for k, v in self.impl_errors.items():
            lines.append(f"impl raised at {k}: {v}")
        return "\n".join(lines)


def signature_of(diff: str) -> str:
    head, _, rest = diff.partition(": ")
    head = re.sub(r"\[\d+\]", "", head)
    head = re.sub(r"\d+", "N", head)
    if "raised" in rest or "skipped" in rest:
        rest = re.sub(r"\d+", "N", rest)
        rest = re.sub(r"\[[^\]]*\]", "[..]", rest)
        return f"{head}: {rest[:90]}"
    if rest.startswith("values differ"):
        return f"{head} values"
    if rest.startswith("eager is"):
        return f"{head} container"
    if " items vs impl " in rest:
        return f"{head} length"
    if rest.startswith("eager ") and head.rsplit(".", 1)[-1] not in _RECORD_KEYS:
        return f"{head} kind"  # tensor vs non-tensor, etc.
    return head


_RECORD_KEYS = {
    "same_object_as", "shape", "stride", "storage_offset", "dtype", "requires_grad", "is_leaf",
    "has_grad_fn", "is_view", "_base", "storage",
}


# --------------------------------------------------------------------------- inputs

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "complex64": torch.complex64}


def resized_spec(spec: dict, k: int) -> dict:
    """``spec`` with every base size of at least 2 grown by ``k`` (equal sizes stay equal;
    the args' expressions are kept, so some may no longer build)."""
    bases = [{**b, "shape": [d + k if d >= 2 else d for d in b["shape"]]} for b in spec["bases"]]
    return {**spec, "bases": bases}


def build_inputs(spec: dict, seed: int) -> tuple[list[torch.Tensor], list[Any]]:
    """Fresh ``(bases, args)`` for ``spec``; identical values for identical seeds."""
    gen = torch.Generator().manual_seed(seed)
    bases = []
    with torch.enable_grad():
        for b in spec["bases"]:
            t = torch.randn(b["shape"], generator=gen, dtype=_DTYPES[b["dtype"]])
            if b["rg"]:
                t.requires_grad_()
            bases.append(t)
        args: list[Any] = []
        for a in spec["args"]:
            kind = a["kind"]
            if kind == "tensor":
                args.append(eval(a["expr"], {"torch": torch, "x": bases[a["base"]]}))
            elif kind == "same":
                args.append(args[a["arg"]])
            elif kind == "value":
                args.append(a["value"])
            else:
                raise ValueError(f"unknown arg kind {kind!r}")
    return bases, args


_counter = itertools.count()


def load_program(source: str, name: str = "f") -> Callable:
    """exec ``source`` (with its lines registered in linecache, for tracebacks)."""
    source = textwrap.dedent(source).strip("\n") + "\n"
    filename = f"<fuzz-program-{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns: dict[str, Any] = {"torch": torch}
    exec(compile(source, filename, "exec"), ns)
    return ns[name]


# --------------------------------------------------------------------------- observing


def _err(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:300] if msg else ''}"


class _Known:
    """Tensors a user can name (bases, args, outputs), for identity/storage/_base maps."""

    def __init__(self, named: list[tuple[str, Any]]):
        self.named = [(n, t) for n, t in named if isinstance(t, torch.Tensor)]
        self.storage_class: dict[int, str] = {}
        for n, t in self.named:
            key = self._skey(t)
            if key is not None:
                self.storage_class.setdefault(key, n)

    @staticmethod
    def _skey(t: torch.Tensor):
        try:
            st = t.untyped_storage()
        except Exception:
            return None
        if st.nbytes() == 0:
            return None
        return st.data_ptr()

    def ident(self, t) -> str | None:
        for n, u in self.named:
            if u is t:
                return n
        return None

    def storage(self, t: torch.Tensor) -> str:
        key = self._skey(t)
        if key is None:
            return "empty"
        return self.storage_class.get(key, "fresh")

    def base(self, t: torch.Tensor) -> str | None:
        b = t._base
        if b is None:
            return None
        return self.ident(b) or "other"


def _safe(fn):
    """An attribute read can itself raise (``grad_fn`` of an invalidated multi-output view)."""
    try:
        return fn()
    except Exception as e:
        return "raises " + _err(e)


def _tensor_record(t: torch.Tensor, known: _Known) -> dict:
    return {
        "same_object_as": known.ident(t),
        "shape": tuple(t.shape),
        "stride": tuple(t.stride()),
        "storage_offset": t.storage_offset(),
        "dtype": t.dtype,
        "requires_grad": _safe(lambda: t.requires_grad),
        "is_leaf": _safe(lambda: t.is_leaf),
        "has_grad_fn": _safe(lambda: t.grad_fn is not None),
        "is_view": t._is_view(),
        "_base": known.base(t),
        "storage": known.storage(t),
        "value": t.detach().clone(),
    }


def _describe(obj: Any, known: _Known) -> Any:
    if isinstance(obj, torch.Tensor):
        return _tensor_record(obj, known)
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__, [_describe(o, known) for o in obj])
    if isinstance(obj, dict):
        return ("dict", {k: _describe(v, known) for k, v in obj.items()})
    return ("value", repr(obj))


def _flat_outputs(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _flat_outputs(o)]
    if isinstance(out, dict):
        return [x for v in out.values() for x in _flat_outputs(v)]
    return [out]


def _known_for(bases, args, outs) -> _Known:
    named = [(f"base{i}", b) for i, b in enumerate(bases)]
    named += [(f"arg{i}", a) for i, a in enumerate(args)]
    named += [(f"out{i}", o) for i, o in enumerate(outs)]
    return _Known(named)


def _observe(bases, args, out) -> dict:
    outs = _flat_outputs(out)
    known = _known_for(bases, args, outs)
    obs = {f"base{i}": _tensor_record(b, known) for i, b in enumerate(bases)}
    for i, a in enumerate(args):
        obs[f"arg{i}"] = _describe(a, known)
    obs["output"] = _describe(out, known)
    return obs


def _observe_grads(bases, args) -> dict:
    known = _known_for(bases, args, [])
    obs = {}
    for i, b in enumerate(bases):
        obs[f"base{i}.grad"] = None if b.grad is None else _tensor_record(b.grad, known)
    return obs


# --------------------------------------------------------------------------- comparing


def _tol(dtype):
    if dtype == torch.float64:
        return 1e-7, 1e-7
    if dtype in (torch.float32, torch.complex64):
        return 1e-4, 1e-5
    return 0.0, 0.0


def _compare(a: Any, b: Any, path: str, diffs: list[str], lenient=frozenset()) -> None:
    if isinstance(a, dict) and isinstance(b, dict) and "value" in a and "shape" in a:
        for k in a:
            if k == "value":
                continue
            if a[k] != b.get(k):
                diffs.append(f"{path}.{k}: eager {a[k]!r} vs impl {b.get(k)!r}")
        if a["shape"] != b["shape"] or a["dtype"] != b["dtype"]:
            return
        va, vb = a["value"], b["value"]
        if va.is_floating_point() or va.is_complex():
            rtol, atol = _tol(va.dtype)
            same = torch.allclose(va, vb, rtol=rtol, atol=atol, equal_nan=True)
        else:
            same = torch.equal(va, vb)
        if not same:
            err = (va.double() - vb.double()).abs().nan_to_num(float("inf")).max().item()
            diffs.append(f"{path}: values differ (max abs err {err:.3g})\n  eager {va}\n  impl  {vb}")
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k not in b:
                diffs.append(f"{path}.{k}: missing on impl side")
            else:
                _compare(a[k], b[k], f"{path}.{k}" if path else k, diffs, lenient)
        return
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == 2 and len(b) == 2:
        kinds = {a[0], b[0]}
        if a[0] != b[0] and not (kinds == {"tuple", "list"} and "tuple_vs_list" in lenient):
            diffs.append(f"{path}: eager is {a[0]} vs impl {b[0]}")
            return
        if a[0] in ("tuple", "list"):
            if len(a[1]) != len(b[1]):
                diffs.append(f"{path}: eager has {len(a[1])} items vs impl {len(b[1])}")
                return
            for i, (x, y) in enumerate(zip(a[1], b[1])):
                _compare(x, y, f"{path}[{i}]", diffs, lenient)
            return
        if a[0] == "dict":
            _compare(a[1], b[1], path, diffs, lenient)
            return
        if a != b:
            diffs.append(f"{path}: eager {a[1]} vs impl {b[1]}")
        return
    if type(a) is not type(b):
        kind = lambda x: "tensor" if isinstance(x, dict) and "shape" in x else type(x).__name__
        diffs.append(f"{path}: eager {kind(a)} vs impl {kind(b)}")
        return
    if a != b:
        diffs.append(f"{path}: eager {a!r} vs impl {b!r}")


# --------------------------------------------------------------------------- running


def _cotangents(outs: list[Any], seed: int) -> list[tuple[int, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed + 7919)
    cots = []
    for i, o in enumerate(outs):
        if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point():
            cots.append((i, torch.randn(o.shape, generator=gen, dtype=o.dtype)))
    return cots


def _one_side(fn: Callable, case: Case, call_index: int, mode: str, cots_from=None, inputs: dict | None = None):
    """Run one call of ``fn`` with fresh inputs (``inputs``: another spec than the case's);
    returns (observations, errors, cots)."""
    obs: dict[str, Any] = {}
    errors: dict[str, str] = {}
    bases, args = build_inputs(case.inputs if inputs is None else inputs, case.seed)
    tag = f"[{call_index}]"
    ctx = torch.no_grad() if mode == "no_grad" else torch.enable_grad()
    try:
        with ctx:
            out = fn(*args)
    except Exception as e:
        errors["call" + tag] = _err(e)
        return obs, errors, None
    obs["call" + tag] = _observe(bases, args, out)

    outs = _flat_outputs(out)
    try:
        with torch.enable_grad():
            for idx, op in case.post:
                if idx < len(outs) and isinstance(outs[idx], torch.Tensor):
                    exec("o." + op, {"torch": torch, "o": outs[idx]})
    except Exception as e:
        errors["post" + tag] = _err(e)
        return obs, errors, None
    if case.post:
        obs["post" + tag] = _observe(bases, args, out)

    # Cotangents follow eager's outputs (requires_grad / shape); the impl gets the same ones.
    cots = _cotangents(outs, case.seed + call_index) if cots_from is None else cots_from
    if cots:
        try:
            tensors = [outs[i] for i, _ in cots]
            with torch.enable_grad():
                torch.autograd.backward(tensors, [c for _, c in cots])
        except Exception as e:
            errors["backward" + tag] = _err(e)
            return obs, errors, cots
        obs["backward" + tag] = _observe_grads(bases, args)
    return obs, errors, cots


def run_case(
    source: str,
    inputs_spec: dict,
    impl: Impl | None = None,
    *,
    post=(),
    modes=("grad",),
    seed: int = 0,
    strict_stage: bool = False,
) -> Result:
    """Run ``source`` eagerly and through ``impl(f)``; return the observed differences."""
    case = Case(source, inputs_spec, list(post), list(modes), seed)
    return run(case, impl, strict_stage=strict_stage)


def run(case: Case, impl: Impl | None = None, *, strict_stage: bool = False) -> Result:
    """Compare eager and ``impl`` on ``case``.

    Raising must match per call: if eager raises anywhere in a call (the call itself, the
    post-call mutation, backward), the impl must raise somewhere in that call too, and vice
    versa.  With ``strict_stage`` it must raise at the same stage; by default raising earlier
    is accepted (an AOT system may reject at compile time what eager rejects in backward),
    since the stages before the first raise are still compared.
    """
    impl = impl or default_impl()
    lenient = getattr(impl, "lenient", frozenset())
    # FakeTensor logs every failed meta kernel at ERROR level; eager-raises cases would spam.
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    old_level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    try:
        return _run(case, impl, lenient, strict_stage)
    finally:
        fake_log.setLevel(old_level)


def _run(case: Case, impl: Impl, lenient, strict_stage: bool) -> Result:
    diffs: list[str] = []
    eager_errors: dict[str, str] = {}
    impl_errors: dict[str, str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager_fn = load_program(case.source)
        impl_fn = None
        compile_error = None
        try:
            impl_fn = impl(load_program(case.source))
        except Exception as e:
            compile_error = _err(e)
        calls = [(mode, None) for mode in case.modes]
        resize = getattr(impl, "resize", 0)
        if resize:
            grown = resized_spec(case.inputs, resize)
            try:
                build_inputs(grown, case.seed)
                calls.append((case.modes[0], grown))
            except Exception:  # noqa: BLE001 - the args are written for one size
                pass
        for i, (mode, inputs) in enumerate(calls):
            e_obs, e_err, cots = _one_side(eager_fn, case, i, mode, inputs=inputs)
            if compile_error is not None:
                i_obs, i_err = {}, {f"call[{i}]": "(compile) " + compile_error}
            else:
                i_obs, i_err, _ = _one_side(impl_fn, case, i, mode, cots_from=cots or [], inputs=inputs)
            eager_errors.update(e_err)
            impl_errors.update(i_err)
            e_first = next((s for s in _STAGES if f"{s}[{i}]" in e_err), None)
            i_first = next((s for s in _STAGES if f"{s}[{i}]" in i_err), None)
            if (e_first is None) != (i_first is None):
                if e_first is None:
                    key = f"{i_first}[{i}]"
                    diffs.append(f"{key}: impl raised, eager did not: {i_err[key]}")
                else:
                    key = f"{e_first}[{i}]"
                    diffs.append(f"{key}: eager raised, impl did not: {e_err[key]}")
            elif strict_stage and e_first != i_first:
                diffs.append(
                    f"call[{i}]: eager raised at {e_first}, impl at {i_first}: "
                    f"{e_err[f'{e_first}[{i}]']} / {i_err[f'{i_first}[{i}]']}"
                )
            for stage in _STAGES:
                # Compare every stage both sides completed; stop at the first raise.
                if stage in (e_first, i_first):
                    break
                key = f"{stage}[{i}]"
                if key in e_obs and key in i_obs:
                    _compare(e_obs[key], i_obs[key], key, diffs, lenient)
                elif key in e_obs or key in i_obs:
                    diffs.append(f"{key}: only one side ran this stage")
            if diffs:
                break
    result = Result(diffs, eager_errors, impl_errors)
    result.entries = len(getattr(impl_fn, "entries", ()))
    result.calls = len(calls)
    return result


def check_case(source: str, inputs: dict, post=(), modes=("grad",), seed: int = 0, impl=None):
    """Assert that ``impl`` (default: :func:`default_impl`) matches eager on this case."""
    res = run_case(source, inputs, impl, post=post, modes=modes, seed=seed)
    assert res.ok, "\n" + res.report() + "\n--- program ---\n" + textwrap.dedent(source)


# --------------------------------------------------------------------------- minimizing


def _body_blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(start, end) line ranges of removable statements/blocks in a ``def f`` source."""
    blocks = []
    i = 1
    n = len(lines)
    while i < n:
        line = lines[i]
        ind = len(line) - len(line.lstrip())
        j = i + 1
        while j < n and (len(lines[j]) - len(lines[j].lstrip()) > ind or lines[j].lstrip().startswith("else:")):
            j += 1
        if not line.lstrip().startswith("return"):
            blocks.append((i, j))
        # also offer the statements inside a block
        i = i + 1 if j > i + 1 else j
    return blocks


def _fix_empty_blocks(lines: list[str]) -> list[str]:
    out = []
    for k, line in enumerate(lines):
        out.append(line)
        if line.rstrip().endswith(":"):
            ind = len(line) - len(line.lstrip())
            nxt = lines[k + 1] if k + 1 < len(lines) else ""
            if len(nxt) - len(nxt.lstrip()) <= ind:
                out.append(" " * (ind + 4) + "pass")
    return out


def _drop_arg(case: Case, k: int) -> Case | None:
    """``case`` without its ``k``-th argument (a non-tensor, or a tensor nothing refers to)."""
    args = case.inputs["args"]
    if any(a["kind"] == "same" and a["arg"] == k for a in args):
        return None
    lines = case.source.split("\n")
    m = re.match(r"def f\((.*)\):$", lines[0])
    if not m:
        return None
    params = [p.strip() for p in m.group(1).split(",") if p.strip()]
    if len(params) != len(args) or len(params) == 1:
        return None
    del params[k]
    lines[0] = f"def f({', '.join(params)}):"
    new_args = []
    for i, a in enumerate(args):
        if i == k:
            continue
        if a["kind"] == "same":
            a = dict(a, arg=a["arg"] - (a["arg"] > k))
        new_args.append(a)
    return dataclasses.replace(case, source="\n".join(lines), inputs={**case.inputs, "args": new_args})


def minimize(case: Case, impl: Impl | None = None, max_runs: int = 400) -> Case:
    """Greedy reduction of a failing case that keeps the failure's :attr:`Result.signature`."""
    impl = impl or default_impl()
    target = run(case, impl).signature
    if target == "ok":
        return case
    runs = [0]

    def still_fails(c: Case) -> bool:
        if runs[0] >= max_runs:
            return False
        runs[0] += 1
        try:
            r = run(c, impl)
        except Exception:
            return False
        return not r.ok and r.signature == target

    changed = True
    while changed and runs[0] < max_runs:
        changed = False
        # fewer calls / post ops
        for k in range(len(case.modes) - 1, -1, -1):
            if len(case.modes) > 1:
                c = dataclasses.replace(case, modes=case.modes[:k] + case.modes[k + 1 :])
                if still_fails(c):
                    case, changed = c, True
        for k in range(len(case.post) - 1, -1, -1):
            c = dataclasses.replace(case, post=case.post[:k] + case.post[k + 1 :])
            if still_fails(c):
                case, changed = c, True
        # fewer statements
        limit = None
        tried: set[str] = set()
        while True:
            # Blocks are recomputed after every accepted removal (their extents change).
            lines = case.source.rstrip("\n").split("\n")
            blocks = [b for b in _body_blocks(lines) if limit is None or b[0] <= limit]
            for start, end in sorted(blocks, key=lambda b: -b[0]):
                new = _fix_empty_blocks(lines[:start] + lines[end:])
                src = "\n".join(new) + "\n"
                if src in tried:
                    continue
                tried.add(src)
                c = dataclasses.replace(case, source=src)
                if still_fails(c):
                    case, changed, limit = c, True, start
                    break
            else:
                break
        # fewer returned values
        lines = case.source.rstrip("\n").split("\n")
        ret = lines[-1]
        m = re.match(r"(\s*return )(\[?)(.*?)(\]?)$", ret)
        if m:
            items = [x.strip() for x in m.group(3).split(",") if x.strip()]
            for k in range(len(items) - 1, -1, -1):
                if len(items) <= 1:
                    break
                rest = items[:k] + items[k + 1 :]
                body = ", ".join(rest) + ("," if len(rest) == 1 and not m.group(2) else "")
                new_ret = m.group(1) + m.group(2) + body + m.group(4)
                c = dataclasses.replace(case, source="\n".join(lines[:-1] + [new_ret]) + "\n")
                if still_fails(c):
                    case, changed, items = c, True, rest
        # drop non-tensor parameters and bases no argument uses
        for k in range(len(case.inputs["args"]) - 1, -1, -1):
            c = _drop_arg(case, k)
            if c is not None and still_fails(c):
                case, changed = c, True
        used = {a["base"] for a in case.inputs["args"] if a["kind"] == "tensor"}
        if len(used) < len(case.inputs["bases"]):
            remap = {old: new for new, old in enumerate(sorted(used))}
            args = [dict(a, base=remap[a["base"]]) if a["kind"] == "tensor" else a for a in case.inputs["args"]]
            bases = [b for i, b in enumerate(case.inputs["bases"]) if i in used]
            c = dataclasses.replace(case, inputs={"bases": bases, "args": args})
            if still_fails(c):
                case, changed = c, True
        # simpler inputs
        for k, a in enumerate(case.inputs["args"]):
            if a["kind"] == "tensor" and a["expr"] != "x":
                args = [dict(x) for x in case.inputs["args"]]
                args[k]["expr"] = "x"
                c = dataclasses.replace(case, inputs={**case.inputs, "args": args})
                if still_fails(c):
                    case, changed = c, True
        for k, b in enumerate(case.inputs["bases"]):
            for key, simple in (("rg", False), ("dtype", "float32")):
                if b[key] != simple:
                    bases = [dict(x) for x in case.inputs["bases"]]
                    bases[k][key] = simple
                    c = dataclasses.replace(case, inputs={**case.inputs, "bases": bases})
                    if still_fails(c):
                        case, changed = c, True
    return case
