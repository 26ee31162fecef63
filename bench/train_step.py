"""Training-step time: eager vs ``torch.compile`` (torch's Inductor) vs aotgrad + Inductor.

A step is forward, MSE loss, backward and an SGD update (the update runs eagerly, outside
the compiled region, identically for all sides). Sides:

  eager            the model as is
  torch.compile    ``torch.compile(model)``: Dynamo + torch's AOT Autograd + Inductor
  aotgrad_inductor ``torch.compile(model, backend="aotgrad_inductor")``: Dynamo + aotgrad +
                   Inductor (the backend name comes from the entry point in pyproject.toml,
                   so it needs ``pip install -e .``; otherwise the same backend object is
                   built with ``aotgrad.backend(fw_compiler=aotgrad.compilers.inductor)``)

Reported per model: the median step time after warm-up (ms; the sides' steps are
interleaved, one step of each per round, so machine noise hits all alike), the ratio
ours/torch, and the compile time: the first step's time, which includes Dynamo tracing, AOT
tracing, partitioning and Inductor (a throwaway compile first pays Inductor's one-time
process costs, so neither side is charged for them). Compile times are measured with a fresh, empty Inductor cache
directory per side (``--warm-cache`` keeps the default directory, so a rerun shows cache
hits). Also printed: the largest difference of the losses from eager's over the measured
steps (all sides start from the same weights and see the same batches).

Dynamo's automatic dynamic shapes are off (all sides compile static shapes: the sides
compile the same code objects in turn, and a recompile could otherwise turn dynamic).

Models (dropout 0):
  mlp          Linear(256, 512) - ReLU - Linear(512, 512) - ReLU - Linear(512, 10), batch 64
  transformer  nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256),
               batch 8 x seq 32

    python bench/train_step.py [--json out.json] [--steps 30] [--models mlp]
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import sys
import tempfile
import time

from _common import fmt, parse_args, print_table, ratio, write_json

import torch
import torch._dynamo
import torch.nn as nn

MODELS = ["mlp", "transformer"]


def make(name):
    torch.manual_seed(0)
    if name == "mlp":
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10))
        return model, (lambda g: torch.randn(64, 256, generator=g)), (64, 10)
    if name == "transformer":
        model = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256,
                                           dropout=0.0, batch_first=True)
        return model, (lambda g: torch.randn(8, 32, 128, generator=g)), (8, 32, 128)
    raise KeyError(name)


def aotgrad_backend():
    """("aotgrad_inductor", how it was found) or (None, why not)."""
    try:
        from torch._dynamo.backends.registry import lookup_backend

        lookup_backend("aotgrad_inductor")
        return "aotgrad_inductor", "entry point"
    except Exception as e:
        entry_err = f"{type(e).__name__}: {e}"
    try:
        from aotgrad.backend import backend
        from aotgrad.compilers import inductor

        return backend(fw_compiler=inductor), "aotgrad.backend(fw_compiler=inductor)"
    except Exception as e:
        return None, f"entry point: {entry_err}; aotgrad.backend: {type(e).__name__}: {e}"


class Side:
    """One side's model copy, optimizer and step function; ``losses`` records every step."""

    def __init__(self, base_model, batches, backend):
        self.model = copy.deepcopy(base_model)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        if backend == "eager":
            self.fn = self.model
        elif backend == "torch":
            self.fn = torch.compile(self.model)
        else:
            self.fn = torch.compile(self.model, backend=backend)
        self.batches = batches
        self.losses = []
        self.times = []

    def step(self):
        x, y = self.batches[len(self.losses) % len(self.batches)]
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(self.fn(x), y)
        loss.backward()
        self.opt.step()
        dt = time.perf_counter() - t0
        self.losses.append(loss.detach())
        return dt


def warm_up_process():
    """Pay Inductor's one-time process costs (imports, worker pool) before measuring."""
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    with temporary_cache_dir(tempfile.mkdtemp(prefix="bench_warmup_")):
        f = torch.compile(lambda x: (x * 2).sin())
        f(torch.randn(4, requires_grad=True)).sum().backward()


