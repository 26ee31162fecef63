"""The tensors eager's autograd saves for backward, and the version check eager makes on them.

Eager's backward refuses a saved tensor whose version counter moved after it was saved:
"one of the variables needed for gradient computation has been modified by an inplace
operation". The compiled backward reads values of its own, which neither the program's later
in-place ops nor the caller's writes after the call touch, so that error would be lost. The
analysis run (:func:`find_eager_saved`) therefore walks eager's autograd graph on fake
tensors and records each saved tensor that

- the program itself changed after saving it (eager's backward raises whenever it reaches
  the node: :attr:`EagerSavedTensor.changed_by_program`), or
- shares a version counter with a tensor the caller holds after the call, a graph input or
  a forward output (the caller may change it before the backward: a *witness*).

The runtime reads the witnesses' versions at the end of each call (:class:`SavedVersions`)
and the Function's backward calls :func:`check_saved_versions` first, which raises eager's
error where eager's backward would reach a changed tensor.
"""

from __future__ import annotations

import contextlib
import functools
import re
import weakref
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

__all__ = [
    "EagerSavedTensor", "EagerSavedTensors", "SavedVersions", "check_saved_versions", "find_eager_saved",
    "note_backward_error", "note_saved_by_stand_in", "saving_into_copy", "saving_through_view",
    "versions_unchecked",
]

_MODIFIED = "one of the variables needed for gradient computation has been modified by an inplace operation"
_HINT = (
    "Hint: enable anomaly detection to find the operation that failed to compute its gradient, "
    "with torch.autograd.set_detect_anomaly(True, check_nan=False)."
)


@dataclass(frozen=True)
class EagerSavedTensor:
    """One tensor eager's autograd saved that its backward would check.

    ``description``: eager's words for it (``[torch.FloatTensor [3]], which is output 0 of
    Relu,``); None where it is the witness input itself, which eager describes as it is at
    the backward (its grad_fn then). ``changed_by_program``: eager's whole error when the program changed it after
    saving it, else None. ``witness``: index into :attr:`EagerSavedTensors.witnesses` of the
    caller-held tensor sharing its version counter (-1: none). ``reached_from``: forward-output
    positions from whose gradient eager's backward reaches the node that saved it.
    ``witness_itself``: it is the witness (a graph input or a returned output) itself, saved
    as an input of its node: eager's unpacking refuses it where the caller's tensor had a
    grad_fn and was detached in place since (``detach_()`` after the call: :data:`DETACHED_SAVED`)."""

    description: str | None
    changed_by_program: str | None
    witness: int
    reached_from: frozenset[int]
    witness_itself: bool = False


@dataclass(frozen=True)
class EagerSavedTensors:
    """The checked saved tensors of one entry, in the order eager's backward reaches their
    nodes (latest node first), and the witnesses the runtime reads after each call:
    ``(True, graph-input index)`` or ``(False, forward-output position)``."""

    entries: tuple[EagerSavedTensor, ...]
    witnesses: tuple[tuple[bool, int], ...]
    #: some entry is ``changed_by_program`` (else a backward whose witnesses kept their
    #: versions has nothing to refuse)
    changed_by_program: bool = False


@functools.cache
def _saved_attribute_names(node_type: type) -> tuple[tuple[str, str | None], ...]:
    """The attributes through which a C++ autograd node of this type unpacks what it saved,
    each with the attribute reading the same saved tensors without unpacking them
    (``_raw_saved_result``: ``SavedTensor`` objects), None where there is none (no tensor)."""
    names = dir(node_type)
    return tuple((a, "_raw" + a if "_raw" + a in names else None) for a in names if a.startswith("_saved_"))


