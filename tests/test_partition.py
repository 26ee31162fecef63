"""Tests for aotgrad.partition: forward/backward splits of joint graphs.

Joint graphs are built here the way the contract describes (docs/contracts.md):
``make_fx(joint)(primals, tangents)`` of a functionalized ``joint(primals, tangents) ->
[fw_outs, grads]`` that calls ``torch.autograd.grad``. Each partitioned pair is checked by
running ``fw_module`` then ``bw_module`` on real tensors against eager (or against the joint
graph itself where eager picks different kernels than tracing). torch's own partitioners
appear only as the comparison side for saved bytes.
"""

from __future__ import annotations

import copy
import logging
import operator
from typing import Any, Callable

import pytest
import torch
import torch.fx as fx
import torch.nn as nn

# Comparison side only (never imported by src/).
from torch._functorch import partitioners as torch_partitioners
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
from torch.fx.experimental.proxy_tensor import get_proxy_mode, make_fx
from torch.utils import _pytree as pytree

import aotgrad.partition as partition
from aotgrad.partition import (
    SavedReport,
    default_partition,
    min_cut_rematerialization_partition,
    saved_bytes,
)

OURS = {"default": default_partition, "min_cut": min_cut_rematerialization_partition}
aten = torch.ops.aten

# Ops the min-cut partitioner must never recompute in the backward.
NEVER_RECOMPUTED = {
    aten.mm,
    aten.addmm,
    aten.bmm,
    aten.convolution,
    aten.native_layer_norm,
    aten._softmax,
    aten._safe_softmax,
}


# --------------------------------------------------------------------------- building joints


def trace_joint(
    fn: Callable[..., list[torch.Tensor]],
    primals: list[torch.Tensor],
    tangents: list[torch.Tensor],
    *,
    tracing_mode: str = "fake",
    functional: bool = True,
) -> fx.GraphModule:
    """``make_fx`` of ``joint(primals, tangents) -> [fn(*primals), grads of primals]``.

    ``functional=True`` traces under FunctionalTensorMode (what the pipeline feeds a
    partitioner); ``False`` keeps in-place ops such as dropout's ``bernoulli_``. Nodes traced
    before the backward get torch's ``partitioner_tag = "is_forward"`` so torch's default
    partitioner (comparison side) sees the placement torch's own tracing would give it.
    """

    def tag_forward_nodes() -> None:
        for node in get_proxy_mode().tracer.graph.nodes:
            if not node.name.startswith("tangents"):
                node.meta["partitioner_tag"] = "is_forward"

    def grads_of(p: list[torch.Tensor], t: list[torch.Tensor]) -> list[Any]:
        with torch.enable_grad():
            outs = fn(*p)
            tag_forward_nodes()
            grads = torch.autograd.grad(outs, p, t, allow_unused=True)
        return [list(outs), list(grads)]

    # make_fx names placeholders after these parameters: primals_1.., tangents_1..
    def joint(primals: list[torch.Tensor], tangents: list[torch.Tensor]) -> list[Any]:
        if not functional:
            return grads_of([x.detach().requires_grad_() for x in primals], tangents)
        with FunctionalTensorMode():
            p = [FunctionalTensor.to_functional(x).requires_grad_() for x in primals]
            t = [FunctionalTensor.to_functional(x) for x in tangents]
            res = grads_of(p, t)
        return pytree.tree_map_only(
            FunctionalTensor, lambda x: torch._from_functional_tensor(x.elem), res
        )

    return make_fx(joint, tracing_mode=tracing_mode)(
        [p.detach() for p in primals], [t.detach() for t in tangents]
    )


def module_fn(model: nn.Module, x: torch.Tensor) -> tuple[Callable, list[torch.Tensor]]:
    """A function of ``[*params, x]`` (params as primals via functional_call)."""
    names = [n for n, _ in model.named_parameters()]
    params = [p.detach() for _, p in model.named_parameters()]

    def fn(*primals: torch.Tensor) -> list[torch.Tensor]:
        return [torch.func.functional_call(model, dict(zip(names, primals[:-1])), (primals[-1],))]

    return fn, [*params, x]


def eager(fn: Callable, primals: list[torch.Tensor], tangents: list[torch.Tensor], seed: int):
    leaves = [p.detach().clone().requires_grad_() for p in primals]
    torch.manual_seed(seed)
    outs = fn(*leaves)
    grads = torch.autograd.grad(outs, leaves, tangents, allow_unused=True)
    return [o.detach() for o in outs], list(grads)


