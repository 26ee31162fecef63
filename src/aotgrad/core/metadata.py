"""What a traced program does to its inputs and how its outputs alias: ViewAndMutationMetadata.

The analysis stage (:mod:`aotgrad.core.analysis`) produces one :class:`ViewAndMutationMetadata`
per compiled entry; every later stage (tracing, runtime) reads it and nothing writes it.

Two index spaces, never mixed:

- **graph inputs**: the tensors the traced graph receives. ``input_info`` and
  ``mutated_input_indices`` are indexed by them.
- **call inputs**: the distinct tensors of the caller's call (a tensor passed twice is one;
  see :mod:`aotgrad.core.frontend`). ``OutputInfo.call_input_index`` (outputs that are or view an
  input) is one of them, so the alias is rebuilt off the caller's own tensor.

They coincide unless aliased inputs are merged into synthetic bases (:mod:`aotgrad.core.aliasing`).
Where each value sits among the graphs' inputs and outputs is not recorded here but in the
:class:`~aotgrad.core.signature.GraphSignature` built from this record.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .saved_tensors import EagerSavedTensors

__all__ = [
    "InputInfo",
    "LeafSlot",
    "OutputInfo",
    "OutputType",
    "ViewAndMutationMetadata",
]


class OutputType(enum.Enum):
    """How one user output relates, in eager, to the program's inputs and other outputs."""

    #: a fresh tensor, aliasing nothing the caller can see
    non_alias = "non_alias"
    #: the very input tensor object (possibly after an in-place metadata change)
    is_input = "is_input"
    #: a view of an input; regenerated from the caller's real input
    alias_of_input = "alias_of_input"
    #: a view of an intermediate that is not otherwise returned: the graph returns the base
    #: as an extra output and the runtime rebuilds the view off it
    alias_of_intermediate_save_as_output = "alias_of_intermediate_save_as_output"
    #: a view of an intermediate whose base an earlier output already added as an extra output
    alias_of_intermediate = "alias_of_intermediate"
    #: a view of an intermediate that is itself a (non-aliased) user output
    alias_of_intermediate_base_is_user_output = "alias_of_intermediate_base_is_user_output"
    #: not a tensor (an int, None, ...): returned as traced
    non_tensor = "non_tensor"


