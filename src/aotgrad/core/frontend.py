"""The call boundary: flatten a call's pytree, split tensors from constants, dedupe, guard.

:class:`InputLayout` says, for one compiled entry, where the tensors and the non-tensor
constants sit among the flattened leaves of ``(args, kwargs)`` and which leaves are the same
tensor object. :class:`EntryGuard` decides in one cheap check whether a new call may reuse
the entry: same pytree structure, same constants, same grad mode, each tensor's shape /
stride / dtype / device / requires_grad (checked in C++ by dynamo's ``TensorGuards``), and
the same aliasing pattern where the entry depends on it.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._C._dynamo.guards import TensorGuards
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from ..errors import AotgradCompileError
from .metadata import ViewAndMutationMetadata
from .subclasses import TensorStructure, structure_check
from .symbolic import ShapeGuard, is_symbolic

__all__ = ["MISS", "EntryGuard", "GuardMismatch", "InputLayout", "flatten_call", "layout_for", "storage_groups"]

#: what a fast call (:meth:`EntryGuard.fast_call`) returns when its guard does not hold
MISS = object()

_CONSTANT_TYPES = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)


def flatten_call(args: tuple, kwargs: dict) -> tuple[list[Any], pytree.TreeSpec]:
    """Flatten ``(args, kwargs)`` into leaves and their spec."""
    return pytree.tree_flatten((args, kwargs))


def _constant_key(value: Any) -> Any:
    # bool/int/float compare equal across types (True == 1 == 1.0): key on the type too;
    # floats by bit pattern so that -0.0 and nan are told apart and nan matches itself.
    if isinstance(value, float):
        return (float, value.hex() if math.isfinite(value) else repr(value))
    return (type(value), value)


def storage_groups(tensors: list[torch.Tensor]) -> tuple[int, ...]:
    """For each tensor, the index of the first tensor sharing its storage."""
    first: dict[int, int] = {}
    keys = [t.untyped_storage()._cdata for t in tensors]
    return tuple([first.setdefault(k, i) for i, k in enumerate(keys)])


def leaf_state(t: torch.Tensor) -> tuple[bool, bool, bool]:
    """(is a leaf, is a view of a leaf, is a view): what decides whether eager allows an
    in-place op, and a ``detach_()`` (refused on any view)."""
    return (t.is_leaf, t._base is not None and t._base.is_leaf, t._base is not None)


def _storage_use_count(t: torch.Tensor) -> int:
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


#: the use count of a storage that only one tensor holds (as seen through _storage_use_count)
_EXCLUSIVE_USE_COUNT = _storage_use_count(torch.empty(1))


def _picker(indices: tuple[int, ...]) -> Callable[[Any], tuple]:
    """``pick(seq) -> tuple(seq[i] for i in indices)``, in C (``itemgetter``)."""
    if len(indices) == 1:
        (i,) = indices
        return lambda seq: (seq[i],)
    return operator.itemgetter(*indices)


@dataclass(frozen=True)
class InputLayout:
    """Where the tensors of a call sit, and which are the same object.

    ``tensor_positions``: leaf indices holding tensors. ``constants``: (leaf index, value) of
    every other leaf, baked into the graph. ``distinct_of_tensor``: for each tensor leaf,
    the index of its distinct input (the same object passed twice is one distinct input).
    ``distinct_tensors``: for each distinct input, its first tensor-leaf index. The distinct
    inputs are the graph's inputs unless some are merged into synthetic bases
    (:mod:`aotgrad.core.aliasing`).
    ``is_flat``: the call was ``fn(*tensors)`` with no kwargs and no constants, so the
    positional args are the tensor leaves themselves.
    ``symint_positions``: int leaves that are graph inputs (SymInts in a symbolic trace),
    passed after the distinct tensors; the other ints are constants.
    """

    in_spec: pytree.TreeSpec
    num_leaves: int
    tensor_positions: tuple[int, ...]
    constants: tuple[tuple[int, Any], ...]
    distinct_of_tensor: tuple[int, ...]
    distinct_tensors: tuple[int, ...]
    is_flat: bool
    symint_positions: tuple[int, ...] = ()

    @property
    def has_duplicates(self) -> bool:
        return len(self.distinct_tensors) != len(self.tensor_positions)

    @property
    def num_distinct(self) -> int:
        return len(self.distinct_tensors)

    def tensors_of(self, leaves: list[Any]) -> list[torch.Tensor]:
        """The tensor leaves of a call, in order."""
        if self.is_flat:
            return leaves
        return [leaves[i] for i in self.tensor_positions]

    def distinct_inputs_of(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """The distinct inputs of a call's tensor leaves (one per tensor object)."""
        if not self.has_duplicates:
            return tensors
        return [tensors[i] for i in self.distinct_tensors]

    def call_inputs_of(self, leaves: list[Any]) -> list[Any]:
        """The distinct tensors of a call, then its int graph inputs (``symint_positions``)."""
        inputs = self.distinct_inputs_of(self.tensors_of(leaves))
        if self.symint_positions:
            return [*inputs, *(leaves[p] for p in self.symint_positions)]
        return inputs

    def rebuild_call(self, distinct_inputs: list[Any]) -> tuple[tuple, dict]:
        """Rebuild ``(args, kwargs)`` for the user function from the call inputs
        (:meth:`call_inputs_of`) and constants."""
        leaves: list[Any] = [None] * self.num_leaves
        for pos, g in zip(self.tensor_positions, self.distinct_of_tensor):
            leaves[pos] = distinct_inputs[g]
        for k, pos in enumerate(self.symint_positions):
            leaves[pos] = distinct_inputs[self.num_distinct + k]
        for pos, value in self.constants:
            leaves[pos] = value
        return pytree.tree_unflatten(leaves, self.in_spec)

    def program_of(self, fn: Callable) -> Callable[..., tuple[list[Any], pytree.TreeSpec]]:
        """``fn`` as a function of the call inputs, returning its flattened outputs and
        their spec: what analysis and tracing run."""

        def program(*call_inputs: Any) -> tuple[list[Any], pytree.TreeSpec]:
            args, kwargs = self.rebuild_call(list(call_inputs))
            return pytree.tree_flatten(fn(*args, **kwargs))

        return program