def run_joint(joint: fx.GraphModule, primals, tangents, num_fwd_outputs: int, seed: int):
    torch.manual_seed(seed)
    flat = pytree.tree_leaves(joint(list(primals), list(tangents)), is_leaf=lambda x: x is None)
    return flat[:num_fwd_outputs], flat[num_fwd_outputs:]


def run_split(fw: fx.GraphModule, bw: fx.GraphModule, primals, tangents, num_fwd_outputs: int, seed: int):
    torch.manual_seed(seed)
    fw_out = list(fw(*primals))
    grads = list(bw(*fw_out[num_fwd_outputs:], *tangents))
    return fw_out[:num_fwd_outputs], grads


def assert_same(actual: list, expected: list) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        if e is None or a is None:
            assert a is None and e is None
        elif isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4)
        else:
            assert a == e


def computed(gm: fx.GraphModule) -> dict[str, fx.Node]:
    return {n.name: n for n in gm.graph.nodes if n.op == "call_function"}


def random_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in computed(gm).values() if partition._is_random(n)]


def placeholder_names(gm: fx.GraphModule) -> list[str]:
    return [n.name for n in gm.graph.nodes if n.op == "placeholder"]


def output_names(gm: fx.GraphModule) -> list[str | None]:
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    return [a.name if isinstance(a, fx.Node) else a for a in out.args[0]]


# --------------------------------------------------------------------------- models


def _mlp():
    return nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)
    ), torch.randn(8, 32)


def _dropout():
    return nn.Sequential(
        nn.Linear(32, 64), nn.Dropout(0.5), nn.ReLU(), nn.Linear(64, 10)
    ), torch.randn(8, 32)


def _conv():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    ), torch.randn(2, 3, 16, 16)


def _ln_gelu():
    return nn.Sequential(
        nn.LayerNorm(32), nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32)
    ), torch.randn(8, 32)


def _transformer(dropout: float):
    def make():
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=dropout, batch_first=True)
        return layer, torch.randn(2, 5, 32)

    return make


# name -> (factory, whether eager draws the same random numbers as the traced graph).
# Eager attention with dropout picks a fused kernel that tracing does not, so the
# transformer with dropout is checked against its own joint graph instead of eager.
MODELS = {
    "mlp": (_mlp, True),
    "dropout": (_dropout, True),
    "conv": (_conv, True),
    "ln_gelu": (_ln_gelu, True),
    "transformer": (_transformer(0.0), True),
    "transformer_dropout": (_transformer(0.1), False),
}


class Case:
    def __init__(self, name: str):
        factory, self.eager_rng_matches = MODELS[name]
        torch.manual_seed(0)
        model, x = factory()
        model.train()
        self.fn, self.primals = module_fn(model, x)
        outs = self.fn(*self.primals)
        self.tangents = [torch.randn_like(o) for o in outs]
        self.num_fwd_outputs = len(outs)
        self.joint = trace_joint(self.fn, self.primals, self.tangents)

    def partition(self, partition_fn: Callable) -> tuple[fx.GraphModule, fx.GraphModule]:
        # torch's min-cut edits the joint in place (DCE, CSE); give every partitioner a copy.
        return partition_fn(
            copy.deepcopy(self.joint), None, num_fwd_outputs=self.num_fwd_outputs
        )

    def expected(self, seed: int):
        if self.eager_rng_matches:
            return eager(self.fn, self.primals, self.tangents, seed)
        return run_joint(self.joint, self.primals, self.tangents, self.num_fwd_outputs, seed)


_CASES: dict[str, Case] = {}


def case(name: str) -> Case:
    if name not in _CASES:
        _CASES[name] = Case(name)
    return _CASES[name]


@pytest.mark.parametrize("part", list(OURS))
@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_eager(name: str, part: str) -> None:
    c = case(name)
    fw, bw = c.partition(OURS[part])
    outs, grads = run_split(fw, bw, c.primals, c.tangents, c.num_fwd_outputs, seed=7)
    exp_outs, exp_grads = c.expected(seed=7)
    assert_same(outs, exp_outs)
    assert_same(grads, exp_grads)
    # Contract: fw takes the primals, bw takes saved values then tangents.
    assert placeholder_names(fw) == [f"primals_{i + 1}" for i in range(len(c.primals))]
    num_saved = fw.meta["num_saved_tensors"] + fw.meta["num_saved_symints"]
    assert placeholder_names(bw)[num_saved:] == [
        f"tangents_{i + 1}" for i in range(len(c.tangents))
    ]
    assert placeholder_names(bw)[:num_saved] == output_names(fw)[c.num_fwd_outputs :]


