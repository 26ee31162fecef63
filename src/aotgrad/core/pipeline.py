"""Compile one entry: from a call's leaves to a guarded runtime, running every stage in order.

frontend (layout, fake inputs) → analysis (metadata) → tracing (joint or inference graph)
→ partition → user compilers → runtime. Each stage hands the next a plain value; this module
only sequences them and keeps what a user may want to look at in :class:`CompiledEntry`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import operator
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Self

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.multiprocessing.reductions import StorageWeakRef

from ..compilers import nop, positional, print_graph
from ..config import AotConfig
from ..context import compiling
from ..errors import AotgradCompileError
from ..partition import grad_tangent_dependencies, saved_values, tag_forward_nodes, view_root, viewed_placeholder
from .aliasing import InputAliasing, outputs_on_call_inputs, plan_input_aliasing
from .analysis import Analysis, analyze, reject_inplace_on_leaves, reorders_elements
from .cache import EntryStore, StoredEntry
from .fake_mode import OffsetKeepingFakeTensorMode
from .frontend import EntryGuard, InputLayout, layout_for
from .higher_order import DifferentiableBackward
from .partial_backward import PartialBackwards
from .layout import eager_layouts, restriding
from .metadata import OutputType, ViewAndMutationMetadata
from .provenance import SourceMarks
from .runtime import BackwardSpec, CompiledRuntime
from .signature import GraphSignature, graph_outputs
from .subclasses import SubclassBoundary, holds_subclass, subclass_boundary
from .symbolic import ShapeGuard, SymbolicLeaves, fake_graph_inputs, plan_symbolic
from .tracing import (
    JointGraph, _primals, analyze_tracing_inference, analyze_tracing_joint, fake_detach, trace_inference, trace_joint,
)

__all__ = ["CompiledEntry", "compile_entry"]

log = logging.getLogger("aotgrad")


@dataclass
class CompiledEntry:
    """One compiled specialisation of the user function, and what produced it."""

    guard: EntryGuard
    layout: InputLayout
    metadata: ViewAndMutationMetadata
    runtime: CompiledRuntime
    training: bool
    #: the graphs handed to the compilers: "forward"/"backward", or "inference"
    graphs: dict[str, torch.fx.GraphModule] = field(default_factory=dict)
    joint_graph: torch.fx.GraphModule | None = None
    #: which call inputs were merged into synthetic bases (None: graph inputs = call inputs)
    input_aliasing: InputAliasing | None = None
    compile_seconds: float = 0.0
    #: why sizes asked to be symbolic were traced static (None: they were not, or none were asked)
    static_reason: str | None = None
    #: seconds spent in each stage of this compile, in the order run: "analysis", "tracing",
    #: "partition", "compile forward" / "compile backward" / "compile inference" (the user's
    #: compilers); a stage that did not run (a graph loaded from the cache) is absent, and an
    #: inference graph traced in the analysis run itself (:func:`_one_pass`) is "analysis" only
    stage_seconds: dict[str, float] = field(default_factory=dict)

    def __call__(self, leaves: list[Any]) -> Any:
        return self.runtime.run(self.layout.call_inputs_of(leaves))

    @property
    def signature(self) -> GraphSignature:
        """Where each value sits among the compiled graphs' inputs and outputs."""
        return self.runtime.signature

    @property
    def run_flat(self) -> Callable[[tuple], Any]:
        """Run on a positional-only call's args (valid when the guard's fast check passes);
        a tensor passed twice is picked once, in C (``itemgetter``)."""
        run = self.runtime.run
        if not self.layout.has_duplicates:
            return run
        pick = operator.itemgetter(*self.layout.distinct_tensors)
        if len(self.layout.distinct_tensors) == 1:
            return lambda args: run((pick(args),))
        return lambda args: run(pick(args))

    def __repr__(self) -> str:
        kind = "training" if self.training else "inference"
        shapes = "symbolic" if self.guard.shape_guard is not None else "static"
        if self.static_reason is not None:
            shapes += f" ({self.static_reason})"
        return (
            f"CompiledEntry({kind}, {shapes}, graph_inputs={self.layout.num_distinct}, "
            f"mutated_inputs={list(self.metadata.mutated_input_indices)}, "
            f"aliased_outputs={list(self.metadata.aliased_output_indices)}, "
            f"synthetic_bases={0 if self.input_aliasing is None else len(self.input_aliasing.bases)}, "
            f"compile_seconds={self.compile_seconds:.3f})"
        )


class _CachedEntry(CompiledEntry):
    """An entry built from the persistent cache (:mod:`.cache`): the same values, but its
    joint graph, which nothing runs, is decoded on first access."""

    _joint: torch.fx.GraphModule | None = None
    _load_joint: Callable[[], torch.fx.GraphModule] | None = None

    @property  # type: ignore[override]
    def joint_graph(self) -> torch.fx.GraphModule | None:
        if self._joint is None and self._load_joint is not None:
            self._joint, self._load_joint = self._load_joint(), None
        return self._joint

    @joint_graph.setter
    def joint_graph(self, value: torch.fx.GraphModule | None) -> None:
        self._joint = value


@dataclass
class _AnalyzedCall:
    """What the analysis stage hands to tracing: the program over the graph inputs."""

    program: Callable
    #: the analysis with the caller's inputs taken one by one (what the guard speaks of)
    call_analysis: Analysis
    #: the analysis of ``program`` over the graph inputs (synthetic bases merged in)
    analysis: Analysis
    input_aliasing: InputAliasing | None
    graph_inputs: list[torch.Tensor]
    fake_inputs: list[torch.Tensor]
    fake_mode: FakeTensorMode
    #: seconds per stage so far (CompiledEntry.stage_seconds), filled as the stages run
    times: dict[str, float] = field(default_factory=dict)
    #: the inference graph, traced during the analysis run itself (see :func:`_one_pass`)
    inference_graph: torch.fx.GraphModule | None = None
    #: the joint graph, traced during the analysis run itself (see :func:`_one_pass_training`)
    joint: JointGraph | None = None
    #: per graph kind, what its compiler kept in the cache entry this call was loaded from
    #: (the compiler loads its compiled graph by it: :func:`_compile_graph`)
    stored_artifacts: dict[str, Any] = field(default_factory=dict)
    #: per graph kind, what its compiler asks to keep in the entry this compile stores
    compiler_artifacts: dict[str, Any] = field(default_factory=dict)
    #: what building the runtime reads off the compiled graphs (:class:`_TrainingFacts`,
    #: or :class:`_EagerOutputs` of an inference graph): read by a cold compile, held from
    #: the start by the call of an entry loaded from the cache, which stores it
    graph_facts: Any = None
    #: per graph kind, the example inputs its compiler was given, where the entry this
    #: compile stores keeps them (None: not kept); called only where the entry is stored
    #: (a symbolic one is not: comparing its sizes would guard them)
    examples_to_store: Callable[[], dict[str, list[Any] | None]] = dict


