"""aot_module / aot_module_simplified against eager (issue 4, bullets 1-3, 6, 7).

Every test builds a module, deep-copies it as the eager reference, and checks that the
compiled module's outputs, gradients, parameters and buffers equal the reference's. With the
nop compiler the compiled graphs run the same ATen kernels eager runs, so comparisons use a
tight tolerance (``_close``) rather than bitwise equality only to allow for decompositions.
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from eager_compare import Counting
from torch import nn

from aotgrad.compilers import nop
from aotgrad.module import AOTModule, aot_module, aot_module_simplified

RTOL, ATOL = 1e-5, 1e-6


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


def _state_close(m1: nn.Module, m2: nn.Module) -> None:
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert list(s1) == list(s2)
    for k in s1:
        torch.testing.assert_close(s1[k], s2[k], rtol=RTOL, atol=ATOL, msg=lambda m: f"{k}: {m}")


class CounterNet(nn.Module):
    """A linear layer plus a step counter buffer bumped in place by every forward."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.steps += 1
        return self.lin(x).relu()


# --- bullet 1: a module that shares state with the original ---------------------------------


def test_returns_module_sharing_parameters_and_state_dict():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 2))
    cm = aot_module(m, nop)
    assert isinstance(cm, nn.Module) and isinstance(cm, AOTModule)
    assert [id(p) for p in cm.parameters()] == [id(p) for p in m.parameters()]
    assert [id(b) for b in cm.buffers()] == [id(b) for b in m.buffers()]
    sd_c, sd_m = cm.state_dict(), m.state_dict()
    assert list(sd_c) == list(sd_m)
    assert all(sd_c[k] is sd_m[k] or torch.equal(sd_c[k], sd_m[k]) for k in sd_m)
    assert dict(cm.named_parameters()).keys() == dict(m.named_parameters()).keys()
    # load_state_dict through the wrapper lands in the original.
    new = {k: torch.randn_like(v.float()).to(v.dtype) for k, v in sd_m.items()}
    cm.load_state_dict(new)
    for k, v in m.state_dict().items():
        assert torch.equal(v, new[k])
    # Attribute lookup falls through to the original module's own attributes.
    m.note = "hello"
    assert cm.note == "hello" and cm.orig_module is m


@pytest.mark.parametrize("opt_on", ["original", "compiled"])
def test_optimizer_on_either_module_updates_both(opt_on):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))
    ref = copy.deepcopy(m)
    cm = aot_module(m, nop)
    opt = torch.optim.SGD((m if opt_on == "original" else cm).parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x = torch.randn(3, 4)
    for _ in range(3):
        opt.zero_grad()
        ref_opt.zero_grad()
        cm(x).square().sum().backward()
        ref(x).square().sum().backward()
        opt.step()
        ref_opt.step()
    _state_close(m, ref)
    _state_close(cm, ref)
    _close(cm(x), ref(x))


def test_parameters_are_read_at_call_time():
    """An optimizer step or a replaced parameter is seen without recompiling."""
    m = nn.Linear(3, 2)
    fw = Counting()
    cm = aot_module(m, fw, nop)
    x = torch.randn(2, 3)
    cm(x)
    with torch.no_grad():
        m.weight.mul_(2)
    _close(cm(x), m(x))
    m.weight = nn.Parameter(torch.randn(2, 3))
    _close(cm(x), m(x))
    assert len(fw.graphs) == 1


def test_gradients_match_eager_including_input_grad():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 6), nn.GELU(), nn.LayerNorm(6), nn.Linear(6, 1))
    ref = copy.deepcopy(m)
    cm = aot_module(m, nop)
    x = torch.randn(5, 4, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    out, out_r = cm(x), ref(xr)
    _close(out, out_r)
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    out_r.sum().backward()
    _close(x.grad, xr.grad)
    for (n, p), (_, pr) in zip(m.named_parameters(), ref.named_parameters()):
        _close(p.grad, pr.grad)


def test_tied_parameters_passed_once_and_grads_accumulate():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3, bias=False)
            self.b = nn.Linear(3, 3, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))

    torch.manual_seed(0)
    m = Tied()
    ref = copy.deepcopy(m)
    fw = Counting()
    cm = aot_module(m, fw, nop)
    x = torch.randn(2, 3)
    cm(x).sum().backward()
    ref(x).sum().backward()
    _close(m.a.weight.grad, ref.a.weight.grad)
    assert m.b.weight is m.a.weight
    n_placeholders = sum(1 for n in fw.graphs[0].graph.nodes if n.op == "placeholder")
    assert n_placeholders == 2  # one shared weight + x


