"""Aliased inputs: merge inputs that share storage, where one is mutated, into synthetic bases.

(A lone input counts as aliased with the rest of its storage when the program addresses it
by storage, through ``as_strided``: a write can then land outside the input's own elements;
and when its elements overlap in memory and it is written: eager's write reaches every
element sharing a location, and the caller's tensor cannot take a written-back value.)

Inside a traced graph, functionalization cannot see that a mutation of one input changes
another input that shares its storage. So, for each *disjoint set of bases* (inputs whose
storages are the same, transitively) in which some member's data is mutated, the graph
receives one **synthetic base** instead of the members, and the traced function regenerates
every member as a view of it; a mutation of a member is then a mutation of the base, which
the runtime writes back into the caller's real base, so every alias the caller holds sees it.

Where this is built and taken apart:
- :func:`plan_input_aliasing` (compile time) decides the sets and how each base is made;
- :meth:`InputAliasing.wrap_program` regenerates the members inside the traced function;
- :meth:`InputAliasing.graph_inputs` (every call) builds the bases from the caller's tensors;
- :meth:`InputAliasing.matches` (the guard) checks a call has the same aliasing layout;
- :func:`outputs_on_call_inputs` points outputs that alias inputs back at the caller's own
  tensors, and :meth:`InputAliasing.member_metadata_writebacks` lists the merged inputs whose
  geometry the program changes.
Aliased inputs that are not mutated need none of this and keep one graph input each.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode

from ..errors import AotgradCompileError
from .metadata import OutputType, ViewAndMutationMetadata
from .overlapping_writes import overlaps_itself

__all__ = ["InputAliasing", "SyntheticBase", "outputs_on_call_inputs", "plan_input_aliasing"]

Strided = tuple[tuple[int, ...], tuple[int, ...], int]  # size, stride, storage_offset


class _NoViewDetaches(TorchFunctionMode):
    """While a program over synthetic bases runs: ``detach_()`` of a merged member that the
    caller holds as no view and that requires no grad is skipped. Eager's changes nothing
    there (no history to cut); the member regenerated here is a view of the base, whose
    ``detach_()`` autograd refuses ("Can't detach views in-place", fuzz seed 13001162).
    ``members``: the ids of those regenerated members."""

    def __init__(self, members: set[int]) -> None:
        super().__init__()
        self._members = members

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func is torch.Tensor.detach_ and id(args[0]) in self._members and not args[0].requires_grad:
            return args[0]
        return func(*args, **(kwargs or {}))


def _strided(t: torch.Tensor) -> Strided:
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset())


@dataclass(frozen=True)
class SyntheticBase:
    """One synthetic base standing for several aliased call inputs.

    ``members``: call-input indices merged into this base. ``common_base``: the base is the
    members' common ``._base`` (or the member that is that base); otherwise it is a 1-D
    ``as_strided`` view over the whole storage taken from the root (``._base``, or itself)
    of member ``source_member``.
    ``member_views``: each member's (size, stride, storage_offset), used to regenerate it.
    ``replay``: per member, whether the caller's view chain can be replayed
    (``Tensor._view_func``) on the base instead of ``as_strided``.
    """

    members: tuple[int, ...]
    common_base: bool
    source_member: int
    base_view: Strided
    member_views: tuple[Strided, ...]
    replay: tuple[bool, ...]
    #: per member, whether the caller's tensor requires grad (a detach()ed alias of a base
    #: that requires grad does not, and must not inside the graph either)
    member_requires_grad: tuple[bool, ...] = ()
    #: without a common base, members that do not require grad and are not rooted at the
    #: source's root are separate autograd families (``detach()``ed aliases): their data
    #: mutations that eager's autograd records
    #: (an in-place op with an operand that requires grad) give *them* a grad_fn, not the
    #: base's source. These are those members (call-input indices).
    separate_family_mutations: tuple[int, ...] = ()
    #: per member, whether its autograd root (``._base``, or itself) is the source member's:
    #: a view of that root that does not require grad (the root does not) is no separate
    #: family; its recorded mutation rebases the root's history, as in eager
    member_in_source_family: tuple[bool, ...] = ()
    #: per member, whether the caller's tensor is no view made in no_grad mode (a leaf, a
    #: non-view, or a view made with grad on): regenerated with grad on, so that, as the
    #: caller's, it may be used with grad on after a write into its storage
    member_made_with_grad: tuple[bool, ...] = ()

    def is_the_base(self, m: int, template: torch.Tensor) -> bool:
        """Whether member ``m`` (a call-input index; ``template``, its fake tensor) is
        regenerated as the base itself, not as a view of it: the caller's tensor is the
        members' common base, no view, in the base's geometry. Its ``detach_()`` in the
        program then detaches the base, as eager's detaches the root its siblings view."""
        k = self.members.index(m)
        return (
            not self.replay[k] and self.common_base and self.member_views[k] == self.base_view
            and template._base is None
        )

    def make(self, call_inputs: list[torch.Tensor]) -> torch.Tensor:
        """The base for this call (the caller's real tensors)."""
        src = call_inputs[self.source_member]
        root = src if src._base is None else src._base
        if self.common_base:
            return root
        # Taken off the source's root, not the source: as_strided of a view sends its
        # gradient only to the view's own elements, so the root's other elements (reached
        # through other members, e.g. the root itself) would get none.
        size, stride, offset = self.base_view
        # Made with grad mode on, whatever the caller's: members made with grad on
        # (member_made_with_grad) stand for caller's tensors that carry their history in
        # every mode, so the base must not be a view made in no_grad mode, which autograd
        # forbids to use with grad on after a write into its storage (fuzz seeds 3001389,
        # 3008402: a write into a detach()ed member).
        with torch.enable_grad():
            return root.as_strided(size, stride, offset)

    def __repr__(self) -> str:
        how = "common ._base" if self.common_base else f"as_strided over the storage of input {self.source_member}"
        return f"SyntheticBase(members={list(self.members)}, base={how}, shape={self.base_view[0]})"