@contextlib.contextmanager
def _stage(times: dict[str, float], name: str) -> Iterator[None]:
    """Add the time spent in the block to ``times[name]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        times[name] = times.get(name, 0.0) + time.perf_counter() - start


def _source_marks(config: AotConfig) -> contextlib.AbstractContextManager:
    """Tag the traced nodes with the user's source lines, where the config asks for it."""
    return SourceMarks() if config.record_source_lines else contextlib.nullcontext()


class _LoadedCall(_AnalyzedCall):
    """The call of an entry loaded from the persistent cache (the analysis as stored). Its
    ``fake_inputs`` (``from_tensor`` of each graph input, ~50 µs apiece) are made from the
    call's inputs when first read: a hit whose compilers' example inputs are stored
    (:func:`_stored_entry_primals`, :meth:`StoredEntry.example_inputs`) reads them only for
    an input whose metadata the program changes, or a double backward's retrace.
    Constructed as :class:`_AnalyzedCall`, with a function making the fake inputs in their
    place."""

    _fake_inputs: list[Any] | None = None

    @property  # type: ignore[override]
    def fake_inputs(self) -> list[Any]:
        if self._fake_inputs is None:
            self._fake_inputs = self._make_fake_inputs()
        return self._fake_inputs

    @fake_inputs.setter
    def fake_inputs(self, make: Callable[[], list[Any]]) -> None:
        self._make_fake_inputs, self._fake_inputs = make, None


class _NeedsStaticTrace(Exception):
    """A symbolic trace met what only a static one handles; the message says what."""


def _fake_mode(symbolic: SymbolicLeaves | None) -> FakeTensorMode:
    if symbolic is None:
        return OffsetKeepingFakeTensorMode(allow_non_fake_inputs=True)
    # Data-dependent sizes raise as in a static trace (the same error, naming the op).
    shape_env = ShapeEnv(allow_scalar_outputs=False, allow_dynamic_output_shape_ops=False)
    return OffsetKeepingFakeTensorMode(allow_non_fake_inputs=True, shape_env=shape_env)


def _fake_call(layout: InputLayout, call_inputs: list[Any], symbolic: SymbolicLeaves | None, fake_mode: FakeTensorMode) -> list[Any]:
    """Fake call inputs, with the sizes ``symbolic`` names symbolic."""
    if symbolic is None:
        return [fake_mode.from_tensor(t) for t in call_inputs]
    distinct_of_leaf = {pos: layout.distinct_of_tensor[k] for k, pos in enumerate(layout.tensor_positions)}
    dims: list[frozenset[int] | None] = [None] * layout.num_distinct
    for pos, leaf_dims in symbolic.tensor_dims:
        if pos in distinct_of_leaf:
            g = distinct_of_leaf[pos]
            dims[g] = (dims[g] or frozenset()) | leaf_dims
    same_as = dict(symbolic.ints)
    ints = []
    for k, pos in enumerate(layout.symint_positions):
        leaf_dim = same_as.get(pos)
        if leaf_dim is not None and leaf_dim[0] in distinct_of_leaf:
            ints.append((call_inputs[layout.num_distinct + k], (distinct_of_leaf[leaf_dim[0]], leaf_dim[1])))
        else:
            ints.append((call_inputs[layout.num_distinct + k], None))
    return fake_graph_inputs(call_inputs[: layout.num_distinct], dims, ints, fake_mode, symbolic.duck)


def _analyze_timed(
    fn: Callable, layout: InputLayout, call_inputs: list[Any], grad_enabled: bool, symbolic: SymbolicLeaves | None,
    config: AotConfig | None = None,
) -> _AnalyzedCall:
    """:func:`_analyze_call`, its time recorded as the "analysis" stage (which then also
    holds tracing, where the inference graph is traced in the same run: :func:`_one_pass`)."""
    start = time.perf_counter()
    call = _analyze_call(fn, layout, call_inputs, grad_enabled, symbolic, config)
    call.times["analysis"] = time.perf_counter() - start
    return call


def _one_pass(config: AotConfig | None, call_inputs: list[Any], grad_enabled: bool) -> bool:
    """Whether the inference graph is traced in the analysis run itself
    (:func:`~aotgrad.core.tracing.analyze_tracing_inference`) instead of in a second run:
    where the entry will be an inference entry (grad mode off, or no input requiring grad)
    and the analysis's fake inputs are what tracing's would be: plain leaf tensors, no view
    base, no inference tensors; static sizes (checked by the caller); no decompositions
    (they may change the fake values the analysis reads) and no source lines recorded."""
    tensors = [t for t in call_inputs if isinstance(t, torch.Tensor)]
    if grad_enabled and any(t.requires_grad for t in tensors):
        return False
    return _traceable_in_analysis(config, tensors)


def _one_pass_training(config: AotConfig | None, call_inputs: list[Any], grad_enabled: bool) -> bool:
    """Whether the joint graph is traced in the analysis run itself
    (:func:`~aotgrad.core.tracing.analyze_tracing_joint`) instead of in a second run: where
    the entry will be a training entry (grad mode on and an input requiring grad), under
    the conditions of :func:`_traceable_in_analysis`. The analysis then decides whether the
    run's forward is the joint's (else the joint is traced as usual)."""
    tensors = [t for t in call_inputs if isinstance(t, torch.Tensor)]
    if not (grad_enabled and any(t.requires_grad for t in tensors)):
        return False
    return _traceable_in_analysis(config, tensors)


