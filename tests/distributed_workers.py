"""Per-rank training programs for tests/test_distributed.py (and bench/distributed.py).

Each worker runs in its own process (``torch.multiprocessing`` spawn), joins a gloo group on
the loopback address, trains the same model N steps eagerly and through aotgrad under the
same wrapper (DDP or FSDP2), and saves what it observed (losses, full parameters, buffers,
compile counts) for the parent to compare. Module level, so spawn can import them.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

#: a collective that has not completed after this long fails (a dead peer, say)
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=30)


# --------------------------------------------------------------------------- models


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(16, 32), nn.GELU()), nn.Sequential(nn.Linear(32, 16), nn.Tanh())])
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


class Block(nn.Module):
    def __init__(self, dim: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 2, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim), nn.Dropout(dropout))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.blocks = nn.ModuleList([Block(16, dropout), Block(16, dropout)])
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        x = self.embed(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean(1))


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([
            nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()),
            nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()),
        ])
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean((2, 3)))


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[torch.Generator], torch.Tensor]]] = {
    "mlp": (MLP, lambda g: torch.randn(8, 16, generator=g)),
    "transformer": (Transformer, lambda g: torch.randn(4, 6, 8, generator=g)),
    "transformer_dropout": (lambda: Transformer(0.1), lambda g: torch.randn(4, 6, 8, generator=g)),
    "cnn": (CNN, lambda g: torch.randn(4, 3, 8, 8, generator=g)),
}


# --------------------------------------------------------------------------- wrappers


def _compiler_backend(backend: str) -> Any:
    import aotgrad.backend  # noqa: F401 - registers the torch.compile backends

    return backend


def wrap(model: nn.Module, how: str, backend: str, counter: dict) -> nn.Module:
    """``model`` distributed as ``how`` says; ``backend`` "eager" or a torch.compile backend
    name ("aotgrad", "aotgrad_inductor", "aot_eager", "inductor"); ``counter['graphs']`` counts
    the graphs aotgrad compiled."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    import aotgrad

    def counting(name: str):
        from torch._dynamo.backends.registry import lookup_backend

        inner = lookup_backend(name)

        def backend_fn(gm, example_inputs, **kw):
            counter["graphs"] = counter.get("graphs", 0) + 1
            return inner(gm, example_inputs, **kw)

        return backend_fn

    if backend != "eager":
        _compiler_backend(backend)
    if how == "ddp_aot_module":  # DistributedDataParallel(aot_module(model))
        if backend == "eager":
            return DDP(model)
        compiled = aotgrad.aot_module(model, aotgrad.nop)
        counter["graphs"] = 1
        return DDP(compiled)
    if how == "compile_ddp":  # torch.compile(DDP(model)): Dynamo's DDP optimizer splits at buckets
        # Buckets of 2 KiB (the first one too), so that these small models split into
        # several graphs as large ones do with DDP's 1 MiB / 25 MiB defaults.
        dist._DEFAULT_FIRST_BUCKET_BYTES = 2048
        ddp = DDP(model, bucket_cap_mb=2048 / 2**20)
        return ddp if backend == "eager" else torch.compile(ddp, backend=counting(backend))
    if how == "fsdp2":  # fully_shard per block, then the root; each block compiled first
        from torch.distributed.fsdp import fully_shard

        for i, block in enumerate(model.blocks):
            # compiled, then sharded: FSDP2's hooks run around the compiled block (Dynamo
            # does not trace into a module fully_shard already wrapped in 2.13)
            if backend != "eager":
                model.blocks[i] = block = torch.compile(block, backend=counting(backend))
            fully_shard(block)
        fully_shard(model)
        return model
    raise ValueError(how)


