"""Export (issue 11): ``aot_export_module`` / ``aot_export_joint_simple`` and torch's public
AOT names on ``aotgrad``. An exported graph is run by hand with the inputs its signature
names and compared with eager."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import aotgrad
from aotgrad.core.signature import graph_outputs


class MLPLoss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))

    def forward(self, x, y):
        logits = self.net(x)
        return F.cross_entropy(logits, y), logits.detach().argmax(1)


def _run(gm, sig, module, *user_inputs):
    """Call the exported graph as its signature says; outputs by name."""
    state = {**dict(module.named_parameters()), **{k: v.clone() for k, v in module.named_buffers()}}
    inputs = [state[sig.inputs_to_parameters[n]] if n in sig.inputs_to_parameters else None
              for n in [p.name for p in gm.graph.find_nodes(op="placeholder")]]
    placeholders = [p.name for p in gm.graph.find_nodes(op="placeholder")]
    user = iter(user_inputs)
    for k, name in enumerate(placeholders):
        if name in sig.inputs_to_buffers:
            inputs[k] = state[sig.inputs_to_buffers[name]]
        elif name in sig.user_inputs:
            inputs[k] = next(user)
    outs = gm(*inputs)
    return dict(zip([n.name for n in graph_outputs(gm)], outs))


def test_joint_export_of_a_training_step_gives_eagers_loss_gradients_and_buffers():
    torch.manual_seed(0)
    m = MLPLoss()
    ref = copy.deepcopy(m)
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    gm, sig = aotgrad.aot_export_module(m, (x, y), trace_joint=True, output_loss_index=0)
    out = _run(gm, sig, m, x, y)
    loss, _ = ref(x, y)
    loss.backward()
    bw = sig.backward_signature
    torch.testing.assert_close(out[bw.loss_output], loss)
    ref_params = dict(ref.named_parameters())
    assert set(bw.gradients_to_parameters.values()) == set(ref_params)
    for g, name in bw.gradients_to_parameters.items():
        torch.testing.assert_close(out[g], ref_params[name].grad, msg=name)
    ref_buffers = dict(ref.named_buffers())
    assert set(sig.buffers_to_mutate.values()) == {"net.1.running_mean", "net.1.running_var", "net.1.num_batches_tracked"}
    for o, name in sig.buffers_to_mutate.items():
        torch.testing.assert_close(out[o], ref_buffers[name], msg=name)
    # the module itself was not touched by exporting
    torch.testing.assert_close(m.net[1].running_mean, torch.zeros(8))
    text = str(sig)
    assert "parameter net.0.weight" in text and "(the loss)" in text and "gradient of net.3.bias" in text


def test_inference_export_returns_user_input_mutations_first():
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        def forward(self, x, counter):
            counter.add_(1)
            return x * self.w, x.view(-1)

    m = M()
    x, counter = torch.randn(2, 3), torch.zeros(1)
    gm, sig = aotgrad.aot_export_module(m, (x, counter), trace_joint=False)
    assert sig.backward_signature is None and sig.parameters == ["w"]
    assert list(sig.user_inputs_to_mutate.values()) == [sig.user_inputs[1]]
    outs = gm(m.w, x, counter)
    assert len(outs) == 3  # the counter's new value, then both user outputs
    torch.testing.assert_close(outs[0], counter + 1)
    torch.testing.assert_close(outs[1], x * m.w)
    torch.testing.assert_close(outs[2], x.view(-1))


class _Mutating(nn.Module):
    def __init__(self, what: str) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))
        self.what = what

    def forward(self, x):
        if self.what == "metadata":
            x.t_()
        return (x * self.w).sum()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"trace_joint": True}, "output_loss_index"),
        ({"trace_joint": True, "output_loss_index": 3}, "has 1 outputs"),
        ({"trace_joint": True, "output_loss_index": 0, "pre_dispatch": True},
         "pre_dispatch is not supported when trace_joint is True"),
        ({"trace_joint": False, "dynamic_shapes": True}, "dynamic_shapes"),
    ],
)
def test_export_options_it_cannot_honour_raise(kwargs, match):
    with pytest.raises(aotgrad.AotgradCompileError, match=match):
        aotgrad.aot_export_module(_Mutating("none"), (torch.randn(3),), **kwargs)


def test_export_rejects_what_a_graph_cannot_express():
    with pytest.raises(aotgrad.AotgradCompileError, match="metadata"):
        aotgrad.aot_export_module(_Mutating("metadata"), (torch.randn(3, 3)[0],), trace_joint=False)

    class NonScalar(nn.Module):
        def forward(self, x):
            return (x * 2,)

    with pytest.raises(aotgrad.AotgradCompileError, match="scalar"):
        aotgrad.aot_export_module(NonScalar(), (torch.randn(3, requires_grad=True),), trace_joint=True, output_loss_index=0)

    class TwoGradOutputs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        def forward(self, x):
            return (x * self.w).sum(), x * self.w

    with pytest.raises(aotgrad.AotgradCompileError, match="requires gradients, that was not the loss: output 1"):
        aotgrad.aot_export_module(TwoGradOutputs(), (torch.randn(3),), trace_joint=True, output_loss_index=0)

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(3, 3)
            self.b = nn.Linear(3, 3)
            self.b.weight = self.a.weight

        def forward(self, x):
            return (self.b(self.a(x)).sum(),)

    with pytest.raises(aotgrad.AotgradCompileError, match="tied"):
        aotgrad.aot_export_module(Tied(), (torch.randn(2, 3),), trace_joint=True, output_loss_index=0)


class _GradRegions(nn.Module):
    """A layer whose gradient depends on grad-mode regions inside the program."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.scale = nn.Parameter(torch.randn(3))
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        h = self.lin(x)
        with torch.no_grad():
            frozen = h * self.scale  # no gradient reaches lin or scale through this
            self.steps.add_(1)
        return ((h + frozen) * self.scale).sum(), h.relu()


