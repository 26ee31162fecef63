"""aotgrad.compilers.inductor: our graphs compiled by TorchInductor behave like eager.

One small end-to-end test runs by default (an MLP step with an input mutation); the rest
compile more graphs and are marked ``slow`` (run with ``pytest -m slow tests/test_inductor.py``).
Inductor's FX graph cache makes reruns much faster than the first run.
"""

from __future__ import annotations

import copy

import pytest
import torch

from aotgrad import aot_function
from aotgrad.compilers import (
    InductorCompiler,
    inductor,
    inductor_bw,
    inductor_inference,
)


def _compile(fn, **kwargs):
    """aotgrad.aot_function with Inductor; tracing picks up ``inductor.decompositions``."""
    kwargs.setdefault("inference_compiler", inductor_inference)
    return aot_function(fn, inductor, **kwargs)


def _mlp(x, w1, b1, w2, b2):
    return torch.tanh(x @ w1 + b1) @ w2 + b2


def _params(seed=0, d_in=8, d_hidden=16, d_out=4):
    g = torch.Generator().manual_seed(seed)
    shapes = [(d_in, d_hidden), (d_hidden,), (d_hidden, d_out), (d_out,)]
    return [torch.randn(s, generator=g).requires_grad_() for s in shapes]


def _clone_leaves(ts):
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in ts]


def test_decompositions_attribute_is_inductors_table():
    from torch._inductor.decomposition import select_decomp_table

    for c in (inductor, inductor_bw, inductor_inference):
        assert c.decompositions == select_decomp_table()
    assert inductor.decompositions is inductor_bw.decompositions  # computed once
    with pytest.raises(ValueError):
        InductorCompiler("sideways")


def test_mlp_step_with_input_mutation_matches_eager():
    """The default-run test: forward + backward through Inductor, plus a buffer update."""

    def step(x, running, w1, b1, w2, b2):
        h = torch.tanh(x @ w1 + b1)
        running.mul_(0.9).add_(h.detach().mean(0), alpha=0.1)  # mutated input
        return h @ w2 + b2

    x = torch.randn(6, 8)
    params = _params()
    running = torch.zeros(16)
    ref_params, ref_running = _clone_leaves(params), running.clone()

    compiled = _compile(step)
    out = compiled(x, running, *params)
    out.pow(2).sum().backward()

    ref = step(x, ref_running, *ref_params)
    ref.pow(2).sum().backward()

    torch.testing.assert_close(out, ref)
    assert out.requires_grad and out.grad_fn is not None
    torch.testing.assert_close(running, ref_running)
    for p, r in zip(params, ref_params):
        torch.testing.assert_close(p.grad, r.grad)

    # Inductor's FX graph cache serves the same graphs compiled again (forward + backward).
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config

    if not inductor_config.force_disable_caches:
        hits = counters["inductor"]["fxgraph_cache_hit"]
        _compile(step)(x, running, *params).sum().backward()
        assert counters["inductor"]["fxgraph_cache_hit"] == hits + 2


@pytest.mark.slow
def test_mlp_training_loop_matches_eager():
    params = _params(seed=1, d_in=32, d_hidden=64, d_out=10)
    ref_params = _clone_leaves(params)
    opt = torch.optim.SGD(params, lr=0.1)
    ref_opt = torch.optim.SGD(ref_params, lr=0.1)
    compiled = _compile(_mlp)
    g = torch.Generator().manual_seed(2)
    for _ in range(4):
        x, y = torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
        for fn, ps, o in ((compiled, params, opt), (_mlp, ref_params, ref_opt)):
            o.zero_grad()
            loss = torch.nn.functional.cross_entropy(fn(x, *ps), y)
            loss.backward()
            o.step()
    for p, r in zip(params, ref_params):
        torch.testing.assert_close(p, r)


@pytest.mark.slow
def test_inference_path_with_mutation_matches_eager():
    def f(x, buf, w):
        buf.add_(x.sum(0))
        return (x @ w).relu()

    x, w = torch.randn(5, 3), torch.randn(3, 7)
    buf = torch.zeros(3)
    ref_buf = buf.clone()
    compiled = _compile(f)
    for _ in range(2):
        out = compiled(x, buf, w)
        ref = f(x, ref_buf, w)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(buf, ref_buf)
        assert not out.requires_grad


@pytest.mark.slow
def test_output_strides_and_alias_of_input_match_eager():
    def f(x, w):
        y = (x @ w).t()  # non-contiguous output
        return y, y.sin(), x.view(-1)  # the last one aliases an input

    x = torch.randn(4, 6, requires_grad=True)
    w = torch.randn(6, 5, requires_grad=True)
    ref_x, ref_w = _clone_leaves([x, w])
    outs = _compile(f)(x, w)
    refs = f(ref_x, ref_w)
    for o, r in zip(outs, refs):
        torch.testing.assert_close(o, r)
        assert o.stride() == r.stride()
    sum(o.cos().sum() for o in outs).backward()
    sum(r.cos().sum() for r in refs).backward()
    torch.testing.assert_close(x.grad, ref_x.grad)
    torch.testing.assert_close(w.grad, ref_w.grad)