def layout_for(leaves: list[Any], spec: pytree.TreeSpec, symint_positions: frozenset[int] = frozenset()) -> InputLayout:
    """Describe a call's leaves; raise a TypeError naming any leaf we cannot handle.
    The int leaves at ``symint_positions`` become graph inputs instead of constants."""
    tensor_positions = []
    constants = []
    for i, leaf in enumerate(leaves):
        if i in symint_positions and type(leaf) is int:
            continue
        if isinstance(leaf, torch.Tensor):
            if leaf.layout is not torch.strided:
                # Checked before anything looks at the tensor: guards and fake tensors
                # abort the process on some sparse layouts.
                raise AotgradCompileError(
                    f"aotgrad: input leaf {i} has layout {leaf.layout}; only strided (dense) "
                    "tensors are supported. Convert it with .to_dense() before the call."
                )
            tensor_positions.append(i)
        elif isinstance(leaf, _CONSTANT_TYPES):
            constants.append((i, leaf))
        else:
            raise TypeError(
                f"aotgrad: input leaf {i} has type {type(leaf).__name__}; inputs must be "
                "tensors, or int/float/bool/str/None (which are baked into the graph), inside "
                "tuples, lists and dicts."
            )
    first_by_id: dict[int, int] = {}
    distinct_of_tensor = []
    distinct_tensors = []
    for k, pos in enumerate(tensor_positions):
        ident = id(leaves[pos])
        if ident not in first_by_id:
            first_by_id[ident] = len(distinct_tensors)
            distinct_tensors.append(k)
        distinct_of_tensor.append(first_by_id[ident])
    symints = tuple(sorted(p for p in symint_positions if type(leaves[p]) is int))
    flat_spec = pytree.tree_flatten((tuple(leaves), {}))[1]
    is_flat = not constants and not symints and spec == flat_spec
    return InputLayout(
        in_spec=spec,
        num_leaves=len(leaves),
        tensor_positions=tuple(tensor_positions),
        constants=tuple(constants),
        distinct_of_tensor=tuple(distinct_of_tensor),
        distinct_tensors=tuple(distinct_tensors),
        is_flat=is_flat,
        symint_positions=symints,
    )