@pytest.mark.parametrize("name", list(MODELS))
def test_min_cut_saves_no_more_than_default(name: str) -> None:
    c = case(name)
    default = saved_bytes(c.partition(default_partition)[0])
    min_cut = saved_bytes(c.partition(min_cut_rematerialization_partition)[0])
    assert min_cut.bytes <= default.bytes


@pytest.mark.parametrize("part", list(OURS))
@pytest.mark.parametrize("name", ["dropout", "transformer_dropout"])
def test_random_ops_stay_in_forward(name: str, part: str) -> None:
    c = case(name)
    fw, bw = c.partition(OURS[part])
    assert random_nodes(bw) == []
    assert len(random_nodes(fw)) == len(random_nodes(c.joint)) > 0


@pytest.mark.parametrize("name", list(MODELS))
def test_min_cut_recomputes_only_cheap_ops(name: str) -> None:
    c = case(name)
    fw, bw = c.partition(min_cut_rematerialization_partition)
    fw_nodes, bw_nodes = computed(fw), computed(bw)
    recomputed = [bw_nodes[k] for k in fw_nodes.keys() & bw_nodes.keys()]
    for node in recomputed:
        packet = getattr(node.target, "overloadpacket", None)
        assert packet not in NEVER_RECOMPUTED, node.format_node()
        assert not partition._is_random(node), node.format_node()


@pytest.mark.parametrize("name", list(MODELS))
def test_saved_bytes_vs_torch_partitioners(name: str) -> None:
    c = case(name)
    bytes_ = {
        "ours_default": saved_bytes(c.partition(default_partition)[0]).bytes,
        "ours_min_cut": saved_bytes(c.partition(min_cut_rematerialization_partition)[0]).bytes,
        "torch_default": saved_bytes(
            c.partition(torch_partitioners.default_partition)[0], c.num_fwd_outputs
        ).bytes,
        "torch_min_cut": saved_bytes(
            c.partition(torch_partitioners.min_cut_rematerialization_partition)[0],
            c.num_fwd_outputs,
        ).bytes,
    }
    ratio = bytes_["ours_min_cut"] / bytes_["torch_min_cut"]
    print(f"\n{name}: {bytes_} ours/torch min-cut = {ratio:.3f}")
    assert ratio <= 1.0


# --------------------------------------------------------------------------- graph edge cases


def edge_joint(primals: list[fx.Proxy], tangents: list[fx.Proxy]) -> list[Any]:
    """A hand-written joint (not autograd) with every awkward output shape.

    fw_outs: an intermediate, a primal (placeholder), and the intermediate again.
    grads: a tangent itself, a primal itself, None, and a value mixing a tangent with a
    forward intermediate. A dead computation (``unused``) is traced and must be dropped.
    """
    x, y, z = primals
    (t,) = tangents
    h = x.sin() * y
    unused = (x * 3).exp()  # noqa: F841  (dead on purpose)
    return [[h, z, h], [t, y, None, t * h.cos()]]


def _edge_inputs():
    torch.manual_seed(0)
    return [torch.randn(4, 3) for _ in range(3)], [torch.randn(4, 3)]


@pytest.mark.parametrize("part", list(OURS))
def test_edge_outputs(part: str) -> None:
    primals, tangents = _edge_inputs()
    joint = make_fx(edge_joint, tracing_mode="fake")(primals, tangents)
    fw, bw = OURS[part](joint, None, num_fwd_outputs=3)
    outs, grads = run_split(fw, bw, primals, tangents, 3, seed=0)
    exp_outs, exp_grads = run_joint(joint, primals, tangents, 3, seed=0)
    assert_same(outs, exp_outs)
    assert_same(grads, exp_grads)
    fw_out = output_names(fw)
    assert fw_out[:3] == [fw_out[0], "primals_3", fw_out[0]]
    bw_out = output_names(bw)
    assert bw_out[0] == "tangents_1" and bw_out[1] == "primals_2" and bw_out[2] is None
    assert "primals_2" in placeholder_names(bw)  # a grad that is a primal is saved
    assert not any("exp" in name for name in [*computed(fw), *computed(bw)])
    assert fw.meta["num_fwd_outputs"] == 3


@pytest.mark.parametrize("part", list(OURS))
def test_no_grads_needed(part: str) -> None:
    """All grads None: nothing is saved and the backward returns Nones."""

    def joint(primals, tangents):
        return [[primals[0] * 2], [None]]

    primals, tangents = [torch.randn(3)], [torch.randn(3)]
    fw, bw = OURS[part](make_fx(joint)(primals, tangents), None, num_fwd_outputs=1)
    assert saved_bytes(fw).values == ()
    assert list(bw(*tangents)) == [None]