@pytest.mark.slow
def test_backward_gets_non_contiguous_tangent():
    def f(x, w):
        return x @ w

    x = torch.randn(4, 6, requires_grad=True)
    w = torch.randn(6, 5, requires_grad=True)
    ref_x, ref_w = _clone_leaves([x, w])
    grad = torch.randn(5, 4).t()  # strides (1, 4): not the layout the tangent was traced with
    _compile(f)(x, w).backward(grad)
    f(ref_x, ref_w).backward(grad)
    torch.testing.assert_close(x.grad, ref_x.grad)
    torch.testing.assert_close(w.grad, ref_w.grad)


def _fake_graph(fn, *tensors):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    mode = FakeTensorMode()
    fakes = [mode.from_tensor(t) for t in tensors]
    with mode:
        gm = make_fx(fn, decomposition_table=inductor.decompositions)(*fakes)
    return gm, fakes


@pytest.mark.slow
def test_compiler_directly_phase_detection_and_graph_left_alone():
    def bw(primals_1, tangents_1):
        return [primals_1 * tangents_1 + 1]

    p, t = torch.randn(4, 6), torch.randn(6, 4).t()
    gm, fakes = _fake_graph(bw, p, t.contiguous())
    code_before = gm.code
    assert any("tangents" in n.name for n in gm.graph.find_nodes(op="placeholder"))
    compiled = inductor(gm, fakes)  # detected as backward: the tangent layout is coerced
    torch.testing.assert_close(compiled(p, t)[0], p * t + 1)
    assert gm.code == code_before

    def single(x):
        return x.cos()  # a graph returning a bare tensor, not a list

    x = torch.randn(3)
    gm, fakes = _fake_graph(single, x)
    torch.testing.assert_close(copy.copy(inductor)(gm, fakes)(x), x.cos())


@pytest.mark.slow
def test_compiles_inside_a_foreign_tracing_context():
    """Called while another trace's TracingContext is active (as inside a Dynamo backend),
    Inductor must see our fake mode, not the enclosing one."""
    from torch._guards import TracingContext, tracing
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(3, 4)
    w = torch.randn(4, 5, requires_grad=True)
    ref_w = w.detach().clone().requires_grad_()
    with tracing(TracingContext(FakeTensorMode())):
        out = _compile(lambda x, w: (x @ w).relu())(x, w)
    out.sum().backward()
    (x @ ref_w).relu().sum().backward()
    torch.testing.assert_close(out, (x @ ref_w).relu())
    torch.testing.assert_close(w.grad, ref_w.grad)


@pytest.mark.slow
def test_conv_batchnorm_module_training_step_matches_eager():
    """Buffer mutation (BatchNorm running stats) through aot_module with Inductor."""
    from aotgrad.module import aot_module

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU()
    )
    ref = copy.deepcopy(model)
    compiled = aot_module(model, inductor, inference_compiler=inductor_inference)
    x = torch.randn(2, 3, 6, 6)
    for _ in range(2):
        compiled(x).square().mean().backward()
        ref(x).square().mean().backward()
    for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad)
    model.eval()
    ref.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), ref(x))


def test_dynamic_entry_compiles_once_for_every_batch():
    """Inductor compiles our symbolic graphs: one entry, every batch size, eager's values
    and gradients."""
    cf = _compile(_mlp, dynamic=True)
    for n in (3, 5, 11):
        x = torch.randn(n, 8)
        params = _params()
        ref_params = _clone_leaves(params)
        out, ref = cf(x, *params), _mlp(x, *ref_params)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
        out.sum().backward()
        ref.sum().backward()
        for p, q in zip(params, ref_params):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert len(cf.entries) == 1 and cf.entries[0].guard.shape_guard is not None


@pytest.mark.slow
def test_aotgrad_inductor_backend_follows_dynamo_dynamic_shapes():
    from aotgrad.backend import aotgrad_inductor_backend

    torch._dynamo.reset()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ref = copy.deepcopy(m)
    cm = torch.compile(m, backend=aotgrad_inductor_backend)
    for n in (3, 5, 7, 9):
        x = torch.randn(n, 8)
        out, e = cm(x), ref(x)
        torch.testing.assert_close(out, e, rtol=1e-4, atol=1e-5)
        out.sum().backward()
        e.sum().backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


def _stored_entry(directory):
    from aotgrad.core import cache

    (path,) = sorted(directory.rglob("*.entry"))
    blob = path.read_bytes()
    return cache._loads(blob[len(cache._MAGIC) + 64 + 32:])


