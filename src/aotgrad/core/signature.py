"""The calling convention of the compiled graphs: which value sits at which position.

One :class:`GraphSignature` per compiled entry. The analysis builds its forward part from the
:class:`~aotgrad.core.metadata.ViewAndMutationMetadata`; the partition step adds the saved values.
Tracing, partitioning and the runtime read positions from it and never count them themselves.

Forward graph outputs (an inference graph has the first three slices only)::

    [ mutated inputs' new values | non-aliased user outputs | intermediate bases | saved tensors | saved symints ]

Backward graph inputs: ``[ saved tensors | saved symints | tangents ]``.
Backward graph outputs: one gradient (or None) per graph input, then one per new leaf the
program returns and computes with (``num_leaf_slots``), then the new value of each graph
input the backward mutates (``backward_mutated_inputs``).

The first three slices together are torch's ``num_fwd_outputs``. Tangent placeholders of the
joint graph are tagged when it is traced (:func:`mark_tangents`); :func:`is_tangent` is the one
test for "is this placeholder a tangent" that partitioners and compilers use.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.immutable_collections import immutable_dict, immutable_list

from .metadata import OutputType, ViewAndMutationMetadata

__all__ = ["ForwardOutput", "GraphSignature", "graph_outputs", "is_tangent", "mark_tangents"]

#: node.meta key of a joint-graph placeholder: "primal" or "tangent"
JOINT_INPUT_KIND = "aotgrad_joint_input"


def mark_tangents(graph: torch.fx.Graph, num_primals: int) -> None:
    """Tag the joint graph's placeholders: the first ``num_primals`` are primals, the rest
    tangents. Partitioners copy placeholder meta, so the tags reach the backward graph."""
    for k, node in enumerate(graph.find_nodes(op="placeholder")):
        node.meta[JOINT_INPUT_KIND] = "primal" if k < num_primals else "tangent"


def is_tangent(node: torch.fx.Node) -> bool:
    """Whether a placeholder is a tangent (an incoming gradient).

    Read off the tag :func:`mark_tangents` set; a graph traced elsewhere (torch's) has no tag
    and follows torch's naming convention (``tangents_*``), which the two agree on.
    """
    if node.op != "placeholder":
        return False
    kind = node.meta.get(JOINT_INPUT_KIND)
    if kind is not None:
        return kind == "tangent"
    return str(node.target).startswith("tangents")


class ForwardOutput(enum.Enum):
    """What one forward-graph output is."""

    #: the new value of a mutated input (its data in the input's geometry at entry)
    mutated_input = "mutated_input"
    #: a user output the runtime takes as the graph returns it (a non-aliased tensor, first
    #: occurrence); aliased and repeated outputs are rebuilt off their base instead
    user_output = "user_output"
    #: the base of user outputs that view an intermediate
    intermediate_base = "intermediate_base"
    #: a tensor the backward needs
    saved_tensor = "saved_tensor"
    #: a size (SymInt) the backward needs
    saved_symint = "saved_symint"


@dataclass(frozen=True)
class GraphSignature:
    """The positions of every value among the forward's outputs and the backward's inputs.

    ``mutated_inputs[k]``: the graph input whose new value is forward output ``k``.
    ``user_outputs[k]``: the user output (index into ``ViewAndMutationMetadata.output_info``)
    at forward output ``len(mutated_inputs) + k``: each ``non_alias`` output that is no
    duplicate. The others are none of the graph's business: the runtime rebuilds an aliased
    output off its base (a call input, an intermediate base, an earlier output) and repeats
    a duplicate, so the graph neither computes nor returns them.
    ``tangents[k]``: the forward output whose gradient is the backward's ``k``-th tangent.
    """

    num_graph_inputs: int
    mutated_inputs: tuple[int, ...]
    user_outputs: tuple[int, ...]
    num_intermediate_bases: int
    tangents: tuple[int, ...] = ()
    num_saved_tensors: int = 0
    num_saved_symints: int = 0
    #: graph inputs whose data the backward changes in place (a custom autograd.Function's
    #: backward writing into a tensor it saved): the backward graph returns their new
    #: values after the gradients, and the runtime writes them into the caller's tensors
    backward_mutated_inputs: tuple[int, ...] = ()
    #: new autograd leaves the program returns and computes with (``LeafSlot``): extra
    #: inputs of the autograd.Function; the backward graph returns their gradients after
    #: the graph inputs'
    num_leaf_slots: int = 0

    @staticmethod
    def of_metadata(metadata: ViewAndMutationMetadata) -> GraphSignature:
        """The functional forward's outputs: every mutated input, every non-aliased user
        output, every intermediate base (no tangents, no saved values yet)."""
        md = metadata
        user = tuple(
            j for j, o in enumerate(md.output_info) if o.output_type is OutputType.non_alias and o.duplicate_of is None
        )
        return GraphSignature(
            len(md.input_info), md.mutated_input_indices, user, md.num_intermediate_bases,
            num_leaf_slots=len(md.leaf_slots),
        )

    def with_tangents(self, metadata: ViewAndMutationMetadata, forward_output_dtypes: Sequence[torch.dtype]) -> GraphSignature:
        """This signature with the forward outputs that take a tangent in training.

        A tangent goes to each forward output autograd can differentiate: a mutated input
        whose data mutation autograd sees, a user output and an intermediate base that
        require grad, of a floating or complex dtype. (Aliased outputs are not forward
        outputs: their gradient reaches the graph through their base.)
        """
        md = metadata
        wants_tangent = [
            md.input_info[i].mutates_data and md.input_info[i].mutation_visible_to_autograd
            for i in self.mutated_inputs
        ]
        # (a new autograd leaf the program made with requires_grad_() is no differentiable
        # output: the runtime makes its value a leaf)
        wants_tangent.extend(
            md.output_info[j].requires_grad and not md.output_info[j].new_leaf for j in self.user_outputs
        )
        wants_tangent.extend(md.intermediate_base_requires_grad)
        if len(forward_output_dtypes) != len(wants_tangent):
            raise AssertionError(
                f"aotgrad internal error: {len(forward_output_dtypes)} forward output dtypes for "
                f"{len(wants_tangent)} forward outputs"
            )
        tangents = tuple(
            p for p, (wanted, dtype) in enumerate(zip(wants_tangent, forward_output_dtypes))
            if wanted and (dtype.is_floating_point or dtype.is_complex)
        )
        return replace(self, tangents=tangents)

    def without_mutations(self, kept: frozenset[int]) -> GraphSignature:
        """An inference graph's signature: the mutations of the graph inputs in ``kept`` stay
        in the graph (``copy_``) and are not returned; no tangents."""
        return replace(self, mutated_inputs=tuple(i for i in self.mutated_inputs if i not in kept), tangents=())

    def with_saved(self, num_saved_tensors: int, num_saved_symints: int) -> GraphSignature:
        """The signature after partitioning, with the saved values the forward returns."""
        return replace(self, num_saved_tensors=num_saved_tensors, num_saved_symints=num_saved_symints)

    # ------------------------------------------------------------------ forward outputs

    @property
    def mutated_input_slice(self) -> slice:
        return slice(0, len(self.mutated_inputs))

    @property
    def user_output_slice(self) -> slice:
        start = len(self.mutated_inputs)
        return slice(start, start + len(self.user_outputs))

    @property
    def intermediate_base_slice(self) -> slice:
        start = len(self.mutated_inputs) + len(self.user_outputs)
        return slice(start, start + self.num_intermediate_bases)

    @property
    def num_forward_outputs(self) -> int:
        """Forward outputs before the saved values (torch's ``num_fwd_outputs``)."""
        return len(self.mutated_inputs) + len(self.user_outputs) + self.num_intermediate_bases

    @property
    def saved_tensor_slice(self) -> slice:
        start = self.num_forward_outputs
        return slice(start, start + self.num_saved_tensors)

    @property
    def saved_symint_slice(self) -> slice:
        start = self.num_forward_outputs + self.num_saved_tensors
        return slice(start, start + self.num_saved_symints)

    @property
    def num_forward_graph_outputs(self) -> int:
        return self.num_forward_outputs + self.num_saved_tensors + self.num_saved_symints

    @functools.cached_property
    def user_output_positions(self) -> dict[int, int]:
        """User-output index → its forward-output position."""
        start = len(self.mutated_inputs)
        return {j: start + k for k, j in enumerate(self.user_outputs)}

    def pack_forward(self, mutated: Sequence[Any], user: Sequence[Any], bases: Sequence[Any]) -> list[Any]:
        """The forward outputs (before saved values) in signature order, lengths checked."""
        for what, values, n in (
            ("mutated-input values", mutated, len(self.mutated_inputs)),
            ("non-aliased user outputs", user, len(self.user_outputs)),
            ("intermediate bases", bases, self.num_intermediate_bases),
        ):
            if len(values) != n:
                raise AssertionError(f"aotgrad internal error: {len(values)} {what} where the signature has {n}")
        return [*mutated, *user, *bases]

    def forward_output(self, position: int) -> tuple[ForwardOutput, int]:
        """What forward output ``position`` is, and its index in its own space: a graph input
        (mutated input), a user output, or the k-th intermediate base / saved value."""
        for kind, where in (
            (ForwardOutput.mutated_input, self.mutated_input_slice),
            (ForwardOutput.user_output, self.user_output_slice),
            (ForwardOutput.intermediate_base, self.intermediate_base_slice),
            (ForwardOutput.saved_tensor, self.saved_tensor_slice),
            (ForwardOutput.saved_symint, self.saved_symint_slice),
        ):
            if where.start <= position < where.stop:
                k = position - where.start
                if kind is ForwardOutput.mutated_input:
                    return kind, self.mutated_inputs[k]
                if kind is ForwardOutput.user_output:
                    return kind, self.user_outputs[k]
                return kind, k
        raise IndexError(f"forward output {position} out of range ({self.num_forward_graph_outputs} outputs)")

    # ------------------------------------------------------------------ backward inputs

    @property
    def backward_tangent_slice(self) -> slice:
        start = self.num_saved_tensors + self.num_saved_symints
        return slice(start, start + len(self.tangents))

    @property
    def num_backward_inputs(self) -> int:
        return self.num_saved_tensors + self.num_saved_symints + len(self.tangents)

    # ------------------------------------------------------------------ checks where stages meet

    def check_forward_graph(self, gm: torch.fx.GraphModule, *, saved: bool) -> None:
        """Raise when a forward (``saved``: partitioned) or inference graph returns another
        number of values than this signature says."""
        n = len(graph_outputs(gm))
        expected = self.num_forward_graph_outputs if saved else self.num_forward_outputs
        if n != expected:
            raise AssertionError(f"aotgrad internal error: the forward graph returns {n} values, the signature {expected}\n{self!r}")

    def check_backward_graph(self, gm: torch.fx.GraphModule) -> None:
        """Raise when the backward graph's inputs or outputs disagree with this signature."""
        placeholders = gm.graph.find_nodes(op="placeholder")
        if len(placeholders) != self.num_backward_inputs:
            raise AssertionError(
                f"aotgrad internal error: the backward graph takes {len(placeholders)} inputs, "
                f"the signature {self.num_backward_inputs}\n{self!r}"
            )
        n = len(graph_outputs(gm))
        if n != self.num_graph_inputs + self.num_leaf_slots + len(self.backward_mutated_inputs):
            raise AssertionError(
                f"aotgrad internal error: the backward graph returns {n} values for "
                f"{self.num_graph_inputs} graph inputs, {self.num_leaf_slots} new leaves and "
                f"{len(self.backward_mutated_inputs)} inputs the backward mutates"
            )

    def __repr__(self) -> str:
        tangent_of = {p: k for k, p in enumerate(self.tangents)}
        lines = ["GraphSignature(", "  forward outputs:"]
        for p in range(self.num_forward_graph_outputs):
            kind, index = self.forward_output(p)
            what = {
                ForwardOutput.mutated_input: f"new value of graph input {index}",
                ForwardOutput.user_output: f"user output {index}",
                ForwardOutput.intermediate_base: f"intermediate base {index}",
                ForwardOutput.saved_tensor: f"saved tensor {index}",
                ForwardOutput.saved_symint: f"saved symint {index}",
            }[kind]
            grad = f"  <- tangent {tangent_of[p]}" if p in tangent_of else ""
            lines.append(f"    {p:>3}  {kind.value:<18} {what}{grad}")
        if self.tangents or self.num_saved_tensors or self.num_saved_symints:
            lines.append(
                f"  backward inputs: {self.num_saved_tensors} saved tensors, "
                f"{self.num_saved_symints} saved symints, {len(self.tangents)} tangents"
            )
            lines.append(f"  backward outputs: {self.num_graph_inputs} gradients (one per graph input)")
            if self.num_leaf_slots:
                lines.append(f"  then {self.num_leaf_slots} gradients of new leaves the program returns")
            if self.backward_mutated_inputs:
                lines.append(
                    "  then the new values of graph inputs "
                    f"{', '.join(map(str, self.backward_mutated_inputs))} (mutated by the backward)"
                )
        lines.append(")")
        return "\n".join(lines)


def graph_outputs(gm: torch.fx.GraphModule) -> list[Any]:
    """The flattened values a graph's output node returns (None kept): pytree's leaves of its
    arguments, in pytree's order."""
    (out,) = gm.graph.find_nodes(op="output")
    leaves: list[Any] = []
    _output_leaves(out.args, leaves)
    return leaves


#: the sequences an output node's arguments are built of (fx makes lists immutable); pytree
#: flattens each into its items in order
_OUTPUT_SEQUENCES = frozenset({tuple, list, immutable_list})
#: the mappings (fx makes dicts immutable); pytree flattens each into its values in order
_OUTPUT_MAPPINGS = frozenset({dict, immutable_dict})


def _output_leaves(value: Any, leaves: list[Any]) -> None:
    """Append ``pytree.tree_leaves(value, is_leaf=lambda x: x is None)`` to ``leaves``: the
    containers above are walked here (a graph's outputs are a few hundred nodes in nested
    lists, where pytree asks each value's type whether it is a namedtuple); a node or None
    is a leaf; anything else goes to pytree."""
    typ = type(value)
    if typ is torch.fx.Node or value is None:
        leaves.append(value)
    elif typ in _OUTPUT_SEQUENCES:
        for item in value:
            _output_leaves(item, leaves)
    elif typ in _OUTPUT_MAPPINGS:
        for item in value.values():
            _output_leaves(item, leaves)
    else:
        leaves.extend(pytree.tree_leaves(value, is_leaf=lambda x: x is None))
