"""Ops whose outputs share memory with their input without being views of it:
``unsafe_split``, ``unsafe_chunk`` and ``unsafe_split_with_sizes`` (``torch.*``, ``Tensor.*``
and ``torch.ops.aten.*``).

Eager's outputs are no autograd views (``_base`` None, a version counter of their own, an
``UnsafeSplitBackward0`` history, in-place ops on them allowed) but address the input's memory.
Functionalization takes them for fresh tensors with storages of their own, while the traced
graph runs ``aten.unsafe_split`` itself, whose outputs do share the input's memory at run time.

A data write, after the op, into one side (the functional storage of the op's input: the
input, any view, ``detach()``ed or ``.data`` alias of it, taken before or after, an aliased
graph input in the run over their synthetic base; or of an output: an output, a view of it,
an unsafe op's output of it) leaves the functional value of every other storage of those
memory locations *stale*: eager's holds the write, the trace's does not. Storages on disjoint
memory stay as they are: two outputs of one op, and what was taken of each. Writes are found
by functionalization's per-storage mutation counter after each of the program's calls (so a
write inside another op, ``F.relu(inplace=True)``, is found too). :class:`UnsafeSplits` (run
by the analysis only) refuses at compile time, naming the op and the user's lines, where a
stale value is observed:

- a later call of the program uses a tensor of a stale storage (the write would show there);
- the call that writes reads the other side too (eager's kernel may raise its overlap error,
  or read what it writes);
- (:meth:`UnsafeSplits.check_outputs`) the function returns one, or a graph input is one (the
  caller holds it after the call), or eager's autograd saved one for backward (its backward
  would read the write: eager's version counters are separate across the op; any, where a
  custom ``autograd.Function`` is in the backward);
- the function returns a written output (or a view of one): its new value is a buffer of
  its own, where eager's size, strides and offset address the op's input's memory;
- a returned output whose memory is that of a graph input the traced forward hands the
  program as a copy (an input it writes or detaches in place, or re-lays out for autograd):
  the caller's tensor and the output would not share memory.

A write whose other side is never observed (``gates.unsafe_chunk(4, 1)``, then
``sigmoid_()`` of each chunk and ``gates`` unused) runs as eager. A returned output of an
intermediate, or of an input the program leaves in place, shares the memory the caller then
holds (the input, or the intermediate returned alongside), as eager's.

The ops are recorded at the program's calls, which torch-function modes see in every
spelling (``torch.ops.aten.unsafe_split.Tensor`` too); an op another op runs inside itself
(``lstm_cell``'s ``unsafe_chunk``, whose outputs it writes in place) is that op's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode

from ..errors import AotgradCompileError, current_user_line
from .metadata import InputInfo
from .op_args import tree_leaves
from .saved_tensors import _saved_values

__all__ = ["UnsafeSplits"]

#: the ops (by name: ``torch.unsafe_split``, ``Tensor.unsafe_split`` and the ATen op are
#: different objects)
_UNSAFE_OPS = frozenset({"unsafe_split", "unsafe_chunk", "unsafe_split_with_sizes"})

_USE_VIEWS = "Use split/chunk/split_with_sizes (views, which the trace follows), or clone() the outputs."


@dataclass(eq=False)
class _UnsafeOp:
    """One call of an unsafe op: its input's storage and each output's, in order."""

    name: str
    line: str
    source: StorageWeakRef
    outputs: list[StorageWeakRef] = field(default_factory=list)


@dataclass
class _Stale:
    """Why a storage's functional value is not eager's memory: the op that shares it, and
    the write into the other side."""

    op: _UnsafeOp
    writer: str


def _op_name(func: Any) -> str | None:
    """``func``'s name; an ATen overload's (``torch.ops.aten.unsafe_split.Tensor``, which
    torch-function modes see too) without the overload."""
    packet = getattr(func, "overloadpacket", None)
    return getattr(packet if packet is not None else func, "__name__", None)


def _mutation_counter(t: FunctionalTensor) -> int:
    """Functionalization's count of data writes into ``t``'s storage (through any alias)."""
    return torch._functionalize_mutation_counter(t.elem)


def _storage(t: FunctionalTensor) -> StorageWeakRef:
    with torch._C.DisableTorchFunction():
        return StorageWeakRef(t.untyped_storage())


def _storages(values: Any) -> list[StorageWeakRef]:
    return [_storage(t) for t in tree_leaves(values) if type(t) is FunctionalTensor]


class UnsafeSplits(TorchFunctionMode):
    """Records the program's unsafe ops, the writes into their memory, and refuses a use of
    what such a write left stale (see the module docstring). Entered above the analysis's
    other modes: it sees the program's own calls, and reads the counters once each returned."""

    def __init__(self) -> None:
        super().__init__()
        #: an output's storage → (its op, its index among the op's outputs)
        self.made_by: dict[StorageWeakRef, tuple[_UnsafeOp, int]] = {}
        #: a storage → the unsafe ops taken of it
        self.taken_of: dict[StorageWeakRef, list[_UnsafeOp]] = {}
        #: each storage of an op's input or output → a tensor on it, and its mutation counter
        #: as last read
        self.counters: dict[StorageWeakRef, tuple[FunctionalTensor, int]] = {}
        self.stale: dict[StorageWeakRef, _Stale] = {}
        #: outputs' storages written after their op → why (their new value is a buffer of
        #: its own, eager's stays in the op's input's memory)
        self.written_outputs: dict[StorageWeakRef, _Stale] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _op_name(func)
        used = _storages((args, kwargs)) if self.counters else []
        if self.stale:
            self._refuse_stale(used, f"{name} at {current_user_line()} uses it")
        out = func(*args, **kwargs)
        if self.counters:
            self._note_writes(f"{name} at {current_user_line()}")
            # (eager's kernel reads the other side while it writes: its overlap check may
            # raise, and what it reads may be the write)
            self._refuse_stale(used, "that op itself reads it")
        if name in _UNSAFE_OPS:
            self._note(name, args, kwargs, out)
        return out

    def _note(self, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        """Record the op's input and outputs (functional tensors only)."""
        source = args[0] if args else kwargs.get("input", kwargs.get("self"))
        outputs = [t for t in tree_leaves(out) if type(t) is FunctionalTensor]
        if type(source) is not FunctionalTensor or not outputs:
            return
        op = _UnsafeOp(name, current_user_line(), _storage(source))
        self.taken_of.setdefault(op.source, []).append(op)
        for t in (source, *outputs):
            self.counters.setdefault(_storage(t), (t, _mutation_counter(t)))
        for k, t in enumerate(outputs):
            op.outputs.append(_storage(t))
            if op.outputs[-1] != op.source:  # (one functionalization holds as its input's is exact)
                self.made_by[op.outputs[-1]] = (op, k)

    def _note_writes(self, writer: str) -> None:
        """After a call (``writer``): every storage written since the last call leaves the
        storages sharing its memory stale."""
        for storage, (t, counter) in list(self.counters.items()):
            now = _mutation_counter(t)
            if now == counter:
                continue
            self.counters[storage] = (t, now)
            if storage in self.made_by:
                self.written_outputs.setdefault(storage, _Stale(self.made_by[storage][0], writer))
            for other, op in self._sharing_memory(storage):
                self.stale.setdefault(other, _Stale(op, writer))

    def _path_up(self, storage: StorageWeakRef) -> list[tuple[StorageWeakRef, tuple[_UnsafeOp, int] | None]]:
        """``storage`` and the inputs of the ops that made it, up to one no op made, each with
        the (op, output index) through which its predecessor in the list was made of it."""
        path: list[tuple[StorageWeakRef, tuple[_UnsafeOp, int] | None]] = [(storage, None)]
        while storage in self.made_by:
            op, k = self.made_by[storage]
            storage = op.source
            path.append((storage, (op, k)))
        return path

    def _component(self, storage: StorageWeakRef) -> set[StorageWeakRef]:
        """The storages the unsafe ops connect ``storage`` to (itself included)."""
        seen = {storage}
        pending = [storage]
        while pending:
            s = pending.pop()
            linked = [self.made_by[s][0].source] if s in self.made_by else []
            linked += [o for op in self.taken_of.get(s, ()) for o in op.outputs]
            for other in linked:
                if other not in seen:
                    seen.add(other)
                    pending.append(other)
        return seen

    def _sharing_memory(self, written: StorageWeakRef) -> list[tuple[StorageWeakRef, _UnsafeOp]]:
        """The other storages whose memory may overlap ``written``'s, each with the unsafe op
        nearest ``written`` on the way: all the connected ones but those reached through
        another output of an op on the way up (outputs of one op are disjoint memory)."""
        up = self._path_up(written)
        on_path = {s: i for i, (s, _) in enumerate(up)}
        found = []
        for other in self._component(written) - {written}:
            other_up = self._path_up(other)
            # the lowest common ancestor: the first of other's path on written's
            j = next(j for j, (s, _) in enumerate(other_up) if s in on_path)
            i = on_path[other_up[j][0]]
            down_to_written, down_to_other = (up[i][1] if i else None), (other_up[j][1] if j else None)
            if down_to_written and down_to_other and down_to_written[0] is down_to_other[0] and (
                down_to_written[1] != down_to_other[1]
            ):
                continue  # two outputs of one op (or what was taken of them): disjoint
            # (the op that made ``written``; for an op's input, the op down to ``other``)
            nearest = up[1][1] if len(up) > 1 else down_to_other
            found.append((other, nearest[0]))
        return found

    def _refuse_stale(
        self, storages: list[StorageWeakRef], how: str, stale_of: dict[StorageWeakRef, _Stale] | None = None
    ) -> None:
        """Raise where one of ``storages`` is in ``stale_of`` (``self.stale`` by default)."""
        for storage in storages:
            stale = (self.stale if stale_of is None else stale_of).get(storage)
            if stale is not None:
                raise AotgradCompileError(
                    f"aotgrad: {stale.op.name} at {stale.op.line} returns tensors that share memory "
                    "with its input without being views of it, which the traced program cannot "
                    f"follow; {stale.writer} writes into that memory after it, and {how} where "
                    f"eager's holds the write. {_USE_VIEWS}"
                )

    def check_outputs(self, outputs: list[Any], inputs: list[Any], input_info: list[InputInfo]) -> None:
        """Refuse what the caller or eager's backward would see of a stale storage: a returned
        tensor on one, a graph input on one, a tensor autograd saved on one (walking the
        autograd graph from the outputs and inputs, as ``saved_tensors.find_eager_saved``);
        and a returned output (or a view of one) of an unsafe op whose memory is, through the
        op's input (and the unsafe ops that made it), that of a graph input the traced forward
        runs the program on a copy of (``tracing._functional_forward``: an input written or
        detached in place, or re-laid out for autograd; conservatively, whether or not it
        requires grad). Run under the analysis's fake and functional modes."""
        if not self.made_by:
            return
        for j, o in enumerate(outputs):
            self._refuse_stale(
                _storages(o), f"the function returns that output (output {j}), a buffer of its own "
                "after the write (eager's size, strides and offset address the input's memory)",
                self.written_outputs,
            )
        if self.stale:
            for j, o in enumerate(outputs):
                self._refuse_stale(_storages(o), f"the function returns it (output {j})")
            for i, f in enumerate(inputs):
                self._refuse_stale(_storages(f), f"the caller's input {i} holds it after the call")
            saved = _saved_storages([*outputs, *inputs])
            if saved is None:
                saved = list(self.stale)  # (refused by the first: the backward may read any)
            self._refuse_stale(saved, "eager's autograd saved it for backward (or a custom Function's backward may read it)")
        copied = {
            _storage(f): i for i, (f, info) in enumerate(zip(inputs, input_info))
            if type(f) is FunctionalTensor and (
                info.mutates_data or info.detached_in_place or info.relaid_out_under_no_grad
                or info.grad_layout_at_use is not None
            )
        }
        for j, o in enumerate(outputs):
            if type(o) is not FunctionalTensor:
                continue
            for storage, made in self._path_up(_storage(o))[1:]:
                if storage in copied:
                    raise AotgradCompileError(
                        f"aotgrad: output {j}, made by {made[0].name} at {made[0].line}, shares "
                        f"memory with input {copied[storage]} without being a view of it; the program "
                        "changes that input in place, so the compiled function computes the output "
                        "from a copy, and the caller's later writes to one would miss the other. "
                        f"{_USE_VIEWS}"
                    )


def _saved_storages(roots: list[Any]) -> list[StorageWeakRef] | None:
    """The storages of the tensors eager's autograd saved in the graph behind ``roots``;
    None where a custom ``autograd.Function`` is in it (its backward may read tensors it
    kept on ``ctx`` otherwise than by ``save_for_backward``)."""
    pending = [t.grad_fn for t in roots if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    seen: set[Any] = set()
    found = []
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            return None
        found += [_storage(v) for v, error, _ in _saved_values(node) if type(v) is FunctionalTensor]
        pending.extend(n for n, _ in node.next_functions if n is not None)
    return found