def test_keyword_arguments():
    class KW(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x, *, scale=1.0, shift=None):
            y = self.lin(x) * scale
            return y if shift is None else y + shift

    m = KW()
    cm = aot_module(m, nop)
    x, s = torch.randn(2, 3), torch.randn(3)
    _close(cm(x), m(x))
    _close(cm(x, scale=2.0, shift=s), m(x, scale=2.0, shift=s))


def test_nested_inside_a_parent_module_keeps_state_dict_keys():
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    parent = nn.Sequential(nn.Linear(3, 3), inner)
    keys = list(parent.state_dict())
    parent[1] = aot_module(inner, nop)
    assert list(parent.state_dict()) == keys
    parent.eval()
    assert not inner.training and not inner[1].training
    parent.load_state_dict(parent.state_dict())


def test_deepcopy_gives_an_independent_compiled_module():
    torch.manual_seed(0)
    m = CounterNet()
    cm = aot_module(m, nop)
    x = torch.randn(2, 4)
    cm(x)
    cm2 = copy.deepcopy(cm)
    assert cm2.orig_module is not m
    cm2(x)
    cm2(x)
    assert int(m.steps) == 1 and int(cm2.orig_module.steps) == 3
    _close(cm2(x), m(x))


# --- bullet 2: buffer mutation in forward ----------------------------------------------------


def test_counter_buffer_mutated_in_place_is_written_back():
    m = CounterNet()
    cm = aot_module(m, nop)
    x = torch.randn(2, 4)
    for _ in range(5):
        cm(x).sum().backward()
    assert int(m.steps) == 5
    with torch.no_grad():
        cm(x)
    assert int(m.steps) == 6


def test_buffer_reassigned_in_forward_is_assigned_back():
    class Reassign(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", torch.zeros(3))

        def forward(self, x):
            self.total = self.total + x.detach().sum(0)
            return x * 2

    m, ref = Reassign(), Reassign()
    cm = aot_module(m, nop)
    for i in range(3):
        x = torch.full((2, 3), float(i))
        _close(cm(x), ref(x))
    _close(m.total, ref.total)
    assert "total" in m.state_dict()


def test_batchnorm_running_stats_match_eager_after_steps():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU())
    ref = copy.deepcopy(m)
    cm = aot_module(m, nop)
    opt, ref_opt = (torch.optim.SGD(mm.parameters(), lr=0.05) for mm in (m, ref))
    for step in range(6):
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step))
        for mod, o in ((cm, opt), (ref, ref_opt)):
            o.zero_grad()
            mod(x).square().mean().backward()
            o.step()
    _state_close(m, ref)
    assert int(m[1].num_batches_tracked) == 6