@dataclass(frozen=True)
class InputAliasing:
    """How call inputs map to graph inputs when some are merged into synthetic bases.

    Graph inputs are ``[call_inputs[i] for i in unmerged] + [base.make(...) for base in
    bases]``.
    """

    num_call_inputs: int
    unmerged: tuple[int, ...]
    bases: tuple[SyntheticBase, ...]

    def graph_inputs(self, call_inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [call_inputs[i] for i in self.unmerged] + [b.make(call_inputs) for b in self.bases]

    def matches(self, call_inputs: list[torch.Tensor]) -> bool:
        """True when the call's merged inputs sit in their storage as at compile time."""
        for b in self.bases:
            src = call_inputs[b.source_member]
            root = src if src._base is None else src._base
            for m, view in zip(b.members, b.member_views):
                t = call_inputs[m]
                if t.storage_offset() != view[2]:
                    return False
                if b.common_base and t is not root and t._base is not root:
                    return False
            if b.common_base and _strided(root) != b.base_view:
                return False
        return True

    def member_metadata_writebacks(self, call_metadata: ViewAndMutationMetadata) -> tuple[tuple[int, Strided], ...]:
        """(call-input index, new geometry) of each merged input whose metadata the program
        changes (``call_metadata``: the analysis over the call inputs). Static: sizes do not
        depend on values; the runtime applies them to the caller's tensors after the call."""
        info = call_metadata.input_info
        return tuple(
            (i, info[i].new_view) for b in self.bases for i in b.members if info[i].mutates_metadata
        )

    @property
    def separate_family_mutations(self) -> tuple[int, ...]:
        """Call inputs whose own autograd history the runtime writes after the base: each
        one's new value is one of the last ``len(...)`` flat outputs of
        :meth:`wrap_program`'s program (in this order), which the user never sees."""
        return tuple(i for b in self.bases for i in b.separate_family_mutations)

    def wrap_program(self, program: Callable, templates: dict[int, torch.Tensor]) -> Callable:
        """``program`` over the graph inputs: regenerate each merged member from its base.
        ``templates[i]``: a (fake) tensor per merged call input whose ``_view_func`` replays
        its view chain.

        Without a common base, a member that does not require grad is taken off the base
        through ``detach()``, as the caller's is: autograd then records none of its
        mutations on the base (whose write back gives the source member a grad_fn only for
        mutations of its own family). The program returns, after the user's outputs, each
        :attr:`separate_family_mutations` member's new value in its original geometry,
        with its autograd history, for the runtime to copy into the caller's tensor."""
        unmerged = self.unmerged
        bases = self.bases
        n = self.num_call_inputs
        extras = self.separate_family_mutations
        original = {m: view for b in bases for m, view in zip(b.members, b.member_views)}

        def program_over_bases(*graph_inputs: Any):
            call_inputs: list[Any] = [None] * n
            for k, i in enumerate(unmerged):
                call_inputs[i] = graph_inputs[k]
            for b, base in zip(bases, graph_inputs[len(unmerged):]):
                # The other members are taken off the graph input itself where ``base`` is an
                # alias of it in the same geometry (tracing's ``view`` of an input whose
                # metadata the program changes): the same elements, and their ``as_strided``
                # then starts its view chain, as functionalization needs to replay a write
                # through it onto the base.
                source = base._base if _same_geometry_alias(base) else base
                families = b.member_in_source_family or (False,) * len(b.members)
                with_grad = b.member_made_with_grad or (False,) * len(b.members)
                for m, view, replay, rg, in_family, grad_on in zip(
                    b.members, b.member_views, b.replay, b.member_requires_grad, families, with_grad
                ):
                    if b.is_the_base(m, templates[m]):
                        member = base
                    else:
                        with torch.set_grad_enabled(grad_on if rg else torch.is_grad_enabled()):
                            member = templates[m]._view_func_unsafe(source) if replay else source.as_strided(*view)
                    separate = not rg and (member.requires_grad or not (b.common_base or in_family))
                    if separate and not replay and overlaps_itself(*view[:2]):
                        # detached before the as_strided: the member's ._base is then the
                        # storage, which a write through memory that overlaps itself writes
                        # (core/overlapping_writes.py), not the member
                        call_inputs[m] = source.detach().as_strided(*view)
                    else:
                        call_inputs[m] = member.detach() if separate else member
            members = {m: call_inputs[m] for m in extras}
            not_views = {
                id(call_inputs[m]) for b in bases for m in b.members
                if templates[m]._base is None and call_inputs[m]._base is not None
            }
            with _NoViewDetaches(not_views) if not_views else contextlib.nullcontext():
                leaves, spec = program(*call_inputs)
            if not extras:
                return leaves, spec
            # a fresh tensor each (no alias of the base): the runtime copies it in; with grad
            # on, whatever the caller's mode, to keep the history of a write that eager's
            # autograd recorded in an enable_grad() region
            with torch.enable_grad():
                new_values = [torch.as_strided_copy(members[m], *original[m]) for m in extras]
            return pytree.tree_flatten((pytree.tree_unflatten(leaves, spec), new_values))

        return program_over_bases

    def __repr__(self) -> str:
        lines = ["InputAliasing("]
        lines.append(f"  graph inputs: call inputs {list(self.unmerged)} unchanged, then {len(self.bases)} synthetic base(s)")
        for k, b in enumerate(self.bases):
            lines.append(f"  synthetic base {k} (graph input {len(self.unmerged) + k}): {b!r}")
        lines.append(")")
        return "\n".join(lines)


def _same_geometry_alias(t: torch.Tensor) -> bool:
    """``t`` is a view of its ``._base`` with the base's own size, stride and offset."""
    return t._base is not None and _strided(t) == _strided(t._base) and t.dtype == t._base.dtype


def _root(t: torch.Tensor) -> torch.Tensor:
    """``t``'s autograd root: its ``._base``, or itself."""
    return t if t._base is None else t._base


def _disjoint_sets(tensors: list[torch.Tensor]) -> list[list[int]]:
    """Indices grouped by shared storage (the same storage object means overlap is possible)."""
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.untyped_storage()._cdata, []).append(i)
    return [g for g in groups.values() if len(g) > 1]