@dataclass(frozen=True)
class InputInfo:
    """What the program does to one graph input.

    ``mutates_data``: its values change in place. ``mutates_metadata``: its size, stride or
    storage offset change in place (``t_``, ``transpose_``, ``as_strided_``...).
    ``mutation_visible_to_autograd``: eager autograd records the data mutation (so the write
    back must happen with grad enabled). ``requires_grad``/``is_leaf`` are the caller's input
    at compile time.
    """

    mutates_data: bool
    mutates_metadata: bool
    mutation_visible_to_autograd: bool
    requires_grad: bool
    is_leaf: bool
    #: (size, stride, storage_offset) after the call, when the metadata is mutated
    new_view: tuple[tuple[int, ...], tuple[int, ...], int] | None = None
    #: the program calls ``as_strided`` (``as_strided_copy``, ``as_strided_scatter``) on this
    #: input or a view of it, or ``as_strided_`` on one requiring grad, written, at an offset
    #: other than 0: its offsets and strides address the input's whole storage, not only the
    #: input's elements
    addresses_storage: bool = False
    #: a view or ``detach()``ed alias of this input (not its caller's whole storage; the
    #: storage without autograd history, or the alias outside autograd) is re-strided by
    #: ``as_strided_`` past the input's own extent: what the program reads through it are
    #: elements of the caller's storage outside the input, so the input gets a synthetic base
    #: (the caller's storage) even where nothing is written (view_geometry's
    #: ``readdressed_past_extent``)
    readdressed_past_extent: bool = False
    #: the program calls ``requires_grad_()`` (or sets ``.requires_grad = True``) on this
    #: input, which did not require grad: the caller's tensor requires grad after the call,
    #: and what the program computes from it afterwards is differentiated with respect to it
    sets_requires_grad: bool = False
    #: the program detaches this input, which requires grad, in place (``detach_()``, or
    #: ``requires_grad_(False)`` on a leaf): what it computed from the input before records
    #: history, nothing after; the runtime detaches the caller's tensor once the forward and
    #: the write backs are done, before rebuilding the aliases of it that do not require grad
    detached_in_place: bool = False
    #: a view requiring grad whose dims the program permutes (or whose size-1 dims it adds
    #: or removes) in place under no_grad and then uses with grad recording: eager rebuilds
    #: its history off its base in the new geometry, which names the same elements, so the
    #: trace records those ops on a copy of the input as if grad were on
    relaid_out_under_no_grad: bool = False
    #: the program's in-place metadata ops on this input leave its geometry as it was and
    #: none is ``as_strided_`` nor under no_grad (``transpose_(0, 0)``): where autograd
    #: records them, eager's
    #: history gains view ops that change nothing, so nothing is replayed (an ``as_strided_``
    #: would route the gradient through its backward, laid out as the base)
    metadata_mutation_is_no_op: bool = False
    #: the program changes this input's size/stride in place under no_grad while it
    #: requires grad: autograd records none of it (its grad_fn keeps expecting the entry
    #: shape, as eager's), whatever grad mode the write backs run in
    metadata_mutation_under_no_grad: bool = False
    #: the user line of the first such op under no_grad (for errors); None where none
    metadata_mutation_under_no_grad_at: str | None = None
    #: a leaf requiring grad whose metadata the program changes and that it uses with grad
    #: recording: eager's AccumulateGrad for it is made at the first such use and checks the
    #: gradients it gets against the input's shape then (a backward reaching it through a
    #: view rebuilt in the new shape raises "invalid gradient"); the runtime makes it before
    #: the forward, with ``grad_accumulator_shape`` (None: the entry shape)
    grad_accumulator_made: bool = False
    grad_accumulator_shape: tuple[int, ...] | None = None
    #: (entry, use) geometries (size, stride, storage offset) of a leaf requiring grad that
    #: the program re-lays out under no_grad and then uses with grad recording in that one
    #: layout: eager's gradient for it is indexed as at the use, so the compiled backward's
    #: gradient for the entry layout is laid out again (``runtime._in_use_layout``)
    grad_layout_at_use: tuple[tuple, tuple] | None = None

    @property
    def mutated(self) -> bool:
        return self.mutates_data or self.mutates_metadata


