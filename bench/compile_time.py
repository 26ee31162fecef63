"""Trace + partition time, ours vs torch's AOT Autograd, with nop compilers.

For each model the timed region is the *first* call of a freshly built compiled callable
plus its first backward: tracing (analysis, joint graph, partition) and compiling (nop)
happen there. Each repeat builds a fresh function object and a fresh aot_function, so no
cache carries over; the sides alternate, and the median over repeats is reported, with
eager's forward+backward of the same call for scale.

Models (training mode, parameters require grad, as ``functional_call`` over the module so
that parameters are ordinary graph inputs):

  mlp8         8 x (Linear(256, 256) + ReLU), batch 32
  transformer  nn.TransformerEncoderLayer(d_model=256, nhead=4, dropout=0), (8, 32, 256)
  resnet       3 ResNet basic blocks (conv3x3-BN-ReLU-conv3x3-BN + skip), 16 channels, 16x16

    python bench/compile_time.py [--json out.json] [--repeat 5] [--models mlp8,resnet]
"""

from __future__ import annotations

import statistics
import sys
import time

from _common import fmt, ours_aot_function, parse_args, print_table, ratio, write_json

import torch
import torch.nn as nn
from torch._functorch.aot_autograd import aot_function as torch_aot_function
from torch._functorch.compilers import nop as torch_nop


class BasicBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


def make_model(name):
    torch.manual_seed(0)
    if name == "mlp8":
        layers = []
        for _ in range(8):
            layers += [nn.Linear(256, 256), nn.ReLU()]
        return nn.Sequential(*layers), torch.randn(32, 256)
    if name == "transformer":
        layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=512,
                                           dropout=0.0, batch_first=True)
        return layer, torch.randn(8, 32, 256)
    if name == "resnet":
        return nn.Sequential(*[BasicBlock(16) for _ in range(3)]), torch.randn(2, 16, 16, 16)
    raise KeyError(name)


MODELS = ["mlp8", "transformer", "resnet"]


def functional(model):
    """A fresh function ``f(*params_and_buffers, x)`` calling the module functionally."""
    names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]

    def f(*args):
        state = dict(zip(names, args[:-1]))
        return torch.func.functional_call(model, state, (args[-1],))

    values = [p for _, p in model.named_parameters()] + [b for _, b in model.named_buffers()]
    return f, values


def first_call_seconds(aot_function, compiler, model, x) -> float:
    f, values = functional(model)
    compiled = aot_function(f, compiler)
    t0 = time.perf_counter()
    out = compiled(*values, x)
    out.sum().backward()
    return time.perf_counter() - t0


def eager_seconds(model, x) -> float:
    f, values = functional(model)
    t0 = time.perf_counter()
    f(*values, x).sum().backward()
    return time.perf_counter() - t0


def main():
    def extra(p):
        p.add_argument("--repeat", type=int, default=5)
        p.add_argument("--models", default=",".join(MODELS))

    args = parse_args(__doc__.splitlines()[0], extra)
    ours_fn, why = ours_aot_function()
    from aotgrad import compilers as ours_compilers

    sides = {"torch": (torch_aot_function, torch_nop)}
    if ours_fn is not None:
        sides["ours"] = (ours_fn, ours_compilers.nop)

    results = []
    for name in args.models.split(","):
        model, x = make_model(name)
        times = {k: [] for k in ("eager", "ours", "torch")}
        errors = {}
        # warm-up: the first trace in a process pays one-time dispatcher/import costs
        for side, (aot, comp) in list(sides.items()):
            try:
                first_call_seconds(aot, comp, model, x)
            except Exception as e:
                errors[side] = f"{type(e).__name__}: {e}"
                del sides[side]
        eager_seconds(model, x)
        for _ in range(args.repeat):
            times["eager"].append(eager_seconds(model, x))
            for side, (aot, comp) in sides.items():
                times[side].append(first_call_seconds(aot, comp, model, x))
        med = {k: (statistics.median(v) * 1e3 if v else None) for k, v in times.items()}
        results.append({"model": name, "ms": med, "all_ms": {k: [t * 1e3 for t in v]
                                                            for k, v in times.items()},
                        "errors": errors})
        print(f"  done {name}", file=sys.stderr)

    print(f"\nfirst call + first backward, ms (median of {args.repeat}), nop compilers, "
          f"torch.set_num_threads({torch.get_num_threads()})")
    rows = [[r["model"], fmt(r["ms"]["eager"], ".2f"), fmt(r["ms"]["ours"]),
             fmt(r["ms"]["torch"]), fmt(ratio(r["ms"]["ours"], r["ms"]["torch"]), ".2f")]
            for r in results]
    print_table(["model", "eager fw+bw", "ours", "torch", "ours/torch"], rows)
    if ours_fn is None:
        print(f"\nours unavailable: {why}")
    for r in results:
        for side, msg in r["errors"].items():
            print(f"  {r['model']} {side} failed: {msg.splitlines()[0][:200]}")
    write_json(args.json, {"benchmark": "compile_time", "unit": "ms", "repeat": args.repeat,
                           "results": results})


if __name__ == "__main__":
    main()