def _covers_storage(t: torch.Tensor) -> bool:
    """``t`` is its storage: every offset ``as_strided`` can name is one of its elements."""
    return (
        t._base is None
        and t.storage_offset() == 0
        and t.is_contiguous()
        and t.numel() * t.element_size() == t.untyped_storage().nbytes()
    )


def _groups(call_inputs: list[torch.Tensor], metadata: ViewAndMutationMetadata) -> list[list[int]]:
    """The inputs to merge, by storage: several inputs on one storage, and a lone input the
    program addresses by storage (``as_strided`` of a slice reaches elements outside the
    slice) where it is not the whole storage."""
    groups = _disjoint_sets(call_inputs)
    grouped = {i for g in groups for i in g}
    groups.extend(
        [i] for i, info in enumerate(metadata.input_info)
        if i not in grouped
        and (
            (info.addresses_storage and not _covers_storage(call_inputs[i]))
            # a write reaches every element sharing the memory written: the graph writes the
            # storage, the input is a view of it (core/overlapping_writes.py)
            or (info.mutates_data and _overlaps(call_inputs[i]))
        )
    )
    return groups


def _written_or_readdressed(info: Any) -> bool:
    """The input's data is written, or it is addressed by storage and its geometry changes,
    or that of a view or ``detach()``ed alias of it (``as_strided_`` past its own extent:
    functionalization holds only the input's elements, the synthetic base the caller's whole
    storage; view_geometry's ``EagerViewGeometry._restride_left_to_base_run``)."""
    return info.mutates_data or (info.addresses_storage and info.mutates_metadata) or info.readdressed_past_extent


