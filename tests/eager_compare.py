"""Compare a program run eagerly with the same program through aotgrad, on fresh clones.

:func:`check` runs ``fn`` eagerly and compiled on separate, identical copies of the inputs
(same values, strides, requires_grad, leafness and aliasing) and compares everything a user
can observe: outputs (values, shape, stride, dtype, requires_grad, which outputs alias which
inputs / outputs), the inputs after the call (values and metadata), gradients, and the effect
of mutating each returned alias afterwards.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

import aotgrad
from aotgrad.compilers import nop

#: "static" or "dynamic"; set by the ``shapes`` fixture (conftest.py). In dynamic mode
#: :func:`check` compiles with ``dynamic=True`` and checks again on inputs of two other sizes,
#: asserting that they compile no new entry.
SHAPES = {"mode": "static"}

#: "plain" or "two_tensor"; set by the ``tensor_types`` fixture (conftest.py). With
#: "two_tensor", :func:`check` builds every factory-made input as a ``TwoTensor`` and compares
#: both inner tensors of every subclass value too.
TENSOR_TYPES = {"mode": "plain"}

_FACTORIES = {torch.randn, torch.rand, torch.zeros, torch.ones, torch.empty, torch.arange, torch.eye}


class _Resized(TorchFunctionMode):
    """Factory calls (``torch.randn(3, 4)``...) make tensors with every size ``v >= 2``
    grown by ``k``: equal sizes stay equal, sizes 0 and 1 stay as they are."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def _grow(self, v: Any) -> Any:
        if type(v) is int and v >= 2:
            return v + self.k
        if isinstance(v, (tuple, list)):  # torch.Size is a tuple: rebuilt as its own type
            return type(v)(self._grow(x) for x in v)
        return v

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _FACTORIES:
            args = tuple(self._grow(a) for a in args)
        return func(*args, **kwargs)


class _AsTwoTensor(TorchFunctionMode):
    """Factory calls make ``TwoTensor``s (two inner tensors, every op run on both): the
    first inner tensor is the factory's tensor, the second a scaled copy (so that a mix-up
    of the two shows); ``requires_grad`` goes on the subclass, not its inner tensors."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func not in _FACTORIES:
            return func(*args, **kwargs)
        requires_grad = kwargs.pop("requires_grad", False)
        a = func(*args, **kwargs)  # the mode is off inside its own __torch_function__
        b = a.clone().mul_(0.5) if a.is_floating_point() else a.clone()
        return TwoTensor(a, b).requires_grad_(requires_grad)


def as_two_tensors(make: Callable[[], Any]) -> Callable[[], Any]:
    """``make`` with every tensor it creates from a factory a ``TwoTensor``."""

    def make_two_tensors() -> Any:
        with _AsTwoTensor():
            return make()

    return make_two_tensors


def resized(make: Callable[[], Any], k: int) -> Callable[[], Any]:
    """``make`` with the tensors it creates grown by ``k`` in every size of at least 2."""

    def make_resized() -> Any:
        with _Resized(k):
            return make()

    return make_resized


class Counting:
    """A compiler that records the graphs it is given and runs them as nop does."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm


def clone_inputs(make: Callable[[], Any]) -> Any:
    torch.manual_seed(0)
    return make()


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _alias_signature(inputs: list, outputs: list) -> list:
    """For each output: which input / earlier output it shares storage with, and whether it
    is the very object."""
    sig = []
    in_st = [(_storage(t) if isinstance(t, torch.Tensor) else None) for t in inputs]
    for j, o in enumerate(outputs):
        if not isinstance(o, torch.Tensor):
            sig.append(("const", o))
            continue
        same_in = [i for i, t in enumerate(inputs) if t is o]
        shares_in = [i for i, s in enumerate(in_st) if s == _storage(o)]
        same_out = [k for k in range(j) if outputs[k] is o]
        shares_out = [k for k in range(j) if isinstance(outputs[k], torch.Tensor) and _storage(outputs[k]) == _storage(o)]
        base_is_out = [k for k in range(j) if o._base is not None and outputs[k] is o._base]
        sig.append((same_in, shares_in, same_out, shares_out, base_is_out, o._base is None))
    return sig


def _grad_fn_state(t: torch.Tensor) -> str:
    """Whether ``t`` has a grad_fn; reading it raises for a no_grad view whose base was
    modified in place since (eager's lazy error), which is compared too."""
    try:
        return "none" if t.grad_fn is None else "present"
    except RuntimeError as exc:
        return f"raises {str(exc)[:40]}"


