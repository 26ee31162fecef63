"""Symbolic shapes: which sizes of a call a trace leaves symbolic, the guards the trace put on
them, and the symbolic sizes the runtime needs, evaluated on a real call.

An entry traced with symbolic sizes serves every call whose sizes satisfy the guards the
``ShapeEnv`` recorded while tracing (0/1 specialisation, equalities, ranges, divisibility).
Graph input ``k`` is named ``t{k}`` (its ``LocalSource``) in the shape environment, so every
symbol, guard and size expression is a Python expression over the graph inputs.

* :class:`SymbolicLeaves`: which leaves of a call are symbolic (decided per call by
  :func:`plan_symbolic`, from ``dynamic=True``, ``torch._dynamo.mark_dynamic`` or Dynamo's
  own symbolic sizes);
* :func:`fake_graph_inputs`: fake inputs with those sizes symbolic;
* :class:`ShapeGuard`: the trace's guards compiled into one Python function;
* :func:`size_function`: a function of the graph inputs computing symbolic sizes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from torch._dynamo.source import LocalSource, TensorProperty, TensorPropertySource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import (
    SYMPY_INTERP,
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
    free_unbacked_symbols,
)
from torch.utils._sympy.printers import PythonPrinter

from ..errors import AotgradCompileError

__all__ = [
    "ShapeGuard",
    "SymbolicLeaves",
    "fake_graph_inputs",
    "holds_sym",
    "is_symbolic",
    "plan_symbolic",
    "size_function",
    "symbolic_leaves_of_examples",
]


def input_name(k: int) -> str:
    """The shape environment's name of graph input ``k``."""
    return f"t{k}"


def _params(n: int) -> str:
    """The parameter list ``t0, t1, ...`` of a function over ``n`` graph inputs."""
    return ", ".join(input_name(k) for k in range(n))


def is_symbolic(value: Any) -> bool:
    """True for a SymInt/SymFloat/SymBool (or a sequence holding one) not known to be a constant."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return not isinstance(value.node.expr, sympy.Number)
    if isinstance(value, (tuple, list, torch.Size)):
        return any(is_symbolic(v) for v in value)
    return False


def holds_sym(value: Any) -> bool:
    """True for a SymInt/SymFloat/SymBool (or a sequence holding one), symbolic or not: a
    value the runtime must evaluate to a plain number before it touches a real tensor (one
    whose symbol the trace specialised is still a SymInt, and would make a real tensor's
    sizes symbolic)."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, (tuple, list, torch.Size)):
        return any(holds_sym(v) for v in value)
    return False


@dataclass(frozen=True)
class SymbolicLeaves:
    """Which leaves of a call's flattened ``(args, kwargs)`` a trace leaves symbolic.

    ``tensor_dims``: (leaf position, dims) for tensors with symbolic sizes. ``ints``: (leaf
    position, same-as) for int leaves passed to the graph as SymInt inputs; ``same_as`` is
    ``(tensor leaf, dim)`` when the int *is* that size (Dynamo passes ``x.size(0)`` so), else
    None. ``duck``: equal sizes share one symbol (``dynamic=True``, as torch's
    ``aot_function``); otherwise each symbolic size has its own (mark_dynamic, Dynamo).
    """

    tensor_dims: tuple[tuple[int, frozenset[int]], ...] = ()
    ints: tuple[tuple[int, tuple[int, int] | None], ...] = ()
    duck: bool = False

    def shifted(self, n: int) -> SymbolicLeaves:
        """The same leaves with ``n`` leaves prepended to the call (a module's state)."""
        return SymbolicLeaves(
            tuple((p + n, d) for p, d in self.tensor_dims),
            tuple((p + n, None if s is None else (s[0] + n, s[1])) for p, s in self.ints),
            self.duck,
        )

    @property
    def int_positions(self) -> frozenset[int]:
        return frozenset(p for p, _ in self.ints)

    def __bool__(self) -> bool:
        return bool(self.tensor_dims or self.ints)


def symbolic_leaves_of_examples(values: Sequence[Any]) -> SymbolicLeaves:
    """The symbolic leaves of a flat call whose example inputs are ``values``: each fake
    tensor's symbolic sizes, and each SymInt, with the tensor size it *is* when its symbol is
    one (Dynamo passes ``x.size(0)`` as its own input), so that the trace keeps apart and
    together the sizes the examples' shape environment did."""
    tensor_dims = []
    size_of_symbol: dict[Any, tuple[int, int]] = {}
    for p, v in enumerate(values):
        if isinstance(v, torch.Tensor):
            dims = frozenset(d for d, s in enumerate(v.shape) if is_symbolic(s))
            if dims:
                tensor_dims.append((p, dims))
                for d in sorted(dims):
                    size_of_symbol.setdefault(v.shape[d].node.expr, (p, d))
    ints = tuple(
        (p, size_of_symbol.get(v.node.expr)) for p, v in enumerate(values) if isinstance(v, torch.SymInt) and is_symbolic(v)
    )
    return SymbolicLeaves(tuple(tensor_dims), ints)