@dataclass(frozen=True)
class OutputInfo:
    """What one flattened user output is.

    ``call_input_index``: for ``is_input`` / ``alias_of_input``, the call input (a distinct
    tensor of the caller's call) it is or views.
    ``base_index``: for ``alias_of_intermediate*``, the index of its base among the
    intermediate bases (``alias_of_intermediate_save_as_output`` / ``alias_of_intermediate``)
    or among the user outputs (``alias_of_intermediate_base_is_user_output``).
    ``duplicate_of``: set when eager returns the very same object as an earlier output.
    ``view_source``: the functionalization ``ViewMeta`` sequence that rebuilds the view from
    its base (None where replay is impossible and ``as_strided`` is used instead).
    ``constant``: the value of a ``non_tensor`` output.
    """

    output_type: OutputType
    requires_grad: bool
    call_input_index: int | None = None
    base_index: int | None = None
    size: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    storage_offset: int = 0
    dtype: torch.dtype | None = None
    duplicate_of: int | None = None
    #: a view made under no_grad of a base that requires grad (no grad_fn, as in eager)
    no_grad_view: bool = False
    #: ``alias_of_input`` only: eager's output is a ``detach()``ed alias of the input (no
    #: autograd view: ``_base`` None) or a view of one (its ``_base`` is that alias, not the
    #: input); rebuilt off ``input.detach()``
    detached: bool = False
    #: with ``detached``: the output is an autograd view (of the detached alias)
    is_view: bool = True
    #: how many leading steps of ``view_source`` eager made under no_grad (the rest in grad
    #: mode): the view requires grad and has a grad_fn, but its gradient stops there
    no_grad_steps: int = 0
    #: ``alias_of_input`` rebuilt with ``as_strided``: taken of the input's autograd root,
    #: as eager's view's grad_fn is once an in-place op on the input regenerated it (its
    #: gradient then reaches the root also outside the input's elements)
    off_root: bool = False
    #: rebuilt by ``as_strided`` through these (size, stride, storage_offset) in order off
    #: its base, then its own: eager's ``as_strided_`` of the view dropped the gradient of
    #: elements outside those it had (``EagerViewGeometry.restride_chain``)
    restrided_through: tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...] = ()
    #: eager's output requires grad only through ``requires_grad_()`` called inside the
    #: program on a tensor without autograd history: 1, the output is that new autograd
    #: leaf (the runtime makes its value a leaf requiring grad); 2, an autograd view of
    #: such a leaf that the program does not return (rebuilt off its base, then made a
    #: leaf requiring grad and viewed once more, so that it has a grad_fn as in eager); 3,
    #: a view eager made under no_grad of a base requiring grad (requires grad, no grad_fn,
    #: a backward from it raises) that the rebuilt view is not (its chain passes a
    #: ``detach()``ed input alias an in-place op gave a history): made so off a fresh leaf
    new_leaf: int = 0
    #: a ``non_alias`` output that a custom ``autograd.Function`` returned as (a view of) an
    #: input: the graph returns it as a view and it stays one (the Function around the graph
    #: makes it a view of the input, with the compiled backward as its grad_fn, as eager's)
    custom_function_view: bool = False
    #: eager's output is a view invalidated by a later in-place op on its storage (the name
    #: of its ``CreationMeta``): made in no_grad mode or by a multi-output op, reading its
    #: ``grad_fn`` raises; an ordinary view's grad_fn is regenerated (``AsStridedBackward0``)
    #: on the next read. The rebuilt view is stale the same way, so autograd does the same
    invalidated: str | None = None
    #: for an ``invalidated`` multi-output view: ``(op, output index, op args)`` of the op
    #: that made it (``analysis._multi_output_step``)
    multi_output_step: tuple | None = None
    #: for an ``invalidated`` multi-output view: eager's had no grad_fn (made while its
    #: base required no grad), so autograd's error begins "A view was created in no_grad mode"
    invalidated_without_grad_fn: bool = False
    #: eager's output is a multi-output view or a view taken of one (autograd's creation
    #: meta ``MULTI_OUTPUT_NODE``), stale or not: the run over synthetic bases, where a
    #: sibling's write makes it stale, is trusted to have made it so too
    multi_output_view: bool = False
    #: for an ``invalidated`` multi-output or no_grad view with a ``grad_fn`` that another
    #: view op made (of such a view): that op (``view_geometry.LastViewStep``), applied last
    #: by the runtime so that autograd's error names it as eager's (``Output 0 of T``)
    last_view_step: tuple | None = None
    #: a ``non_alias`` output that eager made from a ``detach()``ed alias of this call input
    #: by an in-place op with an operand requiring grad: it shares the input's storage (no
    #: view) but has its own autograd history; the graph computes its value (with a tangent)
    #: and the runtime copies it into a detached alias of the input with grad enabled
    storage_of_input: int | None = None
    #: with ``storage_of_input``: the output is an ``invalidated`` multi-output or no_grad
    #: view of the detached alias (reading its ``grad_fn`` raises), so the graph returns the
    #: alias itself (the view's autograd root) instead: the runtime gives a detached alias of
    #: the input that history and makes the view off it, as eager's ``_base``
    graph_returns_root: bool = False
    #: with ``graph_returns_root``: the alias's (size, stride, storage_offset), static, where
    #: it is not laid out as the call input (None where it is)
    root_geometry: tuple | None = None
    #: a ``non_alias`` output the program ``detach_()``ed after taking views of it that it
    #: returns too, all requiring grad (``analysis._detached_after_views``): the graph returns
    #: it as before the detach (``tracing.IntermediateDetaches``), with its history and a
    #: tangent; the runtime rebuilds the views off it, then detaches it, as eager's
    detached_after_views: bool = False
    #: an ``invalidated`` ordinary view of an intermediate that the program ``detach_()``ed
    #: afterwards (its base ``intermediate_base_detached`` or ``detached_after_views``), whose
    #: stale ``grad_fn`` eager regenerated before that detach (a recorded use): the runtime
    #: reads its ``grad_fn`` before detaching the base, so it keeps that history, as eager's
    #: (one stale at the detach regenerates after it, without history)
    history_read_before_detach: bool = False
    view_source: Any = field(default=None, compare=False, repr=False)
    constant: Any = field(default=None, compare=False)

    @property
    def is_alias(self) -> bool:
        return self.output_type not in (OutputType.non_alias, OutputType.non_tensor)


