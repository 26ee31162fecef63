"""Tensor subclasses at the compilers' boundary: graphs over their inner tensors.

Analysis, tracing, partitioning and the runtime see a wrapper subclass (one implementing
``__tensor_flatten__`` / ``__tensor_unflatten__``: ``TwoTensor``, DTensor...) as one tensor,
so mutations, aliasing and autograd are handled at the level the user sees, exactly as for
plain tensors. The graphs handed to the user's compilers, though, take and return plain
tensors only: :func:`subclass_boundary` retraces a graph whose inputs or outputs are
subclasses with every subclass value replaced by its inner tensors (each op dispatched
through the subclass's ``__torch_dispatch__`` becomes the ops on its inner tensors), and
:meth:`SubclassBoundary.wrap` turns the compiled flat graph back into a callable over the
subclass values: it flattens each call's subclass inputs and rebuilds the subclass outputs.

Invariant: a subclass value's structure (its type, ``__tensor_flatten__`` context and inner
tensors' structure) is fixed per entry. The entry guard checks it for the inputs
(:func:`structure_check`: a call whose structure differs compiles a new entry); a tangent is
coerced to the traced structure where the subclass supports torch's protocol for that, and
anything else laid out otherwise raises. Nothing runs through a graph traced for another
structure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from ..errors import AotgradCompileError
from .signature import JOINT_INPUT_KIND, graph_outputs, is_tangent

__all__ = ["SubclassBoundary", "TensorStructure", "holds_subclass", "structure_check", "subclass_boundary"]


@dataclass(frozen=True)
class OpaqueAttr:
    """A non-tensor attribute a subclass flattens to (DTensor's ``device_mesh``): not a graph
    input; a call must carry an equal one."""

    value: Any
    num_leaves = 0

    def flatten(self, value: Any, out: list[Any]) -> None:
        if value is not self.value and value != self.value:
            raise RuntimeError(
                f"aotgrad: a tensor subclass attribute is {value!r}; the compiled graph was traced "
                f"for {self.value!r}. Recompile for the new one (a new aot_function)."
            )

    def rebuild(self, leaves: Iterator[Any]) -> Any:
        return self.value

    def _zero_leaves(self) -> list[torch.Tensor]:
        return []

    def __repr__(self) -> str:
        return type(self.value).__name__


def _graph_ctx(cls: type, ctx: Any) -> Any:
    """The part of a ``__tensor_flatten__`` context the graph depends on: DTensor's ends
    with ``requires_grad``, which autograd (not the graph) handles, and which a fake
    example input does not share with the real one."""
    if cls.__name__ == "DTensor" and cls.__module__.startswith("torch.distributed.tensor"):
        return ctx[:-1]
    return ctx


def _inner_structure(value: Any) -> TensorStructure | OpaqueAttr:
    return TensorStructure.of(value) if isinstance(value, torch.Tensor) else OpaqueAttr(value)


@dataclass(frozen=True)
class TensorStructure:
    """How one tensor value flattens: a plain tensor (``cls`` None) is its own single leaf; a
    wrapper subclass is ``cls.__tensor_unflatten__`` over its inner tensors ``attrs``
    (each with its own structure; a non-tensor attribute is an :class:`OpaqueAttr`) and
    ``ctx``, with outer ``size``/``stride``."""

    cls: type | None
    ctx: Any
    attrs: tuple[str, ...]
    inner: tuple[TensorStructure | OpaqueAttr, ...]
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @staticmethod
    def of(t: torch.Tensor) -> TensorStructure:
        size, stride = tuple(t.shape), tuple(t.stride())
        if not is_traceable_wrapper_subclass(t):
            return TensorStructure(None, None, (), (), size, stride, t.dtype, t.device)
        attrs, ctx = t.__tensor_flatten__()
        inner = tuple(_inner_structure(getattr(t, a)) for a in attrs)
        return TensorStructure(type(t), ctx, tuple(attrs), inner, size, stride, t.dtype, t.device)

    @property
    def num_leaves(self) -> int:
        return 1 if self.cls is None else sum(s.num_leaves for s in self.inner)

    def flatten(self, t: torch.Tensor, out: list[Any], coerce: bool = False) -> None:
        """Append ``t``'s inner tensors to ``out``; raise when ``t`` is structured otherwise.
        ``coerce`` (a tangent): first bring a subclass laid out otherwise to the traced layout
        where the subclass supports torch's protocol for it."""
        if self.cls is None:
            if is_traceable_wrapper_subclass(t):
                raise RuntimeError(
                    f"aotgrad: a {type(t).__name__} arrived where the compiled graph was traced for "
                    "a plain tensor (e.g. a gradient of another type than the output it belongs "
                    "to); pass a plain tensor there."
                )
            out.append(t)
            return
        if type(t) is not self.cls:
            raise RuntimeError(
                f"aotgrad: a {type(t).__name__} arrived where the compiled graph was traced for a "
                f"{self.cls.__name__}; pass a {self.cls.__name__} (as torch does, a gradient must "
                "have the tensor type of its output)."
            )
        attrs, ctx = t.__tensor_flatten__()
        if coerce and tuple(attrs) == self.attrs and _graph_ctx(self.cls, ctx) != _graph_ctx(self.cls, self.ctx):
            # torch's protocol for a gradient laid out otherwise than traced: DTensor
            # redistributes to the traced placements.
            coerce = getattr(t, "__coerce_same_metadata_as_tangent__", None)
            coerced = None if coerce is None else coerce(self.ctx)
            if coerced is not None:
                t = coerced
                attrs, ctx = t.__tensor_flatten__()
        if tuple(attrs) != self.attrs or _graph_ctx(self.cls, ctx) != _graph_ctx(self.cls, self.ctx):
            raise RuntimeError(
                f"aotgrad: this {self.cls.__name__} flattens to {list(attrs)} with context {ctx!r}; "
                f"the compiled graph was traced for {list(self.attrs)} with {self.ctx!r}. Recompile "
                "for the new layout (a new aot_function)."
            )
        for a, s in zip(self.attrs, self.inner):
            s.flatten(getattr(t, a), out)

    def rebuild(self, leaves: Iterator[Any]) -> torch.Tensor:
        """The tensor this structure describes, over the next inner tensors of ``leaves``."""
        if self.cls is None:
            return next(leaves)
        inner = {a: s.rebuild(leaves) for a, s in zip(self.attrs, self.inner)}
        return self.cls.__tensor_unflatten__(inner, self.ctx, self.size, self.stride)

    def zeros(self) -> torch.Tensor:
        """A zero tensor of this structure (a gradient autograd passed as None)."""
        return self.rebuild(iter(self._zero_leaves()))

    def _zero_leaves(self) -> list[torch.Tensor]:
        if self.cls is None:
            return [torch.empty_strided(self.size, self.stride, dtype=self.dtype, device=self.device).zero_()]
        return [z for s in self.inner for z in s._zero_leaves()]

    def __repr__(self) -> str:
        if self.cls is None:
            return f"Tensor{list(self.size)}"
        inner = ", ".join(f"{a}={s!r}" for a, s in zip(self.attrs, self.inner))
        return f"{self.cls.__name__}{list(self.size)}({inner})"


def holds_subclass(values: Sequence[Any]) -> bool:
    """Whether any of ``values`` is a traceable wrapper subclass tensor."""
    return any(isinstance(v, torch.Tensor) and is_traceable_wrapper_subclass(v) for v in values)


def structure_check(inputs: Sequence[Any]) -> Callable[[Sequence[Any]], bool] | None:
    """A check that a call's ``inputs`` (positionally like these, an entry's compile-time
    inputs) have the same subclass structure: None when none of them is a subclass. An
    entry guard runs it, so a call whose DTensor placements (say) differ compiles anew."""
    # Real tensors on both sides: the whole flatten context compares (requires_grad too,
    # which TensorGuards checks anyway), unlike a fake example's (see _graph_ctx).
    structures = tuple((k, TensorStructure.of(t)) for k, t in enumerate(inputs) if is_traceable_wrapper_subclass(t))
    if not structures:
        return None

    def same_structure(values: Sequence[Any]) -> bool:
        return all(TensorStructure.of(values[k]) == s for k, s in structures)

    return same_structure


def _structures(values: Sequence[Any]) -> tuple[TensorStructure | None, ...]:
    return tuple(TensorStructure.of(v) if isinstance(v, torch.Tensor) else None for v in values)


def _flatten_all(
    values: Sequence[Any], structures: Sequence[TensorStructure | None], tangents: frozenset[int] = frozenset()
) -> list[Any]:
    flat: list[Any] = []
    for k, (v, s) in enumerate(zip(values, structures, strict=True)):
        if s is None:
            flat.append(v)
        else:
            s.flatten(v, flat, coerce=k in tangents)
    return flat


def _rebuild_all(flat: Sequence[Any], structures: Sequence[TensorStructure | None]) -> list[Any]:
    leaves = iter(flat)
    return [next(leaves) if s is None else s.rebuild(leaves) for s in structures]


@dataclass(frozen=True)
class SubclassBoundary:
    """A graph over subclass values, retraced over their inner tensors.

    ``graph`` takes the inputs' inner tensors in order (a plain tensor or non-tensor input
    is one leaf) and returns the outputs' inner tensors; ``inputs`` and ``outputs`` are the
    outer graph's per-value structures (None for a non-tensor), ``example_inputs`` the
    flattened example inputs the compiler gets, ``tangents`` the inputs that are tangents
    (the only ones coerced to the traced layout).
    """

    graph: torch.fx.GraphModule
    example_inputs: list[Any]
    inputs: tuple[TensorStructure | None, ...]
    outputs: tuple[TensorStructure | None, ...]
    tangents: frozenset[int] = frozenset()
    #: (output, input) pairs where the outer graph returns a subclass input itself (a saved
    #: primal, say): the call returns that very object, not a rebuilt one, so that its
    #: version counter (eager's check of tensors saved for backward) and identity hold
    passthrough: tuple[tuple[int, int], ...] = ()

    def wrap(self, compiled: Callable) -> Callable:
        """``compiled`` (the compiler's result for :attr:`graph`, positional) as a callable
        over the outer graph's inputs and outputs."""
        inputs, outputs, tangents, passthrough = self.inputs, self.outputs, self.tangents, self.passthrough

        def over_subclasses(*args: Any) -> list[Any]:
            outs = _rebuild_all(compiled(*_flatten_all(args, inputs, tangents)), outputs)
            for j, k in passthrough:
                outs[j] = args[k]
            return outs

        return over_subclasses

    def zeros_of_input(self, k: int) -> Callable[[], torch.Tensor] | None:
        """For a subclass input ``k`` (a tangent), a maker of its zero value; else None."""
        s = self.inputs[k]
        return None if s is None or s.cls is None else s.zeros

    def __repr__(self) -> str:
        return f"SubclassBoundary(inputs={list(self.inputs)}, outputs={list(self.outputs)})"


def subclass_boundary(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], fake_mode: FakeTensorMode
) -> SubclassBoundary | None:
    """``gm`` retraced over inner tensors when a subclass is among its example inputs or
    outputs (see the module docstring); None when there is none. ``example_inputs`` are
    fake tensors of ``fake_mode`` (with static sizes)."""
    out_vals = [o.meta.get("val") if isinstance(o, torch.fx.Node) else o for o in graph_outputs(gm)]
    if not holds_subclass(example_inputs) and not holds_subclass(out_vals):
        return None
    # Imported here: tracing imports analysis, which imports this module.
    from .tracing import trace_function

    inputs = _structures(example_inputs)
    outer_placeholders = gm.graph.find_nodes(op="placeholder")
    kinds = [n.meta.get(JOINT_INPUT_KIND) for n in outer_placeholders]
    outputs: list[TensorStructure | None] = []

    def over_inner_tensors(*flat: Any) -> list[Any]:
        outs = gm(*_rebuild_all(flat, inputs))
        outputs[:] = _structures(outs)
        return _flatten_all(outs, outputs)

    flat_examples = _flatten_all(example_inputs, inputs)
    with torch.no_grad():
        flat_gm = trace_function(over_inner_tensors, tuple(flat_examples), fake_mode)
    _check_functional(flat_gm, inputs)
    placeholders = iter(flat_gm.graph.find_nodes(op="placeholder"))
    for s, kind in zip(inputs, kinds, strict=True):
        for _ in range(1 if s is None else s.num_leaves):
            node = next(placeholders)
            if kind is not None:
                node.meta[JOINT_INPUT_KIND] = kind
    tangents = frozenset(k for k, n in enumerate(outer_placeholders) if is_tangent(n))
    position = {n: k for k, n in enumerate(outer_placeholders)}
    passthrough = tuple(
        (j, position[o]) for j, o in enumerate(graph_outputs(gm))
        if isinstance(o, torch.fx.Node) and o.op == "placeholder" and outputs[j] is not None and outputs[j].cls
    )
    return SubclassBoundary(flat_gm, flat_examples, inputs, tuple(outputs), tangents, passthrough)


def _check_functional(gm: torch.fx.GraphModule, inputs: Sequence[TensorStructure | None]) -> None:
    """A subclass whose ``__torch_dispatch__`` mutates its inner tensors would make the
    flat graph impure, which no compiler expects: refuse it, naming the subclass and op."""
    for node in gm.graph.nodes:
        target = node.target
        if node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            names = sorted({s.cls.__name__ for s in inputs if s is not None and s.cls is not None})
            raise AotgradCompileError(
                f"aotgrad: the tensor subclass {', '.join(names) or '(output)'} runs the in-place op "
                f"{target} on its inner tensors inside a functional graph; aotgrad cannot flatten "
                "it for the compiler. Make its __torch_dispatch__ functional (or use the nop "
                "compiler on the unflattened graph)."
            )
