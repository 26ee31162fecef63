"""Dynamic shapes, ours vs torch's AOT Autograd, side by side in one process.

Part 1, training through ``torch.compile``: 20 steps, each on a new size (forward, backward,
SGD step), with ``backend=aotgrad.backend(nop)`` and with ``aot_eager`` (torch's AOT Autograd
with nop compilers); Dynamo recompiles once as dynamic after the first size change on both
sides. Reported: AOT compiles (forward graphs compiled; ours must equal aot_eager's) and
the total wall time of the 20 steps, ours/aot_eager.

  mlp          Linear(64, 128) + ReLU + Linear(128, 10), batch sizes 4..80
  transformer  nn.TransformerEncoderLayer(64, 4, 128, dropout=0), batch 4, sequence lengths 8..84

Part 2, per-call time of one entry called at a fixed size after warm-up (tiny tensors so
that overhead dominates), in µs: ours static, ours ``dynamic=True``, torch's
``aot_function(dynamic=True)``; training (forward + backward) and inference; and the
overhead of each (the call minus the compiled graphs run alone), with the ratios
dynamic/static and ours dynamic/torch dynamic of the overheads.

Part 3, compile time (first call + first backward of a fresh function) of a dynamic trace
vs a static one, ours and torch's, on the mlp, in ms.

    python bench/dynamic.py [--json out.json] [--steps 20] [--repeat 7]
"""

from __future__ import annotations

import statistics
import time

import torch
import torch._dynamo
from _common import (
    fmt,
    ours_aot_function,
    parse_args,
    print_table,
    ratio,
    time_interleaved,
    write_json,
)
from torch import nn
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import aot_function as torch_aot_function
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.compilers import nop as torch_nop


class Counter:
    """A nop forward compiler that counts the graphs it is given (boxed for torch's side)."""

    def __init__(self, boxed: bool) -> None:
        self.n = 0
        self.boxed = boxed

    def __call__(self, gm, example_inputs):
        self.n += 1
        return make_boxed_func(gm.forward) if self.boxed else gm


def _boxed_nop(gm, example_inputs):
    return make_boxed_func(gm.forward)


MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)),
            lambda k: torch.randn(4 + 4 * k, 64)),
    "transformer": (lambda: nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True),
                    lambda k: torch.randn(4, 8 + 4 * k, 64)),
}


def train_steps(side: str, model_name: str, steps: int) -> tuple[int, float]:
    """(forward graphs compiled, seconds for ``steps`` steps) of one side."""
    import aotgrad

    make_model, make_input = MODELS[model_name]
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = make_model()
    if side == "ours":
        fw = Counter(boxed=False)
        be = aotgrad.backend(fw, aotgrad.compilers.nop)
    else:
        fw = Counter(boxed=True)
        be = aot_autograd(fw_compiler=fw, bw_compiler=_boxed_nop)
    compiled = torch.compile(model, backend=be)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = [make_input(k) for k in range(steps)]
    t0 = time.perf_counter()
    for x in inputs:
        compiled(x).sum().backward()
        opt.step()
        opt.zero_grad()
    seconds = time.perf_counter() - t0
    torch._dynamo.reset()
    return fw.n, seconds


def _tiny(x, w):
    return (x * w).relu().sum(1)


def overhead(repeat: int) -> list[dict]:
    aot_function, _ = ours_aot_function()
    rows = []
    for mode in ("train", "infer"):
        rg = mode == "train"
        x = torch.randn(8, 4, requires_grad=rg)
        w = torch.randn(8, 4, requires_grad=rg)
        fns = {
            "static": aot_function(_tiny, lambda gm, _: gm),
            "dynamic": aot_function(_tiny, lambda gm, _: gm, dynamic=True),
            "torch": torch_aot_function(_tiny, torch_nop, dynamic=True),
        }
        if rg:
            calls = {k: (lambda f=f, x=x, w=w: f(x, w).sum().backward()) for k, f in fns.items()}
        else:
            calls = {k: (lambda f=f, x=x, w=w: f(x, w)) for k, f in fns.items()}
        for call in calls.values():
            call()
        assert len(fns["dynamic"].entries) == 1 and fns["dynamic"].entries[0].guard.shape_guard is not None
        calls["graph static"] = _graphs_alone(fns["static"].entries[0], x, w)
        calls["graph dynamic"] = _graphs_alone(fns["dynamic"].entries[0], x, w)
        t = time_interleaved(calls, number=300, repeat=repeat)
        rows.append({"mode": mode, **{k: v * 1e6 for k, v in t.items()}})
    return rows


