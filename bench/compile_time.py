"""Trace + partition time, ours vs torch's AOT Autograd, with nop compilers.

For each model the timed region is the *first* call of a freshly built compiled callable
plus its first backward (``train`` rows: analysis, joint graph, partition and compiling,
nop, happen there), or the first call under ``torch.no_grad()`` (``infer`` rows: analysis,
the inference graph, nop). Each repeat builds a fresh function object and a fresh aot_function, so no
cache carries over; the sides alternate, and the median over repeats is reported, with
eager's forward+backward of the same call for scale.

Models (training mode, parameters require grad, as ``functional_call`` over the module so
that parameters are ordinary graph inputs):

  mlp8         8 x (Linear(256, 256) + ReLU), batch 32
  transformer  nn.TransformerEncoderLayer(d_model=256, nhead=4, dropout=0), (8, 32, 256)
  resnet       3 ResNet basic blocks (conv3x3-BN-ReLU-conv3x3-BN + skip), 16 channels, 16x16

    python bench/compile_time.py [--json out.json] [--repeat 5] [--models mlp8,resnet] [--modes train,infer]
    python bench/compile_time.py --warm-start [--repeat 3] [--models ...]

``--clock cpu`` times the compiling thread's CPU time (``time.thread_time``) instead of wall
time: on a shared machine, steadier; it leaves out work in other threads and processes.

``--warm-start`` measures the start of a *second process* instead: a first process compiles
every model (filling aotgrad's persistent cache, and for ``torch.compile`` with Inductor
the FX graph cache and torch's AOTAutogradCache), then each repeat is a fresh process that
times the first call + first backward of: ours warm (``aot_function``, nop, cache hit),
ours cold (same, cache off), and under ``torch.compile`` with Inductor, ours warm
(``aotgrad.backend(fw_compiler=aotgrad.compilers.inductor)``: our cache + FX graph cache)
and torch warm (``backend="inductor"``: AOTAutogradCache + FX graph cache). Each repeat is
three processes (the nop sides, ours under Inductor, torch under Inductor: a side measured
after another in one process would find Dynamo's one-time work and Inductor's kernels
loaded); each first pays one-time costs (imports, dispatcher, Inductor's workers) on a
throwaway model.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
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

#: the clock of every timed region: wall time, or with ``--clock cpu`` the CPU time of the
#: compiling thread (steadier on a machine shared with other jobs; it leaves out work done
#: in other threads or processes, such as Inductor's compile workers)
CLOCK = time.perf_counter


def functional(model):
    """A fresh function ``f(*params_and_buffers, x)`` calling the module functionally."""
    names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]

    def f(*args):
        state = dict(zip(names, args[:-1]))
        return torch.func.functional_call(model, state, (args[-1],))

    values = [p for _, p in model.named_parameters()] + [b for _, b in model.named_buffers()]
    return f, values


def _seconds(call, mode="train") -> float:
    """Time ``call()`` (+ a backward of its output's sum in ``train``; under
    ``torch.no_grad()`` in ``infer``)."""
    if mode == "infer":
        with torch.no_grad():
            t0 = CLOCK()
            call()
            return CLOCK() - t0
    t0 = CLOCK()
    call().sum().backward()
    return CLOCK() - t0


def first_call_seconds(aot_function, compiler, model, x, mode="train") -> float:
    """The first call of a fresh compiled function (+ first backward in ``train``)."""
    f, values = functional(model)
    compiled = aot_function(f, compiler)
    return _seconds(lambda: compiled(*values, x), mode)


def eager_seconds(model, x, mode="train") -> float:
    f, values = functional(model)
    return _seconds(lambda: f(*values, x), mode)


def _first_call(fn, x) -> float:
    return _seconds(lambda: fn(x))


def warm_start_child(args) -> None:
    """One process of ``--warm-start``: ``populate`` compiles everything once;
    ``measure`` prints one JSON line of first-call times (seconds)."""
    import aotgrad
    from aotgrad import compilers as ours_compilers

    ours_cache = os.path.join(args.cache_root, "aotgrad")
    inductor_backend = aotgrad.backend(fw_compiler=ours_compilers.inductor, cache=ours_cache)
    torch._dynamo.config.automatic_dynamic_shapes = False
    # one-time process costs, on a throwaway model of its own
    throwaway = nn.Sequential(nn.Linear(5, 5), nn.Tanh())
    for backend in (inductor_backend, "inductor"):
        torch._dynamo.reset()
        _first_call(torch.compile(throwaway, backend=backend), torch.randn(2, 5))
    f, values = functional(throwaway)
    aotgrad.aot_function(f, ours_compilers.nop, cache=False)(*values, torch.randn(2, 5)).sum().backward()
    times = {}
    sides = args.sides.split(",")
    for name in args.models.split(","):
        model, x = make_model(name)
        f, values = functional(model)
        row = times[name] = {}
        if "nop" in sides:
            row["ours warm"] = first_call_seconds(
                lambda fn, c: aotgrad.aot_function(fn, c, cache=ours_cache), ours_compilers.nop, model, x)
        if "nop" in sides and args.child == "measure":
            row["ours cold"] = first_call_seconds(
                lambda fn, c: aotgrad.aot_function(fn, c, cache=False), ours_compilers.nop, model, x)
        for side, backend in (("ours inductor warm", inductor_backend), ("torch inductor warm", "inductor")):
            if side.rsplit(" ", 1)[0] not in sides:
                continue
            torch._dynamo.reset()
            model, x = make_model(name)
            row[side] = _first_call(torch.compile(model, backend=backend), x)
    print(json.dumps(times))


def warm_start(args) -> None:
    """The ``--warm-start`` table: a populating process, then ``--repeat`` measuring ones."""
    root = tempfile.mkdtemp(prefix="bench_warm_start_")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"),
               TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1")

    def child(kind, sides="nop,ours inductor,torch inductor"):
        cmd = [sys.executable, __file__, "--child", kind, "--cache-root", root, "--models", args.models,
               "--threads", str(args.threads), "--clock", args.clock, "--sides", sides]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    child("populate")
    print("  populated the caches", file=sys.stderr)
    runs = []
    for k in range(args.repeat):
        # one process per side: the first Dynamo compile of a model in a process pays one-time
        # costs (and loads Inductor's kernels) that a second side in the same process would not
        run: dict = {}
        for sides in ("nop", "ours inductor", "torch inductor"):
            for name, row in child("measure", sides).items():
                run.setdefault(name, {}).update(row)
        runs.append(run)
        print(f"  measured round {k + 1}/{args.repeat}", file=sys.stderr)
    sides = ["ours cold", "ours warm", "ours inductor warm", "torch inductor warm"]
    results = []
    for name in args.models.split(","):
        med = {side: statistics.median(run[name][side] for run in runs) * 1e3 for side in sides}
        results.append({"model": name, "ms": med,
                        "all_ms": {side: [run[name][side] * 1e3 for run in runs] for side in sides}})
    print(f"\nsecond process: first call + first backward, ms (median of {args.repeat} rounds, a process per side, "
          f"{args.clock} clock), torch.set_num_threads({args.threads})")
    rows = [[r["model"], fmt(r["ms"]["ours cold"]), fmt(r["ms"]["ours warm"]),
             fmt(ratio(r["ms"]["ours warm"], r["ms"]["ours cold"]), ".2f"),
             fmt(r["ms"]["ours inductor warm"]), fmt(r["ms"]["torch inductor warm"]),
             fmt(ratio(r["ms"]["ours inductor warm"], r["ms"]["torch inductor warm"]), ".2f")]
            for r in results]
    print_table(["model", "ours cold (nop)", "ours warm (nop)", "warm/cold",
                 "ours warm (inductor)", "torch warm (inductor)", "ours/torch"], rows)
    write_json(args.json, {"benchmark": "compile_time_warm_start", "unit": "ms", "repeat": args.repeat,
                           "clock": args.clock,
                           "results": results})


def main():
    def extra(p):
        p.add_argument("--repeat", type=int, default=5)
        p.add_argument("--models", default=",".join(MODELS))
        p.add_argument("--modes", default="train,infer",
                       help="train: first call + backward; infer: first call under no_grad")
        p.add_argument("--warm-start", action="store_true", help="second-process rows (see the docstring)")
        p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                       help="wall time (default) or the compiling thread's CPU time")
        p.add_argument("--child", choices=["populate", "measure"], help=__import__("argparse").SUPPRESS)
        p.add_argument("--cache-root", help=__import__("argparse").SUPPRESS)
        p.add_argument("--sides", default="nop,ours inductor,torch inductor", help=__import__("argparse").SUPPRESS)

    args = parse_args(__doc__.splitlines()[0], extra)
    global CLOCK
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    if args.child:
        return warm_start_child(args)
    if args.warm_start:
        return warm_start(args)
    ours_fn, why = ours_aot_function()
    from aotgrad import compilers as ours_compilers

    sides = {"torch": (torch_aot_function, torch_nop)}
    if ours_fn is not None:
        sides["ours"] = (ours_fn, ours_compilers.nop)

    results = []
    for mode in args.modes.split(","):
        for name in args.models.split(","):
            model, x = make_model(name)
            times = {k: [] for k in ("eager", "ours", "torch")}
            errors = {}
            # warm-up: the first trace in a process pays one-time dispatcher/import costs
            for side, (aot, comp) in list(sides.items()):
                try:
                    first_call_seconds(aot, comp, model, x, mode)
                except Exception as e:
                    errors[side] = f"{type(e).__name__}: {e}"
            live = {side: v for side, v in sides.items() if side not in errors}
            eager_seconds(model, x, mode)
            for _ in range(args.repeat):
                times["eager"].append(eager_seconds(model, x, mode))
                for side, (aot, comp) in live.items():
                    times[side].append(first_call_seconds(aot, comp, model, x, mode))
            med = {k: (statistics.median(v) * 1e3 if v else None) for k, v in times.items()}
            per_repeat = [o / t for o, t in zip(times["ours"], times["torch"])]
            results.append({"model": name, "mode": mode, "ms": med,
                            "all_ms": {k: [t * 1e3 for t in v] for k, v in times.items()},
                            "median_ratio": statistics.median(per_repeat) if per_repeat else None,
                            "errors": errors})
            print(f"  done {name} {mode}", file=sys.stderr)

    print(f"\nfirst call (train: + first backward; infer: under no_grad), ms (median of {args.repeat}, "
          f"{args.clock} clock), nop compilers, torch.set_num_threads({torch.get_num_threads()})")
    rows = [[r["model"], r["mode"], fmt(r["ms"]["eager"], ".2f"), fmt(r["ms"]["ours"]),
             fmt(r["ms"]["torch"]), fmt(ratio(r["ms"]["ours"], r["ms"]["torch"]), ".2f"),
             fmt(r["median_ratio"], ".2f")]
            for r in results]
    print_table(["model", "mode", "eager", "ours", "torch", "ours/torch", "(per repeat)"], rows)
    if ours_fn is None:
        print(f"\nours unavailable: {why}")
    for r in results:
        for side, msg in r["errors"].items():
            print(f"  {r['model']} {side} failed: {msg.splitlines()[0][:200]}")
    write_json(args.json, {"benchmark": "compile_time", "unit": "ms", "repeat": args.repeat, "clock": args.clock,
                           "results": results})


if __name__ == "__main__":
    main()
