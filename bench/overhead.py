"""Per-call overhead of the compiled callable, ours vs torch's AOT Autograd (nop compilers).

For each case, in training (some input requires grad) and inference (none does, or the call
runs under ``no_grad``), times per call, in microseconds:

  eager   the function itself, run eagerly
  ours    ``aotgrad.aot_function(fn, nop)`` (``aot_module`` for the module case)
  torch   ``torch._functorch.aot_autograd.aot_function(fn, nop)`` (torch's ``nop``)
  graph   the traced graph(s) alone: our forward graph's ``.forward`` on flat inputs (and,
          for fw+bw, our backward graph's ``.forward`` on the saved tensors and tangents)
  floor   what any correct runtime pays: ``graph`` + ``copy_`` of each mutated input's new
          value + (training) one plain ``autograd.Function`` around the graphs, whose
          backward accumulates the ``.grad`` of every input

and the ratio ours/torch (of the medians; "(min)" is the same ratio of the fastest repeats,
steadier when the machine is shared), and each wrapper's own cost above the floor
(ours-floor, torch-floor; can come out slightly negative from noise). ``floor/torch`` is the
lowest ours/torch any correct runtime over our graphs could reach on that row. Training rows are reported twice: the forward call alone ("fw") and forward
plus ``torch.autograd.backward`` of the first output ("fw+bw"). Tensors are tiny so that
overhead, not arithmetic, dominates. ``graph`` and ``floor`` use our graphs (torch's when
ours are unavailable; the column header says which).

    python bench/overhead.py [--json out.json] [--cases a,b] [--profile CASE[:MODE]]
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from _common import (
    fmt, ours_aot_function, ours_aot_module, parse_args, print_table, ratio,
    time_interleaved, time_per_call, write_json,
)

import torch
import torch.nn as nn
from torch._functorch.aot_autograd import aot_function as torch_aot_function
from torch._functorch.aot_autograd import aot_module as torch_aot_module
from torch._functorch.compilers import nop as torch_nop
from torch._functorch.aot_autograd import make_boxed_func


# --------------------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------------------


@dataclass
class Setup:
    fn: Callable                      # what is compiled (function or module)
    args: tuple                       # the call's arguments
    n_mutated: int                    # inputs the function mutates
    is_module: bool = False
    grad_enabled: bool = True         # grad mode for every call (False: under no_grad)
    note: str = ""


def _leaves(n, shape=(2,), requires_grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g).requires_grad_(requires_grad) for _ in range(n)]


def case_one_input(train):
    def f(x):
        return x * 2

    return Setup(f, tuple(_leaves(1, requires_grad=train)), 0)


def _stack_with_mutations(n, n_mut, train):
    def f(*xs):
        for b in xs[n - n_mut:]:
            b.add_(1)
        return torch.stack(xs[: n - n_mut]).sum(0)

    xs = _leaves(n - n_mut, requires_grad=train) + _leaves(n_mut, seed=1)
    return Setup(f, tuple(xs), n_mut)


def case_200_inputs_2_mutated(train):
    return _stack_with_mutations(200, 2, train)


def case_500_inputs_3_mutated(train):
    return _stack_with_mutations(500, 3, train)


def case_10_outputs_alias_inputs(train):
    def f(*xs):
        return (torch.stack(xs).sum(0), *[x.view(-1) for x in xs[:10]])

    return Setup(f, tuple(_leaves(200, shape=(1, 2), requires_grad=train)), 0)


def case_outputs_alias_intermediate(train):
    def f(x):
        t = x * 2
        return t.view(-1), t.t(), t[0]

    return Setup(f, tuple(_leaves(1, shape=(2, 3), requires_grad=train)), 0)


def case_synthetic_base(train):
    def f(a, b, w):
        a.add_(1)  # a and b overlap: needs a synthetic base
        return (b + w) * 2

    base = torch.zeros(4, 4)
    w = _leaves(1, shape=(3, 4), requires_grad=train)[0]
    return Setup(f, (base[0:3], base[1:4], w), 1)


def case_module_100_params(train):
    torch.manual_seed(0)
    mod = nn.Sequential(*[nn.Linear(2, 2) for _ in range(50)])  # 100 parameters
    x = torch.randn(1, 2)
    return Setup(mod, (x,), 0, is_module=True, grad_enabled=train,
                 note="" if train else "under no_grad")


CASES = {
    "a": ("1 input", case_one_input),
    "b": ("200 inputs, 2 mutated", case_200_inputs_2_mutated),
    "c": ("200 inputs, 10 outs alias inputs", case_10_outputs_alias_inputs),
    "d": ("3 outs alias an intermediate", case_outputs_alias_intermediate),
    "e": ("synthetic base (2 views, 1 mutated)", case_synthetic_base),
    "f": ("500 inputs, 3 mutated", case_500_inputs_3_mutated),
    "g": ("module, 100 params", case_module_100_params),
}


# --------------------------------------------------------------------------------------
# the sides
# --------------------------------------------------------------------------------------


class Recorder:
    """A nop compiler (returns the graph module) that remembers what it compiled."""

    def __init__(self, boxed=False):
        self.graphs: dict[str, list] = {}
        self.boxed = boxed  # torch's runtime wants boxed callables (else it warns)

    def make(self, kind):
        def compiler(gm, example_inputs):
            self.graphs.setdefault(kind, []).append((gm, list(example_inputs)))
            return make_boxed_func(gm) if self.boxed else gm

        return compiler

    def last(self, kind):
        got = self.graphs.get(kind)
        return got[-1] if got else None


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _step(call, train_bw):
    """fw only, or fw + backward of the first output with a preallocated grad."""
    if not train_bw:
        return call
    grad = {}

    def step():
        out = _first(call())
        g = grad.get("g")
        if g is None:
            g = grad["g"] = torch.ones_like(out)
        torch.autograd.backward(out, g)

    return step


def _real_like(fake) -> Any:
    if not isinstance(fake, torch.Tensor):
        return fake
    t = torch.empty_strided(tuple(fake.shape), tuple(fake.stride()), dtype=fake.dtype)
    return t.normal_() if t.is_floating_point() else t.zero_()


def _placeholders(gm):
    return list(gm.graph.find_nodes(op="placeholder"))


def _graph_sides(rec: Recorder, setup: Setup, train: bool, train_bw: bool):
    """(graph-alone callable, floor callable), built from the recorded graphs."""
    fw_kind = "fw" if train else "inf"
    got = rec.last(fw_kind)
    if got is None:
        return None, None
    fw_gm, fw_ex = got
    fw = fw_gm.forward
    inputs = [_real_like(x) for x in fw_ex]
    sample = fw(*inputs)
    n_out = len(sample)
    mut_dsts = [torch.empty_like(o) for o in sample[: setup.n_mutated]]
    pairs = list(zip(mut_dsts, range(setup.n_mutated)))

    if not train:
        def graph_alone():
            return fw(*inputs)

        def floor_inference():
            outs = fw(*inputs)
            for dst, i in pairs:
                dst.copy_(outs[i])
            return outs

        return graph_alone, floor_inference

    got = rec.last("bw")
    if got is None:
        return None, None
    bw_gm, bw_ex = got
    bw = bw_gm.forward
    phs = _placeholders(bw_gm)
    tangent_pos = [i for i, n in enumerate(phs) if "tangents" in n.name]
    n_saved = len(phs) - len(tangent_pos)
    tangents = [_real_like(bw_ex[i]) for i in tangent_pos]
    first_saved = n_out - n_saved

    if train_bw:
        def graph_alone():
            outs = fw(*inputs)
            return bw(*outs[first_saved:], *tangents)
    else:
        def graph_alone():
            return fw(*inputs)

    grads_sample = bw(*sample[first_saved:], *tangents)
    leaves = [
        x.detach().requires_grad_(g is not None) if isinstance(x, torch.Tensor) else x
        for x, g in zip(inputs, grads_sample)
    ]
    user_out = setup.n_mutated

    class Floor(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *prims):
            outs = fw(*prims)
            for dst, i in pairs:
                dst.copy_(outs[i])
            ctx.save_for_backward(*outs[first_saved:])
            return outs[user_out]

        @staticmethod
        def backward(ctx, grad):
            return tuple(bw(*ctx.saved_tensors, *tangents))

    g = torch.ones_like(sample[user_out])

    if not train_bw:
        return graph_alone, (lambda: Floor.apply(*leaves))

    def floor():
        torch.autograd.backward(Floor.apply(*leaves), g)

    return graph_alone, floor


@dataclass
class Row:
    case: str
    desc: str
    mode: str
    us: dict = field(default_factory=dict)
    graph_source: str = ""
    errors: dict = field(default_factory=dict)
    min_us: dict = field(default_factory=dict)  # the fastest repeat, per side
    calls_per_repeat: int = 0


def _compile_sides(setup: Setup, rec: Recorder):
    """Compiled callables: ours (recording nop) and torch's (its nop); None + error if not."""
    errors = {}
    ours = theirs = None
    if setup.is_module:
        aot_module, why = ours_aot_module()
        if aot_module is None:
            errors["ours"] = why
        else:
            try:
                ours = aot_module(setup.fn, rec.make("fw"), rec.make("bw"),
                                  inference_compiler=rec.make("inf"))
            except Exception as e:
                errors["ours"] = f"{type(e).__name__}: {e}"
        theirs = torch_aot_module(setup.fn, torch_nop)
    else:
        aot_function, why = ours_aot_function()
        if aot_function is None:
            errors["ours"] = why
        else:
            ours = aot_function(setup.fn, rec.make("fw"), rec.make("bw"),
                                inference_compiler=rec.make("inf"))
        theirs = torch_aot_function(setup.fn, torch_nop)
    return ours, theirs, errors