@pytest.mark.parametrize("part", list(OURS))
def test_symints_saved_after_tensors(part: str) -> None:
    """The backward needs x's (symbolic) sizes but not x: the sizes are saved as symints."""

    def fn(x, w):
        n = x.shape[0]
        return [x.view(n, -1).sum(0) * w]

    torch.manual_seed(0)
    primals = [torch.randn(6, 2, 4), torch.randn(8)]
    tangents = [torch.randn(8)]
    joint = trace_joint(fn, primals, tangents, tracing_mode="symbolic")
    fw, bw = OURS[part](joint, None, num_fwd_outputs=1)
    n_t, n_s = fw.meta["num_saved_tensors"], fw.meta["num_saved_symints"]
    assert n_s > 0
    saved = [n for n in fw.graph.nodes if n.op == "output"][0].args[0][1:]
    kinds = [isinstance(n.meta["val"], torch.Tensor) for n in saved]
    assert kinds == [True] * n_t + [False] * n_s
    outs, grads = run_split(fw, bw, primals, tangents, 1, seed=0)
    exp_outs, exp_grads = eager(fn, primals, tangents, seed=0)
    assert_same(outs, exp_outs)
    assert_same(grads, exp_grads)
    report = saved_bytes(fw)
    assert [v.dtype is None for v in report.values] == [False] * n_t + [True] * n_s
    # Other sizes (a different batch) run through the same graphs.
    primals2 = [torch.randn(3, 2, 4), primals[1]]
    outs, grads = run_split(fw, bw, primals2, tangents, 1, seed=0)
    assert_same(grads, eager(fn, primals2, tangents, seed=0)[1])


@pytest.mark.parametrize("part", list(OURS))
def test_random_ops_match_eager(part: str) -> None:
    """native_dropout (multi-output), rand_like and bernoulli: masks equal eager's."""

    def fn(x, w):
        out, mask = aten.native_dropout(x @ w, 0.4, True)
        noise = torch.rand_like(out)
        gate = torch.bernoulli(torch.full_like(out, 0.7))
        return [(out * noise + gate * out).tanh() * mask, out.sin()]

    torch.manual_seed(0)
    primals = [torch.randn(6, 5), torch.randn(5, 7)]
    tangents = [torch.randn(6, 7), torch.randn(6, 7)]
    joint = trace_joint(fn, primals, tangents)
    fw, bw = OURS[part](joint, None, num_fwd_outputs=2)
    assert random_nodes(bw) == []
    assert len(random_nodes(fw)) == 3
    outs, grads = run_split(fw, bw, primals, tangents, 2, seed=11)
    exp_outs, exp_grads = eager(fn, primals, tangents, seed=11)
    assert_same(outs, exp_outs)
    assert_same(grads, exp_grads)


@pytest.mark.parametrize("part", list(OURS))
def test_random_op_needed_only_by_backward(part: str) -> None:
    """A forward rng draw only the backward reads still happens once, in the forward."""

    def joint(primals, tangents):
        (x,), (t,) = primals, tangents
        noise = torch.rand_like(x)
        return [[x * 2], [t * noise]]

    primals, tangents = [torch.randn(4)], [torch.randn(4)]
    joint_gm = make_fx(joint, tracing_mode="fake")(primals, tangents)
    fw, bw = OURS[part](joint_gm, None, num_fwd_outputs=1)
    assert random_nodes(bw) == [] and len(random_nodes(fw)) == 1
    assert_same(
        run_split(fw, bw, primals, tangents, 1, seed=3)[1],
        run_joint(joint_gm, primals, tangents, 1, seed=3)[1],
    )


def test_min_cut_falls_back_on_in_place_ops(caplog: pytest.LogCaptureFixture) -> None:
    c = case("dropout")
    joint = trace_joint(c.fn, c.primals, c.tangents, functional=False)
    assert any(n.target is aten.bernoulli_.float for n in joint.graph.nodes)
    with caplog.at_level(logging.WARNING, logger="aotgrad.partition"):
        fw, bw = min_cut_rematerialization_partition(joint, None, num_fwd_outputs=1)
    assert "in-place" in caplog.text
    outs, grads = run_split(fw, bw, c.primals, c.tangents, 1, seed=5)
    exp_outs, exp_grads = eager(c.fn, c.primals, c.tangents, seed=5)
    assert_same(outs, exp_outs)
    assert_same(grads, exp_grads)
    assert random_nodes(bw) == []


def _pointwise_chain(x, y, w):
    return [((x.sigmoid() * y).tanh() * x.exp()) @ w]