@dataclass(frozen=True)
class GuardMismatch:
    """Why a call may not reuse a compiled entry: the first check of its guard that fails.

    ``kind`` names the check: ``"grad_mode"``, ``"structure"`` (pytree spec), ``"constant"``
    (a non-tensor argument's value or type), ``"symint"`` (an int graph input's type),
    ``"tensor_count"``, ``"shape"``, ``"stride"``, ``"dtype"``, ``"device"``,
    ``"requires_grad"``, ``"type"`` (a tensor's class), ``"not_a_tensor"``, ``"tensor"`` (another per-tensor check of
    dynamo's ``TensorGuards``), ``"duplicates"`` (which arguments are the same tensor),
    ``"shape_guard"`` (a symbolic entry's size guard), ``"subclass"`` (a tensor subclass's
    flatten structure), ``"leafness"`` (of a mutated input), ``"storage"`` (which inputs
    share storage) and ``"aliasing"`` (where merged inputs sit in their storage). ``what``
    names the argument or guard, ``old`` is what the entry was compiled for and ``new``
    what this call has (both as text).
    """

    kind: str
    what: str
    old: str
    new: str

    def __str__(self) -> str:
        return f"{self.what}: {self.kind} was {self.old}, now {self.new}"


def _dims(dims: tuple[int | None, ...]) -> str:
    return "(" + ", ".join("s" if d is None else str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def _structure_texts(old: TensorStructure, new: Any) -> tuple[str, str]:
    """The part of two tensor-subclass structures that differs, as (old, new) text."""
    if not isinstance(new, TensorStructure) or old.cls is not new.cls:
        return _short(repr(old)), _short(repr(new))
    if old.ctx != new.ctx:
        return f"flatten context {_short(repr(old.ctx), 240)}", f"flatten context {_short(repr(new.ctx), 240)}"
    return _short(repr(old.inner), 240), _short(repr(new.inner), 240)


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _tensor_summary(t: torch.Tensor, sizes: list[int | None], strides: list[int | None]) -> dict[str, Any]:
    """What the guard checks of one tensor, as values to print (None: a symbolic size)."""
    return {
        "type": type(t).__name__, "shape": tuple(sizes), "stride": tuple(strides), "dtype": t.dtype, "device": t.device,
        "requires_grad": t.requires_grad,
    }


class EntryGuard:
    """Decides whether a call may reuse a compiled entry.

    Checked: pytree structure (unless the entry is flat and the call is positional-only),
    constants by type and value, grad mode, per-tensor metadata in C++ (``TensorGuards``),
    which tensor leaves are the same object (when the entry deduplicated any), the leafness
    of mutated inputs, and which
    share storage (when the entry mutates an input's data, since a mutation of one alias
    changes the others).
    """

    def __init__(
        self,
        layout: InputLayout,
        tensors: list[torch.Tensor],
        grad_enabled: bool,
        check_storage: bool,
        leafness: dict[int, tuple[bool, bool, bool]] | None = None,
        mutated_leaves: tuple[int, ...] | None = None,
        aliasing_check: Callable[[list[torch.Tensor]], bool] | None = None,
        symbolic_sizes: list[tuple[list[int | None], list[int | None]]] | None = None,
        shape_guard: ShapeGuard | None = None,
    ) -> None:
        self.layout = layout
        self.grad_enabled = grad_enabled
        # TensorGuards.check also fails when one object sits at two of its positions, so it
        # guards one tensor per distinct object; the duplicates are checked by identity
        # (``_duplicate_pairs``), and an identical object has identical metadata.
        #: picks the distinct tensors out of a call's tensor leaves (None: all are distinct)
        self._pick_distinct = _picker(layout.distinct_tensors) if layout.has_duplicates else None
        guarded = [tensors[k] for k in layout.distinct_tensors]
        # A symbolic size or stride is None here (not checked in C++): the shape guard
        # checks what the trace assumed of it.
        if symbolic_sizes is None:
            symbolic_sizes = [(list(t.size()), list(t.stride())) for t in guarded]
        self._tensor_guards = TensorGuards(
            *guarded,
            dynamic_dims_sizes=[sizes for sizes, _ in symbolic_sizes],
            dynamic_dims_strides=[strides for _, strides in symbolic_sizes],
        )
        # Read only to explain a miss (mismatch): the compile-time values of what is checked.
        self._tensor_summaries = tuple(
            _tensor_summary(t, sizes, strides) for t, (sizes, strides) in zip(guarded, symbolic_sizes, strict=True)
        )
        self._input_sizes = tuple(tuple(t.size()) for t in guarded)
        self._subclass_structures = {
            k: TensorStructure.of(t) for k, t in enumerate(guarded) if is_traceable_wrapper_subclass(t)
        }
        self.shape_guard = shape_guard
        self._constant_keys = tuple((pos, _constant_key(v)) for pos, v in layout.constants)
        self._duplicate_pairs = tuple(
            (layout.distinct_tensors[g], k)
            for k, g in enumerate(layout.distinct_of_tensor)
            if layout.distinct_tensors[g] != k
        )
        self._storage_groups = storage_groups(tensors) if check_storage else None
        # Tensor leaves whose data the entry mutates. When each of them was unaliased at
        # compile time and its storage is held by no other tensor now, it cannot alias
        # another input: O(#mutated) instead of looking at every input's storage.
        self._mutated_leaves: tuple[int, ...] = ()
        if check_storage:
            mutated = tuple(mutated_leaves or ())
            groups = self._storage_groups
            singletons = all(groups.count(groups[k]) == 1 for k in mutated)
            self._mutated_leaves = mutated if singletons and mutated else ()
        # Mutated inputs: eager rejects an in-place op on a leaf that requires grad, so
        # leafness decides between a working entry and the eager error; likewise inputs
        # detached in place (eager rejects detach_() of a view, at the detach_(), before the
        # program's later writes: the entry would make them, then raise).
        self._leafness = tuple((leafness or {}).items())
        # Synthetic bases depend on where the merged inputs sit in their storage.
        self._aliasing_check = aliasing_check
        # Graphs over a subclass's inner tensors depend on its flatten structure.
        self._subclass_check = structure_check(layout.distinct_inputs_of(tensors))

        self._relations = self._build_relations()

    @classmethod
    def for_entry(
        cls,
        layout: InputLayout,
        tensors: list[torch.Tensor],
        grad_enabled: bool,
        call_metadata: ViewAndMutationMetadata,
        aliasing_check: Callable[[list[torch.Tensor]], bool] | None = None,
        fake_inputs: list[Any] | None = None,
        shape_guard: ShapeGuard | None = None,
    ) -> EntryGuard:
        """The guard of an entry compiled for this call: ``call_metadata`` is the analysis
        with the call's distinct inputs taken one by one (what the guard speaks of);
        ``aliasing_check`` is the synthetic bases' layout check, if the entry has any.
        A symbolic trace gives its ``fake_inputs`` (sizes the trace left symbolic are not
        checked one by one) and its ``shape_guard`` (what the trace assumed of them).

        Storage sharing is checked when the entry mutates some input's data (a mutation of
        one alias changes the others), and the leafness of every mutated or detached input
        (it decides between the entry and eager's in-place-on-a-leaf or detach_()-of-a-view
        error).
        """
        call_inputs = layout.distinct_inputs_of(tensors)
        data_mutated = set(call_metadata.data_mutated_input_indices)
        return cls(
            layout,
            tensors,
            grad_enabled,
            check_storage=bool(data_mutated),
            leafness={
                layout.distinct_tensors[i]: leaf_state(call_inputs[i])
                for i in sorted({*call_metadata.mutated_input_indices, *call_metadata.detached_call_inputs})
            },
            mutated_leaves=tuple(k for k, g in enumerate(layout.distinct_of_tensor) if g in data_mutated),
            aliasing_check=aliasing_check,
            symbolic_sizes=None if shape_guard is None else [
                ([None if is_symbolic(x) else int(x) for x in f.size()],
                 [None if is_symbolic(x) else int(x) for x in f.stride()])
                for f in fake_inputs[: layout.num_distinct]
            ],
            shape_guard=shape_guard,
        )

    def fast_call(self, run: Callable[[tuple], Any]) -> Callable[[tuple], Any] | None:
        """For a flat entry, one closure ``fast(args)`` for a positional-only call: grad mode,
        tensor metadata and the entry's relations checks, then ``run(args)``; :data:`MISS`
        when a check fails. Fusing check and run saves a Python call per call; None for a
        non-flat entry (its calls go through :meth:`check_leaves`)."""
        if not self.layout.is_flat:
            return None
        grad_enabled = self.grad_enabled
        is_grad_enabled = torch.is_grad_enabled
        miss = MISS
        relations = self._relations if self._has_relations else None
        # TensorGuards.check raises TypeError for a wrong number of args, and returns
        # False for a non-tensor where a tensor was: no separate length check.
        tensor_check = self._tensor_guards.check
        pick = self._pick_distinct
        shape_check = None if self.shape_guard is None else self.shape_guard.check
        if shape_check is not None and pick is not None:
            shape_guard_check = shape_check

            def shape_check(*args: Any) -> bool:
                return shape_guard_check(*pick(args))

        if pick is not None:
            n = self.layout.num_leaves
            guards_check = tensor_check

            def tensor_check(*args: Any) -> bool:
                # the picked tuple has TensorGuards' arity whatever len(args) is: check it
                return len(args) == n and guards_check(*pick(args))

        def fast(args: tuple) -> Any:
            if is_grad_enabled() is not grad_enabled:
                return miss
            try:
                if not tensor_check(*args):
                    return miss
            except TypeError:
                return miss
            if shape_check is not None and not shape_check(*args):
                return miss
            if relations is not None and not relations(args):
                return miss
            return run(args)

        return fast

    @property
    def _has_relations(self) -> bool:
        return bool(
            self._leafness or self._duplicate_pairs or self._storage_groups is not None
            or self._aliasing_check is not None or self._subclass_check is not None
        )

    def _build_relations(self) -> Callable[[Any], bool]:
        """``relations(tensors) -> bool`` over the call's tensor leaves, doing only the checks
        this entry has (it runs on every call that has any); O(#mutated + #duplicates)
        unless a mutated input shares its storage (then O(#inputs))."""
        leafness = tuple((k, *state) for k, state in self._leafness)
        duplicate_pairs = self._duplicate_pairs
        groups = self._storage_groups
        mutated = self._mutated_leaves
        aliasing_check = self._aliasing_check
        subclass_check = self._subclass_check
        pick = self._pick_distinct
        use_count = torch._C._storage_Use_Count
        exclusive_count = _EXCLUSIVE_USE_COUNT

        def relations(tensors: Any) -> bool:
            for k, leaf, base_leaf, view in leafness:
                t = tensors[k]
                if t.is_leaf is not leaf:
                    return False
                base = t._base
                if (base is not None) is not view or (base is not None and base.is_leaf) is not base_leaf:
                    return False
            for a, b in duplicate_pairs:
                if tensors[a] is not tensors[b]:
                    return False
            if groups is not None:
                exclusive = bool(mutated)
                for k in mutated:
                    if use_count(tensors[k].untyped_storage()._cdata) != exclusive_count:
                        exclusive = False
                        break
                if not exclusive and storage_groups(tensors) != groups:
                    return False
            if aliasing_check is None and subclass_check is None:
                return True
            distinct = tensors if pick is None else pick(tensors)
            if subclass_check is not None and not subclass_check(distinct):
                return False
            return aliasing_check is None or aliasing_check(distinct)

        return relations

    def check_leaves(self, leaves: list[Any], spec: pytree.TreeSpec) -> bool:
        """True when a call with these flattened leaves and spec may reuse the entry."""
        layout = self.layout
        if torch.is_grad_enabled() is not self.grad_enabled or spec != layout.in_spec:
            return False
        # The same checks as mismatch(), without building any explanation.
        for pos, key in self._constant_keys:
            if _constant_key(leaves[pos]) != key:
                return False
        for pos in layout.symint_positions:
            if type(leaves[pos]) is not int:
                return False
        tensors = layout.tensors_of(leaves)
        guarded = tensors if self._pick_distinct is None else self._pick_distinct(tensors)
        try:
            if not self._tensor_guards.check(*guarded):
                return False
        except TypeError:
            return False
        if self.shape_guard is not None and not self.shape_guard.check(*layout.call_inputs_of(leaves)):
            return False
        if self._subclass_check is not None and not self._subclass_check(guarded):
            return False
        return not self._has_relations or self._relations(tensors)

    def failure(self, leaves: list[Any], spec: pytree.TreeSpec) -> str | None:
        """Why a call with these flattened leaves and spec may not reuse the entry (the
        first check that fails, in words), or None when it may."""
        mismatch = self.mismatch(leaves, spec)
        return None if mismatch is None else str(mismatch)

    def mismatch(self, leaves: list[Any], spec: pytree.TreeSpec) -> GuardMismatch | None:
        """The first check a call with these flattened leaves and spec fails, with the
        entry's value and the call's, or None when the call may reuse the entry. Runs only
        on a miss: it does each check again, slowly, to say which one failed."""
        layout = self.layout
        if torch.is_grad_enabled() is not self.grad_enabled:
            return GuardMismatch("grad_mode", "grad mode", str(self.grad_enabled), str(torch.is_grad_enabled()))
        if spec != layout.in_spec:
            return GuardMismatch(
                "structure", "the arguments' structure (pytree spec)", _short(str(layout.in_spec)), _short(str(spec))
            )
        for pos, key in self._constant_keys:
            if _constant_key(leaves[pos]) != key:
                new = leaves[pos]
                old_text, new_text = repr(key[1]), repr(new)
                if old_text == new_text or type(new) is not key[0]:
                    old_text, new_text = f"{old_text} ({key[0].__name__})", f"{new_text} ({type(new).__name__})"
                return GuardMismatch("constant", f"non-tensor argument leaf {pos}", old_text, new_text)
        for pos in layout.symint_positions:
            if type(leaves[pos]) is not int:
                return GuardMismatch("symint", f"argument leaf {pos}", "an int", f"a {type(leaves[pos]).__name__}")
        tensors = layout.tensors_of(leaves)
        if len(tensors) != len(layout.tensor_positions):
            return GuardMismatch(
                "tensor_count", "the number of tensor arguments", str(len(layout.tensor_positions)), str(len(tensors))
            )
        guarded = tensors if self._pick_distinct is None else self._pick_distinct(tensors)
        names = [f"argument leaf {layout.tensor_positions[k]}" for k in layout.distinct_tensors]
        try:
            passed = self._tensor_guards.check(*guarded)
        except TypeError:
            passed = False
        if not passed:
            return self._tensor_mismatch(guarded, names)
        if self.shape_guard is not None:
            call_inputs = layout.call_inputs_of(leaves)
            if not self.shape_guard.check(*call_inputs):
                failed = self.shape_guard.failure(call_inputs)
                return GuardMismatch(
                    "shape_guard", f"shape guard failed: {failed}",
                    self._sizes_text(failed, self._input_sizes), self._sizes_text(failed, call_inputs),
                )
        if self._subclass_check is not None and not self._subclass_check(guarded):
            for k, old in self._subclass_structures.items():
                new = TensorStructure.of(guarded[k]) if isinstance(guarded[k], torch.Tensor) else guarded[k]
                if new != old:
                    return GuardMismatch(
                        "subclass", f"tensor-subclass {names[k]} (flatten structure)", *_structure_texts(old, new)
                    )
        return self._relations_mismatch(tensors)

    def _tensor_mismatch(self, guarded: list[Any], names: list[str]) -> GuardMismatch:
        """What dynamo's ``TensorGuards`` rejected, with the entry's and the call's values."""
        for k, t in enumerate(guarded):
            if not isinstance(t, torch.Tensor):
                return GuardMismatch("not_a_tensor", names[k], "a tensor", f"a {type(t).__name__}")
            old = self._tensor_summaries[k]
            new = _tensor_summary(t, list(t.size()), list(t.stride()))
            for what in ("type", "dtype", "device", "requires_grad"):
                if old[what] != new[what]:
                    return GuardMismatch(what, names[k], str(old[what]), str(new[what]))
            for what in ("shape", "stride"):
                # a symbolic (None) dim is checked by the shape guard, not here
                if len(old[what]) != len(new[what]) or any(
                    o is not None and o != n for o, n in zip(old[what], new[what])
                ):
                    return GuardMismatch(what, names[k], _dims(old[what]), _dims(new[what]))
        for k, t in enumerate(guarded):
            if any(t is other for other in guarded[:k]):
                j = next(j for j, other in enumerate(guarded[:k]) if t is other)
                return GuardMismatch(
                    "duplicates", f"{names[j]} and {names[k]}", "distinct tensors", "the same tensor"
                )
        text = str(self._tensor_guards.check_verbose(*guarded, tensor_check_names=names))
        return GuardMismatch("tensor", "a tensor argument", "as compiled", text)

    @staticmethod
    def _sizes_text(guard: str | None, inputs: Any) -> str:
        """The sizes (or int values) of the graph inputs ``t<k>`` that ``guard`` reads."""
        ks = sorted({int(k) for k in re.findall(r"\bt(\d+)\b", guard or "")})
        parts = []
        for k in ks:
            x = inputs[k] if k < len(inputs) else None
            parts.append(f"t{k}={tuple(x.size()) if isinstance(x, torch.Tensor) else x!r}")
        return ", ".join(parts) or "-"

    def _relations_mismatch(self, tensors: list[Any]) -> GuardMismatch | None:
        """Which relation between the inputs (leafness, identity, storage, synthetic-base
        layout) differs from the entry's, or None when they all hold."""
        if not self._has_relations or self._relations(tensors):
            return None
        names = [f"argument leaf {p}" for p in self.layout.tensor_positions]
        for k, state in self._leafness:
            now = leaf_state(tensors[k])
            if now != state:
                return GuardMismatch(
                    "leafness", f"mutated or detached input {names[k]} (is a leaf, is a view of a leaf, is a view)",
                    str(state), str(now),
                )
        for a, b in self._duplicate_pairs:
            if tensors[a] is not tensors[b]:
                return GuardMismatch("duplicates", f"{names[a]} and {names[b]}", "the same tensor", "distinct tensors")
        if self._storage_groups is not None:
            groups = storage_groups(tensors)
            if groups != self._storage_groups:
                return GuardMismatch(
                    "storage", "storage sharing (for each tensor argument, the first one sharing its storage)",
                    str(self._storage_groups), str(groups),
                )
        distinct = tensors if self._pick_distinct is None else self._pick_distinct(tensors)
        if self._aliasing_check is not None and not self._aliasing_check(distinct):
            return GuardMismatch(
                "aliasing", "aliased inputs merged into a synthetic base",
                "their compile-time offsets and base", "another offset or base",
            )
        return GuardMismatch("relations", "leafness, identity or storage sharing of the inputs", "as compiled", "different")

    def describe(self) -> str:
        return (
            f"EntryGuard(grad_enabled={self.grad_enabled}, tensors={len(self.layout.tensor_positions)}, "
            f"constants={len(self._constant_keys)}, duplicates={len(self._duplicate_pairs)}, "
            f"storage_checked={self._storage_groups is not None}, shape_guard={self.shape_guard!r})"
        )

    __repr__ = describe