def _bind(f, args):
    return lambda: f(*args)


def measure_case(key: str, train: bool, number_scale: float, repeat: int) -> list[Row]:
    desc, make = CASES[key]
    setup = make(train)
    mode_name = "train" if train else "infer"
    rows = []
    grad_ctx = torch.enable_grad() if setup.grad_enabled else torch.no_grad()
    with grad_ctx:
        ours_rec, torch_rec = Recorder(), Recorder(boxed=True)
        ours_fn, torch_fn, errors = _compile_sides(setup, ours_rec)
        # the graphs for the graph/floor columns: ours, else torch's traced separately
        graph_rec, graph_source = ours_rec, "ours"

        sides_call = {"eager": setup.fn, "ours": ours_fn, "torch": torch_fn}
        phases = [("fw", False), ("fw+bw", True)] if train else [("", False)]
        # compile (and run backward once) before timing anything
        for name, f in list(sides_call.items()):
            if f is None:
                continue
            try:
                _step(_bind(f, setup.args), train)()
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {e}"
                sides_call[name] = None
        if ours_rec.last("fw" if train else "inf") is None:
            graph_source = "torch"
            graph_rec = torch_rec
            probe = (torch_aot_module(setup.fn, torch_rec.make("fw"), torch_rec.make("bw"),
                                      inference_compiler=torch_rec.make("inf"))
                     if setup.is_module else
                     torch_aot_function(setup.fn, torch_rec.make("fw"), torch_rec.make("bw"),
                                        inference_compiler=torch_rec.make("inf")))
            _step(_bind(probe, setup.args), train)()

        # the number of calls per repeat: aim at ~50 ms per repeat of the eager side
        t_eager = time_per_call(_step(_bind(setup.fn, setup.args), train), number=5, repeat=1)
        number = max(20, min(2000, int(number_scale * 0.05 / max(t_eager, 1e-6))))

        for phase, bw in phases:
            fns = {name: (_step(_bind(f, setup.args), bw) if f is not None else None)
                   for name, f in sides_call.items()}
            try:
                g_alone, floor = _graph_sides(graph_rec, setup, train, bw)
            except Exception as e:
                g_alone = floor = None
                errors["graph"] = f"{type(e).__name__}: {e}"
            fns["graph"], fns["floor"] = g_alone, floor
            runs: dict = {}
            secs = time_interleaved(fns, number=number, repeat=repeat, runs_out=runs)
            row = Row(key, desc, f"{mode_name} {phase}".strip(), graph_source=graph_source,
                      errors=dict(errors))
            row.us = {k: (v * 1e6 if v is not None else None) for k, v in secs.items()}
            row.min_us = {k: min(v) * 1e6 for k, v in runs.items()}
            row.calls_per_repeat = number
            rows.append(row)
    return rows


