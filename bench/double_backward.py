"""Time of one WGAN-GP critic step (gradient penalty: a double backward), side by side.

    python bench/double_backward.py [--steps 30] [--repeat 5] [--json out.json]

The step: critic on real and fake batches, the gradient of the critic's output with respect
to interpolated inputs taken with ``create_graph=True``, the penalty ``(|grad| - 1)^2``,
``loss.backward()`` (a second derivative through the critic), an Adam step. Sides:

- **eager** — the critic as is.
- **aotgrad nop** — ``aotgrad.aot_module(critic, nop)``: the graphs run op by op.
- **aotgrad inductor** — ``aot_module`` with Inductor compiling the forward, backward and
  the differentiable backward's own graphs.
- **torch aot_eager** — ``torch.compile(backend="aot_eager")``: torch's AOT Autograd raises
  on double backward, so its row says so instead of a time.

Ratios are against eager, measured interleaved in one process; the first step (which traces
and compiles, including the differentiable backward) is reported apart.
"""

from __future__ import annotations

import copy
import time

import torch
import torch._dynamo
from _common import (
    environment,
    fmt,
    parse_args,
    print_table,
    ratio,
    time_interleaved,
    write_json,
)
from torch import nn


def make_critic() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.LeakyReLU(0.2), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1))


def make_step(fn, params):
    opt = torch.optim.Adam(params, lr=1e-4, betas=(0.5, 0.9))
    g = torch.Generator().manual_seed(1)
    real, fake = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g) + 1
    eps = torch.rand(64, 1, generator=g)

    def step():
        x_hat = (eps * real + (1 - eps) * fake).requires_grad_()
        (grad,) = torch.autograd.grad(fn(x_hat).sum(), x_hat, create_graph=True)
        penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        loss = fn(fake).mean() - fn(real).mean() + 10 * penalty
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def sides() -> dict:
    import aotgrad
    from aotgrad.compilers import inductor

    out = {}
    base = make_critic()
    for name in ("eager", "aotgrad nop", "aotgrad inductor", "torch aot_eager"):
        model = copy.deepcopy(base)
        if name == "eager":
            fn = model
        elif name == "aotgrad nop":
            fn = aotgrad.aot_module(model, aotgrad.nop)
        elif name == "aotgrad inductor":
            fn = aotgrad.aot_module(model, inductor)
        else:
            fn = torch.compile(model, backend="aot_eager")
        out[name] = make_step(fn, list(model.parameters()))
    return out


def main() -> None:
    args = parse_args(__doc__, lambda p: (p.add_argument("--steps", type=int, default=20),
                                          p.add_argument("--repeat", type=int, default=5)))
    torch._dynamo.reset()
    steps = sides()
    first, errors = {}, {}
    for name, step in list(steps.items()):
        t0 = time.perf_counter()
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - a side that cannot run the program is reported
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
            steps[name] = None
        first[name] = time.perf_counter() - t0
    runs: dict = {}
    times = time_interleaved(steps, number=args.steps, repeat=args.repeat, warmup=2, runs_out=runs)
    eager = times["eager"]
    rows = []
    for name, t in times.items():
        rows.append([
            name, fmt(None if t is None else t * 1e3, ".2f"), fmt(ratio(t, eager), ".2f"),
            fmt(first[name], ".2f") if name not in errors else "n/a", errors.get(name, ""),
        ])
    print(f"WGAN-GP critic step (batch 64, 64-256-256-1 MLP), threads={torch.get_num_threads()}")
    print_table(["side", "ms/step", "/eager", "first step s", "note"], rows)
    write_json(args.json, {"times_s": times, "first_step_s": first, "errors": errors, "runs": runs,
                           "environment": environment()})


if __name__ == "__main__":
    main()