def plan_symbolic(
    leaves: Sequence[Any], dynamic: bool, hint: SymbolicLeaves | None, num_static: int = 0
) -> SymbolicLeaves | None:
    """Which leaves of this call to trace symbolically; None for a static trace.

    ``hint`` (Dynamo's graph) wins; ``dynamic=True`` makes every tensor size and every int
    leaf (not bool) symbolic, as torch's ``aot_function(dynamic=True)``, except the first
    ``num_static`` leaves (parameters and buffers); otherwise only the dims marked with
    ``torch._dynamo.mark_dynamic`` are (torch's ``aot_function`` ignores them without
    ``dynamic=True``; aotgrad honours them).
    """
    if hint is not None:
        return hint or None
    tensor_dims = []
    ints = []
    for p, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            if dynamic and leaf.dim() and p >= num_static:
                tensor_dims.append((p, frozenset(range(leaf.dim()))))
            elif marked := getattr(leaf, "_dynamo_dynamic_indices", None):
                tensor_dims.append((p, frozenset(marked)))
        elif dynamic and type(leaf) is int and p >= num_static:
            ints.append((p, None))
    plan = SymbolicLeaves(tuple(tensor_dims), tuple(ints), duck=dynamic)
    return plan or None


def fake_graph_inputs(
    tensors: Sequence[torch.Tensor],
    tensor_dims: Sequence[frozenset[int] | None],
    ints: Sequence[tuple[int, tuple[int, int] | None]],
    fake_mode: FakeTensorMode,
    duck: bool,
) -> list[Any]:
    """Fake graph inputs: ``tensors`` (with the sizes in ``tensor_dims`` symbolic), then one
    SymInt per ``(value, same_as)`` in ``ints`` (``same_as``: (tensor index, dim) it equals).

    Input ``k`` gets source ``t{k}``, which the guards and size functions refer to.
    """
    shape_env = fake_mode.shape_env
    how = DimDynamic.DUCK if duck else DimDynamic.DYNAMIC
    fakes: list[Any] = []
    for k, (t, dims) in enumerate(zip(tensors, tensor_dims, strict=True)):
        if not dims:
            fakes.append(fake_mode.from_tensor(t, static_shapes=True))
            continue
        context = StatelessSymbolicContext(
            dynamic_sizes=[how if d in dims else DimDynamic.STATIC for d in range(t.dim())]
        )
        fakes.append(fake_mode.from_tensor(t, source=LocalSource(input_name(k)), symbolic_context=context))
    for value, same_as in ints:
        k = len(fakes)
        if same_as is not None:
            i, d = same_as
            size = fakes[i].size(d)
            if isinstance(size, torch.SymInt) and size.node.hint == value:
                fakes.append(size)
                continue
        source = LocalSource(input_name(k))
        symbol = shape_env.create_symbol(value, source, dynamic_dim=how, positive=value >= 0)
        fakes.append(shape_env.create_symintnode(symbol, hint=value, source=source))
    return fakes


class _SourcePrinter(PythonPrinter):
    """Prints a sympy expression over graph-input symbols as Python over ``t0, t1, ...``."""

    def __init__(self, names: dict[sympy.Symbol, str]) -> None:
        super().__init__()
        self.names = names

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        return self.names[expr]


def _symbol_names(shape_env: ShapeEnv) -> dict[sympy.Symbol, str]:
    """Each backed symbol → the Python expression that reads it off the graph inputs."""
    names = {}
    for symbol, sources in shape_env.var_to_sources.items():
        for source in sources:
            if isinstance(source, TensorPropertySource) and isinstance(source.base, LocalSource):
                t = source.base.local_name
                if source.prop is TensorProperty.SIZE:
                    names[symbol] = f"{t}.size({source.idx})"
                elif source.prop is TensorProperty.STRIDE:
                    names[symbol] = f"{t}.stride({source.idx})"
                else:
                    names[symbol] = f"{t}.storage_offset()"
                break
            if isinstance(source, LocalSource):
                names[symbol] = source.local_name
                break
    return names