def _unpacks_unwitnessed(raw: Any, witnessed: Container[StorageWeakRef]) -> bool:
    """Each saved tensor behind ``raw`` (a ``SavedTensor`` or a list of them) would unpack
    without error to a tensor of a storage outside ``witnessed``, known without unpacking it:
    unpacking a saved *output* makes a new tensor, a detach that runs through the analysis's
    Python modes (~0.2 ms each). Its data is held (not freed by a backward) and packed by no
    saved-tensor hooks (whose unpack hook may return anything), and it is at version 0: never
    changed (the analysis only moves version counters forward), so neither the version check
    nor the refusal of a view whose base changed can raise. A saved tensor so decided would
    be skipped by :func:`find_eager_saved` anyway: nothing the caller holds can change it.
    False where in doubt (then it is unpacked)."""
    for saved in raw if isinstance(raw, (tuple, list)) else (raw,):
        if getattr(saved, "unpack_hook", True) is not None:
            return False
        data = getattr(saved, "data", None)
        if not isinstance(data, torch.Tensor) or data._version != 0:
            return False
        if StorageWeakRef(data.untyped_storage()) in witnessed:
            return False
    return True


#: eager's error unpacking a saved tensor that was a non-leaf input of its node and has since
#: been detached in place (SavedVariable::unpack)
DETACHED_SAVED = (
    "Trying to use a saved tensor that has been detached in-place, i.e. with .detach_().This is not "
    "supported, please use out-of-place `.detach()` instead"
)


#: eager's error unpacking a saved view made in no_grad mode or by a multi-output op whose
#: base (or another view of it) changed in place since (the view's grad_fn is refused)
_VIEW_MODIFIED = "its base or another view of its base has been modified inplace"


#: the key, in a ``CopySlices`` node's ``metadata``, of what the in-place op it wraps saved
#: (:func:`saving_through_view`): autograd exposes neither the wrapped node nor its saved tensors
_WRAPPED_SAVED = "aotgrad.wrapped_saved"


def saving_through_view(run: Callable[[], Any], view: torch.Tensor, op_name: str) -> Any:
    """``run()``, an in-place op ``op_name`` on ``view`` (a view autograd records), with the
    tensors its node saves noted on the ``CopySlices`` node it leaves on the view's base:
    eager's backward checks their versions too, but the node holding them is wrapped inside
    ``CopySlices``, out of :func:`find_eager_saved`'s reach (fuzz seed 422024: ``t0 =
    a.unsqueeze(-1); t0.sigmoid_()``, then the caller changes ``a``). Each is noted with its
    version when saved (autograd's own check is off for them: nothing unpacks them here)."""
    out, saved = saving_into_copy(run)
    base = view._base
    node = base.grad_fn if base is not None else None
    if saved and type(node).__name__ == "CopySlices":
        # eager describes a saved output of the wrapped node by that node (``output 0 of Sigmoid``)
        node.metadata[_WRAPPED_SAVED] = [
            (t, version, f"[{t.type()} {list(t.shape)}], which is output 0 of {_camel(op_name)}," if t is view else None, 0)
            for t, version in saved
        ]
    return out


def saving_into_copy(run: Callable[[], Any]) -> tuple[Any, list[tuple[torch.Tensor, int]]]:
    """``(run(), saved)``: ``run()``, an in-place op on a copy standing in for the tensor
    eager runs it on (core/overlapping_writes.py), with ``saved`` each tensor its node saved
    and its version then, for :func:`note_saved_by_stand_in` (autograd's own check is off
    for them: nothing unpacks them here). :func:`saving_through_view` notes them the same
    way."""
    saved: list[tuple[torch.Tensor, int]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append((t, t._version))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, _same):
        out = run()
    return out, saved


def note_saved_by_stand_in(
    saved: list[tuple[torch.Tensor, int]], copy: torch.Tensor, dest: torch.Tensor, dest_version: int, op_name: str
) -> None:
    """Eager ran the in-place op ``op_name`` on ``dest`` (at version ``dest_version``
    before it), the trace on ``copy`` (:func:`saving_into_copy`'s ``saved``), then wrote the
    result into ``dest``'s memory. Eager's node saved ``dest`` where the trace's saved
    ``copy``, and its backward checks ``dest``'s version, which the program's later writes
    move (fuzz seeds 2000073, 1011023: ``t = x.expand(...); t.relu_(); t.mul_(y)``); the
    copy never changes. Noted on the trace's node for :func:`find_eager_saved`, with eager's
    version numbers (``dest``'s version after the op: one more than before it)."""
    node = copy.grad_fn
    if node is None or not saved:
        return
    offset = dest_version + 1 - dest._version
    node.metadata[_WRAPPED_SAVED] = [
        (dest, dest._version, f"[{dest.type()} {list(dest.shape)}], which is output 0 of {_camel(op_name)},", offset)
        if t is copy else (t, version, None, 0)
        for t, version in saved
    ]


