"""Training loops through aotgrad match eager (issue 4, bullet 5).

Three tiny models (an MLP; a CNN with BatchNorm and Dropout; ``nn.TransformerEncoderLayer``,
which has dropout inside), each trained for ``STEPS`` steps with SGD (momentum) and with
AdamW, through ``aot_module`` and through ``torch.compile(backend=aotgrad)``, side by side
with an identical eager copy. Each step reseeds the global RNG before both forwards, so
dropout draws from the same generator state; the compiled graphs must consume it exactly
as eager does, which is checked directly (RNG state after each step) and through the losses.

Tolerance (documented in docs/user-guide.md too): float32 losses, parameters and buffers
agree with eager within ``rtol=1e-4, atol=1e-5`` after 20 steps. With the nop compiler the
graphs run eager's own kernels; the slack is for decompositions and for autograd summing
gradient contributions in a different order, which then compounds over steps.

After training, ``model.eval()`` + ``torch.no_grad()`` inference goes through the same
compiled object and must match eager's eval output.
"""

from __future__ import annotations

import copy
from typing import Callable

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from eager_compare import Counting
from torch import nn

from aotgrad.backend import aotgrad_backend
from aotgrad.compilers import nop
from aotgrad.module import aot_module

STEPS = 20
RTOL, ATOL = 1e-4, 1e-5


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(4 * 4 * 4, 4)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(x).flatten(1))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            d_model=8, nhead=2, dim_feedforward=16, dropout=0.1, batch_first=True
        )
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[torch.Generator], torch.Tensor]]] = {
    "mlp": (MLP, lambda g: torch.randn(6, 8, generator=g)),
    "cnn": (SmallCNN, lambda g: torch.randn(4, 1, 8, 8, generator=g)),
    "transformer": (Encoder, lambda g: torch.randn(3, 5, 8, generator=g)),
}
OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.01),
}


def _compile(model: nn.Module, path: str) -> nn.Module:
    if path == "aot_module":
        return aot_module(model, nop)
    torch._dynamo.reset()
    return torch.compile(model, backend=aotgrad_backend)


@pytest.mark.parametrize("path", ["aot_module", "torch_compile"])
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
@pytest.mark.parametrize("model_name", list(MODELS))
def test_training_matches_eager(model_name: str, opt_name: str, path: str) -> None:
    make_model, make_input = MODELS[model_name]
    torch.manual_seed(0)
    model = make_model()
    ref = copy.deepcopy(model)
    compiled = _compile(model, path)
    opt, ref_opt = OPTIMIZERS[opt_name](model.parameters()), OPTIMIZERS[opt_name](ref.parameters())
    data = torch.Generator().manual_seed(1)

    for step in range(STEPS):
        x = make_input(data)
        target = torch.randint(0, 4, (x.shape[0],), generator=data)
        losses, rng = [], []
        for m, o in ((compiled, opt), (ref, ref_opt)):
            torch.manual_seed(100 + step)  # same dropout draws for both
            o.zero_grad()
            loss = F.cross_entropy(m(x), target)
            loss.backward()
            o.step()
            losses.append(loss.detach())
            rng.append(torch.get_rng_state())
        _close(losses[0], losses[1], f"loss at step {step}")
        assert torch.equal(rng[0], rng[1]), f"step {step}: RNG consumed differently from eager"

    for (name, v), (_, v_ref) in zip(model.state_dict().items(), ref.state_dict().items()):
        _close(v, v_ref, f"after {STEPS} steps, {name}")

    # Inference through the same compiled object.
    compiled.eval()
    ref.eval()
    with torch.no_grad():
        x = make_input(data)
        out, out_ref = compiled(x), ref(x)
    assert not out.requires_grad
    _close(out, out_ref, "eval output")
    for (name, v), (_, v_ref) in zip(model.state_dict().items(), ref.state_dict().items()):
        _close(v, v_ref, f"after eval, {name}")  # eval must not touch running stats


