"""Bytes saved for backward: our partitioners vs torch's, on identical joint graphs.

For each model, one joint graph is traced (params made primals with
``torch.func.functional_call``; ``make_fx`` of a functionalized ``joint(primals, tangents)``
that calls ``torch.autograd.grad``), and each partitioner gets its own copy of it:

  ours default    ``aotgrad.partition.default_partition``
  ours min-cut    ``aotgrad.partition.min_cut_rematerialization_partition``
  torch default   ``torch._functorch.partitioners.default_partition`` (comparison side)
  torch min-cut   ``torch._functorch.partitioners.min_cut_rematerialization_partition``

Bytes are what ``aotgrad.partition.saved_bytes`` reports for each forward module: the sum
of ``numel * element_size`` over the saved tensors (primals included; symints 0). The
ratio column is ours min-cut / torch min-cut (lower is better for us). Each split is also
run on real tensors and checked against the joint graph itself (same seed). Nodes traced before
the backward carry torch's ``partitioner_tag = "is_forward"``, as torch's own tracing sets
it, so torch's default partitioner places them as it would in torch.

Run: ``python bench/memory.py [--json PATH]``.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from _common import fmt, parse_args, print_table, ratio, write_json

import torch
import torch.fx as fx
import torch.nn as nn
from torch._functorch import partitioners as torch_partitioners  # comparison side only
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
from torch.fx.experimental.proxy_tensor import get_proxy_mode, make_fx
from torch.utils import _pytree as pytree

from aotgrad.partition import default_partition, min_cut_rematerialization_partition, saved_bytes

PARTITIONERS: dict[str, Callable] = {
    "ours_default": default_partition,
    "ours_min_cut": min_cut_rematerialization_partition,
    "torch_default": torch_partitioners.default_partition,
    "torch_min_cut": torch_partitioners.min_cut_rematerialization_partition,
}


# The same joint-graph construction as tests/test_partition.py (kept in step by hand).
def trace_joint(fn: Callable, primals: list[torch.Tensor], tangents: list[torch.Tensor]) -> fx.GraphModule:
    def joint(primals: list[torch.Tensor], tangents: list[torch.Tensor]) -> list[Any]:
        with FunctionalTensorMode():
            p = [FunctionalTensor.to_functional(x).requires_grad_() for x in primals]
            t = [FunctionalTensor.to_functional(x) for x in tangents]
            with torch.enable_grad():
                outs = fn(*p)
                for node in get_proxy_mode().tracer.graph.nodes:
                    if not node.name.startswith("tangents"):
                        node.meta["partitioner_tag"] = "is_forward"
                grads = torch.autograd.grad(outs, p, t, allow_unused=True)
            res = [list(outs), list(grads)]
        return pytree.tree_map_only(
            FunctionalTensor, lambda x: torch._from_functional_tensor(x.elem), res
        )

    return make_fx(joint, tracing_mode="fake")(
        [p.detach() for p in primals], [t.detach() for t in tangents]
    )


def module_joint(model: nn.Module, x: torch.Tensor) -> tuple[fx.GraphModule, list, list]:
    """The joint graph of ``model(x)`` with params and ``x`` as primals, the primals, and
    tangents for its outputs."""
    model.train()
    names = [n for n, _ in model.named_parameters()]
    params = [p.detach() for _, p in model.named_parameters()]

    def fn(*primals: torch.Tensor) -> list[torch.Tensor]:
        return [torch.func.functional_call(model, dict(zip(names, primals[:-1])), (primals[-1],))]

    primals = [*params, x]
    tangents = [torch.randn_like(o) for o in fn(*primals)]
    return trace_joint(fn, primals, tangents), primals, tangents


class ResBlock(nn.Module):
    """conv-norm-relu-conv-norm plus the identity, then relu (GroupNorm: no buffer updates)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(4, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(4, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.norm1(self.conv1(x)))
        return torch.relu(x + self.norm2(self.conv2(y)))


def models() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    mlp_layers: list[nn.Module] = []
    for _ in range(8):
        mlp_layers += [nn.Linear(256, 256), nn.ReLU()]
    return {
        "mlp8 (256 wide, batch 64)": (nn.Sequential(*mlp_layers), torch.randn(64, 256)),
        "TransformerEncoderLayer(d_model=256), 4x32": (
            nn.TransformerEncoderLayer(d_model=256, nhead=8, batch_first=True),
            torch.randn(4, 32, 256),
        ),
        "resnet 4 blocks (32ch, 8x32x32)": (
            nn.Sequential(
                nn.Conv2d(3, 32, 3, padding=1),
                *[ResBlock(32) for _ in range(4)],
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(32, 10),
            ),
            torch.randn(8, 3, 32, 32),
        ),
    }


def _matches_joint(joint, fw, bw, primals, tangents, num_fwd_outputs: int) -> bool:
    """Whether fw then bw computes what the joint graph does (same seed, real tensors)."""
    torch.manual_seed(0)
    expected = pytree.tree_leaves(joint(primals, tangents), is_leaf=lambda v: v is None)
    torch.manual_seed(0)
    fw_out = list(fw(*primals))
    got = fw_out[:num_fwd_outputs] + list(bw(*fw_out[num_fwd_outputs:], *tangents))
    return len(got) == len(expected) and all(
        (a is None and e is None) or torch.allclose(a, e, rtol=1e-4, atol=1e-5)
        for a, e in zip(got, expected)
    )


def measure(joint: fx.GraphModule, primals: list, tangents: list) -> dict[str, dict[str, Any]]:
    num_fwd_outputs = len(tangents)
    results = {}
    for name, part in PARTITIONERS.items():
        # torch's min-cut edits its input in place (DCE, CSE): every partitioner gets a copy.
        fw, bw = part(copy.deepcopy(joint), None, num_fwd_outputs=num_fwd_outputs)
        report = saved_bytes(fw, num_fwd_outputs)
        results[name] = {
            "bytes": report.bytes,
            "num_saved": len(report.values),
            "matches_joint": _matches_joint(joint, fw, bw, primals, tangents, num_fwd_outputs),
        }
    return results


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    headers = ["model", *(f"{k} KiB" for k in PARTITIONERS), "ours/torch min-cut", "all correct"]
    rows, payload = [], {}
    for label, (model, x) in models().items():
        joint, primals, tangents = module_joint(model, x)
        res = measure(joint, primals, tangents)
        r = ratio(res["ours_min_cut"]["bytes"], res["torch_min_cut"]["bytes"])
        payload[label] = {**res, "ratio_ours_min_cut_to_torch_min_cut": r}
        wrong = [k for k in PARTITIONERS if not res[k]["matches_joint"]]
        rows.append(
            [
                label,
                *(fmt(res[k]["bytes"] / 1024, ".1f") for k in PARTITIONERS),
                fmt(r, ".3f"),
                "yes" if not wrong else "NO: " + ",".join(wrong),
            ]
        )
    print_table(headers, rows)
    print("KiB = saved tensors' numel * element_size / 1024; 'all correct': fw+bw of every")
    print("partitioner reproduces the joint graph's outputs and grads (same seed).")
    write_json(args.json, {"bench": "memory", "results": payload})


if __name__ == "__main__":
    main()
