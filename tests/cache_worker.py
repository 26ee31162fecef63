"""Compiles a few programs and prints their graphs, metadata and results (tests/test_cache.py
runs it in fresh processes against one cache directory and compares the reports).

    python tests/cache_worker.py [--rounds N]

Prints ``=== case`` blocks, then ``loaded N`` (entries loaded from the cache)."""

import argparse
import logging

import torch
from torch import nn

import aotgrad
from aotgrad import compilers


class _Loads(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record):
        if "loaded from cache" in record.getMessage():
            self.count += 1


def describe(entry):
    lines = [repr(entry.metadata), repr(entry.signature)]
    for name, gm in sorted(entry.graphs.items()):
        lines += [f"--- {name}", gm.code]
        lines += [f"{n.name}: {tuple(n.meta['val'].shape)} {n.meta['val'].stride()} {n.meta['val'].dtype}"
                  for n in gm.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]
    if entry.joint_graph is not None:
        lines += ["--- joint", entry.joint_graph.code]
    return "\n".join(lines)


def mutates_and_views(x, buf):
    buf.add_(1)
    return x.t(), (x * buf).sum(), x.relu() * 2


def case_training():
    f = aotgrad.aot_function(mutates_and_views, compilers.nop)
    torch.manual_seed(0)
    x, buf = torch.randn(3, 4, requires_grad=True), torch.zeros(3, 4)
    out = f(x, buf)
    (out[1] + out[2].sum()).backward()
    return describe(f.entries[0]) + f"\n{out}\n{buf}\n{x.grad}"


def case_inference():
    f = aotgrad.aot_function(mutates_and_views, compilers.nop)
    torch.manual_seed(0)
    x, buf = torch.randn(3, 4), torch.zeros(3, 4)
    with torch.no_grad():
        out = f(x, buf)
    return describe(f.entries[0]) + f"\n{out}\n{buf}"


def case_module():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(16, 3))
    m = aotgrad.aot_module(model, compilers.nop)
    x = torch.randn(2, 2, 4, 4)
    out = m(x)
    out.sum().backward()
    (_, f), = m._compiled_forward.entries.values()
    return describe(f.entries[0]) + f"\n{out}\n{model[1].running_mean}\n{model[0].weight.grad}"


def case_dynamo():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    compiled = torch.compile(model, backend=aotgrad.backend(), dynamic=False)
    x = torch.randn(3, 4)
    out = compiled(x)
    out.sum().backward()
    return f"{out}\n{model[0].weight.grad}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    loads = _Loads()
    log = logging.getLogger("aotgrad")
    log.addHandler(loads)
    log.setLevel(logging.DEBUG)
    torch.set_num_threads(1)
    for _ in range(args.rounds):
        for name, case in (("training", case_training), ("inference", case_inference),
                           ("module", case_module), ("dynamo", case_dynamo)):
            print(f"=== {name}\n{case()}")
    print(f"loaded {loads.count}")


if __name__ == "__main__":
    main()