def _camel(op_name: str) -> str:
    """An in-place op's name as eager's version error names its node (``Sigmoid``): the op
    in CamelCase, without the trailing underscore."""
    return "".join(part.capitalize() for part in op_name.rstrip("_").split("_"))


def _wrapped_saved(node: Any) -> Iterable[tuple[Any, BaseException | None, str | None]]:
    """:func:`_saved_values` noted on ``node``: of the node a ``CopySlices`` wraps
    (:func:`saving_through_view`), or of the one an op on a stand-in copy made
    (:func:`note_saved_by_stand_in`). Versions in the message are ``offset`` past the
    trace's."""
    for t, version, description, offset in node.metadata.get(_WRAPPED_SAVED, ()):
        if t._version != version:
            text = description or _describe(t)
            yield None, RuntimeError(
                f"{_MODIFIED}: {text} is at version {t._version + offset}; expected version "
                f"{version + offset} instead. {_HINT}"
            ), None
        else:
            yield t, None, description


def _saved_values(
    node: Any, witnessed: Container[StorageWeakRef] | None = None
) -> Iterable[tuple[Any, BaseException | None, str | None]]:
    """``(saved value, None, eager's description or None)`` per tensor ``node`` saved, or
    ``(None, error, None)`` where eager's unpacking raises (the tensor changed since it was
    saved); also those of the node a ``CopySlices`` wraps (:func:`saving_through_view`).
    Where ``witnessed`` is given, saved tensors that unpack without error to a storage
    outside it may be left out (:func:`_unpacks_unwitnessed`)."""
    yield from _wrapped_saved(node)
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        names: tuple[tuple[str, str | None], ...] = (("saved_tensors", None),)
    else:
        names = _saved_attribute_names(type(node))
    for name, raw_name in names:
        if witnessed is not None and raw_name is not None and _unpacks_unwitnessed(getattr(node, raw_name), witnessed):
            continue  # (find_eager_saved would skip it)
        try:
            value = getattr(node, name)
        except RuntimeError as exc:
            if _MODIFIED in str(exc) or _VIEW_MODIFIED in str(exc):
                yield None, exc, None
            continue
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, torch.Tensor):
                yield v, None, None


#: the key, in an autograd node's ``metadata``, of eager's error where eager's backward raises
#: at the node the program's rewritten op made in its stead (:func:`note_backward_error`)
_BACKWARD_ERROR = "aotgrad.eager_backward_error"


def note_backward_error(node: Any, message: str) -> None:
    """Eager's backward raises ``message`` where it reaches the op that made ``node`` (a
    rewritten op's node, core/overlapping_writes.py): :func:`find_eager_saved` records it as
    an entry the backward refuses, as a saved tensor the program changed."""
    node.metadata[_BACKWARD_ERROR] = message


def _noted_error(node: Any) -> str | None:
    if type(node).__name__ != "WhereBackward0":  # the only node noted (no metadata made elsewhere)
        return None
    return node.metadata.get(_BACKWARD_ERROR)


def _op_name(node: Any) -> str:
    """An autograd node's forward op as eager's version error names it (``Cos``)."""
    return re.sub(r"Backward\d*$", "", node.name())


def _describe(t: torch.Tensor) -> str:
    """Eager's words for a saved tensor in its version error."""
    text = f"[{t.type()} {list(t.shape)}]"
    if t.grad_fn is not None:
        name = re.sub(r"Backward\d*$", "", t.grad_fn.name())
        text += f", which is output {t.output_nr} of {name},"
    return text