def _made_with_grad(t: torch.Tensor) -> bool:
    """``t`` is no view made in no_grad mode (see ``SyntheticBase.member_made_with_grad``)."""
    return t._base is None or torch._C._autograd._get_creation_meta(t) != torch._C._autograd.CreationMeta.NO_GRAD_MODE


def _overlaps(t: torch.Tensor) -> bool:
    """Two elements of ``t`` share a memory location (an ``expand()``ed input, say)."""
    return overlaps_itself(tuple(t.shape), tuple(t.stride()))


def _replayable(template: torch.Tensor, base: torch.Tensor, view: Strided) -> bool:
    if template._base is None or template._base is not base:
        return False
    try:
        out = template._view_func_unsafe(base)
    except Exception:  # noqa: BLE001 - any failure means: use as_strided
        return False
    return _strided(out) == view and out.dtype == template.dtype


def _refuse_leaf_views_requiring_grad(group: list[int], call_inputs: list[torch.Tensor]) -> None:
    """Refuse a member that is an autograd leaf requiring grad and a view of a tensor that
    does not (``x.detach()[1:].requires_grad_()``): its gradient is its own, where every
    tensor inside the graph is regenerated off a synthetic base made from its root, which
    does not require grad: the call's outputs computed from it lost ``requires_grad`` and
    their gradients, silently (found beside fuzz seed 30000167)."""
    for i in group:
        t = call_inputs[i]
        if t.is_leaf and t.requires_grad and t._base is not None and not t._base.requires_grad:
            raise AotgradCompileError(
                f"aotgrad: input {i} is an autograd leaf that requires grad and is a view of a tensor "
                "that does not (requires_grad_() on a view of a detach()ed tensor), and the program "
                "writes into its storage through as_strided or another input sharing it; its gradient "
                "beside that write is not supported. Pass a tensor that owns its storage (clone() it "
                "before requires_grad_())."
            )


