"""Export: one functional graph (and what each of its inputs and outputs is), no runtime.

:func:`aot_export_module` and :func:`aot_export_joint_simple` have torch's signatures and
meaning. The graph is traced by the same analysis and tracing stages as a compiled entry;
instead of a runtime that writes mutations back and rebuilds aliases, the caller gets the
graph and an :class:`ExportGraphSignature` naming every placeholder and output, and applies
mutations itself. What the graph cannot express is rejected at export time: metadata
mutations of inputs, data mutations of anything that requires grad (parameters), mutated
inputs that alias other inputs or are passed twice; with ``trace_joint``, a tensor passed twice
(tied parameters), a loss that is no scalar requiring grad, and other outputs that require grad.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from .core import tracing
from .core.aliasing import plan_input_aliasing
from .core.fake_mode import OffsetKeepingFakeTensorMode
from .core.analysis import Analysis, analyze
from .core.frontend import flatten_call, layout_for
from .core.metadata import OutputType
from .core.signature import GraphSignature, graph_outputs
from .errors import AotgradCompileError

__all__ = ["BackwardSignature", "ExportGraphSignature", "aot_export_joint_simple", "aot_export_module"]


@dataclass
class BackwardSignature:
    """The backward part of an exported joint graph (torch's ``BackwardSignature``): which
    output is the gradient of which parameter / user input, and which output is the loss.
    Names are ``node.name``s of the graph's outputs and placeholders."""

    gradients_to_parameters: dict[str, str]
    gradients_to_user_inputs: dict[str, str]
    loss_output: str


@dataclass
class ExportGraphSignature:
    """What each input and output of an exported graph is (torch's export ``GraphSignature``).

    Graph inputs are ``(*parameters, *buffers, *user inputs)``, flattened; outputs are
    ``(*mutated buffers' and user inputs' new values, *user outputs, *gradients)``.
    """

    parameters: list[str]
    buffers: list[str]
    user_inputs: list[str]
    user_outputs: list[str]
    inputs_to_parameters: dict[str, str]
    inputs_to_buffers: dict[str, str]
    buffers_to_mutate: dict[str, str]
    parameters_to_mutate: dict[str, str]
    user_inputs_to_mutate: dict[str, str]
    in_spec: pytree.TreeSpec
    out_spec: pytree.TreeSpec
    backward_signature: BackwardSignature | None
    input_tokens: list[str] = dataclasses.field(default_factory=list)
    output_tokens: list[str] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        lines = ["ExportGraphSignature("]
        for name, fqn in self.inputs_to_parameters.items():
            lines.append(f"  input  {name:<14} parameter {fqn}")
        for name, fqn in self.inputs_to_buffers.items():
            lines.append(f"  input  {name:<14} buffer {fqn}")
        for name in self.user_inputs:
            lines.append(f"  input  {name:<14} user input")
        for name, target in {**self.buffers_to_mutate, **self.user_inputs_to_mutate}.items():
            lines.append(f"  output {name:<14} new value of {target}")
        for name in self.user_outputs:
            loss = self.backward_signature is not None and name == self.backward_signature.loss_output
            lines.append(f"  output {name:<14} user output{' (the loss)' if loss else ''}")
        if self.backward_signature is not None:
            for name, of in {**self.backward_signature.gradients_to_parameters,
                             **self.backward_signature.gradients_to_user_inputs}.items():
                lines.append(f"  output {name:<14} gradient of {of}")
        lines.append(")")
        return "\n".join(lines)


@dataclass
class _Traced:
    """A program analysed for export: every tensor output is a graph output."""

    program: Callable
    analysis: Analysis
    fake_inputs: list[torch.Tensor]
    fake_mode: FakeTensorMode


def _untie_duplicates(leaves: list[Any]) -> tuple[list[Any], set[int]]:
    """``leaves`` with each repeat of a tensor replaced by a new alias of it (``detach()``,
    same ``requires_grad``), so each position is a graph input of its own (torch's export does
    the same); and the ids of every tensor standing for a repeated one."""
    seen: dict[int, torch.Tensor] = {}
    repeated: set[int] = set()
    untied = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor) and id(leaf) in seen:
            alias = leaf.detach().requires_grad_(leaf.requires_grad)
            repeated.update((id(leaf), id(alias)))
            leaf = alias
        elif isinstance(leaf, torch.Tensor):
            seen[id(leaf)] = leaf
        untied.append(leaf)
    return untied, repeated