def find_eager_saved(
    roots: Sequence[tuple[int, Any]],
    graph_inputs: Sequence[Any],
    forward_outputs: Sequence[Any],
    input_nodes: Iterable[Any],
    detached_non_leaves: dict[int, int] | None = None,
) -> EagerSavedTensors | None:
    """Walk eager's autograd graph, as the analysis run recorded it, from the forward
    outputs ``roots`` (``(position, tensor)``) down to the graph inputs' own nodes
    ``input_nodes`` (and leaves), and collect the saved tensors the backward must check
    (see the module docstring). Run under the analysis's fake and functional modes.
    ``detached_non_leaves``: graph inputs that are no leaves in the caller and that the
    program detaches in place → autograd's next sequence number at the detach: eager's
    backward refuses each of them saved (as an input of its node) before then. (Inputs
    sharing storage in the caller share eager's version counter: the analysis moves their
    counters together, ``analysis._EagerChecks.storage_peers``.)
    None when there are none."""
    detached_non_leaves = detached_non_leaves or {}
    stop = {n for n in input_nodes if n is not None}
    reached: dict[Any, set[int]] = {}
    for position, t in roots:
        node = getattr(t, "grad_fn", None)
        pending = [node] if node is not None else []
        while pending:
            node = pending.pop()
            if node in stop or type(node).__name__ == "AccumulateGrad":
                continue
            seen = reached.setdefault(node, set())
            if position in seen:
                continue
            seen.add(position)
            pending.extend(n for n, _ in node.next_functions if n is not None)
    if not reached:
        return None

    witness_of: dict[StorageWeakRef, tuple[bool, int]] = {}
    for is_input, values in ((True, graph_inputs), (False, forward_outputs)):
        for k, t in enumerate(values):
            if isinstance(t, torch.Tensor):
                witness_of.setdefault(StorageWeakRef(t.untyped_storage()), (is_input, k))
    witnesses: list[tuple[bool, int]] = []
    entries: list[tuple[int, EagerSavedTensor]] = []
    for node, positions in reached.items():
        if (noted := _noted_error(node)) is not None:
            entries.append((node._sequence_nr(), EagerSavedTensor("", noted, -1, frozenset(positions))))
        for value, error, described in _saved_values(node, witness_of):
            if any(
                node._sequence_nr() < at and (
                    value is graph_inputs[i] if error is None
                    # changed too: eager's unpacking refuses the detach first (the detached
                    # input unpacks as an output of the node itself, so the message says)
                    else f"{list(graph_inputs[i].shape)}], which is output 0 of {_op_name(node)}," in str(error)
                )
                for i, at in detached_non_leaves.items()
            ):
                entry = EagerSavedTensor("", DETACHED_SAVED, -1, frozenset(positions))
            elif error is not None:
                # a graph input's fake autograd history is no user's: eager names the
                # caller's grad_fn there, which this message leaves out
                message = re.sub(r", which is output \d+ of torch::autograd::Error,", "", str(error))
                entry = EagerSavedTensor("", message, -1, frozenset(positions))
            else:
                w = witness_of.get(StorageWeakRef(value.untyped_storage()))
                if w is None:
                    continue  # nothing the caller holds can change it
                if w not in witnesses:
                    witnesses.append(w)
                # saved as an input of its node (no output of it), the caller's tensor itself,
                # which the caller may detach_(); a graph input's is described by its grad_fn
                # at the backward, as eager's SavedVariable does
                itself = value is (graph_inputs if w[0] else forward_outputs)[w[1]] and value.grad_fn is not node
                description = None if itself and w[0] else described or _describe(value)
                entry = EagerSavedTensor(description, None, witnesses.index(w), frozenset(positions), itself)
            entries.append((node._sequence_nr(), entry))
    if not entries:
        return None
    entries.sort(key=lambda e: -e[0])
    return EagerSavedTensors(
        tuple(e for _, e in entries), tuple(witnesses), any(e.changed_by_program is not None for _, e in entries)
    )


def _same(t: Any) -> Any:
    return t