def _call_pre_dispatch(gm, sig, module, *user_inputs):
    """The exported graph called with the module's real parameters (requiring grad) and
    copies of its buffers, as the signature names them."""
    params, buffers = dict(module.named_parameters()), {k: v.clone() for k, v in module.named_buffers()}
    user = iter(user_inputs)
    inputs = []
    for p in gm.graph.find_nodes(op="placeholder"):
        if p.name in sig.inputs_to_parameters:
            inputs.append(params[sig.inputs_to_parameters[p.name]])
        elif p.name in sig.inputs_to_buffers:
            inputs.append(buffers[sig.inputs_to_buffers[p.name]])
        else:
            inputs.append(next(user))
    return dict(zip([n.name for n in graph_outputs(gm)], gm(*inputs)))


def test_pre_dispatch_export_runs_under_autograd_as_eager():
    """Pre-dispatch graphs sit above autograd: run with parameters that require grad, their
    outputs, buffer mutations and gradients are eager's, no_grad regions included."""
    torch.manual_seed(0)
    m = _GradRegions()
    ref = copy.deepcopy(m)
    x = torch.randn(4, 3)
    gm, sig = aotgrad.aot_export_module(m, (x,), trace_joint=False, pre_dispatch=True)
    assert sig.backward_signature is None
    assert sorted(sig.inputs_to_parameters.values()) == ["lin.bias", "lin.weight", "scale"]
    out = _call_pre_dispatch(gm, sig, m, x)
    loss, act = ref(x)
    user = [out[n] for n in sig.user_outputs]
    torch.testing.assert_close(user[0], loss)
    torch.testing.assert_close(user[1], act)
    (steps_out,) = [out[o] for o, b in sig.buffers_to_mutate.items() if b == "steps"]
    torch.testing.assert_close(steps_out, ref.steps)
    assert m.steps.item() == 0  # exporting ran nothing for real
    user[0].backward()
    loss.backward()
    for name, p in m.named_parameters():
        torch.testing.assert_close(p.grad, dict(ref.named_parameters())[name].grad, msg=name)
    assert torch.is_grad_enabled()