def _analyse_for_export(
    fn: Callable, args: tuple, kwargs: dict, grad_enabled: bool, what: str, *, joint: bool
) -> _Traced:
    """Analyse ``fn`` for export; refuse what an exported graph cannot express.

    The same tensor passed twice is two graph inputs, as in torch, where neither is mutated
    and no gradient is traced (``joint``: each position would get part of the gradient)."""
    leaves, spec = flatten_call(args, kwargs)
    leaves, repeated = _untie_duplicates(leaves)
    if repeated and joint:
        raise AotgradCompileError(
            f"{what}: the same tensor is passed as two inputs (tied parameters?); a joint graph "
            "would give each position part of its gradient. Pass it once, or untie it."
        )
    layout = layout_for(leaves, spec)
    call_inputs = layout.call_inputs_of(leaves)
    fake_mode = OffsetKeepingFakeTensorMode(allow_non_fake_inputs=True)
    fake_inputs = [fake_mode.from_tensor(t) for t in call_inputs]
    program = layout.program_of(fn)
    # (final: export makes no synthetic bases)
    analysis = analyze(program, fake_inputs, fake_mode, grad_enabled=grad_enabled, final=True)
    md = analysis.metadata
    for i, info in enumerate(md.input_info):
        if id(call_inputs[i]) in repeated and (info.mutates_data or info.mutates_metadata):
            raise AotgradCompileError(
                f"{what}: Encountered duplicated inputs that are mutated in the graph you are trying "
                f"to export: input {i} is passed more than once and changed in place. Pass it once."
            )
    for i, info in enumerate(md.input_info):
        if info.mutates_metadata:
            raise AotgradCompileError(f"{what}: Found an input that received a metadata mutation: input {i} has its size/stride "
                "changed in place; export cannot express that.")
        if info.mutates_data and call_inputs[i].requires_grad:
            raise AotgradCompileError(
                f"{what}: Found a graph input that requires gradients, and received a mutation: input {i} "
                "(a parameter?); export cannot express that. Mutate a buffer, or a tensor that does not require grad."
            )
    if plan_input_aliasing(call_inputs, fake_inputs, md) is not None:
        raise AotgradCompileError(f"{what}: Encountered aliased inputs that are mutated (a mutated input shares storage with "
            "another input); export cannot express that.")
    # The graph returns every tensor output as it is (no runtime rebuilds aliases).
    user = tuple(j for j, o in enumerate(md.output_info) if o.output_type is not OutputType.non_tensor)
    signature = GraphSignature(len(md.input_info), md.mutated_input_indices, user, 0)
    analysis = dataclasses.replace(analysis, intermediate_base_sources=(), signature=signature)
    return _Traced(program, analysis, fake_inputs, fake_mode)


def _names(nodes: Iterable[Any]) -> list[str]:
    return [n.name for n in nodes]