@dataclass(frozen=True)
class LeafSlot:
    """A new autograd leaf the program makes (``requires_grad_()`` on a tensor without
    history), returns, and computes other outputs (or an input's in-place change) from:
    eager accumulates their gradients into the returned leaf's ``.grad``. The runtime makes
    the leaf before the forward and passes it to the autograd.Function as an extra input
    (so the compiled backward's gradient for it accumulates there), then gives it the
    value the graph computed.

    ``flip``: which of the program's new leaves it is (their order of creation).
    ``output``: the user output it is, or ``base``: the intermediate base it is.
    ``alias``: the output is a view (or ``detach()``) of call input ``output_info[output]
    .call_input_index``: made off the caller's tensor before the forward, sharing its
    storage (no value to give it). Otherwise a fresh tensor of ``shape``/``dtype``/``device``
    given the graph's value with ``set_``."""

    flip: int
    output: int | None
    base: int | None
    alias: bool
    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device


@dataclass(frozen=True)
class ViewAndMutationMetadata:
    """Per-input mutation facts and per-output alias facts of one traced program.

    ``input_info`` is indexed by graph input, ``output_info`` by flattened user output.
    The positions these take among the graphs' inputs and outputs are the
    :class:`~aotgrad.core.signature.GraphSignature`'s business. Everything a call needs is
    precomputed here so that it visits only the mutated inputs and the aliased outputs.
    """

    input_info: tuple[InputInfo, ...]
    output_info: tuple[OutputInfo, ...]
    num_intermediate_bases: int
    #: requires_grad of each intermediate base (they are extra forward outputs)
    intermediate_base_requires_grad: tuple[bool, ...]
    #: graph-input indices that are mutated (data or metadata), ascending
    mutated_input_indices: tuple[int, ...] = ()
    #: graph-input indices whose data is mutated
    data_mutated_input_indices: tuple[int, ...] = ()
    #: user-output indices that are aliases or duplicates (the runtime regenerates them)
    aliased_output_indices: tuple[int, ...] = ()
    #: per intermediate base: the program made it a new autograd leaf (``requires_grad_()``
    #: on a tensor without autograd history); the runtime makes its value a leaf requiring
    #: grad before rebuilding the outputs that view it (no tangent: it is no graph output
    #: autograd differentiates)
    intermediate_base_new_leaf: tuple[bool, ...] = ()
    #: returned new leaves other outputs are computed from (:class:`LeafSlot`)
    leaf_slots: tuple[LeafSlot, ...] = ()
    #: per intermediate base: the program ``detach_()``ed it after taking the views rebuilt
    #: off it (``analysis._keeps_history_through_detach``): the graph returns it as before the
    #: detach, requiring grad, and the runtime ``detach_()``es it once those views are
    #: rebuilt, as eager's, so a view stale by then regenerates its ``grad_fn`` off a base
    #: without history (fuzz seed 21002515)
    intermediate_base_detached: tuple[bool, ...] = ()
    #: tensors eager's autograd saved that its backward would find changed: by the program
    #: after saving, or by the caller after the call (:mod:`aotgrad.core.saved_tensors`)
    eager_saved: EagerSavedTensors | None = None
    #: with synthetic bases, the *call* inputs the program detaches in place (graph inputs
    #: are then the bases, and :attr:`detached_in_place` indexes them); None without
    call_inputs_detached: tuple[int, ...] | None = None

    @property
    def sets_requires_grad(self) -> tuple[int, ...]:
        """Graph inputs the program makes require grad (``requires_grad_()``)."""
        return tuple(i for i, x in enumerate(self.input_info) if x.sets_requires_grad)

    @property
    def detached_in_place(self) -> tuple[int, ...]:
        """Graph inputs the program detaches in place (``detach_()``)."""
        return tuple(i for i, x in enumerate(self.input_info) if x.detached_in_place)

    @property
    def detached_call_inputs(self) -> tuple[int, ...]:
        """Call inputs the program detaches in place: the runtime detaches these of the
        caller's tensors (graph inputs are call inputs where no synthetic base is made)."""
        return self.detached_in_place if self.call_inputs_detached is None else self.call_inputs_detached

    def graph_values(
        self, out_leaves: Sequence[Any], user_outputs: Sequence[int], before_detach: Callable[[Any], Any] | None = None
    ) -> list[Any]:
        """What the graph returns for each of the user outputs ``user_outputs`` (indices into
        ``out_leaves``, the program's flattened outputs): the output, or its autograd root
        where the runtime makes the output off that (``OutputInfo.graph_returns_root``), or,
        in the joint, ``before_detach`` of it (``OutputInfo.detached_after_views``)."""
        values = []
        for j in user_outputs:
            info, o = self.output_info[j], out_leaves[j]
            if info.graph_returns_root:
                o = o._base
            elif info.detached_after_views and before_detach is not None:
                o = before_detach(o)
            values.append(o)
        return values

    @staticmethod
    def build(
        input_info: tuple[InputInfo, ...],
        output_info: tuple[OutputInfo, ...],
        intermediate_base_requires_grad: tuple[bool, ...],
        intermediate_base_new_leaf: tuple[bool, ...] = (),
        leaf_slots: tuple[LeafSlot, ...] = (),
        intermediate_base_detached: tuple[bool, ...] = (),
    ) -> ViewAndMutationMetadata:
        """Make the record and its precomputed index tuples."""
        return ViewAndMutationMetadata(
            intermediate_base_new_leaf=intermediate_base_new_leaf,
            intermediate_base_detached=intermediate_base_detached,
            leaf_slots=leaf_slots,
            input_info=input_info,
            output_info=output_info,
            num_intermediate_bases=len(intermediate_base_requires_grad),
            intermediate_base_requires_grad=intermediate_base_requires_grad,
            mutated_input_indices=tuple(i for i, x in enumerate(input_info) if x.mutated),
            data_mutated_input_indices=tuple(
                i for i, x in enumerate(input_info) if x.mutates_data
            ),
            aliased_output_indices=tuple(
                i
                for i, o in enumerate(output_info)
                if o.is_alias or o.duplicate_of is not None
            ),
        )

    def __repr__(self) -> str:
        lines = ["ViewAndMutationMetadata("]
        lines.append("  inputs:")
        lines.append(
            "    {:>3}  {:<12} {:<15} {:<17} {:<13} {}".format(
                "#", "data_mut", "metadata_mut", "autograd_sees", "requires_grad", "is_leaf"
            )
        )
        for i, x in enumerate(self.input_info):
            lines.append(
                "    {:>3}  {:<12} {:<15} {:<17} {:<13} {}".format(
                    i,
                    str(x.mutates_data),
                    str(x.mutates_metadata),
                    str(x.mutation_visible_to_autograd) if x.mutates_data else "-",
                    str(x.requires_grad),
                    str(x.is_leaf),
                )
            )
        lines.append("  outputs:")
        lines.append(
            "    {:>3}  {:<42} {:<10} {:<13} {}".format(
                "#", "output_type", "aliases", "requires_grad", "shape"
            )
        )
        for i, o in enumerate(self.output_info):
            kind = o.output_type.value
            if o.duplicate_of is not None:
                kind += f" (same object as output {o.duplicate_of})"
            lines.append(
                "    {:>3}  {:<42} {:<10} {:<13} {}".format(
                    i,
                    kind,
                    _alias_target(o),
                    str(o.requires_grad),
                    tuple(o.size) if o.output_type is not OutputType.non_tensor else "-",
                )
            )
        lines.append(f"  intermediate bases returned: {self.num_intermediate_bases}")
        lines.append(")")
        return "\n".join(lines)


def _alias_target(o: OutputInfo) -> str:
    """What an output aliases, naming its index space: ``input 2`` (a call input), ``base 0``
    (an intermediate base), ``output 1`` (a user output)."""
    if o.call_input_index is not None:
        return f"input {o.call_input_index}"
    if o.base_index is None:
        return "-"
    if o.output_type is OutputType.alias_of_intermediate_base_is_user_output:
        return f"output {o.base_index}"
    return f"base {o.base_index}"