def test_pre_dispatch_graph_holds_ops_above_autograd():
    """Composite ops autograd would decompose stay whole (linear, matmul); in-place ones are
    functionalized (absolute_ -> abs); grad-mode changes are graph nodes."""
    gm, _ = aotgrad.aot_export_module(_GradRegions(), (torch.randn(4, 3),), trace_joint=False, pre_dispatch=True)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.linear.default in targets and torch.ops.aten.addmm.default not in targets
    assert [n.args for n in gm.graph.nodes if n.target is torch._C._set_grad_enabled] == [(False,), (True,)]
    assert not any(getattr(t, "_schema", None) is not None and t._schema.is_mutable for t in targets)

    class Inplace(nn.Module):
        def forward(self, x):
            y = x.clone()
            torch.ops.aten.absolute_.default(y)
            return (y @ x,)

    x = torch.randn(3, 3)
    gm, _ = aotgrad.aot_export_module(Inplace(), (x,), trace_joint=False, pre_dispatch=True)
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.abs.default in targets and torch.ops.aten.matmul.default in targets
    torch.testing.assert_close(gm(x)[0], Inplace()(x)[0])
    assert [p.name for p in gm.graph.find_nodes(op="placeholder")] == ["arg0_1"]


def test_pre_dispatch_export_returns_user_input_mutations_and_refuses_writes_into_dropout():
    class Counter(nn.Module):
        def forward(self, x, seen):
            seen.add_(x.sum())
            return (x.t() * 2,)

    x, seen = torch.randn(2, 3), torch.zeros(())
    gm, sig = aotgrad.aot_export_module(Counter(), (x, seen), trace_joint=False, pre_dispatch=True)
    assert list(sig.user_inputs_to_mutate.values()) == [sig.user_inputs[1]]
    new_seen, out = gm(x, seen)
    torch.testing.assert_close(new_seen, x.sum())
    torch.testing.assert_close(out, x.t() * 2)
    assert seen.item() == 0

    class DropoutThenWrite(nn.Module):
        def forward(self, x):
            y = torch.ops.aten.dropout.default(x, 0.1, train=False)
            y.add_(1)  # y is x in eager; torch's export refuses the write, and so do we
            return (y,)

    with pytest.raises(RuntimeError, match="cannot mutate tensors with frozen storage"):
        aotgrad.aot_export_module(DropoutThenWrite(), (torch.randn(2, 2),), trace_joint=False, pre_dispatch=True)


def test_inference_graphs_name_their_inputs_as_torchs():
    """torch names an inference graph's placeholders ``arg{i}_1`` (compiled or exported) and a
    training forward's ``primals_{i}``; what a compiler or an export signature shows."""
    names = []

    def compiler(gm, example_inputs):
        names.append([p.name for p in gm.graph.find_nodes(op="placeholder")])
        return gm

    cf = aotgrad.aot_function(lambda x, y: x * y, compiler)
    cf(torch.randn(2), torch.randn(2))
    cf(torch.randn(2, requires_grad=True), torch.randn(2))
    assert names[0] == ["arg0_1", "arg1_1"] and names[1] == ["primals_1", "primals_2"]

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("buffer1", torch.ones(6, 4))

        def forward(self, x, y):
            y.add_(4)
            self.buffer1.add_(5)
            return (x.cos().sum() + y.sin().sum(), self.buffer1.sum())

    gm, sig = aotgrad.aot_export_module(M(), [torch.ones(6, 4), torch.zeros(6, 4)], trace_joint=False)
    assert sig.user_inputs == ["arg1_1", "arg2_1"] and sig.inputs_to_buffers == {"arg0_1": "buffer1"}
    assert list(sig.user_inputs_to_mutate.values()) == ["arg2_1"]