def aot_export_module(
    mod: nn.Module,
    args: Iterable[Any],
    *,
    decompositions: dict | None = None,
    trace_joint: bool,
    output_loss_index: int | None = None,
    pre_dispatch: bool = False,
    dynamic_shapes: bool | None = None,
    kwargs: dict[str, Any] | None = None,
) -> tuple[torch.fx.GraphModule, ExportGraphSignature]:
    """``mod``'s forward as one functional graph of ATen ops, and its signature.

    Graph inputs are ``(*parameters, *buffers, *user inputs)`` (flattened); outputs are the
    new values of mutated buffers and user inputs, then the user outputs (flattened), then,
    with ``trace_joint``, the gradient of the loss (user output ``output_loss_index``, a
    scalar) with respect to each parameter and user input that requires grad. Without
    ``trace_joint`` the graph is traced under ``no_grad``, unless ``pre_dispatch``: then it
    holds ATen ops above autograd (composite ops such as ``linear`` kept whole), traced in
    the caller's grad mode with the program's grad-mode changes as
    ``torch._C._set_grad_enabled`` nodes (:func:`~aotgrad.core.tracing.trace_pre_dispatch`);
    torch's only such mode, it cannot be joint. ``dynamic_shapes=True`` is not supported and
    raises. Placeholders are named ``arg{i}_1``, as torch's.
    """
    what = "aot_export_module"
    if pre_dispatch and trace_joint:
        # torch's words: a joint graph is traced below autograd
        raise AotgradCompileError("pre_dispatch is not supported when trace_joint is True.")
    if dynamic_shapes:
        raise AotgradCompileError(f"{what}: dynamic_shapes=True is not supported; sizes are exported static.")
    if trace_joint and output_loss_index is None:
        raise AotgradCompileError(
            f"{what}: with trace_joint=True one forward output must be a scalar loss; say which "
            "with output_loss_index."
        )
    named_parameters = dict(mod.named_parameters(remove_duplicate=False))
    named_buffers = dict(mod.named_buffers(remove_duplicate=False))
    state = {**named_parameters, **named_buffers}
    names = list(state)
    _refuse_tied_state(state, what)
    args, kwargs = tuple(args), dict(kwargs or {})
    n_state = len(names)

    def functional_forward(*flat: Any, **kw: Any) -> Any:
        return torch.func.functional_call(mod, dict(zip(names, flat[:n_state])), flat[n_state:], kw)

    # Pre-dispatch graphs record grad mode, so they are traced in the caller's; the others
    # are traced with grad exactly where a backward is wanted.
    grad_enabled = torch.is_grad_enabled() if pre_dispatch else trace_joint
    with torch.set_grad_enabled(grad_enabled):
        traced = _analyse_for_export(
            functional_forward, (*state.values(), *args), kwargs, grad_enabled, what, joint=trace_joint
        )
    md = traced.analysis.metadata
    _refuse_requires_grad_changes(md, what)
    out_leaves_count = len(md.output_info)
    if trace_joint:
        _check_loss(md, output_loss_index, out_leaves_count, what)
        gm, grad_inputs = tracing.trace_loss_joint(
            traced.program, traced.analysis, traced.fake_inputs, traced.fake_mode, decompositions,
            output_loss_index,
        )
    elif pre_dispatch:
        with torch.set_grad_enabled(grad_enabled):
            gm = tracing.trace_pre_dispatch(
                traced.program, traced.analysis, traced.fake_inputs, traced.fake_mode, decompositions,
            )
        grad_inputs = ()
    else:
        gm = tracing.trace_inference(
            traced.program, traced.analysis, traced.fake_inputs, traced.fake_mode, decompositions,
            traced.analysis.signature, grad_enabled=False,
        )
        grad_inputs = ()
    placeholders = _names(gm.graph.find_nodes(op="placeholder"))
    outputs = _names(graph_outputs(gm))
    sig = traced.analysis.signature
    mutated = outputs[sig.mutated_input_slice]
    user_out = outputs[sig.user_output_slice]
    grads = outputs[sig.num_forward_outputs:]
    n_params = len(named_parameters)

    def input_name(i: int) -> str:
        return names[i] if i < n_state else placeholders[i]

    backward = None
    if trace_joint:
        for i, g in zip(grad_inputs, grads, strict=True):
            if g is None:
                raise AotgradCompileError(f"{what}: {input_name(i)} requires grad but the loss does not depend on it.")
        backward = BackwardSignature(
            gradients_to_parameters={g: names[i] for i, g in zip(grad_inputs, grads) if i < n_params},
            gradients_to_user_inputs={g: placeholders[i] for i, g in zip(grad_inputs, grads) if i >= n_state},
            loss_output=user_out[sig.user_outputs.index(output_loss_index)],
        )
    mutated_inputs = dict(zip(mutated, sig.mutated_inputs, strict=True))
    signature = ExportGraphSignature(
        parameters=names[:n_params],
        buffers=names[n_params:],
        user_inputs=placeholders[n_state:],
        user_outputs=user_out,
        inputs_to_parameters=dict(zip(placeholders[:n_params], names[:n_params])),
        inputs_to_buffers=dict(zip(placeholders[n_params:n_state], names[n_params:])),
        buffers_to_mutate={o: names[i] for o, i in mutated_inputs.items() if n_params <= i < n_state},
        parameters_to_mutate={},
        user_inputs_to_mutate={o: placeholders[i] for o, i in mutated_inputs.items() if i >= n_state},
        in_spec=pytree.tree_flatten((args, kwargs))[1],
        out_spec=traced.analysis.out_spec,
        backward_signature=backward,
    )
    return gm, signature


def _refuse_tied_state(state: dict[str, torch.Tensor], what: str) -> None:
    """Parameters and buffers must be distinct tensors (torch's rule): the graph takes one
    input per name, and the module cannot be called with tied names given two values."""
    names_of: dict[int, list[str]] = {}
    for name, t in state.items():
        names_of.setdefault(id(t), []).append(name)
    tied = [names for names in names_of.values() if len(names) > 1]
    if tied:
        raise AotgradCompileError(
            f"{what}: parameters or buffers are tied (one tensor under the names {tied[0]}); an "
            "exported graph takes each name as an input of its own. Untie them for export."
        )