def _compile_fx_inner_calls(monkeypatch):
    """Count compile_fx_inner's calls (InductorCompiler imports it at each compile)."""
    from torch._inductor import compile_fx

    calls = []
    real = compile_fx.compile_fx_inner

    def counting(*args, **kwargs):
        calls.append(kwargs.get("is_backward"))
        return real(*args, **kwargs)

    monkeypatch.setattr(compile_fx, "compile_fx_inner", counting)
    return calls


def _step_of_cached(tmp_path):
    def step(x, running, w1, b1, w2, b2):
        h = torch.tanh(x @ w1 + b1)
        running.mul_(0.9).add_(h.detach().mean(0), alpha=0.1)
        return h @ w2 + b2

    def run(fn):
        x, running, params = torch.randn(6, 8, generator=torch.Generator().manual_seed(3)), torch.zeros(16), _params()
        out = fn(x, running, *params)
        out.pow(2).sum().backward()
        return [out, running, *(p.grad for p in params)]

    return step, run, lambda: _compile(step, cache=tmp_path)


def test_persistent_cache_hit_loads_inductors_graphs_by_their_stored_key(tmp_path, monkeypatch):
    """A cold compile stores the FX graph cache keys of both graphs in aotgrad's entry; a hit
    loads the compiled graphs by them (no compile_fx_inner: no graph copy, no key computed
    again) and runs as the cold compile and eager do."""
    from torch._inductor import config as inductor_config

    if inductor_config.force_disable_caches:
        pytest.skip("Inductor's caches are disabled")
    step, run, compiled = _step_of_cached(tmp_path)
    expected = run(step)
    calls = _compile_fx_inner_calls(monkeypatch)
    cold = run(compiled())
    assert calls == [False, True]
    artifacts = _stored_entry(tmp_path).compiler_artifacts
    assert sorted(artifacts) == ["backward", "forward"]
    assert artifacts["forward"][0] != artifacts["backward"][0]
    warm_fn = compiled()
    warm = run(warm_fn)
    assert calls == [False, True], "a hit compiled again"
    assert type(warm_fn.entries[0]).__name__ == "_CachedEntry"
    # loading by key reads nothing of the graphs (their nodes are still undecoded)
    assert all("_graph" not in vars(gm) for gm in warm_fn.entries[0].graphs.values())
    for w, c, e in zip(warm, cold, expected):
        torch.testing.assert_close(w, e)
        assert torch.equal(w, c)


@pytest.mark.slow
def test_persistent_cache_hit_compiles_where_inductors_key_would_differ(tmp_path, monkeypatch):
    """The stored FX graph cache key is used only where everything else Inductor's key holds
    is as at the cold compile: with Inductor's configuration changed, or its cache emptied,
    a hit compiles both graphs again (and is right)."""
    from torch._inductor import config as inductor_config

    if inductor_config.force_disable_caches:
        pytest.skip("Inductor's caches are disabled")
    step, run, compiled = _step_of_cached(tmp_path)
    expected = run(step)
    run(compiled())
    calls = _compile_fx_inner_calls(monkeypatch)
    with inductor_config.patch(comment_origin=not inductor_config.comment_origin):
        changed = run(compiled())
    assert calls == [False, True]
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "empty_inductor_cache"))
    emptied = run(compiled())
    assert calls == [False, True] * 2
    for results in (changed, emptied):
        for r, e in zip(results, expected):
            torch.testing.assert_close(r, e)


@pytest.mark.slow
def test_persistent_cache_hit_loads_inductors_inference_graph_by_its_key(tmp_path, monkeypatch):
    """An inference entry (inductor_inference, with an input mutation written back) stores
    its graph's FX-cache key too; a hit under no_grad loads it and runs as eager."""
    from torch._inductor import config as inductor_config

    if inductor_config.force_disable_caches:
        pytest.skip("Inductor's caches are disabled")

    def step(x, running, w):
        h = torch.tanh(x @ w)
        running.mul_(0.5).add_(h.mean(0))
        return h.t()

    def run(fn):
        g = torch.Generator().manual_seed(4)
        x, running, w = torch.randn(5, 4, generator=g), torch.ones(3), torch.randn(4, 3, generator=g)
        with torch.no_grad():
            out = fn(x, running, w)
        return [out, running]

    expected = run(step)
    calls = _compile_fx_inner_calls(monkeypatch)
    cold = run(_compile(step, cache=tmp_path))
    assert calls == [False]
    assert sorted(_stored_entry(tmp_path).compiler_artifacts) == ["inference"]
    warm_fn = _compile(step, cache=tmp_path)
    warm = run(warm_fn)
    assert calls == [False]
    assert "_graph" not in vars(warm_fn.entries[0].graphs["inference"])
    for w, c, e in zip(warm, cold, expected):
        torch.testing.assert_close(w, e)
        assert torch.equal(w, c) and w.stride() == e.stride()
