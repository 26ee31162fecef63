"""aotgrad demo: train a small MLP through ``torch.compile(backend=...)`` and compare to eager.

Run it with ``python demo.py`` (see README.md for the one-command set-up; ``-v`` also turns
on aotgrad's INFO logging). It shows:

1. the forward and backward graphs aotgrad captures for the MLP (printed by a compiler in
   the style of :func:`aotgrad.compilers.print_graph`);
2. the ``ViewAndMutationMetadata`` table of the compiled MLP;
3. a few SGD steps side by side with an eager copy of the model (identical init, same
   data): losses and gradients, and their max abs difference;
4. an :func:`aotgrad.aot_function` example with an in-place input mutation and an output
   that is a view of an input, with its metadata and the eager-matching behaviour.

It exits non-zero when anything differs from eager, and prints ``LOSSES MATCH`` when the
losses and gradients agree.
"""

from __future__ import annotations

import copy
import logging
import sys
import time

import torch
from torch import nn

import aotgrad
from aotgrad import compilers
from aotgrad.backend import backend as make_backend

TOL = 1e-5
STEPS = 5


def banner(title: str) -> None:
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


def labelled_print_graph(label: str):
    """A compiler that prints the graph (like ``compilers.print_graph``) under a heading."""

    def compiler(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        print(f"--- {label} graph ({len(gm.graph.nodes)} nodes) ---")
        return compilers.print_graph(gm, example_inputs)

    return compiler


class MLP(nn.Module):
    def __init__(self, d_in: int = 8, d_hidden: int = 16, d_out: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def train_mlp() -> bool:
    banner("1. torch.compile(model, backend=\"aotgrad\") on a small MLP")
    print("torch.compile backend 'aotgrad' (registered by pip install):",
          torch._dynamo.lookup_backend("aotgrad"))

    torch.manual_seed(0)
    eager_model = MLP()
    # Two compiled copies with identical init:
    #  * "aotgrad": torch.compile(model, backend="aotgrad"), the registered backend (nop
    #    compiler: the captured graphs run op by op);
    #  * "inspect": the same backend class, built by aotgrad.backend's backend(...), with a
    #    compiler that prints each graph, wrapped so we keep what it returns (the
    #    aot_module_simplified callable) and can show its metadata afterwards.
    named_model = copy.deepcopy(eager_model)
    inspect_model = copy.deepcopy(eager_model)

    printing = make_backend(
        fw_compiler=labelled_print_graph("forward"),
        bw_compiler=labelled_print_graph("backward"),
    )
    compiled_forwards = []

    def inspecting_backend(gm: torch.fx.GraphModule, example_inputs: list):
        compiled = printing(gm, example_inputs)
        compiled_forwards.append(compiled)
        return compiled

    torch._dynamo.reset()
    runs = {
        "eager": (eager_model, eager_model),
        "aotgrad": (named_model, torch.compile(named_model, backend="aotgrad")),
        "inspect": (inspect_model, torch.compile(inspect_model, backend=inspecting_backend)),
    }
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.1) for k, (m, _) in runs.items()}
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(32, 8, generator=gen), torch.randn(32, 4, generator=gen))
            for _ in range(STEPS)]

    def grad_diff(a: nn.Module, b: nn.Module) -> float:
        return max(max_abs_diff(pa.grad, pb.grad) for pa, pb in zip(a.parameters(), b.parameters()))

    rows = []
    worst = 0.0
    for step, (x, y) in enumerate(data):
        losses = {}
        for name, (model, fwd) in runs.items():
            opts[name].zero_grad()
            loss = nn.functional.mse_loss(fwd(x), y)
            loss.backward()
            losses[name] = loss.detach()
        loss_d = max(max_abs_diff(losses["eager"], losses[k]) for k in ("aotgrad", "inspect"))
        grad_d = max(grad_diff(eager_model, runs[k][0]) for k in ("aotgrad", "inspect"))
        worst = max(worst, loss_d, grad_d)
        rows.append((step, losses["eager"].item(), losses["aotgrad"].item(),
                     losses["inspect"].item(), loss_d, grad_d))
        for opt in opts.values():
            opt.step()

    param_diff = max(
        max_abs_diff(pe, pa)
        for k in ("aotgrad", "inspect")
        for pe, pa in zip(eager_model.parameters(), runs[k][0].parameters())
    )
    worst = max(worst, param_diff)

    banner("2. ViewAndMutationMetadata of the compiled MLP")
    # The backend returned aot_module_simplified's callable; it keeps one aot_function
    # per module-state layout, and each aot_function one entry per specialisation.
    print("Graph inputs are what Dynamo passes: the lifted parameters and the batch x (the one")
    print("input with requires_grad=False). Nothing is mutated or aliased in an MLP.")
    for compiled in compiled_forwards:
        for _layout, aot_fn in compiled.entries.values():
            print(aot_fn)
            for entry in aot_fn.entries:
                print(entry)
                print(entry.metadata)

    banner(f"3. {STEPS} SGD steps: eager vs torch.compile(backend=aotgrad)")
    print(f"{'step':>4}  {'eager loss':>12}  {'aotgrad loss':>12}  {'inspect loss':>12}  "
          f"{'max |loss diff|':>15}  {'max |grad diff|':>15}")
    for step, le, la, li, dl, dg in rows:
        print(f"{step:>4}  {le:>12.6f}  {la:>12.6f}  {li:>12.6f}  {dl:>15.2e}  {dg:>15.2e}")
    print(f"max abs diff of parameters after {STEPS} steps: {param_diff:.2e}")
    print(f"Dynamo graphs handed to the inspecting backend: {len(compiled_forwards)}")
    ok = worst <= TOL
    print(f"max abs diff over losses, grads and params: {worst:.2e} (tolerance {TOL:g})")
    return ok