def test_buffers_untouched_by_compilation_itself():
    """Tracing runs on fake tensors: a compile must not advance buffers or the RNG."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
    ref = copy.deepcopy(m)
    cm = aot_module(m, nop)
    x = torch.randn(6, 4)
    torch.manual_seed(1)
    out = cm(x)
    state_after = torch.get_rng_state()
    torch.manual_seed(1)
    out_r = ref(x)
    assert torch.equal(state_after, torch.get_rng_state())
    _close(out, out_r)
    _state_close(m, ref)


# --- bullet 3: aot_module_simplified -----------------------------------------------------------


def test_aot_module_simplified_prepends_state():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5))
    ref = copy.deepcopy(m)
    fw = Counting()
    x = torch.randn(3, 4)
    f = aot_module_simplified(m, [x], fw, nop)
    assert not isinstance(f, nn.Module) and callable(f)
    out, out_r = f(x), ref(x)
    _close(out, out_r)
    placeholders = [n for n in fw.graphs[0].graph.nodes if n.op == "placeholder"]
    n_state = len(list(m.parameters())) + len(list(m.buffers()))
    assert len(placeholders) == n_state + 1
    out.sum().backward()
    out_r.sum().backward()
    _state_close(m, ref)
    _close(m[0].weight.grad, ref[0].weight.grad)


def test_aot_module_simplified_accepts_fake_example_inputs():
    from torch._subclasses.fake_tensor import FakeTensorMode

    m = nn.Linear(3, 2)
    fake_x = FakeTensorMode().from_tensor(torch.randn(4, 3))
    f = aot_module_simplified(m, [fake_x], nop)
    x = torch.randn(4, 3)
    _close(f(x), m(x))


def test_aot_module_simplified_rejects_wrong_example_arity():
    with pytest.raises(TypeError, match="example inputs do not fit"):
        aot_module_simplified(nn.Linear(3, 2), [torch.randn(1, 3), torch.randn(1, 3)], nop)


# --- bullet 6: recompilation -----------------------------------------------------------------


def test_recompiles_on_train_eval_switch_and_reuses_entries():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.3))
    ref = copy.deepcopy(m)
    fw = Counting()
    cm = aot_module(m, fw, nop)
    x = torch.randn(5, 4)
    torch.manual_seed(3)
    cm(x)
    n_train = len(fw.graphs)
    torch.manual_seed(3)
    ref(x)
    cm.eval()
    ref.eval()
    _close(cm(x), ref(x))  # eval: running stats, no dropout
    assert len(fw.graphs) == n_train + 1
    cm.train()
    ref.train()
    torch.manual_seed(4)
    out = cm(x)
    torch.manual_seed(4)
    _close(out, ref(x))
    assert len(fw.graphs) == n_train + 1  # the training entry is reused
    _state_close(m, ref)


def test_submodule_mode_change_alone_recompiles():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    fw = Counting()
    cm = aot_module(m, fw, nop)
    x = torch.randn(3, 4)
    cm(x)
    m[1].eval()  # only a child changes mode
    _close(cm(x), m(x))
    assert len(fw.graphs) == 2


def test_recompiles_on_input_metadata_change():
    m = nn.Linear(4, 2)
    fw = Counting()
    cm = aot_module(m, fw, nop)
    cm(torch.randn(3, 4))
    cm(torch.randn(3, 4))
    assert len(fw.graphs) == 1
    for x in (torch.randn(5, 4), torch.randn(4, 3).t(), torch.randn(3, 4, requires_grad=True)):
        _close(cm(x), m(x))
    assert len(fw.graphs) == 4
    with torch.no_grad():
        out = cm(torch.randn(3, 4))
    assert not out.requires_grad


def test_grad_mode_is_part_of_the_key():
    m = nn.Linear(3, 2)
    cm = aot_module(m, nop)
    x = torch.randn(2, 3)
    with torch.no_grad():
        assert not cm(x).requires_grad
    out = cm(x)
    assert out.requires_grad
    out.sum().backward()
    assert m.weight.grad is not None


# --- bullet 7: bad input ------------------------------------------------------------------------


def _snapshot_state(m: nn.Module) -> dict:
    return {k: (v, v.detach().clone()) for k, v in m.state_dict(keep_vars=True).items()}


def _assert_untouched(m: nn.Module, snap: dict) -> None:
    now = m.state_dict(keep_vars=True)
    assert list(now) == list(snap)
    for k, (obj, val) in snap.items():
        assert now[k] is obj, f"{k} was replaced"
        assert type(now[k]) in (torch.Tensor, nn.Parameter), f"{k} left as {type(now[k])}"
        assert torch.equal(now[k].detach(), val), f"{k} changed"


@pytest.mark.parametrize("call", ["too_many", "too_few", "bad_kwarg"])
def test_wrong_number_of_arguments(call):
    m = CounterNet()
    snap = _snapshot_state(m)
    cm = aot_module(m, nop)
    x = torch.randn(2, 4)
    args, kwargs = {"too_many": ((x, x), {}), "too_few": ((), {}), "bad_kwarg": ((x,), {"y": x})}[call]
    with pytest.raises(TypeError) as info:
        cm(*args, **kwargs)
    msg = str(info.value)
    _, line = inspect.getsourcelines(CounterNet.forward)
    assert "CounterNet.forward" in msg and f"{__file__}:{line}" in msg
    _assert_untouched(m, snap)
    _close(cm(x), m.lin(x).relu())  # still usable afterwards


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        y = self.bn(x)
        if y.sum() > 0:  # data-dependent Python control flow
            return y * 2
        return y


def test_data_dependent_control_flow_names_the_user_line():
    m = DataDependent()
    snap = _snapshot_state(m)
    cm = aot_module(m, nop)
    with pytest.raises(Exception) as info:
        cm(torch.randn(4, 3))
    lines, start = inspect.getsourcelines(DataDependent.forward)
    bad = start + next(i for i, s in enumerate(lines) if "if y.sum() > 0" in s)
    text = str(info.value) + "\n".join(getattr(info.value, "__notes__", []))
    assert f"{__file__}:{bad}" in text or f'File "{__file__}", line {bad}' in text, text
    assert "data" in text.lower()
    _assert_untouched(m, snap)


def test_not_a_module():
    with pytest.raises(TypeError, match="aot_function"):
        aot_module(lambda x: x, nop)


def test_batchnorm_cumulative_average_is_rejected_at_its_source_line():
    """momentum=None reads float(num_batches_tracked) in Python: data-dependent."""
    import torch.nn.modules.batchnorm as bn_src

    m = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6, momentum=None))
    snap = _snapshot_state(m)
    cm = aot_module(m, nop)
    with pytest.raises(Exception) as info:
        cm(torch.randn(8, 4))
    text = str(info.value) + "\n".join(getattr(info.value, "__notes__", []))
    assert bn_src.__file__ in text and "num_batches_tracked" in text, text
    _assert_untouched(m, snap)


def test_shared_submodule_frozen_params_and_dict_output():
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.Linear(3, 3)
            self.again = self.block  # the same submodule under two names
            self.frozen = nn.Linear(3, 3).requires_grad_(False)

        def forward(self, x):
            h = self.again(self.block(x))
            return {"out": self.frozen(h), "hidden": h}

    torch.manual_seed(0)
    m = Shared()
    ref = copy.deepcopy(m)
    cm = aot_module(m, nop)
    x = torch.randn(2, 3)
    out, out_r = cm(x), ref(x)
    assert isinstance(out, dict) and set(out) == {"out", "hidden"}
    _close(out["out"], out_r["out"])
    (out["out"].sum() + out["hidden"].sum()).backward()
    (out_r["out"].sum() + out_r["hidden"].sum()).backward()
    _close(m.block.weight.grad, ref.block.weight.grad)
    assert m.frozen.weight.grad is None and out["out"].grad_fn is not None
    assert list(cm.state_dict()) == list(ref.state_dict())


def test_reassigning_one_name_of_a_shared_buffer_leaves_the_other():
    class TwoNames(nn.Module):
        def __init__(self):
            super().__init__()
            shared = torch.zeros(2)
            self.register_buffer("a", shared)
            self.register_buffer("b", shared)

        def forward(self, x):
            self.a = self.a + 1
            return x + self.b

    m, ref = TwoNames(), TwoNames()
    cm = aot_module(m, nop)
    x = torch.randn(2)
    for _ in range(2):
        _close(cm(x), ref(x))
    _close(m.a, ref.a)
    _close(m.b, ref.b)
    assert torch.equal(m.b, torch.zeros(2))


@pytest.mark.parametrize("keep", [False, True])
def test_buffer_updates_on_the_inference_path(keep):
    """Training mode under no_grad: no autograd.Function, running stats still update."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    ref = copy.deepcopy(m)
    cm = aot_module(m, nop, keep_inference_input_mutations=keep)
    x = torch.randn(5, 3)
    with torch.no_grad():
        for _ in range(3):
            _close(cm(x), ref(x))
    _state_close(m, ref)
    assert int(m[1].num_batches_tracked) == 3


