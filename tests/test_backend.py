"""The torch.compile backend (issue 4, bullet 4).

What Dynamo of torch 2.13 hands a backend was checked and is pinned down here: an FX graph
per graph break, *real* example tensors with parameters/buffers lifted to graph inputs (the
default ``inline_inbuilt_nn_modules``), GraphModule-owned parameters when inlining is off,
and SymInts for dynamic sizes. Each shape is run against eager.
"""

from __future__ import annotations

import copy
import importlib
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch import nn

import aotgrad
from aotgrad import compilers
from aotgrad.backend import AotgradBackend, aotgrad_backend, aotgrad_inductor_backend
from aotgrad.backend import backend as make_backend

ROOT = Path(__file__).resolve().parents[1]
RTOL, ATOL = 1e-5, 1e-6


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Recorder:
    """A backend wrapper recording what Dynamo passes, then delegating to aotgrad's."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple[torch.fx.GraphModule, list]] = []

    def __call__(self, gm, example_inputs):
        self.calls.append((gm, list(example_inputs)))
        return self.inner(gm, example_inputs)


class Counting:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm


# --- registration ----------------------------------------------------------------------------


def _declared_entry_points() -> dict[str, str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return meta["project"]["entry-points"]["torch_dynamo_backends"]


def test_entry_points_declared_in_pyproject_resolve():
    eps = _declared_entry_points()
    assert eps == {
        "aotgrad": "aotgrad.backend:aotgrad_backend",
        "aotgrad_inductor": "aotgrad.backend:aotgrad_inductor_backend",
    }
    for target in eps.values():
        mod, attr = target.split(":")
        assert callable(getattr(importlib.import_module(mod), attr))


def test_backend_string_works_after_install(tmp_path):
    """Simulate ``pip install``: a dist-info whose entry_points.txt is pyproject's table.

    pip writes exactly this file; Dynamo discovers backends through
    ``importlib.metadata.entry_points(group="torch_dynamo_backends")``. Run in a fresh
    interpreter so that Dynamo's discovery (cached per process) sees it.
    """
    dist = tmp_path / "aotgrad-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: aotgrad\nVersion: 0.1.0\n")
    lines = "".join(f"{k} = {v}\n" for k, v in _declared_entry_points().items())
    (dist / "entry_points.txt").write_text(f"[torch_dynamo_backends]\n{lines}")
    script = textwrap.dedent(
        """
        import torch, torch._dynamo
        assert "aotgrad" in torch._dynamo.list_backends(), torch._dynamo.list_backends()
        m = torch.nn.Linear(3, 2)
        x = torch.randn(4, 3)
        out = torch.compile(m, backend="aotgrad")(x)
        torch.testing.assert_close(out, m(x))
        out.sum().backward()
        assert m.weight.grad is not None
        from aotgrad.backend import aotgrad_backend
        assert torch._dynamo.lookup_backend("aotgrad") is aotgrad_backend
        print("OK")
        """
    )
    import aotgrad as pkg

    src = str(Path(pkg.__path__[0]).parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), src]))
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-3000:]


def test_backend_string_in_process_when_installed():
    from importlib.metadata import entry_points

    if "aotgrad" not in entry_points(group="torch_dynamo_backends").names:
        pytest.skip("aotgrad is not pip-installed in this environment (covered by the "
                    "simulated-install test)")
    m = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    _close(torch.compile(m, backend="aotgrad")(x), m(x))


def test_package_exports_backend_factory():
    assert aotgrad.backend is make_backend, "aotgrad/__init__.py must re-export backend.backend"
    assert aotgrad.aot_module is not None and aotgrad.aot_module_simplified is not None


def test_configured_backend_uses_given_compilers():
    fw, bw = Counting(), Counting()
    be = make_backend(fw_compiler=fw, bw_compiler=bw)
    assert isinstance(be, AotgradBackend)
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    ref = copy.deepcopy(m)
    x = torch.randn(5, 3)
    out = torch.compile(m, backend=be)(x)
    out.sum().backward()
    ref(x).sum().backward()
    assert len(fw.graphs) == 1 and len(bw.graphs) == 1
    for p, pr in zip(m.parameters(), ref.parameters()):
        _close(p.grad, pr.grad)
    # The default backend runs the nop compiler.
    assert aotgrad_backend.fw_compiler is compilers.nop


def test_configured_partition_and_decompositions_are_used():
    seen = {}

    def partition(joint, joint_inputs, *, num_fwd_outputs, **_ignored):
        seen["partition"] = True
        from aotgrad.partition import default_partition

        return default_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs)

    aten = torch.ops.aten

    def gelu_decomp(x, approximate="none"):
        seen["decomp"] = True
        return 0.5 * x * (1 + torch.erf(x / 2**0.5))

    be = make_backend(partition_fn=partition, decompositions={aten.gelu.default: gelu_decomp})
    x = torch.randn(4, requires_grad=True)
    f = torch.compile(lambda t: torch.nn.functional.gelu(t) * 2, backend=be)
    out = f(x)
    out.sum().backward()
    xr = x.detach().requires_grad_()
    (torch.nn.functional.gelu(xr) * 2).sum().backward()
    _close(x.grad, xr.grad)
    assert seen == {"partition": True, "decomp": True}


# --- what Dynamo passes ------------------------------------------------------------------------


def test_dynamo_passes_real_tensors_with_lifted_parameters():
    rec = Recorder(aotgrad_backend)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    ref = copy.deepcopy(m)
    x = torch.randn(6, 3)
    out = torch.compile(m, backend=rec)(x)
    (gm, ex), = rec.calls
    assert not any(isinstance(t, torch._subclasses.FakeTensor) for t in ex)
    assert any(isinstance(t, nn.Parameter) for t in ex)  # lifted, not GraphModule attrs
    assert not list(gm.parameters())
    _close(out, ref(x))
    _close(m[1].running_mean, ref[1].running_mean)
    assert int(m[1].num_batches_tracked) == 1


def test_graph_module_owning_parameters():
    """Dynamo 2.13 always lifts state (inline_inbuilt_nn_modules is forced on), but a
    backend may also be handed a GraphModule that owns parameters and buffers (get_attr /
    call_module nodes, as older Dynamo and other front ends produce): they are lifted too."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    ref = copy.deepcopy(m)
    gm = torch.fx.symbolic_trace(m)
    assert list(gm.parameters())
    fw = Counting()
    compiled = make_backend(fw_compiler=fw, bw_compiler=compilers.nop)(gm, [torch.randn(6, 3)])
    n_state = len(list(gm.parameters())) + len(list(gm.buffers()))
    opt, ref_opt = (torch.optim.SGD(mm.parameters(), lr=0.1) for mm in (gm, ref))
    for step in range(3):
        x = torch.randn(6, 3, generator=torch.Generator().manual_seed(step))
        for fn, o in ((compiled, opt), (ref, ref_opt)):
            o.zero_grad()
            fn(x).square().mean().backward()
            o.step()
    placeholders = [n for n in fw.graphs[0].graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == n_state + 1
    for (k, v), (_, vr) in zip(gm.state_dict().items(), ref.state_dict().items()):
        _close(v, vr)
    assert int(gm.get_submodule("1").num_batches_tracked) == 3


def test_fake_example_inputs_are_accepted():
    from torch._subclasses.fake_tensor import FakeTensorMode

    def f(x, y):
        return (x * y).sin(), x.t()

    gm = torch.fx.symbolic_trace(f)
    mode = FakeTensorMode()
    fake = [mode.from_tensor(torch.randn(2, 3)), mode.from_tensor(torch.randn(2, 3))]
    compiled = aotgrad_backend(gm, fake)
    x, y = torch.randn(2, 3, requires_grad=True), torch.randn(2, 3)
    out = compiled(x, y)
    ref = f(x, y)
    _close(out[0], ref[0])
    assert out[1]._base is x or out[1].data_ptr() == x.data_ptr()  # the alias is preserved
    out[0].sum().backward()
    _close(x.grad, (y * torch.cos(x.detach() * y)))


def test_graph_breaks_compile_each_graph():
    fw = Counting()
    rec = Recorder(make_backend(fw_compiler=fw, bw_compiler=compilers.nop))

    def f(x):
        y = x.sin() * 2
        print("graph break")  # Dynamo splits here
        return y.cos() + x

    x = torch.randn(4, requires_grad=True)
    xr = x.detach().requires_grad_()
    out = torch.compile(f, backend=rec)(x)
    ref = (xr.sin() * 2).cos() + xr
    _close(out, ref)
    out.sum().backward()
    ref.sum().backward()
    _close(x.grad, xr.grad)
    assert len(rec.calls) == 2 and len(fw.graphs) == 2


def test_input_mutation_and_aliasing_through_dynamo():
    def f(x, y):
        x.add_(1)
        return y.view(-1), x * y

    x, y = torch.randn(3, 2), torch.randn(3, 2)
    xr, yr = x.clone(), y.clone()
    out = torch.compile(f, backend="aotgrad" if "aotgrad" in torch._dynamo.list_backends()
                        else aotgrad_backend)(x, y)
    ref = f(xr, yr)
    _close(x, xr)
    _close(out[1], ref[1])
    out[0].mul_(0)  # a view of y in eager: must zero y here too
    assert torch.count_nonzero(y) == 0


@pytest.mark.parametrize("dynamic", [None, False])
def test_dynamic_shapes_from_dynamo(dynamic):
    """One Dynamo graph with a SymInt input: aotgrad follows Dynamo (one symbolic entry) by
    default, and specialises per size with dynamic=False."""
    fw = Counting()
    rec = Recorder(make_backend(fw_compiler=fw, bw_compiler=compilers.nop, dynamic=dynamic))
    m = nn.Linear(3, 2)
    cm = torch.compile(m, backend=rec, dynamic=True)
    for n in (2, 5, 7, 5):
        x = torch.randn(n, 3, requires_grad=True)
        out = cm(x)
        _close(out, m(x))
        out.sum().backward()
        _close(x.grad, m.weight.detach().sum(0).expand(n, 3))
    assert len(rec.calls) == 1
    assert any(isinstance(t, torch.SymInt) for t in rec.calls[0][1])
    # static: one per distinct size (size 2 included), reused for the repeat
    assert len(fw.graphs) == (1 if dynamic is None else 3)


def test_train_eval_and_grad_mode_recompile_in_dynamo():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
    ref = copy.deepcopy(m)
    cm = torch.compile(m, backend=aotgrad_backend)
    x = torch.randn(6, 4)
    torch.manual_seed(1)
    out = cm(x)
    torch.manual_seed(1)
    _close(out, ref(x))
    cm.eval()
    ref.eval()
    with torch.no_grad():
        out = cm(x)
        assert not out.requires_grad
        _close(out, ref(x))
    for (k, v), (_, vr) in zip(m.state_dict().items(), ref.state_dict().items()):
        _close(v, vr)


def test_inductor_backend_is_lazy_and_explains_when_missing(monkeypatch):
    monkeypatch.delattr(compilers, "inductor", raising=False)
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    with pytest.raises(RuntimeError, match="compilers.inductor is not available"):
        aotgrad_inductor_backend(gm, [torch.randn(2)])


@pytest.mark.slow
def test_inductor_backend_matches_eager():
    if not hasattr(compilers, "inductor"):
        pytest.skip("aotgrad.compilers.inductor not present")
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    ref = copy.deepcopy(m)
    x = torch.randn(5, 3)
    out = torch.compile(m, backend=aotgrad_inductor_backend)(x)
    _close(out, ref(x))
    out.sum().backward()
    ref(x).sum().backward()
    for p, pr in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, pr.grad, rtol=1e-4, atol=1e-5)