def test_export_takes_a_repeated_tensor_at_each_position_unless_mutated_or_joint():
    def f(a, b):
        return (a * b + 1,)

    x = torch.randn(3)
    g = aotgrad.aot_export_joint_simple(f, (x, x), trace_joint=False)
    assert len(g.graph.find_nodes(op="placeholder")) == 2
    torch.testing.assert_close(g(x, x)[0], f(x, x)[0])
    y = torch.randn(3)
    torch.testing.assert_close(g(x, y)[0], f(x, y)[0])  # positions are independent inputs

    def mutates(a, b):
        a.mul_(2)
        return (a + b,)

    with pytest.raises(RuntimeError, match="Encountered duplicated inputs that are mutated in the graph"):
        aotgrad.aot_export_joint_simple(mutates, (x, x), trace_joint=False)
    w = torch.randn(3, requires_grad=True)
    with pytest.raises(aotgrad.AotgradCompileError, match="part of its gradient"):
        aotgrad.aot_export_joint_simple(f, (w, w), trace_joint=True)


def test_parameter_mutation_is_rejected():
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        def forward(self, x):
            self.w.mul_(2)  # eager rejects this under grad mode; export rejects it always
            return (x * self.w).sum()

    with pytest.raises((aotgrad.AotgradCompileError, RuntimeError), match="requires grad"):
        aotgrad.aot_export_module(M(), (torch.randn(3),), trace_joint=False)


def test_export_joint_simple_keeps_the_calling_convention():
    def f(a, b):
        return (a * b).sin(), a + 1

    a, b = torch.randn(3, requires_grad=True), torch.randn(3)
    g = aotgrad.aot_export_joint_simple(f, (a.detach(), b), trace_joint=False)
    for o, r in zip(g(a.detach(), b), f(a.detach(), b)):
        torch.testing.assert_close(o, r)
    joint = aotgrad.aot_export_joint_simple(f, (a, b), trace_joint=True)
    placeholders = joint.graph.find_nodes(op="placeholder")
    assert len(placeholders) == 4  # two primals, one tangent per output requiring grad
    t1, t2 = torch.randn(3), torch.randn(3)
    outs = joint(a.detach(), b, t1, t2)
    ref = f(a, b)
    torch.autograd.backward(ref, [t1, t2])
    torch.testing.assert_close(outs[0], ref[0])
    torch.testing.assert_close(outs[2], a.grad)
    assert outs[3] is None  # b needs no gradient


@pytest.mark.parametrize(
    "fn, args, match",
    [
        (lambda a: (a.add_(1),), (torch.randn(3),), "mutated"),
        (lambda a: (a.view(-1),), (torch.randn(3),), "alias"),
        (lambda a: a * 2, (torch.randn(3),), "flat tuple or list"),
        (lambda a: (a[0] * 2,), ([torch.randn(3)],), "flat tuple of tensors"),
    ],
)
def test_export_joint_simple_rejects(fn, args, match):
    with pytest.raises(aotgrad.AotgradCompileError, match=match):
        aotgrad.aot_export_joint_simple(fn, args, trace_joint=False)


def test_compilers_see_the_compilation_context():
    seen = []

    def compiler(gm, example_inputs):
        seen.append((aotgrad.get_aot_compilation_context()[0], aotgrad.get_aot_graph_name()))
        return gm

    aotgrad.set_model_name("tiny")
    try:
        cf = aotgrad.aot_function(lambda x: x.sin().sum(), compiler)
        cf(torch.randn(3, requires_grad=True)).backward()
        with torch.no_grad():
            cf(torch.randn(3))
    finally:
        aotgrad.set_model_name("model")
    # one compiled function: one aot_id prefix (torch's "{aot_id}_{kind}" names)
    (aot_id,) = {s[0][0].split("_")[0] for s in seen}
    assert [s[0] for s in seen] == [[f"{aot_id}_forward"], [f"{aot_id}_backward"], [f"{aot_id}_inference"]]
    assert seen[0][1].startswith(f"tiny__{aot_id}_forward_")
    n_forward = int(seen[0][1].rsplit("_", 1)[1])
    assert seen[1][1] == f"tiny__{aot_id}_backward_{n_forward + 1}"
    assert aotgrad.get_aot_compilation_context()[0] == []  # outside a compiler
    seen.clear()
    aotgrad.aot_function(lambda x: x.cos(), compiler)(torch.randn(3))
    assert seen[0][0] == [f"{int(aot_id) + 1}_inference"]  # the next compiled function