def plan_input_aliasing(
    call_inputs: list[torch.Tensor],
    fake_inputs: list[torch.Tensor],
    metadata: ViewAndMutationMetadata,
) -> InputAliasing | None:
    """Decide the synthetic bases for a call, or None when no aliased input is mutated.

    ``fake_inputs`` are the fake versions of ``call_inputs`` (same aliasing); ``metadata`` is
    the analysis of the program with the inputs taken as separate tensors (its mutation flags
    are right; its values are not, which is why the program is re-analysed over the bases).
    """
    bases: list[SyntheticBase] = []
    merged: set[int] = set()
    for group in _groups(call_inputs, metadata):
        if not any(_written_or_readdressed(metadata.input_info[i]) for i in group):
            continue  # nothing written: aliasing cannot be observed inside the graph
        _refuse_leaf_views_requiring_grad(group, call_inputs)
        if len({call_inputs[i].dtype for i in group}) != 1:
            raise AotgradCompileError(
                f"aotgrad: inputs {group} share storage with different dtypes and one is "
                "mutated; this is not supported. Pass them as separate tensors."
            )
        roots = {id(call_inputs[i] if call_inputs[i]._base is None else call_inputs[i]._base) for i in group}
        # a root whose elements overlap (an expand()ed tensor detach()ed) is no base to write:
        # the storage is, as for aliases without a common base
        common = len(roots) == 1 and not any(
            _overlaps(call_inputs[i] if call_inputs[i]._base is None else call_inputs[i]._base) for i in group
        )
        if common:
            source = group[0]
            real_root = call_inputs[source] if call_inputs[source]._base is None else call_inputs[source]._base
            fake_src = fake_inputs[source]
            fake_root = fake_src if fake_src._base is None else fake_src._base
            base_view = _strided(real_root)
        else:
            needing_grad = [i for i in group if call_inputs[i].requires_grad]
            # those requiring grad must be one autograd tensor and its views (members that
            # do not, detach()ed aliases, are taken off the base through detach())
            if len({id(call_inputs[i] if call_inputs[i]._base is None else call_inputs[i]._base) for i in needing_grad}) > 1:
                raise AotgradCompileError(
                    f"aotgrad: inputs {group} share storage, one is mutated, several require "
                    "grad, and they have no common ._base; this is not supported. Pass views "
                    "of one base instead."
                )
            source = needing_grad[0] if needing_grad else group[0]
            t = call_inputs[source]
            numel = t.untyped_storage().nbytes() // t.element_size()
            base_view = ((numel,), (1,), 0)
            fake_root = None
        views = tuple(_strided(call_inputs[i]) for i in group)
        # A member addressed by storage is made with as_strided, one view off the base: its
        # own as_strided is then taken of the base (see eager_rewrites), which
        # functionalization replays onto the base exactly.
        replay = tuple(
            common and not metadata.input_info[i].addresses_storage and _replayable(fake_inputs[i], fake_root, v)
            for i, v in zip(group, views)
        )
        # (a family of the source alone is taken as before: separately, through detach())
        source_root = _root(call_inputs[source])
        in_family = tuple(_root(call_inputs[i]) is source_root for i in group)
        if sum(in_family) < 2:
            in_family = (False,) * len(group)
        separate = () if common else tuple(
            i for i, family in zip(group, in_family)
            if not call_inputs[i].requires_grad
            and not family
            and metadata.input_info[i].mutates_data
            and metadata.input_info[i].mutation_visible_to_autograd
        )
        if any(_overlaps(call_inputs[i]) for i in separate):
            raise AotgradCompileError(
                f"aotgrad: input {next(i for i in separate if _overlaps(call_inputs[i]))}, a detach()ed "
                "tensor whose elements overlap in memory (an expanded one), is written with an operand "
                "that requires grad: eager gives it an autograd history of its own, which the compiled "
                "call would copy into memory that overlaps itself. Pass a contiguous tensor (clone())."
            )
        bases.append(
            SyntheticBase(
                tuple(group), common, source, base_view, views, replay,
                tuple(call_inputs[i].requires_grad for i in group), separate, in_family,
                tuple(_made_with_grad(call_inputs[i]) for i in group),
            )
        )
        merged.update(group)
    if not bases:
        return None
    unmerged = tuple(i for i in range(len(call_inputs)) if i not in merged)
    return InputAliasing(len(call_inputs), unmerged, tuple(bases))


