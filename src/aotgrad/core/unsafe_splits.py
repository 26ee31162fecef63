"""Ops whose outputs share memory with their input without being views of it:
``unsafe_split``, ``unsafe_chunk`` and ``unsafe_split_with_sizes`` (``torch.*``, ``Tensor.*``
and ``torch.ops.aten.*``).

Eager's outputs are no autograd views (``_base`` None, a version counter of their own, an
``UnsafeSplitBackward0`` history, in-place ops on them allowed) but address the input's memory.
Functionalization takes them for fresh tensors with storages of their own, while the traced
graph runs ``aten.unsafe_split`` itself, whose outputs do share the input's memory at run time.
So a program is exact as long as nothing writes into that memory after the op, and the graph
computes the op on the memory the caller holds. :class:`UnsafeSplits` (run by the analysis
only) refuses at compile time, naming the op and the user's lines:

- a data write, after the op, into the functional storage of the op's input (the input, any
  view, ``detach()``ed or ``.data`` alias of it, taken before or after; an aliased graph input
  in the run over their synthetic base) or of an output (an output, a view of it, an unsafe
  op's output of it). Writes are found by functionalization's per-storage mutation counter
  after each of the program's calls, so a write inside another op (``F.relu(inplace=True)``)
  is found too;
- (:meth:`UnsafeSplits.check_outputs`) a returned output whose memory is that of a graph input
  the traced forward hands the program as a copy (an input it writes or detaches in place, or
  re-lays out for autograd): the caller's tensor and the output would not share memory.

The ops are recorded at the program's calls, which torch-function modes see in every
spelling (``torch.ops.aten.unsafe_split.Tensor`` too); an op another op runs inside itself
(``lstm_cell``'s ``unsafe_chunk``, whose outputs it writes in place) is that op's own.

A returned output of an intermediate, or of an input the program leaves in place, shares the
memory the caller then holds (the input, or the intermediate returned alongside), as eager's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode

from ..errors import AotgradCompileError, current_user_line
from .metadata import InputInfo

__all__ = ["UnsafeSplits"]

#: the ops (by name: ``torch.unsafe_split``, ``Tensor.unsafe_split`` and the ATen op are
#: different objects)
_UNSAFE_OPS = frozenset({"unsafe_split", "unsafe_chunk", "unsafe_split_with_sizes"})

_USE_VIEWS = "Use split/chunk/split_with_sizes (views, which the trace follows), or clone() the outputs."


@dataclass
class _UnsafeOp:
    """One call of an unsafe op: a tensor of each storage whose writes it refuses (its input,
    each output) with that storage's mutation counter at the call."""

    name: str
    line: str
    tensors: list[FunctionalTensor]
    counters: list[int]


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


class UnsafeSplits(TorchFunctionMode):
    """Records the program's unsafe ops and refuses a later write into their memory (see the
    module docstring). Entered above the analysis's other modes: it sees the program's own
    calls, and checks the counters once each of them returned."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[_UnsafeOp] = []
        #: an output's functional storage → (its op, the op's input's storage)
        self.source_of: dict[StorageWeakRef, tuple[_UnsafeOp, StorageWeakRef]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.ops:
            self._refuse_writes(func)
        if _op_name(func) in _UNSAFE_OPS:
            self._note(func, args, kwargs, out)
        return out

    def _note(self, func, args: tuple, kwargs: dict, out: Any) -> None:
        """Record the op's input and outputs (functional tensors only)."""
        source = args[0] if args else kwargs.get("input", kwargs.get("self"))
        outputs = [t for t in pytree.tree_leaves(out) if type(t) is FunctionalTensor]
        if type(source) is not FunctionalTensor or not outputs:
            return
        op = _UnsafeOp(_op_name(func), current_user_line(), [source, *outputs], [])
        op.counters = [_mutation_counter(t) for t in op.tensors]
        self.ops.append(op)
        for t in outputs:
            self.source_of[_storage(t)] = (op, _storage(source))

    def _refuse_writes(self, func) -> None:
        """Raise where the call ``func`` that just returned wrote into a recorded storage."""
        for op in self.ops:
            if any(_mutation_counter(t) != c for t, c in zip(op.tensors, op.counters)):
                raise AotgradCompileError(
                    f"aotgrad: {op.name} at {op.line} returns tensors that share memory with its "
                    "input without being views of it, which the traced program cannot follow; "
                    f"{getattr(func, '__name__', func)} at {current_user_line()} writes into that "
                    "memory after it (through the input, a view or alias of it, or an output), "
                    f"and eager's other side would see the write. {_USE_VIEWS}"
                )

    def check_outputs(self, outputs: list[Any], inputs: list[Any], input_info: list[InputInfo]) -> None:
        """Refuse a returned output (or a view of one) of an unsafe op whose memory is, through
        the op's input (and the unsafe ops that made it), that of a graph input the traced
        forward runs the program on a copy of (``tracing._functional_forward``: an input
        written or detached in place, or re-laid out for autograd; conservatively, whether or
        not it requires grad)."""
        if not self.source_of:
            return
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
            storage = _storage(o)
            while storage in self.source_of:
                op, storage = self.source_of[storage]
                if storage in copied:
                    raise AotgradCompileError(
                        f"aotgrad: output {j}, made by {op.name} at {op.line}, shares memory with "
                        f"input {copied[storage]} without being a view of it; the program changes "
                        "that input in place, so the compiled function computes the output from a "
                        "copy, and the caller's later writes to one would miss the other. "
                        f"{_USE_VIEWS}"
                    )