def assert_tensor_equal(a: Any, b: Any, what: str, check_stride: bool = True) -> None:
    if not isinstance(a, torch.Tensor):
        assert a == b, f"{what}: {a!r} != {b!r}"
        return
    assert isinstance(b, torch.Tensor), f"{what}: eager gave a tensor, compiled gave {type(b)}"
    assert a.shape == b.shape, f"{what}: shape {a.shape} vs {b.shape}"
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} vs {b.dtype}"
    if check_stride:
        assert a.stride() == b.stride(), f"{what}: stride {a.stride()} vs {b.stride()}"
        assert a.storage_offset() == b.storage_offset(), f"{what}: storage_offset"
    assert a.requires_grad == b.requires_grad, f"{what}: requires_grad {a.requires_grad} vs {b.requires_grad}"
    assert _grad_fn_state(a) == _grad_fn_state(b), f"{what}: grad_fn {_grad_fn_state(a)} vs {_grad_fn_state(b)}"
    if is_traceable_wrapper_subclass(a):
        assert type(b) is type(a), f"{what}: eager gave a {type(a).__name__}, compiled a {type(b).__name__}"
        attrs, ctx = a.__tensor_flatten__()
        b_attrs, b_ctx = b.__tensor_flatten__()
        assert (list(attrs), ctx) == (list(b_attrs), b_ctx), f"{what}: flattens to {b_attrs}, {b_ctx!r}"
        for name in attrs:
            assert_tensor_equal(getattr(a, name), getattr(b, name), f"{what}.{name}", check_stride)
        return
    torch.testing.assert_close(a.detach(), b.detach(), equal_nan=True, msg=lambda m: f"{what}: {m}")


def run_both(fn: Callable, make_inputs: Callable[[], Any], compiled: Callable | None = None):
    eager_in = clone_inputs(make_inputs)
    comp_in = clone_inputs(make_inputs)
    compiled = compiled or aotgrad.aot_function(fn, nop)
    e_err = c_err = None
    try:
        e_out = fn(*eager_in)
    except Exception as exc:  # noqa: BLE001 - mirrored below
        e_err = exc
    try:
        c_out = compiled(*comp_in)
    except Exception as exc:  # noqa: BLE001
        c_err = exc
    return eager_in, comp_in, (e_out if e_err is None else None), (c_out if c_err is None else None), e_err, c_err, compiled


def check(
    fn: Callable,
    make_inputs: Callable[[], Any],
    *,
    backward: bool = True,
    mutate_outputs: bool = True,
    compiled: Callable | None = None,
    grad_mode: bool = True,
    specialises: bool = False,
) -> Callable:
    """Assert that ``fn`` behaves the same eagerly and through aotgrad; return the compiled fn.

    In dynamic mode (:data:`SHAPES`), also on inputs of two other sizes, through the same
    compiled function, which must compile no new entry for them, unless ``specialises``
    (the program's outputs depend on a size: ``unbind`` returns one tensor per row) or the
    entry says why it is static (``CompiledEntry.static_reason``: synthetic bases).
    """
    if TENSOR_TYPES["mode"] == "two_tensor":
        make_inputs = as_two_tensors(make_inputs)
    if SHAPES["mode"] == "dynamic" and compiled is None:
        compiled = aotgrad.aot_function(fn, nop, dynamic=True)
        _check_once(fn, make_inputs, backward, mutate_outputs, compiled, grad_mode)
        entries = len(compiled.entries)
        for k in (1, 2):
            try:
                resized(make_inputs, k)()
            except RuntimeError:
                continue  # the inputs themselves are built for one size (x.view(2, 2))
            eager_ok, _ = _check_once(fn, resized(make_inputs, k), backward, mutate_outputs, compiled, grad_mode)
            static = [e.static_reason for e in compiled.entries if e.static_reason]
            if eager_ok and not specialises and not static:
                assert len(compiled.entries) == entries, (
                    f"inputs grown by {k} compiled a new entry: "
                    + "; ".join(e.guard.describe() for e in compiled.entries)
                )
        return compiled
    return _check_once(fn, make_inputs, backward, mutate_outputs, compiled, grad_mode)[1]


def _check_once(fn, make_inputs, backward, mutate_outputs, compiled, grad_mode) -> tuple[bool, Callable]:
    """One eager-vs-compiled comparison: (False when eager raised and aotgrad did too, the
    compiled function)."""
    with torch.set_grad_enabled(grad_mode):
        eager_in, comp_in, e_out, c_out, e_err, c_err, compiled = run_both(fn, make_inputs, compiled)
    if e_err is not None:
        assert c_err is not None, f"eager raised {e_err!r} but aotgrad did not"
        return False, compiled
    if c_err is not None:
        raise AssertionError(f"aotgrad raised but eager did not: {c_err!r}") from c_err

    e_leaves, e_spec = pytree.tree_flatten(e_out)
    c_leaves, c_spec = pytree.tree_flatten(c_out)
    assert e_spec == c_spec, f"output structure {e_spec} vs {c_spec}"
    assert type(e_out) is type(c_out)
    for j, (a, b) in enumerate(zip(e_leaves, c_leaves)):
        assert_tensor_equal(a, b, f"output {j}")
    e_in_leaves = pytree.tree_leaves(eager_in)
    c_in_leaves = pytree.tree_leaves(comp_in)
    for i, (a, b) in enumerate(zip(e_in_leaves, c_in_leaves)):
        assert_tensor_equal(a, b, f"input {i} after the call")
    assert _alias_signature(e_in_leaves, e_leaves) == _alias_signature(c_in_leaves, c_leaves), "aliasing differs"

    if backward:  # under no_grad too: outputs of the program's enable_grad regions
        _check_backward(e_in_leaves, c_in_leaves, e_leaves, c_leaves)
    if mutate_outputs:
        _check_mutating_outputs(make_inputs, fn, compiled, grad_mode)
    return True, compiled