def test_dropout_masks_equal_eager_under_fixed_seed() -> None:
    """The mask itself, not only the loss: same zeros, same scaling, several calls."""
    drop = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5))
    compiled = aot_module(drop, nop)
    x = torch.randn(8, 16)
    for seed in range(3):
        torch.manual_seed(seed)
        a = compiled(x)
        torch.manual_seed(seed)
        b = drop(x)
        assert torch.equal(a == 0, b == 0)
        _close(a, b, f"dropout output, seed {seed}")
    # Without reseeding, consecutive calls keep drawing fresh masks, as in eager.
    torch.manual_seed(7)
    a1, a2 = compiled(x), compiled(x)
    torch.manual_seed(7)
    b1, b2 = drop(x), drop(x)
    assert torch.equal(a1 == 0, b1 == 0) and torch.equal(a2 == 0, b2 == 0)
    assert not torch.equal(a1 == 0, a2 == 0)


def test_dropout_of_a_non_contiguous_tensor_draws_in_eager_memory_order() -> None:
    """Eager fills the mask in the *input's* memory order (``empty_like`` + ``bernoulli_``).
    ``nn.TransformerEncoderLayer(batch_first=True)`` applies dropout1 to a transposed
    attention output, so a contiguous mask there gives different losses from step 0."""

    def f(x):
        return F.dropout(x.t(), 0.5)

    from aotgrad.api import aot_function

    compiled = aot_function(f, nop)
    x = torch.randn(4, 6, requires_grad=True)
    torch.manual_seed(0)
    a = compiled(x)
    torch.manual_seed(0)
    b = f(x)
    assert torch.equal(a, b)


#: inputs whose batch (and, for the transformer, sequence length) changes every step
SIZED_INPUTS: dict[str, Callable[[torch.Generator, int], torch.Tensor]] = {
    "mlp": lambda g, k: torch.randn(4 + k % 5, 8, generator=g),
    "cnn": lambda g, k: torch.randn(2 + k % 4, 1, 8, 8, generator=g),
    "transformer": lambda g, k: torch.randn(3, 4 + k % 5, 8, generator=g),
}


@pytest.mark.parametrize("path", ["aot_module", "torch_compile"])
@pytest.mark.parametrize("model_name", list(MODELS))
def test_training_on_changing_sizes_matches_eager_and_compiles_once(model_name: str, path: str) -> None:
    """Dynamic shapes: a new size every step, losses and state as eager's; after the first
    two steps (torch.compile: Dynamo's static graph, then its dynamic one) nothing compiles."""
    from aotgrad.backend import backend

    make_model, _ = MODELS[model_name]
    torch.manual_seed(0)
    model = make_model()
    ref = copy.deepcopy(model)
    count = Counting()
    if path == "aot_module":
        compiled = aot_module(model, count, nop, dynamic=True)
    else:
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=backend(count, nop))
    opt, ref_opt = OPTIMIZERS["sgd"](model.parameters()), OPTIMIZERS["sgd"](ref.parameters())
    data = torch.Generator().manual_seed(1)
    compiles_after_two = None
    for step in range(8):
        x = SIZED_INPUTS[model_name](data, step)
        target = torch.randint(0, 4, (x.shape[0],), generator=data)
        losses = []
        for m, o in ((compiled, opt), (ref, ref_opt)):
            torch.manual_seed(100 + step)
            o.zero_grad()
            loss = F.cross_entropy(m(x), target)
            loss.backward()
            o.step()
            losses.append(loss.detach())
        _close(losses[0], losses[1], f"loss at step {step}")
        if step == 1:
            compiles_after_two = len(count.graphs)
    assert len(count.graphs) == compiles_after_two, f"{len(count.graphs) - compiles_after_two} compiles after step 2"
    if path == "aot_module":
        assert compiles_after_two == 1  # one symbolic entry from the first step on
    for (name, v), (_, v_ref) in zip(model.state_dict().items(), ref.state_dict().items()):
        _close(v, v_ref, f"after 8 steps, {name}")
    torch._dynamo.reset()