#: torch's public AOT Autograd names (torch/_functorch/aot_autograd.py and compilers.py)
#: and what aotgrad has of them; docs/user-guide.md ("torch's names") lists the same.
TORCH_NAMES_WE_HAVE = [
    "aot_function", "aot_module", "aot_module_simplified", "aot_export_module", "aot_export_joint_simple",
    "compiled_function", "compiled_module", "make_boxed_compiler", "make_boxed_func", "default_partition",
    "min_cut_rematerialization_partition", "get_aot_compilation_context", "get_aot_graph_name", "get_graph_being_compiled",
    "set_model_name",
    "nop", "print_compile", "default_decompositions",
]


@pytest.mark.parametrize("name", TORCH_NAMES_WE_HAVE)
def test_torch_public_names_are_on_aotgrad(name):
    import torch._functorch.aot_autograd as torch_aot
    import torch._functorch.compilers as torch_compilers

    assert hasattr(torch_aot, name) or hasattr(torch_compilers, name), f"{name} is not a torch name"
    assert hasattr(aotgrad, name)


def _torch_public_aot_names() -> set[str]:
    """Public names of functorch.compile and the functions and classes defined at the top of
    torch's aot_autograd.py and compilers.py (read, never imported by aotgrad)."""
    import ast
    import functorch.compile
    import torch._functorch.aot_autograd as torch_aot
    import torch._functorch.compilers as torch_compilers

    names = {n for n in dir(functorch.compile) if not n.startswith("_")}
    for module in (torch_aot, torch_compilers):
        tree = ast.parse(open(module.__file__).read())
        names |= {
            n.name for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")
        }
    return names


def test_user_guide_says_for_each_torch_aot_name_whether_aotgrad_has_it():
    guide = (Path(__file__).resolve().parents[1] / "docs" / "user-guide.md").read_text()
    section = guide.split("## torch's names", 1)[1].split("\n## ", 1)[0]
    missing = sorted(n for n in _torch_public_aot_names() if f"`{n}`" not in section)
    assert not missing, f"docs/user-guide.md (torch's names) does not list {missing}"
    for name in TORCH_NAMES_WE_HAVE:
        assert f"`{name}`" in section


class _ExportRefusal(nn.Module):
    """A module whose forward does one thing export refuses, chosen by ``what``."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what
        self.w = nn.Parameter(torch.randn(3))

    def forward(self, x, y=None):
        if self.what == "param_mutation":
            with torch.no_grad():
                self.w.add_(1)
        elif self.what == "metadata":
            x.unsqueeze_(0)
        elif self.what == "aliased_mutation":
            x.add_(1)
            return ((x + y) * self.w).sum(), y * 2
        return ((x * self.w).sum(),)


@pytest.mark.parametrize(
    "what, args, phrase",
    [
        # torch's own wording leads each message, so code (and people) that grep for torch's
        # errors recognise aotgrad's; aotgrad's explanation follows it
        ("param_mutation", lambda: (torch.randn(3),), "Found a graph input that requires gradients, and received a mutation"),
        ("metadata", lambda: (torch.randn(3),), "Found an input that received a metadata mutation"),
        ("aliased_mutation", lambda: (lambda b: (b[0], b[1]))(torch.randn(2, 3)), "Encountered aliased inputs that are mutated"),
    ],
)
def test_export_refusals_carry_torchs_wording(what, args, phrase):
    x = args()
    with pytest.raises(aotgrad.AotgradCompileError, match=phrase):
        aotgrad.aot_export_module(_ExportRefusal(what), x, trace_joint=False)


def test_export_joint_simple_refusals_carry_torchs_wording():
    with pytest.raises(aotgrad.AotgradCompileError, match="requires individual inputs not to be pytrees"):
        aotgrad.aot_export_joint_simple(lambda xs: (xs[0] + xs[1],), ([torch.randn(2), torch.randn(2)],), trace_joint=False)