def _check_backward(e_in, c_in, e_out, c_out) -> None:
    torch.manual_seed(1)
    pairs = [
        (a, b) for a, b in zip(e_out, c_out)
        if isinstance(a, torch.Tensor) and a.requires_grad and a.dtype.is_floating_point
    ]
    if not pairs:
        return
    cots = [torch.randn_like(a) for a, _ in pairs]
    e_leaves = _autograd_leaves(e_in)
    c_leaves = _autograd_leaves(c_in)
    assert len(e_leaves) == len(c_leaves), "different autograd leaves behind the inputs"
    if not e_leaves:
        return
    e_err = c_err = None
    try:
        eg = torch.autograd.grad([a for a, _ in pairs], e_leaves, cots, allow_unused=True, retain_graph=True)
    except RuntimeError as exc:
        e_err = exc
    try:
        cg = torch.autograd.grad([b for _, b in pairs], c_leaves, cots, allow_unused=True, retain_graph=True)
    except RuntimeError as exc:
        c_err = exc
    if e_err is not None:
        assert c_err is not None, f"eager backward raised {e_err!r}, aotgrad did not"
        return
    if c_err is not None:
        raise AssertionError(f"aotgrad backward raised: {c_err!r}") from c_err
    for k, (a, b) in enumerate(zip(eg, cg)):
        assert (a is None) == (b is None), f"grad {k}: {a} vs {b}"
        if a is not None:
            torch.testing.assert_close(a, b, msg=lambda m: f"grad {k}: {m}")


def _autograd_leaves(inputs) -> list:
    """The leaf tensors (what ``.grad`` is accumulated into) behind the inputs, in a fixed order.

    Gradients are compared w.r.t. these, as a user sees them; a non-leaf input mutated in
    place is a different autograd node after the call in eager and compiled alike.
    """
    found: list = []
    seen: set = set()

    def visit(fn, depth=0):
        if fn is None or id(fn) in seen or depth > 200:
            return
        seen.add(id(fn))
        var = getattr(fn, "variable", None)
        if var is not None and all(var is not f for f in found):
            found.append(var)
        for nxt, _ in fn.next_functions:
            visit(nxt, depth + 1)

    # the leaf inputs first, in input order: the graph behind a non-leaf input mutated in
    # place reaches other inputs in another order in eager (the ops that wrote into it) than
    # compiled (the compiled function's node, all its inputs in order)
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf and all(t is not f for f in found):
            found.append(t)
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.requires_grad and not t.is_leaf:
            visit(t.grad_fn)
    return found


def _check_mutating_outputs(make_inputs, fn, compiled, grad_mode) -> None:
    """Mutate each returned tensor in place after the call; inputs, outputs, grads must follow."""
    with torch.set_grad_enabled(grad_mode):
        probe_in = clone_inputs(make_inputs)
        n = len(pytree.tree_leaves(fn(*probe_in)))
    for j in range(n):
        with torch.set_grad_enabled(grad_mode):
            eager_in, comp_in, e_out, c_out, e_err, c_err, _ = run_both(fn, make_inputs, compiled)
        e_leaves = pytree.tree_leaves(e_out)
        c_leaves = pytree.tree_leaves(c_out)
        if not isinstance(e_leaves[j], torch.Tensor) or not e_leaves[j].dtype.is_floating_point:
            continue
        errs = []
        for leaves in (e_leaves, c_leaves):
            try:
                with torch.set_grad_enabled(grad_mode):
                    leaves[j].mul_(2)
                errs.append(None)
            except RuntimeError as exc:
                errs.append(exc)
        assert (errs[0] is None) == (errs[1] is None), f"mutating output {j}: eager {errs[0]!r}, aotgrad {errs[1]!r}"
        if errs[0] is not None:
            continue
        for i, (a, b) in enumerate(zip(pytree.tree_leaves(eager_in), pytree.tree_leaves(comp_in))):
            assert_tensor_equal(a, b, f"input {i} after mutating output {j}")
        for k, (a, b) in enumerate(zip(e_leaves, c_leaves)):
            assert_tensor_equal(a, b, f"output {k} after mutating output {j}")
        if grad_mode:
            _check_backward(pytree.tree_leaves(eager_in), pytree.tree_leaves(comp_in), e_leaves, c_leaves)