def _traceable_in_analysis(config: AotConfig | None, tensors: list[torch.Tensor]) -> bool:
    """Whether the analysis's fake inputs are what tracing's would be (static sizes are
    checked by the caller): plain leaf tensors, no view base, no inference tensors, outside
    inference mode; no decompositions (they may change the fake values the analysis reads)
    and no source lines recorded."""
    if config is None or config.record_source_lines or config.trace_decompositions:
        return False
    if torch.is_inference_mode_enabled():
        return False
    return all(
        type(t) in (torch.Tensor, torch.nn.Parameter) and t.is_leaf and t._base is None and not t.is_inference()
        for t in tensors
    )


def _analyze_call(
    fn: Callable, layout: InputLayout, call_inputs: list[Any], grad_enabled: bool, symbolic: SymbolicLeaves | None,
    config: AotConfig | None = None,
) -> _AnalyzedCall:
    """Analysis, then synthetic bases (and a second analysis over them) where needed."""
    if symbolic is not None and holds_subclass(call_inputs):
        raise _NeedsStaticTrace("tensor subclass inputs are traced with static shapes")
    fake_mode = _fake_mode(symbolic)
    fake_call = _fake_call(layout, call_inputs, symbolic, fake_mode)
    program = layout.program_of(fn)
    rng_state = torch.random.get_rng_state()
    inference_graph = joint = None
    try:
        with _GeneratorStateCalls() as calls:
            if symbolic is None and _one_pass_training(config, call_inputs, grad_enabled):
                call_analysis, joint = analyze_tracing_joint(
                    program,
                    lambda p, inputs, **modes: analyze(p, inputs, fake_mode, grad_enabled=grad_enabled, **modes),
                    fake_call, fake_mode,
                )
            elif symbolic is None and _one_pass(config, call_inputs, grad_enabled):
                assert config is not None
                call_analysis, inference_graph = analyze_tracing_inference(
                    program,
                    lambda p, inputs: analyze(p, inputs, fake_mode, grad_enabled=grad_enabled),
                    fake_call, fake_mode,
                    lambda a: not (
                        records_autograd(a.metadata, grad_enabled)
                        and any(isinstance(t, torch.Tensor) and t.requires_grad for t in call_inputs)
                    )
                    and not any(i.mutates_metadata for i in a.metadata.input_info)
                    and not (config.keep_inference_input_mutations and a.metadata.mutated_input_indices),
                )
            else:
                call_analysis = analyze(program, fake_call, fake_mode, grad_enabled=grad_enabled)
    finally:
        reseeded = calls.seen or not torch.equal(rng_state, torch.random.get_rng_state())
        torch.random.set_rng_state(rng_state)
    if reseeded:
        # Random ops on fake tensors draw nothing: only the program itself set the state.
        raise AotgradCompileError(
            f"aotgrad: {getattr(fn, '__name__', fn)} sets the global random generator's state "
            "(torch.manual_seed, torch.seed, set_rng_state) while it runs. A compiled function runs "
            "that once, at trace time, not on every call, so its random ops would draw other values "
            "than eager's. Seed outside the compiled function."
        )
    reject_inplace_on_leaves(call_inputs, call_analysis.metadata)
    if symbolic is not None and call_analysis.metadata.leaf_slots:
        raise _NeedsStaticTrace("a new autograd leaf the program returns and computes with is made with static sizes")
    n = layout.num_distinct  # the SymInt inputs after the tensors alias nothing
    input_aliasing = plan_input_aliasing(call_inputs[:n], fake_call[:n], call_analysis.metadata)
    if input_aliasing is None:
        return _AnalyzedCall(
            program, call_analysis, call_analysis, None, call_inputs, fake_call, fake_mode,
            inference_graph=inference_graph, joint=joint,
        )
    if call_analysis.metadata.leaf_slots:
        raise AotgradCompileError(
            "aotgrad: the program returns a new autograd leaf (requires_grad_()) that other outputs "
            "are computed from, while mutating an input that shares its storage with another; this "
            "is not supported. Call requires_grad_() outside the function."
        )
    if call_analysis.metadata.sets_requires_grad:
        raise AotgradCompileError(
            f"aotgrad: the program makes input {call_analysis.metadata.sets_requires_grad[0]} require "
            "grad (requires_grad_()) while mutating an input that shares its storage; this is not "
            "supported. Call requires_grad_() before calling the function."
        )
    templates = {i: fake_call[i] for b in input_aliasing.bases for i in b.members}
    _refuse_detached_member_views(input_aliasing, templates, call_analysis.metadata)
    _refuse_relaid_out_leaf_members(input_aliasing, call_inputs, call_analysis.metadata)
    if symbolic is not None:
        raise _NeedsStaticTrace("aliased inputs of which one is mutated need synthetic bases")
    if holds_subclass(call_inputs[:n]):
        raise AotgradCompileError(
            "aotgrad: Encountered aliased inputs that are mutated in the graph, but at least one "
            "input/output to the graph is a tensor subclass. This is not supported today (torch's "
            "words): tensor-subclass inputs that alias one another, one of them mutated, would need a "
            "synthetic base over the subclass's inner tensors. Pass separate tensors (e.g. clone() "
            "one of the views) or mutate them outside the function."
        )
    log.debug("aotgrad: %r", input_aliasing)
    graph_inputs = input_aliasing.graph_inputs(call_inputs)
    fake_inputs = [fake_mode.from_tensor(t) for t in graph_inputs]
    program = input_aliasing.wrap_program(program, templates)
    try:
        base_analysis = analyze(program, fake_inputs, fake_mode, grad_enabled=grad_enabled, final=True)
    except Exception as exc:
        if not call_analysis.metadata.detached_in_place or (
            isinstance(exc, AotgradCompileError) and "could not trace the program" not in str(exc)
        ):
            raise
        # The run over separate inputs got through: an error only the run over the bases
        # raises is its own, not eager's (never a false eager error); autograd's own assert
        # there (a use of a stale view of the detached base: "new_fn INTERNAL ASSERT") too
        raise AotgradCompileError(
            f"aotgrad: the program detaches input {call_analysis.metadata.detached_in_place[0]} in place "
            "(detach_()/requires_grad_(False)) while mutating an input that shares its storage, and its "
            f"run over their synthetic base raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
            "This is not supported. Detach it before calling the function, or use x.detach()."
        ) from exc
    metadata = outputs_on_call_inputs(base_analysis.metadata, call_analysis.metadata)
    analysis = dataclasses.replace(base_analysis, metadata=metadata)
    return _AnalyzedCall(program, call_analysis, analysis, input_aliasing, graph_inputs, fake_inputs, fake_mode)