def outputs_on_call_inputs(
    base_metadata: ViewAndMutationMetadata, call_metadata: ViewAndMutationMetadata
) -> ViewAndMutationMetadata:
    """The metadata of the program over synthetic bases (``base_metadata``), with outputs
    that are or view an input pointed at the caller's own input, as ``call_metadata`` (the
    analysis with inputs taken one by one) has them: they are rebuilt off the real input,
    ``._base`` as in eager, and their ``call_input_index`` is a call-input index.

    requires_grad stays from the analysis over bases: a mutation of one alias can make its
    siblings require grad, which only that run sees; so can it invalidate their no_grad and
    multi-output views, and make a view taken under no_grad a ``no_grad_view`` (one that
    requires grad without a grad_fn).
    """
    input_kinds = (OutputType.is_input, OutputType.alias_of_input)
    outputs = []
    n_user = len(call_metadata.output_info)
    # (the outputs past the user's are the separate families' new values: fresh tensors)
    for o_base, o_call in zip(base_metadata.output_info[:n_user], call_metadata.output_info, strict=True):
        if o_base.output_type in input_kinds:
            if o_call.output_type not in input_kinds:
                raise AotgradCompileError(
                    "aotgrad internal error: an output aliases a synthetic base but not an input"
                )
            # A mutation of one alias invalidates views of its siblings: only the run over
            # bases sees that (shared version counter); taken where the call's run agrees
            # that eager's view was made in no_grad mode.
            invalidated, step = o_call.invalidated, o_call.multi_output_step
            without_grad_fn, last_step = o_call.invalidated_without_grad_fn, o_call.last_view_step
            # a no_grad view of an input that requires grad only through a sibling's mutation
            # (only the run over bases has it require grad): eager's requires grad without a
            # grad_fn, so it is rebuilt under no_grad (fuzz seed 7006432)
            no_grad_view = o_call.no_grad_view or (o_base.no_grad_view and not o_call.requires_grad)
            if o_base.invalidated == "NO_GRAD_MODE" and no_grad_view:
                invalidated, last_step = o_base.invalidated, o_base.last_view_step
            elif o_base.invalidated == "MULTI_OUTPUT_NODE" and (o_base.multi_output_step is not None or o_call.multi_output_view):
                # (its chain over the base ends with the same multi-output op as the caller's,
                # or the caller's is a view of a multi-output view too;
                # made before a sibling's mutation gave the input a history, it has no grad_fn,
                # which only that run sees: autograd's error says "A view was created in no_grad mode")
                invalidated, step = o_base.invalidated, o_base.multi_output_step
                without_grad_fn, last_step = o_base.invalidated_without_grad_fn, o_base.last_view_step
            # Likewise a write into a sibling makes the view stale: eager regenerates its
            # grad_fn as as_strided off the autograd root, which the call's run does not see
            # (fuzz seed 10004958); the caller's input has the same root as the synthetic
            # base's member, so it is rebuilt off that root.
            root = dict(off_root=True, view_source=None, no_grad_steps=o_base.no_grad_steps) if (
                o_base.off_root and not o_call.off_root
            ) else {}
            o_base = dataclasses.replace(
                o_call, requires_grad=o_base.requires_grad, no_grad_view=no_grad_view, invalidated=invalidated,
                multi_output_step=step, invalidated_without_grad_fn=without_grad_fn, last_view_step=last_step, **root,
            )
        elif o_base.storage_of_input is not None:
            # a detach()ed alias with its own history: rebuilt off the caller's input
            if o_call.storage_of_input is not None:
                o_base = dataclasses.replace(o_base, storage_of_input=o_call.storage_of_input)
            elif o_call.output_type in input_kinds:
                # only the run over bases gave it that history (a sibling alias's mutation
                # did): rebuilt as the call's run has it, as before that history was followed
                o_base = dataclasses.replace(o_call, requires_grad=o_base.requires_grad)
            else:
                raise AotgradCompileError(
                    "aotgrad: an output that shares an input's storage through detach() and has "
                    "its own autograd history (an in-place op with an operand requiring grad) is "
                    "not supported where the inputs alias one another; clone() it before returning"
                )
        outputs.append(o_base)
    outputs.extend(base_metadata.output_info[n_user:])
    return dataclasses.replace(
        base_metadata, output_info=tuple(outputs), call_inputs_detached=call_metadata.detached_in_place
    )