def size_function(values: Any, shape_env: ShapeEnv, num_inputs: int) -> Callable[..., Any]:
    """``fn(*graph_inputs)`` -> ``values`` with every SymInt replaced by its value on this call.

    ``values``: nested tuples of SymInts/SymFloats/SymBools over the graph inputs' symbols
    and of other values, which are returned as they are. Raises
    :class:`AotgradCompileError` for a size no graph input determines (one that depends on
    a tensor's data).
    """
    names = _symbol_names(shape_env)
    printer = _SourcePrinter(names)
    constants: list[Any] = []

    def code(v: Any) -> str:
        if isinstance(v, (tuple, list, torch.Size)):
            return "(" + "".join(code(x) + ", " for x in v) + ")"
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) and not v.node.expr.free_symbols:
            v = v.node.hint  # specialised by the trace: a plain number
        if not isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            constants.append(v)
            return f"_constants[{len(constants) - 1}]"
        expr = shape_env.simplify(v.node.expr)
        missing = [s for s in expr.free_symbols if s not in names]
        if missing:
            raise AotgradCompileError(
                f"aotgrad: a size of an output or an input mutation ({v}) depends on the data "
                "of a tensor, not on input sizes (nonzero, masked_select, .item() feeding a "
                "size); such programs are not supported with dynamic shapes."
            )
        return printer.doprint(expr)

    params = _params(num_inputs)
    body = code(values)
    return eval(f"lambda {params}: {body}", {**SYMPY_INTERP, "_constants": constants})


_SOURCE_REF = re.compile(r"L\['(t\d+)'\]")
_INDEXED_CALL = re.compile(r"\.(size|stride)\(\)\[(\d+)\]")


_READ = re.compile(r"\b(t\d+)\.(size|stride)\((\d+)\)")


def _as_python(guard: str) -> str:
    """A guard over ``L['t0'].size()[0]`` as Python over ``t0.size(0)``."""
    return _INDEXED_CALL.sub(r".\1(\2)", _SOURCE_REF.sub(r"\1", guard))


@dataclass
class ShapeGuard:
    """The shape environment's guards over an entry's graph inputs, as one Python function.

    ``check(*graph_inputs) -> bool``; :meth:`failure` names the first guard a call violates.
    """

    guards: tuple[str, ...]
    num_inputs: int
    check: Callable[..., bool] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Each input's size() and stride() are read once per call, then indexed.
        params = _params(self.num_inputs)
        body = " and ".join(f"({g})" for g in self.guards) or "True"
        reads = sorted(set(_READ.findall(body)))
        body = _READ.sub(lambda m: f"_{m.group(1)}_{m.group(2)}[{m.group(3)}]", body)
        lines = [f"def check({params}):"]
        lines += [f"    _{t}_{what} = {t}.{what}()" for t, what in {(t, w) for t, w, _ in reads}]
        lines.append(f"    return {body}")
        namespace = dict(SYMPY_INTERP)
        exec("\n".join(lines), namespace)  # noqa: S102 - code built from the ShapeEnv's guards
        self.check = namespace["check"]

    @staticmethod
    def of_trace(shape_env: ShapeEnv, fake_inputs: Sequence[Any]) -> ShapeGuard:
        """The guards the trace recorded, over the entry's fake graph inputs."""
        placeholders = [x if isinstance(x, (torch.Tensor, torch.SymInt)) else None for x in fake_inputs]
        sources = [LocalSource(input_name(k)) for k in range(len(fake_inputs))]
        unbacked = [g for g in shape_env.guards if free_unbacked_symbols(g.expr)]
        if unbacked:
            raise AotgradCompileError(
                f"aotgrad: the program branches on a data-dependent size ({unbacked[0].expr}); "
                "this is not supported with dynamic shapes."
            )
        produced = shape_env.produce_guards(
            [p for p in placeholders if p is not None],
            [s for s, p in zip(sources, placeholders) if p is not None],
        )
        # An int input specialised to a constant (0 or 1) is no placeholder the shape
        # environment guards: its value is.
        constants = [f"{input_name(k)} == {x}" for k, x in enumerate(fake_inputs) if type(x) is int]
        return ShapeGuard(tuple(_as_python(g) for g in produced) + tuple(constants), len(fake_inputs))

    def failure(self, graph_inputs: Sequence[Any]) -> str | None:
        """The first guard these inputs violate (as written over ``t0, t1, ...``), or None."""
        params = _params(self.num_inputs)
        for g in self.guards:
            if not eval(f"lambda {params}: {g}", dict(SYMPY_INTERP))(*graph_inputs):
                return g
        return None

    def __repr__(self) -> str:
        return f"ShapeGuard({' and '.join(self.guards) or 'True'})"