class _GeneratorStateCalls:
    """While entered, notes calls that set the global generator's state (``torch.manual_seed``,
    ``torch.seed``, ``torch.set_rng_state``, through ``torch`` or ``torch.random``), even when
    the program restores the state before it returns (``freeze_rng_state``, ``fork_rng``):
    random ops between them would draw from the set state in eager, and from the caller's in
    a compiled call."""

    _NAMES = ("manual_seed", "seed", "set_rng_state")

    def __init__(self) -> None:
        self.seen = False
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> Self:
        for module in (torch, torch.random):
            for name in self._NAMES:
                original = getattr(module, name)
                self._saved.append((module, name, original))
                setattr(module, name, self._noting(original))
        return self

    def _noting(self, original: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.seen = True
            return original(*args, **kwargs)

        return call

    def __exit__(self, *exc: object) -> None:
        for module, name, original in reversed(self._saved):
            setattr(module, name, original)


def records_autograd(md: ViewAndMutationMetadata, grad_enabled: bool) -> bool:
    """Whether eager's autograd records anything of the program: always in grad mode; under
    no_grad only where the program turns grad mode back on (``enable_grad()``,
    ``set_grad_enabled(True)``) and an output, or a mutation of an input, comes out of that
    region requiring grad. The caller's mode alone does not decide the graph."""
    if grad_enabled:
        return True
    return any(o.requires_grad and not o.new_leaf for o in md.output_info) or any(
        i.mutation_visible_to_autograd for i in md.input_info
    )


def _is_training(md: ViewAndMutationMetadata, grad_enabled: bool, graph_inputs: list[Any]) -> tuple[bool, bool]:
    """(training, anchored): a training entry when autograd records something of the program
    and there is something to differentiate: a graph input that requires grad (at the call,
    or made to by the program's ``requires_grad_()``), or a graph output that requires grad
    through a new autograd leaf the program made (``anchored``: no input requires grad, so
    the Function is given one extra leaf of its own to give those outputs a grad_fn)."""
    if not records_autograd(md, grad_enabled):
        return False, False
    if md.sets_requires_grad or md.leaf_slots or any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in graph_inputs
    ):
        return True, False
    differentiable = any(
        o.requires_grad and not o.new_leaf and o.output_type is OutputType.non_alias for o in md.output_info
    ) or any(md.intermediate_base_requires_grad)
    return differentiable, differentiable


def _relaid_out_storage(call: _AnalyzedCall, placeholders: list[torch.fx.Node]) -> set[torch.fx.Node]:
    """The forward graph's placeholders of graph inputs sharing storage (and so, in the
    caller, a version counter) with an input whose metadata the program changes."""
    inputs = call.analysis.metadata.input_info
    storages = {
        StorageWeakRef(call.fake_inputs[i].untyped_storage()) for i, x in enumerate(inputs) if x.mutates_metadata
    }
    # a synthetic base with a member whose metadata the program changes (the run over bases
    # sees the member as a view of the base, not as an input)
    merged = call.input_aliasing
    members_relaid = set() if merged is None else {
        placeholders[len(merged.unmerged) + k] for k, b in enumerate(merged.bases)
        if any(call.call_analysis.metadata.input_info[i].mutates_metadata for i in b.members)
    }
    if not storages:
        return members_relaid
    return members_relaid | {
        placeholders[i] for i, t in enumerate(call.fake_inputs[: len(placeholders)])
        if isinstance(t, torch.Tensor) and StorageWeakRef(t.untyped_storage()) in storages
    }


def _plain_fake_leaves(fake_inputs: list[Any]) -> bool:
    """Whether every fake input is a leaf with no autograd history and no view base (as
    parameters and data usually are): then they stand for the graph inputs as
    :func:`~aotgrad.core.tracing._primals` would make them (a detach() through the fake
    mode for each would make equal ones, at ~0.2 ms apiece on a cache hit)."""
    return all(not isinstance(t, torch.Tensor) or (t.grad_fn is None and t._base is None) for t in fake_inputs)


def _stored_primals(call: _AnalyzedCall) -> list[Any] | None:
    """What the entry stores of the forward compiler's example inputs
    (:meth:`StoredEntry.example_inputs`): the fake inputs where they are plain leaves
    (:func:`_plain_fake_leaves`) laid out as the call's inputs still (the key, which
    describes those, then determines them); None elsewhere (a hit fakes them again)."""
    fakes = call.fake_inputs
    if len(fakes) != len(call.graph_inputs) or not _plain_fake_leaves(fakes):
        return None
    for f, t in zip(fakes, call.graph_inputs):
        if isinstance(f, torch.Tensor) != isinstance(t, torch.Tensor) or (isinstance(t, torch.Tensor) and (
            f.shape != t.shape or f.stride() != t.stride() or f.storage_offset() != t.storage_offset()
            or f.dtype != t.dtype or f.requires_grad != t.requires_grad
        )):
            return None
    return list(fakes)


def _stored_entry_primals(call: _AnalyzedCall, stored: StoredEntry) -> list[Any]:
    """The forward compiler's example inputs for a stored entry: fake leaves standing for the
    graph inputs, as :func:`~aotgrad.core.tracing._primals` makes them: those the entry
    stores (made from descriptions, ~3x cheaper than faking the call's inputs again), else
    the fake inputs themselves where they are plain leaves, else detached copies of them."""
    primals = stored.example_inputs("forward")
    if primals is not None:
        return primals
    if _plain_fake_leaves(call.fake_inputs):
        return list(call.fake_inputs)
    return _primals(call.fake_inputs, call.fake_mode)


#: ``bw_module.meta`` key of the joint's ``tangent_reach``, kept with the stored graphs
_TANGENT_REACH = "aotgrad_tangent_reach"


