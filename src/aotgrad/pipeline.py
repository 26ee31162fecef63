"""Compile one entry: from a call's leaves to a guarded runtime, running every stage in order.

frontend (layout, fake inputs) → analysis (metadata) → tracing (joint or inference graph)
→ partition → user compilers → runtime. Each stage hands the next a plain value; this module
only sequences them and keeps what a user may want to look at in :class:`CompiledEntry`.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode

from .aliasing import InputAliasing, plan_input_aliasing
from .analysis import Analysis, analyze
from .errors import AotgradCompileError
from .frontend import EntryGuard, InputLayout, layout_for, leaf_state
from .metadata import OutputType, ViewAndMutationMetadata
from .partition import tag_forward_nodes
from .runtime import BackwardSpec, CompiledRuntime, build_runtime
from .tracing import trace_inference, trace_joint

__all__ = ["AotConfig", "CompiledEntry", "compile_entry"]

log = logging.getLogger("aotgrad")


@dataclass(frozen=True)
class AotConfig:
    """Everything the user chose when calling :func:`aotgrad.aot_function`."""

    fw_compiler: Callable
    bw_compiler: Callable
    inference_compiler: Callable
    partition_fn: Callable
    decompositions: dict | None
    num_params_buffers: int = 0
    keep_inference_input_mutations: bool = False
    #: accepted for API compatibility; graphs are traced with static shapes either way (a
    #: call with new shapes compiles a new entry), see :func:`aotgrad.aot_function`
    dynamic: bool = False

    @property
    def trace_decompositions(self) -> dict | None:
        """The user's decompositions, else the forward compiler's own (e.g. Inductor's)."""
        if self.decompositions is not None:
            return self.decompositions
        return getattr(self.fw_compiler, "decompositions", None)


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

    def __call__(self, leaves: list[Any]) -> Any:
        tensors = self.layout.tensors_of(leaves)
        return self.runtime.run(self.layout.distinct_inputs_of(tensors))

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
        return (
            f"CompiledEntry({kind}, graph_inputs={self.layout.num_distinct}, "
            f"mutated_inputs={list(self.metadata.mutated_input_indices)}, "
            f"aliased_outputs={list(self.metadata.aliased_output_indices)}, "
            f"synthetic_bases={0 if self.input_aliasing is None else len(self.input_aliasing.bases)}, "
            f"compile_seconds={self.compile_seconds:.3f})"
        )


def _program(fn: Callable, layout: InputLayout) -> Callable[..., tuple[list[Any], pytree.TreeSpec]]:
    """``fn`` as a function of the graph inputs, returning flattened outputs and their spec."""

    def program(*graph_inputs: Any) -> tuple[list[Any], pytree.TreeSpec]:
        args, kwargs = layout.rebuild_call(list(graph_inputs))
        return pytree.tree_flatten(fn(*args, **kwargs))

    return program


def _saved_counts(fw_module: torch.fx.GraphModule, num_fwd_outputs: int) -> tuple[int, int, list[torch.fx.Node]]:
    """How many tensors and symints the partitioned forward saves, and the saved nodes."""
    out_node = next(n for n in reversed(fw_module.graph.nodes) if n.op == "output")
    outs = pytree.tree_leaves(out_node.args)
    saved = outs[num_fwd_outputs:]
    symints = sum(
        1 for n in saved if isinstance(n, torch.fx.Node) and isinstance(n.meta.get("val"), (int, torch.SymInt))
    )
    return len(saved) - symints, symints, saved


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


def _analyze_call(fn: Callable, layout: InputLayout, call_inputs: list[torch.Tensor], grad_enabled: bool) -> _AnalyzedCall:
    """Analysis, then synthetic bases (and a second analysis over them) where needed."""
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake_call = [fake_mode.from_tensor(t) for t in call_inputs]
    program = _program(fn, layout)
    call_analysis = analyze(program, fake_call, fake_mode, grad_enabled=grad_enabled)
    _reject_inplace_on_leaves(call_inputs, call_analysis.metadata)
    input_aliasing = plan_input_aliasing(call_inputs, fake_call, call_analysis.metadata)
    if input_aliasing is None:
        return _AnalyzedCall(program, call_analysis, call_analysis, None, call_inputs, fake_call, fake_mode)
    log.debug("aotgrad: %r", input_aliasing)
    graph_inputs = input_aliasing.graph_inputs(call_inputs)
    fake_inputs = [fake_mode.from_tensor(t) for t in graph_inputs]
    templates = {i: fake_call[i] for b in input_aliasing.bases for i in b.members}
    program = input_aliasing.wrap_program(program, templates)
    base_analysis = analyze(program, fake_inputs, fake_mode, grad_enabled=grad_enabled)
    analysis = _aliases_of_call_inputs(base_analysis, call_analysis)
    return _AnalyzedCall(program, call_analysis, analysis, input_aliasing, graph_inputs, fake_inputs, fake_mode)


def _compile_training(call: _AnalyzedCall, config: AotConfig, graphs: dict) -> tuple[CompiledRuntime, torch.fx.GraphModule]:
    """Joint graph → partition → forward/backward compilers → runtime with an autograd.Function."""
    md = call.analysis.metadata
    joint = trace_joint(call.program, call.analysis, call.fake_inputs, call.fake_mode, config.trace_decompositions)
    tag_forward_nodes(joint.graph, joint.num_fwd_outputs)
    fw_module, bw_module = config.partition_fn(
        joint.graph, [joint.primals, joint.tangents], num_fwd_outputs=joint.num_fwd_outputs
    )
    graphs["forward"], graphs["backward"] = fw_module, bw_module
    n_saved_t, n_saved_s, saved_nodes = _saved_counts(fw_module, joint.num_fwd_outputs)
    placeholders = [n for n in fw_module.graph.nodes if n.op == "placeholder"]
    data_mutated = set(md.data_mutated_input_indices)
    to_clone = tuple(
        k
        for k, node in enumerate(saved_nodes[:n_saved_t])
        if node in placeholders and placeholders.index(node) in data_mutated
    )
    fw_callable = _detaching(
        config.fw_compiler(fw_module, list(joint.primals)), _view_outputs(fw_module, md, joint.num_fwd_outputs)
    )
    bw_inputs = [n.meta.get("val") for n in bw_module.graph.nodes if n.op == "placeholder"]
    bw_callable = config.bw_compiler(bw_module, bw_inputs)
    avals = call.analysis.forward_output_avals
    backward = BackwardSpec(
        bw_callable=_direct(bw_callable),
        num_fwd_outputs=joint.num_fwd_outputs,
        num_saved_tensors=n_saved_t,
        num_saved_symints=n_saved_s,
        tangent_positions=joint.tangent_positions,
        tangent_meta=tuple(avals[p] for p in joint.tangent_positions),
        saved_inputs_to_clone=to_clone,
        grad_tangent_deps=_tangent_dependencies(bw_module),
    )
    runtime = build_runtime(
        md, call.analysis.out_spec, _direct(fw_callable), backward,
        **_aliasing_runtime(call.input_aliasing, call.call_analysis),
    )
    return runtime, joint.graph


def _compile_inference(call: _AnalyzedCall, config: AotConfig, graphs: dict, grad_enabled: bool) -> CompiledRuntime:
    """Forward graph alone → inference compiler → runtime without autograd.Function."""
    md = call.analysis.metadata
    keep = config.keep_inference_input_mutations
    gm = trace_inference(
        call.program, call.analysis, call.fake_inputs, call.fake_mode, config.trace_decompositions,
        grad_enabled=grad_enabled, keep_input_mutations=keep,
    )
    graphs["inference"] = gm
    with call.fake_mode:
        example = [t.detach() for t in call.fake_inputs]
    fw_callable = _detaching(config.inference_compiler(gm, example), _view_outputs(gm, md, None))
    kept = frozenset(i for i in md.mutated_input_indices if keep and not md.input_info[i].mutates_metadata)
    return build_runtime(
        md, call.analysis.out_spec, _direct(fw_callable), None, kept,
        **_aliasing_runtime(call.input_aliasing, call.call_analysis),
    )


def compile_entry(fn: Callable, leaves: list[Any], spec: pytree.TreeSpec, config: AotConfig) -> CompiledEntry:
    """Compile ``fn`` for a call with these flattened leaves; nothing real is mutated."""
    start = time.perf_counter()
    layout = layout_for(leaves, spec)
    tensors = layout.tensors_of(leaves)
    call_inputs = layout.distinct_inputs_of(tensors)
    grad_enabled = torch.is_grad_enabled()
    call = _analyze_call(fn, layout, call_inputs, grad_enabled)
    md = call.analysis.metadata
    training = grad_enabled and any(t.requires_grad for t in call.graph_inputs)
    log.debug(
        "aotgrad: compiling %s entry for %s\n%r", "training" if training else "inference",
        getattr(fn, "__name__", fn), md,
    )
    graphs: dict[str, torch.fx.GraphModule] = {}
    joint_gm = None
    if training:
        runtime, joint_gm = _compile_training(call, config, graphs)
    else:
        runtime = _compile_inference(call, config, graphs, grad_enabled)

    # The guard speaks of the caller's inputs: the analysis with inputs taken one by one.
    call_md = call.call_analysis.metadata
    data_mutated = set(call_md.data_mutated_input_indices)
    guard = EntryGuard(
        layout,
        tensors,
        grad_enabled,
        check_storage=bool(data_mutated),
        leafness={
            layout.distinct_tensors[i]: leaf_state(call_inputs[i]) for i in call_md.mutated_input_indices
        },
        mutated_leaves=tuple(k for k, g in enumerate(layout.distinct_of_tensor) if g in data_mutated),
        aliasing_check=None if call.input_aliasing is None else call.input_aliasing.matches,
    )
    entry = CompiledEntry(guard, layout, md, runtime, training, graphs, joint_gm, call.input_aliasing)
    entry.compile_seconds = time.perf_counter() - start
    log.info("aotgrad: compiled %r", entry)
    return entry


def _reject_inplace_on_leaves(call_inputs: list[torch.Tensor], md: ViewAndMutationMetadata) -> None:
    """Raise eager's error for an in-place op, seen by autograd, on a leaf that requires grad
    or on a view of one (analysis on fake inputs cannot always see that the input is a view)."""
    for i in md.data_mutated_input_indices:
        if not md.input_info[i].mutation_visible_to_autograd:
            continue
        t = call_inputs[i]
        if t.is_leaf and t.requires_grad:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        if t._base is not None and t._base.is_leaf and t._base.requires_grad:
            raise RuntimeError(
                "a view of a leaf Variable that requires grad is being used in an in-place operation."
            )


def _aliases_of_call_inputs(base_analysis: Analysis, call_analysis: Analysis) -> Analysis:
    """The analysis over synthetic bases, with outputs that alias inputs re-pointed at the
    caller's own inputs (so they are rebuilt off the real input, ``._base`` as in eager).

    requires_grad stays from the analysis over bases: a mutation of one alias can make its
    siblings require grad, which only that run sees.
    """
    md = base_analysis.metadata
    input_kinds = (OutputType.is_input, OutputType.alias_of_input)
    outputs = []
    for o_base, o_call in zip(md.output_info, call_analysis.metadata.output_info):
        if o_base.output_type in input_kinds:
            if o_call.output_type not in input_kinds:
                raise AotgradCompileError(
                    "aotgrad internal error: an output aliases a synthetic base but not an input"
                )
            o_base = dataclasses.replace(o_call, requires_grad=o_base.requires_grad)
        outputs.append(o_base)
    merged = dataclasses.replace(md, output_info=tuple(outputs))
    return dataclasses.replace(base_analysis, metadata=merged)


def _aliasing_runtime(input_aliasing: InputAliasing | None, call_analysis: Analysis) -> dict:
    """Runtime arguments for synthetic bases: how to build graph inputs, and the metadata
    mutations of merged inputs (static: sizes do not depend on values)."""
    if input_aliasing is None:
        return {}
    merged = [i for b in input_aliasing.bases for i in b.members]
    info = call_analysis.metadata.input_info
    return {
        "graph_inputs_of": input_aliasing.graph_inputs,
        "member_metadata_writebacks": tuple(
            (i, info[i].new_view) for i in merged if info[i].mutates_metadata
        ),
    }


def _tangent_dependencies(bw_module: torch.fx.GraphModule) -> tuple[frozenset[int], ...]:
    """For each output of the backward graph, which tangents (by order) it depends on."""
    tangents = [n for n in bw_module.graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")]
    index = {n: k for k, n in enumerate(tangents)}
    deps: dict[torch.fx.Node, frozenset[int]] = {}
    for n in bw_module.graph.nodes:
        if n in index:
            deps[n] = frozenset((index[n],))
        else:
            acc: frozenset[int] = frozenset()
            for a in n.all_input_nodes:
                acc |= deps.get(a, frozenset())
            deps[n] = acc
    out = next(n for n in reversed(bw_module.graph.nodes) if n.op == "output")
    grads = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    return tuple(deps.get(g, frozenset()) if isinstance(g, torch.fx.Node) else frozenset() for g in grads)


def _view_outputs(gm: torch.fx.GraphModule, md: ViewAndMutationMetadata, num_fwd_outputs: int | None) -> tuple[int, ...]:
    """Forward-output positions of non-aliased user outputs and intermediate bases that the
    graph computes with a view op (an intermediate whose metadata was mutated in place, say).

    Eager's tensor is not a view there, so the runtime detaches them: otherwise ``._base``
    differs and, in training, an in-place op on the output hits autograd's "view created
    inside a custom Function" error.
    """
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    outs = pytree.tree_leaves(out.args)
    if num_fwd_outputs is not None:
        outs = outs[:num_fwd_outputs]
    first_user = len(outs) - sum(
        o.output_type is not OutputType.non_tensor for o in md.output_info
    ) - md.num_intermediate_bases
    candidates = []
    pos = first_user
    for o in md.output_info:
        if o.output_type is OutputType.non_tensor:
            continue
        if o.output_type is OutputType.non_alias and o.duplicate_of is None:
            candidates.append(pos)
        pos += 1
    candidates.extend(range(pos, pos + md.num_intermediate_bases))
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
    call = _direct(compiled)

    def forward(*args: Any) -> list:
        outs = list(call(*args))
        for p in positions:
            outs[p] = outs[p].detach()
        return outs

    return forward


def _direct(compiled: Callable) -> Callable:
    """Call a GraphModule's ``forward`` directly: ``nn.Module.__call__`` costs µs per call."""
    if isinstance(compiled, torch.fx.GraphModule):
        return compiled.forward
    return compiled