def test_min_cut_recomputes_pointwise_chain() -> None:
    torch.manual_seed(0)
    primals = [torch.randn(16, 32), torch.randn(16, 32), torch.randn(32, 8)]
    tangents = [torch.randn(16, 8)]
    joint = trace_joint(_pointwise_chain, primals, tangents)
    fw_d, _ = default_partition(joint, None, num_fwd_outputs=1)
    fw_m, bw_m = min_cut_rematerialization_partition(joint, None, num_fwd_outputs=1)
    assert saved_bytes(fw_m).bytes < saved_bytes(fw_d).bytes
    # Only the inputs of the chain (and of the matmul) need saving.
    assert {v.name for v in saved_bytes(fw_m).values} <= {"primals_1", "primals_2", "primals_3"}
    assert {"sigmoid", "tanh", "exp"} <= computed(bw_m).keys()
    assert_same(
        run_split(fw_m, bw_m, primals, tangents, 1, seed=0)[1],
        eager(_pointwise_chain, primals, tangents, seed=0)[1],
    )


def test_reduction_recompute_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Recomputing the mean lets the backward start from x alone; above the threshold the
    mean is computed once in the forward and saved with x instead."""

    def fn(x, w):
        a = x - x.mean(-1, keepdim=True)
        return [(a.exp() + x.sin()) @ w]

    torch.manual_seed(0)
    primals, tangents = [torch.randn(8, 16), torch.randn(16, 4)], [torch.randn(8, 4)]
    joint = trace_joint(fn, primals, tangents)
    _, bw = min_cut_rematerialization_partition(joint, None, num_fwd_outputs=1)
    assert "mean" in computed(bw)  # 128 input elements: small, recomputed
    monkeypatch.setattr(partition, "REDUCTION_RECOMPUTE_MAX_NUMEL", 100)
    fw, bw = min_cut_rematerialization_partition(joint, None, num_fwd_outputs=1)
    assert "mean" not in computed(bw) and "mean" in {v.name for v in saved_bytes(fw).values}
    assert_same(run_split(fw, bw, primals, tangents, 1, seed=0)[1], eager(fn, primals, tangents, 0)[1])


# --------------------------------------------------------------------------- saved_bytes


def test_saved_report() -> None:
    c = case("mlp")
    fw, _ = c.partition(default_partition)
    report = saved_bytes(fw)
    assert isinstance(report, SavedReport)
    assert report.bytes == sum(v.nbytes for v in report.values) > 0
    first = report.values[0]
    assert first.dtype == torch.float32 and first.nbytes == 4 * first.shape[0] * first.shape[1]
    text = repr(report)
    assert text.startswith(f"SavedReport({len(report.values)} values, {report.bytes} bytes)")
    assert first.name in text
    # Saved values start right after the forward outputs.
    assert [v.name for v in report.values] == output_names(fw)[fw.meta["num_fwd_outputs"] :]


def test_saved_bytes_needs_num_fwd_outputs_for_foreign_modules() -> None:
    c = case("mlp")
    fw, _ = c.partition(torch_partitioners.default_partition)
    with pytest.raises(ValueError, match="num_fwd_outputs"):
        saved_bytes(fw)
    assert saved_bytes(fw, c.num_fwd_outputs).bytes > 0


def test_getitem_of_multi_output_is_saved_not_tuple() -> None:
    c = case("ln_gelu")
    for part in OURS.values():
        fw, _ = c.partition(part)
        for v in saved_bytes(fw).values:
            assert v.dtype is not None
        saved = [n for n in fw.graph.nodes if n.op == "output"][0].args[0][1:]
        assert all(isinstance(n.meta["val"], torch.Tensor) for n in saved)
        assert any(n.target is operator.getitem for n in saved)


@pytest.mark.parametrize("part", list(OURS))
def test_tensor_constants_and_torch_kwargs(part: str) -> None:
    """get_attr constants travel with both modules; torch-only keyword arguments are ignored."""

    def joint(primals, tangents):
        c = torch.tensor([1.0, 2.0, 3.0])
        return [[primals[0] * c], [tangents[0] * c * primals[0].cos(), None]]

    primals, tangents = [torch.randn(3), torch.randn(3)], [torch.randn(3)]
    joint_gm = make_fx(joint)(primals, tangents)
    fw, bw = OURS[part](
        joint_gm, primals + tangents, num_fwd_outputs=1, static_lifetime_input_indices=[0]
    )
    outs, grads = run_split(fw, bw, primals, tangents, 1, seed=0)
    exp_outs, exp_grads = run_joint(joint_gm, primals, tangents, 1, seed=0)
    assert_same(outs, exp_outs)
    assert_same(grads, exp_grads)