def run_model(name, sides, steps, warmup, warm_cache):
    """Compile each side (first step, timed), then interleave the measured steps."""
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    base, batch, target = make(name)
    g = torch.Generator().manual_seed(1)
    batches = [(batch(g), torch.randn(target, generator=g)) for _ in range(4)]
    live, compile_s, errors = {}, {}, {}
    for side, backend in sides.items():
        if isinstance(backend, str) and backend.startswith("n/a:"):
            errors[side] = backend[4:]
            continue
        cache = (contextlib.nullcontext() if warm_cache
                 else temporary_cache_dir(tempfile.mkdtemp(prefix=f"bench_{name}_{side}_")))
        try:
            with cache:
                s = Side(base, batches, backend)
                compile_s[side] = s.step()
                for _ in range(1, warmup):
                    s.step()
            live[side] = s
        except Exception as e:
            errors[side] = f"{type(e).__name__}: {e}"
    for _ in range(steps):
        for s in live.values():
            s.times.append(s.step())
    step_ms = {k: statistics.median(s.times) * 1e3 for k, s in live.items()}
    diffs = {}
    if "eager" in live:
        ref = torch.stack(live["eager"].losses)
        for k, s in live.items():
            if k != "eager":
                diffs[k] = (torch.stack(s.losses) - ref).abs().max().item()
    return {"model": name, "step_ms": step_ms, "compile_s": compile_s,
            "min_step_ms": {k: min(s.times) * 1e3 for k, s in live.items()},
            "max_loss_diff": diffs, "errors": errors}


def main():
    def extra(p):
        p.add_argument("--steps", type=int, default=30)
        p.add_argument("--warmup", type=int, default=5)
        p.add_argument("--models", default=",".join(MODELS))
        p.add_argument("--warm-cache", action="store_true",
                       help="use the default Inductor cache dir (compile times = cache hits)")

    args = parse_args(__doc__.splitlines()[0], extra)
    ours_backend, how = aotgrad_backend()
    sides = {"eager": "eager", "torch": "torch",
             "ours": ours_backend if ours_backend is not None else "n/a:" + how}
    # The sides compile the same forward code objects one after another; with automatic
    # dynamic shapes a later side's recompile could come out dynamic. Keep all static.
    torch._dynamo.config.automatic_dynamic_shapes = False
    warm_up_process()
    results = []
    for name in args.models.split(","):
        results.append(run_model(name, sides, args.steps, args.warmup, args.warm_cache))
        print(f"  done {name}", file=sys.stderr)

    print(f"\ntraining step (fw + MSE + bw + SGD), median of {args.steps} interleaved steps after "
          f"{args.warmup} warm-up, torch.set_num_threads({torch.get_num_threads()}); "
          f"compile = first step, {'default (warm)' if args.warm_cache else 'fresh'} "
          f"Inductor cache; ours via {how if ours_backend is not None else 'n/a'}")
    rows = []
    for r in results:
        s, c, d = r["step_ms"], r["compile_s"], r["max_loss_diff"]
        rows.append([r["model"], fmt(s.get("eager"), ".3f"), fmt(s.get("torch"), ".3f"),
                     fmt(s.get("ours"), ".3f"), fmt(ratio(s.get("ours"), s.get("torch")), ".2f"),
                     fmt(c.get("torch"), ".1f"), fmt(c.get("ours"), ".1f"),
                     fmt(ratio(c.get("ours"), c.get("torch")), ".2f"),
                     fmt(d.get("torch"), ".1e"), fmt(d.get("ours"), ".1e")])
    print_table(["model", "eager ms", "torch ms", "ours ms", "ours/torch", "torch compile s",
                 "ours compile s", "ours/torch", "torch |dloss|", "ours |dloss|"], rows)
    for r in results:
        for side, msg in r["errors"].items():
            print(f"  {r['model']} {side}: {msg.splitlines()[0][:240]}")
    write_json(args.json, {"benchmark": "train_step", "steps": args.steps,
                           "warmup": args.warmup, "warm_cache": args.warm_cache,
                           "ours_backend": how, "results": results})


if __name__ == "__main__":
    main()