def _grad_tangent_deps(
    bw_module: torch.fx.GraphModule, tangent_reach: tuple[frozenset[int], ...], signature: GraphSignature
) -> tuple[frozenset[int], ...]:
    """Per gradient of a graph input (or new leaf), the tangents whose absence (autograd's
    None) leaves it None (``BackwardSpec.grad_tangent_deps``): those of the forward outputs
    from which eager's autograd graph reaches that input (``JointGraph.tangent_reach``), as
    the joint recorded it, and those the backward graph reads for it. Eager's backward from
    such an output gives the input a tensor even where the formula's value reads no
    incoming gradient (``pow(x, 0)``: zeros; fuzz seed 2015710), and none where its graph
    does not reach the input whatever the traced ops' data flow (a view the program took
    under no_grad, which functionalization regenerates from its base: fuzz seed 4006405)."""
    n = signature.num_graph_inputs + signature.num_leaf_slots
    read = grad_tangent_dependencies(bw_module)[:n]
    return tuple(
        deps | frozenset(k for k, reached in enumerate(tangent_reach) if i in reached)
        for i, deps in enumerate(read)
    )


class _SavedNode(NamedTuple):
    """A saved tensor's node as :class:`DifferentiableBackward` reads it."""

    name: str
    target: Any


@dataclass(frozen=True)
class _EagerOutputs:
    """A forward (or inference) graph's fresh outputs the runtime makes as eager's: detached
    where the graph computes them with a view op (``views``: :func:`_view_outputs`), given
    eager's strides (``layouts``: :func:`~aotgrad.core.layout.eager_layouts`)."""

    views: tuple[int, ...]
    layouts: tuple[tuple, ...]

    @classmethod
    def of(cls, gm: torch.fx.GraphModule, md: ViewAndMutationMetadata, signature: GraphSignature) -> _EagerOutputs:
        return cls(_view_outputs(gm, md, signature), eager_layouts(gm, md, signature))

    def as_eager(self, compiled: Callable) -> Callable:
        """The compiled graph with those outputs made as eager's."""
        return restriding(_detaching(compiled, self.views), self.layouts)


@dataclass(frozen=True)
class _TrainingFacts:
    """What a training entry's runtime is built from that is read off its partitioned forward
    and backward graphs (:func:`_training_facts`): read by a cold compile and stored in the
    cache entry with the graphs, so that a hit decodes none of their nodes."""

    num_saved_tensors: int
    num_saved_symints: int
    #: each saved tensor's node
    saved: tuple[_SavedNode, ...]
    saved_inputs_to_clone: tuple[int, ...]
    saved_outputs_unversioned: tuple[int, ...]
    grad_tangent_deps: tuple[frozenset[int], ...]
    forward_outputs: _EagerOutputs


def _training_facts(
    call: _AnalyzedCall, fw_module: torch.fx.GraphModule, bw_module: torch.fx.GraphModule,
    joint_signature: GraphSignature,
) -> _TrainingFacts:
    """Read the partitioned graphs (checked against the signature) for what the runtime needs."""
    md = call.analysis.metadata
    num_fwd_outputs = joint_signature.num_forward_outputs
    saved_tensors, saved_symints = saved_values(fw_module, num_fwd_outputs)
    signature = joint_signature.with_saved(len(saved_tensors), len(saved_symints))
    signature.check_forward_graph(fw_module, saved=True)
    signature.check_backward_graph(bw_module)
    placeholders = fw_module.graph.find_nodes(op="placeholder")
    data_mutated = set(md.data_mutated_input_indices)
    # a saved input, or a view of one (made in the Function's forward, so under no_grad),
    # that the write back mutates is saved as a copy: eager saved the value before the write
    to_clone = tuple(
        k
        for k, node in enumerate(saved_tensors)
        if (p := viewed_placeholder(node)) is not None and placeholders.index(p) in data_mutated
    )
    # a saved value sharing a version counter with a returned one: the caller may write the
    # output, which only matters where eager saved it too (core/saved_tensors.py checks that);
    # likewise with an input whose metadata the write back changes, which moves the counter
    # of its storage (runtime.replay_metadata) where eager's op moved it before or after saving
    returned = {view_root(n) for n in graph_outputs(fw_module)[:num_fwd_outputs] if isinstance(n, torch.fx.Node)}
    returned |= _relaid_out_storage(call, placeholders)
    unversioned = tuple(
        k for k, node in enumerate(saved_tensors) if k not in to_clone and view_root(node) in returned
    )
    return _TrainingFacts(
        num_saved_tensors=len(saved_tensors),
        num_saved_symints=len(saved_symints),
        saved=tuple(_SavedNode(n.name, n.target) for n in saved_tensors),
        saved_inputs_to_clone=to_clone,
        saved_outputs_unversioned=unversioned,
        grad_tangent_deps=_grad_tangent_deps(bw_module, bw_module.meta[_TANGENT_REACH], signature),
        forward_outputs=_EagerOutputs.of(fw_module, md, signature),
    )


def _placeholder_values(gm: torch.fx.GraphModule) -> list[Any]:
    """The graph's placeholders' fake values (the backward compiler's example inputs)."""
    return [n.meta.get("val") for n in gm.graph.find_nodes(op="placeholder")]