# --- the per-call state snapshot is cached: every way of changing the tree is still seen -----


class _ScaleShift(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("shift", torch.ones(3))

    def forward(self, x):
        return self.lin(x) + self.shift


def _run_both(cm, m, x):
    _close(cm(x), m(x))


@pytest.mark.parametrize(
    "change",
    [
        "reassign_param",
        "param_to_none_and_back",
        "swap_submodule",
        "apply_replaces_buffers",
        "direct_buffer_write",
        "del_and_readd_buffer",
        "replace_param_in_dict",
        "tie_then_untie",
        "child_eval",
    ],
)
@pytest.mark.parametrize("check", ["cpp_guard", "python_fingerprint"])
def test_cached_snapshot_sees_changes_of_the_module_tree(change, check, monkeypatch):
    import aotgrad.module_state as module_state

    if check == "python_fingerprint":
        monkeypatch.setattr(module_state, "state_guard", lambda modules: None)
    torch.manual_seed(0)
    m = _ScaleShift()
    cm = aot_module(m, nop)
    x = torch.randn(2, 3)
    for _ in range(2):  # the second call runs off the cached snapshot
        _run_both(cm, m, x)
    cache = cm._compiled_forward._cache
    assert (cache._guard is not None) == (check == "cpp_guard") and cache.valid()
    if change == "reassign_param":
        m.lin.weight = nn.Parameter(torch.randn(3, 3))
    elif change == "param_to_none_and_back":
        m.lin.bias = None
        _run_both(cm, m, x)
        m.lin.bias = nn.Parameter(torch.randn(3))
    elif change == "swap_submodule":
        m.lin = nn.Linear(3, 3)
    elif change == "apply_replaces_buffers":
        # Module._apply stores fn(buf) straight into _buffers: no registration hook runs.
        m._apply(lambda t: t.clone() * 3 if t.dim() == 1 and t is m.shift else t)
    elif change == "direct_buffer_write":
        m._buffers["shift"] = torch.full((3,), 5.0)
    elif change == "del_and_readd_buffer":
        del m.shift
        m.register_buffer("shift", torch.full((3,), -2.0))
    elif change == "replace_param_in_dict":
        # a plain dict write, no registration hook
        w = m.lin._parameters.pop("bias")
        m.lin._parameters["bias"] = nn.Parameter(w.detach() + 1)
    elif change == "tie_then_untie":
        m.b2 = m.lin.bias  # one parameter under two names
        _run_both(cm, m, x)
        m.b2 = nn.Parameter(torch.zeros(3))
    elif change == "child_eval":
        m.lin.eval()
    for _ in range(2):
        _run_both(cm, m, x)
    # gradients reach the current parameters
    cm(x).sum().backward()
    ref = copy.deepcopy(m)
    for p in ref.parameters():
        p.grad = None
    ref(x).sum().backward()
    for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
        assert (p.grad is None) == (q.grad is None), n
        if p.grad is not None:
            _close(p.grad, q.grad)


def test_reordered_sequential_children_are_seen():
    """``del seq[i]`` leaves an OrderedDict in ``_modules``, which move_to_end reorders in place."""
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3), nn.ReLU())
    cm = aot_module(seq, nop)
    x = torch.randn(2, 3)
    for _ in range(2):
        _close(cm(x), seq(x))
    del seq[3]
    for _ in range(2):
        _close(cm(x), seq(x))
    seq._modules.move_to_end(next(iter(seq._modules)))  # Linear first -> last
    for _ in range(2):
        _close(cm(x), seq(x))