def test_backend_rejects_non_graph_module():
    with pytest.raises(TypeError, match="GraphModule"):
        aotgrad_backend(lambda x: x, [torch.randn(1)])


def test_forward_graph_nodes_keep_the_users_stack_trace():
    """As torch's AOT Autograd does, each ATen node traced from a Dynamo node carries that
    node's stack_trace: the user's own source line."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm

    def f(x):
        y = x.sin()
        return y * 2

    torch._dynamo.reset()
    torch.compile(f, backend=make_backend(fw_compiler=keep, bw_compiler=compilers.nop))(torch.randn(3, requires_grad=True))
    torch._dynamo.reset()
    traces = {n.name: n.meta.get("stack_trace") or "" for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert "y = x.sin()" in traces["sin"] and "return y * 2" in traces["mul"]


def test_backward_graph_nodes_carry_the_stack_trace_of_the_forward_op_they_differentiate():
    """As torch's AOT Autograd does: each node of the backward graph carries the stack_trace
    of the forward op whose derivative it computes (for a Dynamo graph, or any GraphModule
    whose nodes have stack traces)."""
    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return gm
        return compiler

    def f(x, w):
        y = x.sin()
        z = y @ w
        return z.relu()

    torch._dynamo.reset()
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True)
    out = torch.compile(f, backend=make_backend(fw_compiler=keep("fw"), bw_compiler=keep("bw")))(x, w)
    out.sum().backward()
    torch._dynamo.reset()
    bw_nodes = [n for n in graphs["bw"].graph.nodes if n.op == "call_function"]
    traces = {str(n.target): n.meta.get("stack_trace") or "" for n in bw_nodes}
    assert bw_nodes and all(n.meta.get("stack_trace") for n in bw_nodes), traces
    assert "y = x.sin()" in traces["aten.cos.default"]  # sin's derivative
    assert "return z.relu()" in traces["aten.threshold_backward.default"]
    assert any("z = y @ w" in t for k, t in traces.items() if k == "aten.mm.default")