def _compile_training(
    call: _AnalyzedCall, config: AotConfig, graphs: dict, grad_enabled: bool, name: str,
    stored: StoredEntry | None = None, anchored: bool = False,
) -> tuple[CompiledRuntime, torch.fx.GraphModule]:
    """Joint graph → partition → forward/backward compilers → runtime with an autograd.Function.

    ``grad_enabled`` is the caller's mode: the forward is traced in it (the program's own
    grad-mode regions nest inside), and under no_grad the runtime applies the Function with
    grad enabled so autograd records what those regions made. ``stored``: the joint,
    forward and backward graphs from the persistent cache (no trace, no partition)."""
    md = call.analysis.metadata
    joint_signature = call.analysis.signature
    num_fwd_outputs = joint_signature.num_forward_outputs
    if stored is None:
        joint = call.joint  # traced in the analysis run, where it could be
        if joint is None:
            with _stage(call.times, "tracing"), _source_marks(config):
                joint = trace_joint(
                    call.program, call.analysis, call.fake_inputs, call.fake_mode, config.trace_decompositions,
                    grad_enabled=grad_enabled,
                )
        joint_gm, primals = joint.graph, joint.primals
        joint_signature = joint.signature  # with the inputs the backward mutates
        with _stage(call.times, "partition"):
            tag_forward_nodes(joint_gm, num_fwd_outputs)
            fw_module, bw_module = config.partition_fn(
                joint_gm, [joint.primals, joint.tangents], num_fwd_outputs=num_fwd_outputs
            )
        bw_module.meta[_TANGENT_REACH] = joint.tangent_reach
        call.graph_facts = _training_facts(call, fw_module, bw_module, joint_signature)
        forward_examples: Callable[[], list[Any]] = lambda: list(primals)
        backward_examples = functools.partial(_placeholder_values, bw_module)
        call.examples_to_store = lambda: {"forward": _stored_primals(call), "backward": backward_examples()}
    else:
        # the joint graph is decoded when someone looks at it (_CachedEntry), the forward's
        # and backward's nodes when someone reads them (what the runtime needs of them is in
        # call.graph_facts), their example inputs where a compiler reads them
        joint_gm, fw_module, bw_module = None, stored.graphs["forward"], stored.graphs["backward"]
        forward_examples = functools.partial(_stored_entry_primals, call, stored)

        def backward_examples() -> list[Any]:
            examples = stored.example_inputs("backward")
            return _placeholder_values(bw_module) if examples is None else examples

    graphs["forward"], graphs["backward"] = fw_module, bw_module
    facts: _TrainingFacts = call.graph_facts
    signature = joint_signature.with_saved(facts.num_saved_tensors, facts.num_saved_symints)
    with _stage(call.times, "compile forward"):
        fw_compiled, _ = _compile_graph("forward", config, fw_module, forward_examples, call)
    fw_callable = facts.forward_outputs.as_eager(fw_compiled)
    with _stage(call.times, "compile backward"):
        bw_callable, bw_boundary = _compile_graph("backward", config, bw_module, backward_examples, call)
    avals = call.analysis.forward_output_avals
    backward = BackwardSpec(
        bw_callable=positional(bw_callable),
        tangent_meta=tuple(avals[p] for p in signature.tangents),
        tangent_zeros=() if bw_boundary is None else tuple(
            bw_boundary.zeros_of_input(len(backward_examples()) - len(signature.tangents) + k)
            for k in range(len(signature.tangents))
        ),
        saved_inputs_to_clone=facts.saved_inputs_to_clone,
        saved_outputs_unversioned=facts.saved_outputs_unversioned,
        grads_laid_out_as_inputs=_grads_laid_out_as_inputs(md, call.input_aliasing),
        # (indexed by graph input, as the backward's gradients are, with synthetic bases too:
        # the joint records the relayout on whatever graph input has one)
        grads_in_use_layout=tuple(
            (i, *info.grad_layout_at_use) for i, info in enumerate(md.input_info) if info.grad_layout_at_use
        ),
        grad_tangent_deps=facts.grad_tangent_deps,
        partial=PartialBackwards(
            lambda: bw_module,
            lambda gm: _compile_graph("backward", config, gm, backward_examples, call, stored=False)[0],
            len(signature.tangents), facts.grad_tangent_deps, name,
        ),
        differentiable=DifferentiableBackward(
            lambda: trace_joint(
                call.program, call.analysis, call.fake_inputs, call.fake_mode, config.trace_decompositions,
                grad_enabled=grad_enabled, create_graph=True,
            ).graph,
            num_fwd_outputs,
            [  # (each primal requires grad as its graph input does: tracing._primals)
                isinstance(t, torch.Tensor) and (t.requires_grad or md.input_info[i].sets_requires_grad)
                for i, t in enumerate(call.graph_inputs)
            ],
            facts.saved,
            {
                i: "writes" if info.mutates_data else "re-strides"
                for i, info in enumerate(md.input_info) if info.mutates_data or info.mutates_metadata
            },
            config, name,
        ),
    )
    runtime = CompiledRuntime(
        md, signature, call.analysis.out_spec, positional(fw_callable), backward,
        records_under_no_grad=not grad_enabled, anchored=anchored, **_runtime_context(call),
    )
    return runtime, joint_gm


def _compile_inference(
    call: _AnalyzedCall, config: AotConfig, graphs: dict, grad_enabled: bool, stored: StoredEntry | None = None
) -> CompiledRuntime:
    """Forward graph alone → inference compiler → runtime without autograd.Function
    (``stored``: the graph from the persistent cache, not traced again)."""
    md = call.analysis.metadata
    kept = frozenset(
        i for i in md.mutated_input_indices
        if config.keep_inference_input_mutations and not md.input_info[i].mutates_metadata
    )
    signature = call.analysis.signature.without_mutations(kept)
    if stored is not None:
        gm = stored.graphs["inference"]
    elif call.inference_graph is not None and not kept:
        gm = call.inference_graph  # traced in the analysis run
    else:
        with _stage(call.times, "tracing"), _source_marks(config):
            gm = trace_inference(
                call.program, call.analysis, call.fake_inputs, call.fake_mode, config.trace_decompositions,
                signature, grad_enabled=grad_enabled,
            )
    graphs["inference"] = gm
    if stored is None:
        call.graph_facts = _EagerOutputs.of(gm, md, signature)
        example = [fake_detach(t, call.fake_mode) if isinstance(t, torch.Tensor) else t for t in call.fake_inputs]
        # kept where they stand for the call's inputs as the key describes them
        call.examples_to_store = lambda: {"inference": example if _stored_primals(call) is not None else None}
        examples: Callable[[], list[Any]] = lambda: example
    else:

        def examples() -> list[Any]:
            kept = stored.example_inputs("inference")
            if kept is not None:
                return kept
            return [fake_detach(t, call.fake_mode) if isinstance(t, torch.Tensor) else t for t in call.fake_inputs]

    with _stage(call.times, "compile inference"):
        compiled, _ = _compile_graph("inference", config, gm, examples, call)
    fw_callable = call.graph_facts.as_eager(compiled)
    return CompiledRuntime(md, signature, call.analysis.out_spec, positional(fw_callable), None, **_runtime_context(call))


#: aotgrad's compilers that read no example input: on a cache hit, where each would be a
#: fake tensor to make, they are handed none
_READS_NO_EXAMPLES = (nop, print_graph)