def _check_loss(md: Any, loss_index: int, n_outputs: int, what: str) -> None:
    if not 0 <= loss_index < n_outputs:
        raise AotgradCompileError(f"{what}: output_loss_index={loss_index}, but the forward has {n_outputs} outputs.")
    for j, o in enumerate(md.output_info):
        if j != loss_index and o.requires_grad:
            raise AotgradCompileError(
                f"{what}: Found an output of the forward that requires gradients, that was not the loss: "
                f"output {j} (the loss is output {loss_index}); the joint graph backpropagates the loss only. Detach the other outputs."
            )
    loss = md.output_info[loss_index]
    if loss.output_type is OutputType.non_tensor or not loss.requires_grad:
        raise AotgradCompileError(f"{what}: output {loss_index} is the loss but does not require grad.")
    if math.prod(loss.size) != 1:
        raise AotgradCompileError(f"{what}: the loss (output {loss_index}) must be a scalar; it has shape {loss.size}.")


def aot_export_joint_simple(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    trace_joint: bool,
    num_params_buffers: int = 0,
    decompositions: dict | None = None,
) -> torch.fx.GraphModule:
    """``func`` as a graph with no change of calling convention (torch's contract).

    ``args`` are flat tensors; ``func`` returns a tuple or list of tensors, mutates no
    input and returns no alias of one. Without ``trace_joint`` (traced under ``no_grad``)
    the graph takes ``args`` and returns the outputs. With it, the graph is the joint
    ``(*primals, *tangents) -> (*outputs, *gradients)``: one tangent per output that requires
    grad, one gradient (or None) per input; partitioning it gives a forward with ``func``'s
    own calling convention. ``num_params_buffers`` is accepted for torch's signature.
    """
    what = "aot_export_joint_simple"
    args = tuple(args)
    if not all(isinstance(a, torch.Tensor) for a in args):
        raise AotgradCompileError(f"{what} requires individual inputs not to be pytrees: inputs must be a flat tuple of "
            "tensors (no pytrees, no constants).")
    with torch.set_grad_enabled(trace_joint):
        traced = _analyse_for_export(func, args, {}, trace_joint, what, joint=trace_joint)
    md = traced.analysis.metadata
    _refuse_requires_grad_changes(md, what)
    if md.mutated_input_indices:
        raise AotgradCompileError(f"{what}: inputs {list(md.mutated_input_indices)} are mutated in place; not supported.")
    aliased = [j for j, o in enumerate(md.output_info) if o.output_type is not OutputType.non_alias]
    if aliased:
        raise AotgradCompileError(f"{what}: outputs {aliased} alias an input or another output (or are no tensors); not supported.")
    spec = traced.analysis.out_spec
    if spec.is_leaf() or not all(c.is_leaf() for c in spec.children()):
        raise AotgradCompileError(f"{what}: func must return a flat tuple or list of tensors (out_spec={spec}).")
    if not trace_joint:
        return tracing.trace_inference(
            traced.program, traced.analysis, traced.fake_inputs, traced.fake_mode, decompositions,
            traced.analysis.signature, grad_enabled=False,
        )
    md_out = md.output_info
    signature = dataclasses.replace(
        traced.analysis.signature,
        tangents=tuple(k for k, j in enumerate(traced.analysis.signature.user_outputs) if md_out[j].requires_grad),
    )
    analysis = dataclasses.replace(traced.analysis, signature=signature)
    joint = tracing.trace_joint(traced.program, analysis, traced.fake_inputs, traced.fake_mode, decompositions)
    if joint.signature.backward_mutated_inputs:
        raise AotgradCompileError(
            f"{what}: the backward changes inputs {list(joint.signature.backward_mutated_inputs)} in "
            "place (a custom autograd.Function's backward writing into a tensor it saved); an exported "
            "joint graph has no output for it. Not supported."
        )
    return joint.graph


def _refuse_requires_grad_changes(md: Any, what: str) -> None:
    """An exported graph carries no runtime: ``requires_grad_()`` inside the program (on an
    input, or making a new autograd leaf) would be lost."""
    if md.sets_requires_grad or any(o.new_leaf for o in md.output_info) or any(md.intermediate_base_new_leaf):
        raise AotgradCompileError(
            f"{what}: the program calls requires_grad_() on an input or on a tensor without autograd "
            "history; an exported graph cannot carry that change. Set requires_grad before export."
        )