def _full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters (gathered when sharded) and buffers, by name."""
    out = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        name = name.replace("_orig_mod.", "").replace("module.", "").replace("_fsdp_wrapped_module.", "")
        full = t.full_tensor() if hasattr(t, "full_tensor") else t
        out[name] = full.detach().clone()
    return out


def train(model_name: str, how: str, backend: str, steps: int, rank: int) -> dict:
    """Train ``steps`` AdamW steps; every rank sees its own data, the same across backends."""
    make_model, make_batch = MODELS[model_name]
    torch.manual_seed(0)  # the same initial parameters on every rank and backend
    model = make_model()
    counter: dict = {}
    model = wrap(model, how, backend, counter)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.Generator().manual_seed(1000 + rank)
    torch.manual_seed(rank)  # dropout masks: per rank, the same for each backend
    losses = []
    step_times = []
    for _ in range(steps):
        x = make_batch(data)
        target = torch.randn(x.shape[0], 4, generator=data)
        start = time.perf_counter()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_times.append(time.perf_counter() - start)
        losses.append(loss.detach().clone())
    params = [n.replace("_orig_mod.", "").replace("module.", "") for n, _ in model.named_parameters()]
    return {"losses": torch.stack(losses), "state": _full_state(model), "params": params,
            "graphs": counter.get("graphs", 0), "step_times": step_times}


# --------------------------------------------------------------------------- process entry points


def init(rank: int, world_size: int, port: int) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
        timeout=COLLECTIVE_TIMEOUT,
    )


def compare_worker(rank: int, world_size: int, port: int, out_dir: str, jobs: list) -> None:
    """For each (model, how, backend, steps): train eagerly and with ``backend``; save both."""
    torch.set_num_threads(1)
    init(rank, world_size, port)
    try:
        results = {}
        for model_name, how, backend, steps in jobs:
            # One model per Dynamo state, as in a training script: a float attribute that
            # changes between models (MultiheadAttention's dropout) would otherwise turn into
            # a tensor input read with .item(), which aotgrad cannot trace yet.
            torch._dynamo.reset()
            eager = train(model_name, how, "eager", steps, rank)
            ours = train(model_name, how, backend, steps, rank)
            results[(model_name, how, backend)] = (eager, ours)
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def bench_worker(rank: int, world_size: int, port: int, out_dir: str, jobs: list) -> None:
    """For each (model, how, backend, steps): train and save the step times."""
    torch.set_num_threads(1)
    init(rank, world_size, port)
    try:
        times = {}
        for model_name, how, backend, steps in jobs:
            torch._dynamo.reset()
            times[(model_name, how, backend)] = train(model_name, how, backend, steps, rank)["step_times"]
        torch.save(times, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def dying_worker(rank: int, world_size: int, port: int, out_dir: str, jobs: list) -> None:
    """Rank 1 exits after one step; rank 0 goes on and must fail (not hang) in a collective."""
    torch.set_num_threads(1)
    init(rank, world_size, port)
    from torch.nn.parallel import DistributedDataParallel as DDP

    import aotgrad

    torch.manual_seed(0)
    model = DDP(aotgrad.aot_module(MLP(), aotgrad.nop))
    x = torch.randn(8, 16)
    for step in range(100):
        if rank == 1 and step == 1:
            os._exit(0)  # a killed process: no clean-up, no goodbye to the group
        try:
            model(x).sum().backward()
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            with open(os.path.join(out_dir, f"rank{rank}.err"), "w") as f:
                f.write(f"{type(exc).__name__}: {exc}")
            raise SystemExit(3)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(target: Callable, world_size: int, jobs: list, out_dir: str, timeout: float) -> list[int | None]:
    """Start ``world_size`` spawned processes running ``target(rank, world_size, port,
    out_dir, jobs)``; wait at most ``timeout`` seconds in all, then kill what still runs.
    Returns each rank's exit code (None: killed at the timeout)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=target, args=(r, world_size, port, out_dir, jobs), daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    codes: list[int | None] = []
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5)
            codes.append(None)
        else:
            codes.append(p.exitcode)
    return codes