def _compile_graph(
    kind: str, config: AotConfig, gm: torch.fx.GraphModule, examples: Callable[[], list[Any]],
    call: _AnalyzedCall, stored: bool = True,
) -> tuple[Callable, SubclassBoundary | None]:
    """``compiler(gm, example)`` under the compilation context, as a positional callable:
    ``config``'s compiler for the ``kind`` ("forward", "backward", "inference") of graph,
    ``example`` made by ``examples``.

    Cache artifacts: where the entry was loaded from the persistent cache with what this
    compiler kept for the graph (``call.stored_artifacts[kind]``), and the compiler has a
    ``load_cached(gm, example, artifact)`` (:class:`~aotgrad.compilers.InductorCompiler`),
    that loads the compiled graph instead (None from it: compiled as usual). A compiled
    callable's ``cache_artifact`` goes to ``call.compiler_artifacts[kind]``, which the
    entry stores; the entry's key determines ``gm`` and ``example``, so the compiler's
    artifact is only to be checked against what lies outside them.

    A graph with tensor-subclass inputs or outputs is handed to the compiler retraced over
    the subclasses' inner tensors, and the result wrapped back (:mod:`.subclasses`); the
    boundary is returned too (None without subclasses). An entry from the cache holds no
    tensor subclass (the key refuses subclass inputs, the stored metadata any subclass
    value): its graphs are not read to look for one.

    ``stored=False``: a graph the entry does not store (a backward pruned for absent
    tangents), compiled with no artifact loaded or kept."""
    compiler = {"forward": config.fw_compiler, "backward": config.bw_compiler, "inference": config.inference_compiler}[kind]
    if isinstance(call, _LoadedCall):
        example = [] if compiler in _READS_NO_EXAMPLES else examples()
        boundary = None
    else:
        example = examples()
        boundary = subclass_boundary(gm, example, call.fake_mode)
    if boundary is None:
        with compiling(kind, config.aot_id):
            artifact = call.stored_artifacts.get(kind) if stored else None
            load = getattr(compiler, "load_cached", None)
            compiled = None if artifact is None or load is None else load(gm, example, artifact)
            if compiled is None:
                compiled = compiler(gm, example)
        if stored:
            call.compiler_artifacts[kind] = getattr(compiled, "cache_artifact", None)
        return positional(compiled), None
    log.debug("aotgrad: %s graph over tensor subclasses: %r", kind, boundary)
    with compiling(kind, config.aot_id):
        compiled = compiler(boundary.graph, boundary.example_inputs)
    return boundary.wrap(positional(compiled)), boundary


def _refuse_detached_member_views(
    input_aliasing: InputAliasing, templates: dict[int, torch.Tensor], call_metadata: ViewAndMutationMetadata
) -> None:
    """Refuse a ``detach_()`` of a call input merged into a synthetic base that is not
    regenerated as the base itself (:meth:`SyntheticBase.is_the_base`): inside the program
    it is then a view of the base, whose ``detach_()`` autograd refuses, and whose detach
    would not reach its siblings' family as eager's does. The root its siblings view (the
    common base, passed itself) is detached as eager's is: the base's ``detach_()``."""
    for i in call_metadata.detached_in_place:
        for b in input_aliasing.bases:
            if i in b.members and not b.is_the_base(i, templates[i]):
                raise AotgradCompileError(
                    f"aotgrad: the program detaches input {i} in place (detach_()/requires_grad_(False)) "
                    "while mutating an input that shares its storage, and input "
                    f"{i} is not the tensor the others view (a view, or a detach()ed alias); this is not "
                    "supported. Detach it before calling the function, or use x.detach()."
                )


def _refuse_relaid_out_leaf_members(
    input_aliasing: InputAliasing, call_inputs: Any, metadata: ViewAndMutationMetadata
) -> None:
    """Refuse a leaf input requiring grad, merged into a synthetic base other than as the
    members' common base, whose layout the program changes in place under no_grad other
    than by adding or dropping size-1 dims (``t_``, ``as_strided_``): the synthetic base's
    view of it makes its AccumulateGrad in the entry layout before the call, where eager's
    is made at the first recorded use in the new one (fuzz seed 25002596, ``f(x.detach(),
    x)``: a (1, 1) leaf re-strided to (1, 2) got a (1, 1) gradient, silently; a transposed
    square one a transposed gradient). A leaf that is the common base is the graph input
    itself, whose gradient the runtime lays out as at its use (``grads_in_use_layout``)."""
    for base in input_aliasing.bases:
        for i in base.members:
            if base.common_base and call_inputs[i]._base is None:
                continue
            t, info = call_inputs[i], metadata.input_info[i]
            if not (t.is_leaf and t.requires_grad and info.metadata_mutation_under_no_grad and info.new_view):
                continue
            entry = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
            if reorders_elements(entry, info.new_view):
                raise AotgradCompileError(
                    f"aotgrad: input {i}, a leaf that requires grad and shares its storage with an "
                    "input the function writes, has its layout changed in place under no_grad at "
                    f"{info.metadata_mutation_under_no_grad_at}: its gradient in the new layout is "
                    "not supported beside the aliased write. Change the layout outside the "
                    "function, or pass a clone() of one of the aliased inputs."
                )


def _grads_laid_out_as_inputs(md: ViewAndMutationMetadata, input_aliasing: InputAliasing | None) -> tuple[int, ...]:
    """Graph inputs requiring grad whose data (not geometry) the program writes: where the
    caller's tensor is an autograd view, eager's gradient for it is laid out as the view
    (``runtime._as_input_in_size1_dims``). Not over synthetic bases (the graph input is then
    no caller's tensor)."""
    if input_aliasing is not None:
        return ()
    return tuple(
        i for i, info in enumerate(md.input_info)
        if info.requires_grad and info.mutates_data and not info.mutates_metadata
    )


def _runtime_context(call: _AnalyzedCall) -> dict:
    """The runtime's arguments for symbolic sizes and synthetic bases (none without them)."""
    if call.input_aliasing is None:
        return {"shape_env": call.fake_mode.shape_env}
    return {
        "graph_inputs_of": call.input_aliasing.graph_inputs,
        "member_metadata_writebacks": call.input_aliasing.member_metadata_writebacks(call.call_analysis.metadata),
        "separate_family_mutations": call.input_aliasing.separate_family_mutations,
    }