def _with_version(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    return t, t._version


def _checking_version(packed: tuple[torch.Tensor, int]) -> torch.Tensor:
    """Autograd's version check on a saved tensor, without its check that a saved non-leaf
    input was not detached in place since."""
    t, version = packed
    if t._version != version:
        raise RuntimeError(f"{_MODIFIED}: {_describe(t)} is at version {t._version}; expected version {version} instead. {_HINT}")
    return t


def versions_unchecked(checked: EagerSavedTensors | None, detaches: bool = False) -> contextlib.AbstractContextManager:
    """Where the program changes a tensor eager saved after saving it, the trace's own
    autograd must still differentiate it (the runtime's backward raises eager's error before
    that gradient is used): saved-tensor hooks that pass the tensor through turn autograd's
    version check off. Else, where the program ``detaches`` an input in place (the trace's
    copy of it, which autograd may have saved: the analysis holds eager's errors for it),
    hooks that check versions as autograd does, and not that. Elsewhere a no-op."""
    if checked is not None and checked.changed_by_program:
        return torch.autograd.graph.saved_tensors_hooks(_same, _same)
    if detaches:
        return torch.autograd.graph.saved_tensors_hooks(_with_version, _checking_version)
    return contextlib.nullcontext()


class SavedVersions:
    """One call's witnesses (caller-held tensors sharing a checked saved tensor's version
    counter; an output's as a detached alias, so the record holds no autograd graph) and
    their versions when the call returned, and which had a grad_fn then (an output's read
    off the caller's tensor itself, held weakly: its grad_fn holds this record; an input's
    after the call's writes, which may have given it one)."""

    __slots__ = ("tensors", "versions", "had_history", "outputs")

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        #: None until the call returned
        self.versions: tuple[int, ...] | None = None
        self.had_history: tuple[bool, ...] = ()
        #: per witness, the returned tensor itself (weakly) where it is an output, else None
        self.outputs: tuple[weakref.ref | None, ...] = ()

    def take(self, checked: EagerSavedTensors, graph_inputs: Sequence[Any], forward_outputs: Sequence[Any]) -> None:
        """Hold the witnesses of one call (its graph inputs and forward outputs)."""
        self.tensors = [graph_inputs[k] if is_input else forward_outputs[k].detach() for is_input, k in checked.witnesses]
        # (an output gets its grad_fn once the Function returns: read at the snapshot)
        self.outputs = tuple(None if is_input else weakref.ref(forward_outputs[k]) for is_input, k in checked.witnesses)

    def _caller_tensor(self, k: int) -> torch.Tensor | None:
        """The caller's tensor of witness ``k`` (None: a returned one no longer alive)."""
        ref = self.outputs[k]
        return self.tensors[k] if ref is None else ref()

    def detached_since(self, k: int) -> bool:
        """Witness ``k`` had a grad_fn at the call and has none now: detached in place."""
        t = self._caller_tensor(k)
        return self.had_history[k] and t is not None and t.grad_fn is None

    def snapshot(self) -> None:
        """Read the witnesses' versions: the call has returned, its own writes are done."""
        self.versions = tuple(t._version for t in self.tensors)
        # (an input's too: a write the call recorded into it gave it a grad_fn, which the
        # caller may detach_() before the backward; fuzz seed 35001307)
        self.had_history = tuple(
            (t := self._caller_tensor(k)) is not None and t.grad_fn is not None for k in range(len(self.tensors))
        )


def check_saved_versions(checked: EagerSavedTensors, record: SavedVersions, grad_outputs: Sequence[Any]) -> None:
    """Raise eager's error for the first checked saved tensor (in eager's backward order)
    that changed and that a defined output gradient reaches, as eager's backward would."""
    if not checked.changed_by_program and (
        record.versions is None or (
            all(t._version == v for t, v in zip(record.tensors, record.versions))
            and not any(record.detached_since(e.witness) for e in checked.entries if e.witness_itself)
        )
    ):
        return
    for entry in checked.entries:
        if all(grad_outputs[p] is None for p in entry.reached_from):
            continue
        if entry.changed_by_program is not None:
            raise RuntimeError(entry.changed_by_program)
        if record.versions is None:
            continue  # the call raised before it returned
        if entry.witness_itself and record.detached_since(entry.witness):
            raise RuntimeError(DETACHED_SAVED)  # eager's unpacking checks this before the version
        witness = record.tensors[entry.witness]
        now, then = witness._version, record.versions[entry.witness]
        if now != then:
            description = entry.description or _describe(witness)
            raise RuntimeError(f"{_MODIFIED}: {description} is at version {now}; expected version {then} instead. {_HINT}")