def profile_case(spec: str, number: int = 2000) -> None:
    key, _, mode = spec.partition(":")
    train = mode != "infer"
    bw = mode in ("", "train", "fw+bw")
    desc, make = CASES[key]
    setup = make(train)
    with (torch.enable_grad() if setup.grad_enabled else torch.no_grad()):
        ours, _, errors = _compile_sides(setup, Recorder())
        if ours is None:
            print("ours unavailable:", errors)
            return
        step = _step(_bind(ours, setup.args), bw)
        step()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(number):
            step()
        prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    print(f"cProfile of ours, case {key} ({desc}), {'train' if train else 'infer'}"
          f"{' fw+bw' if bw else ''}, {number} calls, sorted by tottime:")
    print(s.getvalue())


def main():
    def extra(p):
        p.add_argument("--cases", default=",".join(CASES), help="comma-separated case keys")
        p.add_argument("--repeat", type=int, default=7)
        p.add_argument("--scale", type=float, default=1.0, help="scale the calls per repeat")
        p.add_argument("--profile", metavar="CASE[:MODE]",
                       help="cProfile our side on one case (MODE: train, fw, infer) and exit")

    args = parse_args(__doc__.splitlines()[0], extra)
    if args.profile:
        profile_case(args.profile)
        return
    rows: list[Row] = []
    for key in args.cases.split(","):
        for train in (True, False):
            rows.extend(measure_case(key, train, args.scale, args.repeat))
            print(f"  done {key} {'train' if train else 'infer'}", file=sys.stderr)

    sources = {r.graph_source for r in rows}
    src = "/".join(sorted(sources))
    print(f"\nper-call time in µs (median of {args.repeat} repeats), "
          f"torch.set_num_threads({torch.get_num_threads()}); graph/floor from {src} graphs")
    headers = ["case", "mode", "eager", "ours", "torch", "graph", "floor", "ours/torch",
               "(min)", "floor/torch", "ours-floor", "torch-floor"]
    table = []
    for r in rows:
        u = r.us
        floor = u.get("floor")
        table.append([
            f"{r.case} {r.desc}", r.mode, fmt(u.get("eager")), fmt(u.get("ours")),
            fmt(u.get("torch")), fmt(u.get("graph")), fmt(floor),
            fmt(ratio(u.get("ours"), u.get("torch")), ".2f"),
            fmt(ratio(r.min_us.get("ours"), r.min_us.get("torch")), ".2f"),
            fmt(ratio(floor, u.get("torch")), ".2f"),
            fmt(None if u.get("ours") is None or floor is None else u["ours"] - floor),
            fmt(None if u.get("torch") is None or floor is None else u["torch"] - floor),
        ])
    print_table(headers, table)
    errs = {(r.case, r.mode): r.errors for r in rows if r.errors}
    if errs:
        print("\nunavailable / failed:")
        seen = set()
        for (case, mode), e in errs.items():
            for side, msg in e.items():
                line = f"  {case} {side}: {msg.splitlines()[0][:160]}"
                if line not in seen:
                    seen.add(line)
                    print(line)
    write_json(args.json, {
        "benchmark": "overhead",
        "unit": "us per call",
        "repeat": args.repeat,
        "rows": [r.__dict__ for r in rows],
    })


if __name__ == "__main__":
    main()