def compile_entry(fn: Callable, leaves: list[Any], spec: pytree.TreeSpec, config: AotConfig) -> CompiledEntry:
    """Compile ``fn`` for a call with these flattened leaves; nothing real is mutated.

    The sizes :func:`~aotgrad.core.symbolic.plan_symbolic` names are traced symbolically (the
    entry then serves every call its shape guard admits). Where the symbolic trace fails
    (synthetic bases, which are static; a torch op whose symbolic kernel fails), the entry
    is traced static: the program's own errors are raised by that trace, as without
    dynamic shapes, and a static entry is logged at INFO with the reason.
    """
    start = time.perf_counter()
    symbolic = plan_symbolic(leaves, config.dynamic, config.symbolic_leaves, config.num_params_buffers)
    if symbolic is None:
        # Only static entries are cached (core/cache.py: symbolic guards are not stored).
        return _compile_entry(fn, leaves, spec, config, None, start, EntryStore.for_call(fn, leaves, spec, config))
    try:
        return _compile_entry(fn, leaves, spec, config, symbolic, start)
    except Exception as exc:  # noqa: BLE001 - the static trace below re-raises the program's own errors
        why = str(exc) if isinstance(exc, _NeedsStaticTrace) else f"the symbolic trace failed: {type(exc).__name__}: {exc}"
    entry = _compile_entry(fn, leaves, spec, config, None, start)
    entry.static_reason = why.splitlines()[0]
    log.info("aotgrad: %s traced with static shapes: %s", getattr(fn, "__name__", fn), entry.static_reason)
    return entry


def _compile_entry(
    fn: Callable, leaves: list[Any], spec: pytree.TreeSpec, config: AotConfig,
    symbolic: SymbolicLeaves | None, start: float, store: EntryStore | None = None,
) -> CompiledEntry:
    layout = layout_for(leaves, spec, symbolic.int_positions if symbolic is not None else frozenset())
    tensors = layout.tensors_of(leaves)
    call_inputs = layout.call_inputs_of(leaves)
    grad_enabled = torch.is_grad_enabled()
    stored = None if store is None else store.load()
    if stored is None:
        call = _analyze_timed(fn, layout, call_inputs, grad_enabled, symbolic, config)
    else:  # the analysis as stored; the fake inputs made as analysis makes them, when read
        program = layout.program_of(fn)
        call = _LoadedCall(
            program, stored.analysis, stored.analysis, None, call_inputs,
            functools.partial(_fake_call, layout, call_inputs, None, stored.fake_mode), stored.fake_mode,
            stored_artifacts=stored.compiler_artifacts, graph_facts=stored.facts,
        )
    md = call.analysis.metadata
    training, anchored = _is_training(md, grad_enabled, call.graph_inputs)
    if stored is not None and not stored.fits(training):
        log.debug("aotgrad: ignoring cache entry %r: not a %s entry", store, "training" if training else "inference")
        stored = None
        call = _analyze_timed(fn, layout, call_inputs, grad_enabled, symbolic, config)
        md = call.analysis.metadata
        training, anchored = _is_training(md, grad_enabled, call.graph_inputs)
    log.debug(
        "aotgrad: compiling %s entry for %s\n%r", "training" if training else "inference",
        getattr(fn, "__name__", fn), md,
    )
    graphs: dict[str, torch.fx.GraphModule] = {}
    joint_gm = None
    if training:
        runtime, joint_gm = _compile_training(
            call, config, graphs, grad_enabled, getattr(fn, "__name__", repr(fn)), stored, anchored
        )
    else:
        runtime = _compile_inference(call, config, graphs, grad_enabled, stored)
    if (
        store is not None and stored is None and call.input_aliasing is None
        and not runtime.signature.backward_mutated_inputs  # (not in the stored analysis)
    ):
        store.save(
            call.analysis, graphs if joint_gm is None else {**graphs, "joint": joint_gm}, call.compiler_artifacts,
            call.graph_facts, call.examples_to_store(),
        )

    shape_guard = None if symbolic is None else ShapeGuard.of_trace(call.fake_mode.shape_env, call.fake_inputs)
    guard = EntryGuard.for_entry(
        layout, tensors, grad_enabled, call.call_analysis.metadata,
        None if call.input_aliasing is None else call.input_aliasing.matches,
        fake_inputs=None if shape_guard is None else call.fake_inputs, shape_guard=shape_guard,
    )
    entry = (CompiledEntry if stored is None else _CachedEntry)(
        guard, layout, md, runtime, training, graphs, joint_gm, call.input_aliasing
    )
    if stored is not None and training:
        entry._load_joint = stored.joint
    entry.compile_seconds = time.perf_counter() - start
    entry.stage_seconds = call.times
    log.info("aotgrad: compiled %r", entry)
    log.debug("aotgrad: %r", entry.signature)
    return entry


def _view_outputs(gm: torch.fx.GraphModule, md: ViewAndMutationMetadata, signature: GraphSignature) -> tuple[int, ...]:
    """Forward-output positions of non-aliased user outputs and intermediate bases that the
    graph computes with a view op (an intermediate whose metadata was mutated in place, say).

    Eager's tensor is not a view there, so the runtime detaches them: otherwise ``._base``
    differs and, in training, an in-place op on the output hits autograd's "view created
    inside a custom Function" error.
    """
    outs = graph_outputs(gm)
    candidates = [
        signature.user_output_positions[j]
        for j in signature.user_outputs
        if md.output_info[j].output_type is OutputType.non_alias and md.output_info[j].duplicate_of is None
        and not md.output_info[j].custom_function_view
    ]
    candidates.extend(range(signature.intermediate_base_slice.start, signature.intermediate_base_slice.stop))
    return tuple(
        p for p in candidates
        if isinstance(outs[p], torch.fx.Node)
        and isinstance(outs[p].target, torch._ops.OpOverload)
        and outs[p].target.is_view
    )


def _detaching(compiled: Callable, positions: tuple[int, ...]) -> Callable:
    """``compiled`` with the outputs at ``positions`` detached (see :func:`_view_outputs`)."""
    if not positions:
        return compiled
    call = positional(compiled)

    def forward(*args: Any) -> list:
        outs = list(call(*args))
        for p in positions:
            outs[p] = outs[p].detach()
        return outs

    return forward