def _graphs_alone(entry, x, w):
    """The entry's compiled graphs run directly on detached inputs (forward, then backward
    on the saved values and ones as tangents): what the call costs without any runtime."""
    x, w = x.detach(), w.detach()
    if not entry.training:
        g = entry.graphs["inference"].forward
        return lambda: g(x, w)
    fw, bw, sig = entry.graphs["forward"].forward, entry.graphs["backward"].forward, entry.signature
    outs = fw(x, w)
    tangents = [torch.ones_like(outs[p]) for p in sig.tangents]

    def run():
        outs = fw(x, w)
        bw(*outs[sig.saved_tensor_slice], *outs[sig.saved_symint_slice], *tangents)

    return run


def compile_times(repeat: int) -> dict:
    import aotgrad

    make_model, make_input = MODELS["mlp"]
    model = make_model()
    params = {k: v.detach().requires_grad_() for k, v in model.named_parameters()}

    def fn(p, x):
        return torch.func.functional_call(model, p, (x,)).sum()

    def first_call(side: str, dynamic: bool) -> float:
        f = lambda p, x: fn(p, x)
        if side == "ours":
            compiled = aotgrad.aot_function(f, lambda gm, _: gm, dynamic=dynamic)
        else:
            compiled = torch_aot_function(f, torch_nop, dynamic=dynamic)
        x = make_input(3)
        t0 = time.perf_counter()
        compiled(params, x).backward()
        return time.perf_counter() - t0

    out = {}
    for side in ("ours", "torch"):
        for dynamic in (False, True):
            out[(side, dynamic)] = statistics.median(first_call(side, dynamic) for _ in range(repeat)) * 1e3
    return out


def main() -> None:
    args = parse_args(__doc__, lambda p: (p.add_argument("--steps", type=int, default=20),
                                          p.add_argument("--repeat", type=int, default=7)))
    payload: dict = {"train": [], "overhead": [], "compile_ms": {}}

    print(f"Part 1: {args.steps} training steps through torch.compile, each on a new size")
    rows = []
    for side in ("torch", "ours"):  # warm-up: Dynamo's own first-use costs are paid here, by neither row
        train_steps(side, "mlp", 3)
    for name in MODELS:
        n_ours, t_ours = train_steps("ours", name, args.steps)
        n_torch, t_torch = train_steps("torch", name, args.steps)
        rows.append([name, str(n_ours), str(n_torch), fmt(t_ours, ".2f"), fmt(t_torch, ".2f"), fmt(ratio(t_ours, t_torch), ".2f")])
        payload["train"].append({"model": name, "compiles_ours": n_ours, "compiles_aot_eager": n_torch,
                                 "seconds_ours": t_ours, "seconds_aot_eager": t_torch})
    print_table(["model", "compiles ours", "aot_eager", "wall s ours", "aot_eager", "ours/aot_eager"], rows)

    print("\nPart 2: per-call time of one entry at a fixed size, µs (median of repeats)")
    rows = []
    for r in overhead(args.repeat):
        # overhead: the call minus its graphs alone (torch's against our dynamic graphs: the
        # same ops)
        o_static, o_dyn, o_torch = r["static"] - r["graph static"], r["dynamic"] - r["graph dynamic"], r["torch"] - r["graph dynamic"]
        rows.append([r["mode"], fmt(r["static"]), fmt(r["dynamic"]), fmt(r["torch"]), fmt(r["graph dynamic"]),
                     fmt(o_static), fmt(o_dyn), fmt(o_torch),
                     fmt(ratio(o_dyn, o_static), ".2f"), fmt(ratio(o_dyn, o_torch), ".2f")])
        payload["overhead"].append({**r, "overhead_static": o_static, "overhead_dynamic": o_dyn, "overhead_torch": o_torch})
    print_table(["mode", "ours static", "ours dynamic", "torch dynamic", "graphs", "overhead static", "dynamic",
                 "torch dynamic", "dyn/static", "ours dyn/torch dyn"], rows)

    print("\nPart 3: compile time (first call + backward), mlp, ms (median)")
    c = compile_times(max(3, args.repeat // 2))
    rows = [[side, fmt(c[(side, False)]), fmt(c[(side, True)]), fmt(ratio(c[(side, True)], c[(side, False)]), ".2f")]
            for side in ("ours", "torch")]
    rows.append(["ours/torch", fmt(ratio(c[("ours", False)], c[("torch", False)]), ".2f"),
                 fmt(ratio(c[("ours", True)], c[("torch", True)]), ".2f"), ""])
    print_table(["side", "static", "dynamic", "dynamic/static"], rows)
    payload["compile_ms"] = {f"{s}_{'dynamic' if d else 'static'}": v for (s, d), v in c.items()}
    write_json(args.json, payload)


if __name__ == "__main__":
    main()