def aliasing_example() -> bool:
    banner("4. aot_function: an input mutated in place, an output that views an input")

    def fn(buf: torch.Tensor, x: torch.Tensor):
        buf.add_(1)            # in-place mutation of an input
        view = x.t()           # output that is a view of input x
        out = (x * buf).sum()  # ordinary output
        return view, out

    compiled = aotgrad.aot_function(
        fn,
        fw_compiler=labelled_print_graph("forward"),
        bw_compiler=labelled_print_graph("backward"),
    )

    def inputs():
        torch.manual_seed(2)
        return torch.zeros(2, 3), torch.randn(2, 3, requires_grad=True)

    buf_e, x_e = inputs()
    view_e, out_e = fn(buf_e, x_e)
    out_e.backward()

    buf_a, x_a = inputs()
    view_a, out_a = compiled(buf_a, x_a)
    out_a.backward()

    print(compiled.entries[0])
    print(compiled.metadata)
    print("Input 0 is buf (data mutated, outside autograd's view: written back with copy_ under")
    print("no_grad), input 1 is x. The functional forward returns buf's new value first; output 0")
    print("(x.t()) is regenerated at run time as a real view of the caller's x.")

    checks = {
        "out matches eager": torch.equal(out_e, out_a),
        "buf was mutated in place like eager": torch.equal(buf_e, buf_a),
        "view is a view of x (shares storage)":
            view_a._base is x_a and view_a.data_ptr() == x_a.data_ptr(),
        "view values/strides match eager":
            torch.equal(view_e, view_a) and view_e.stride() == view_a.stride(),
        "x.grad matches eager": torch.equal(x_e.grad, x_a.grad),
    }
    with torch.no_grad():  # mutate through the view: x changes, as in eager
        view_e.mul_(10)
        view_a.mul_(10)
    checks["writing through the view updates x like eager"] = torch.equal(x_e, x_a)
    for what, good in checks.items():
        print(f"  [{'ok' if good else 'MISMATCH'}] {what}")
    return all(checks.values())


def main() -> int:
    start = time.perf_counter()
    if "-v" in sys.argv[1:] or "--verbose" in sys.argv[1:]:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
        logging.getLogger("aotgrad").setLevel(logging.INFO)
    print(f"aotgrad {aotgrad.__version__}, torch {torch.__version__}")
    mlp_ok = train_mlp()
    alias_ok = aliasing_example()
    banner("Summary")
    print("LOSSES MATCH" if mlp_ok else "LOSSES DIFFER")
    print("ALIASING MATCHES" if alias_ok else "ALIASING DIFFERS")
    print(f"demo took {time.perf_counter() - start:.1f}s")
    return 0 if (mlp_ok and alias_ok) else 1


if __name__ == "__main__":
    sys.exit(main())
