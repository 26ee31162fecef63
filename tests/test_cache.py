"""The persistent compile cache (core/cache.py): a hit gives what a cold compile gives, and
an entry is never used where it might be wrong.

Each test uses its own cache directory; the second-process tests run scripts in fresh
interpreters (tests/cache_worker.py)."""

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import aotgrad
from aotgrad import compilers
from aotgrad.core import cache

WORKER = Path(__file__).with_name("cache_worker.py")


def entries(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.entry"))


def worker_env(directory: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, AOTGRAD_CACHE_DIR=str(directory), PYTHONPATH=os.pathsep.join(sys.path), **extra)
    env.pop("AOTGRAD_CACHE", None)
    return env


def run_worker(directory: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(WORKER), *extra], env=worker_env(directory), capture_output=True, text=True,
        timeout=300, check=True,
    )


def run_concurrent_workers(directory: Path, **env: str) -> list[str]:
    """Two workers (two rounds each) at once on one cache directory: their reports."""
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), "--rounds", "2"], env=worker_env(directory, **env),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    return [out for out, _ in outs]


def parse(out: str) -> tuple[dict[str, str], int]:
    """The worker's report: case -> graphs and results, and how many entries it loaded."""
    cases, loaded = {}, 0
    out, _, tail = out.rpartition("\nloaded ")
    loaded = int(tail.split()[0])
    for block in out.split("=== ")[1:]:
        name, _, body = block.partition("\n")
        cases[name] = body
    return cases, loaded


def test_second_process_hits_and_matches_cold(tmp_path):
    cold = run_worker(tmp_path)
    cold_cases, cold_loaded = parse(cold.stdout)
    assert cold_loaded == 0
    stored = entries(tmp_path)
    assert len(stored) == len(cold_cases) == 4, cold.stdout
    warm = run_worker(tmp_path)
    warm_cases, warm_loaded = parse(warm.stdout)
    assert warm_loaded == len(cold_cases), warm.stderr[-3000:]
    # graphs (printed code, joint included), metadata, signature, results, gradients
    assert warm_cases == cold_cases
    assert entries(tmp_path) == stored


def test_concurrent_writers_leave_whole_entries(tmp_path):
    outs = run_concurrent_workers(tmp_path)
    assert not list(tmp_path.rglob(".tmp-*")), "a temporary file was left behind"
    first, _ = parse(outs[0])
    assert parse(outs[1])[0] == first
    after, loaded = parse(run_worker(tmp_path).stdout)
    assert loaded == len(first) and after == first


def _compiled_sin_mul():
    def fn(x, y):
        return (x.sin() * y).sum(), x.cos()

    return fn


def _call(f, seed=0):
    torch.manual_seed(seed)
    x = torch.randn(4, 3, requires_grad=True)
    y = torch.randn(4, 3)
    out = f(x, y)
    # through every output: a backward that reaches only some reads the backward graph to
    # prune it (core/partial_backward.py), which test_hit_decodes_no_node_... would see
    sum(o.sum() for o in out).backward()
    return out, x.grad


def _loads(caplog) -> int:
    return sum("loaded from cache" in r.getMessage() for r in caplog.records)


@pytest.fixture
def debug_log(caplog):
    caplog.set_level(logging.DEBUG, logger="aotgrad")
    return caplog


def test_corrupt_and_truncated_entries_are_ignored_and_rewritten(tmp_path, debug_log):
    fn = _compiled_sin_mul()
    expected = _call(fn)
    _call(aotgrad.aot_function(fn, compilers.nop, cache=tmp_path))
    (path,) = entries(tmp_path)
    whole = path.read_bytes()
    for broken in (whole[: len(whole) // 2], whole[:-1] + bytes([whole[-1] ^ 1]), b"", whole[:10]):
        path.write_bytes(broken)
        debug_log.clear()
        out, grad = _call(aotgrad.aot_function(fn, compilers.nop, cache=tmp_path))
        assert _loads(debug_log) == 0
        assert any("ignoring cache entry" in r.getMessage() for r in debug_log.records) or not broken
        torch.testing.assert_close((out, grad), expected, rtol=0, atol=0)
        assert path.read_bytes() == whole  # rewritten by the cold compile
    debug_log.clear()
    _call(aotgrad.aot_function(fn, compilers.nop, cache=tmp_path))
    assert _loads(debug_log) == 1


def test_other_versions_never_load(tmp_path, debug_log, monkeypatch):
    fn = _compiled_sin_mul()
    _call(aotgrad.aot_function(fn, compilers.nop, cache=tmp_path))
    real = cache.versions()
    for k, other in ((2, "2.99.0"), (3, "another aotgrad"), (1, "3.99")):
        monkeypatch.setattr(cache, "versions", lambda k=k, other=other: real[:k] + (other,) + real[k + 1:])
        debug_log.clear()
        _call(aotgrad.aot_function(fn, compilers.nop, cache=tmp_path))
        assert _loads(debug_log) == 0
    assert len(entries(tmp_path)) == 4


SOURCE = """
import torch
def helper(t):
    return t * {helper_factor}
def make(c):
    def fn(x, y):
        return (helper(x).sin() * y * c).sum(), x.cos() + {body_const}
    return fn
"""


def _program(helper_factor=2, body_const=1, c=3.0):
    namespace: dict = {}
    exec(compile(SOURCE.format(helper_factor=helper_factor, body_const=body_const), "<cache test>", "exec"), namespace)
    return namespace["make"](c)


def test_changed_code_closure_or_global_retraces(tmp_path, debug_log):
    variants = [_program(), _program(body_const=2), _program(c=4.0), _program(helper_factor=5)]
    for k, fn in enumerate(variants):
        debug_log.clear()
        out = _call(aotgrad.aot_function(fn, compilers.nop, cache=tmp_path))
        assert _loads(debug_log) == 0, f"variant {k} loaded another variant's entry"
        torch.testing.assert_close(out, _call(fn), rtol=0, atol=0)
    assert len(entries(tmp_path)) == len(variants)
    debug_log.clear()
    _call(aotgrad.aot_function(_program(c=4.0), compilers.nop, cache=tmp_path))
    assert _loads(debug_log) == 1


def test_captured_tensor_is_keyed_by_value(tmp_path, debug_log):
    def make(w):
        return lambda x, y: ((x @ w).sin().sum() * y.sum(), x.cos())

    for scale in (1.0, 2.0):
        fn = make(torch.ones(3, 3) * scale)
        debug_log.clear()
        out = _call(aotgrad.aot_function(fn, compilers.nop, cache=tmp_path))
        assert _loads(debug_log) == 0
        torch.testing.assert_close(out, _call(fn), rtol=0, atol=0)


def test_module_parameters_are_not_in_the_key(tmp_path, debug_log):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU())
    x = torch.randn(5, 3)
    aotgrad.aot_module(model, compilers.nop, cache=tmp_path)(x).sum().backward()
    other = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU())  # other values
    reference = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU())
    reference.load_state_dict(other.state_dict())
    debug_log.clear()
    out = aotgrad.aot_module(other, compilers.nop, cache=tmp_path)(x)
    assert _loads(debug_log) == 1
    torch.testing.assert_close(out, reference(x), rtol=0, atol=0)
    torch.testing.assert_close(other[1].running_mean, reference[1].running_mean, rtol=0, atol=0)
    other.eval()
    debug_log.clear()
    aotgrad.aot_module(other, compilers.nop, cache=tmp_path)(x)
    assert _loads(debug_log) == 0  # the training flag is in the key


def test_disabled_by_argument_and_environment(tmp_path, monkeypatch):
    fn = _compiled_sin_mul()
    _call(aotgrad.aot_function(fn, compilers.nop, cache=False))
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("AOTGRAD_CACHE", "0")
    _call(aotgrad.aot_function(fn, compilers.nop))
    assert not entries(tmp_path)
    monkeypatch.delenv("AOTGRAD_CACHE")
    _call(aotgrad.aot_function(fn, compilers.nop))
    assert len(entries(tmp_path / "env")) == 1
    assert cache.cache_location(None) == tmp_path / "env"
    monkeypatch.delenv("AOTGRAD_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_location(None) == tmp_path / "xdg" / "aotgrad"
    assert cache.cache_location(tmp_path / "arg") == tmp_path / "arg"


def test_effects_at_trace_time_are_not_cached(tmp_path, debug_log):
    seen = []

    def prints(x):
        print("tracing")
        return x * 2

    def appends(x):
        seen.append(1)
        return x * 2

    class Counter:
        n = 0

    def sets(x):
        Counter.n = Counter.n + 1
        return x * 2

    for fn in (prints, appends, sets):
        debug_log.clear()
        aotgrad.aot_function(fn, compilers.nop, cache=tmp_path)(torch.ones(2))
        assert any(f"not caching {fn.__name__}" in r.getMessage() for r in debug_log.records), fn.__name__
    assert not entries(tmp_path)


def test_user_compilers_are_not_cached(tmp_path):
    def my_compiler(gm, example_inputs):
        return gm

    _call(aotgrad.aot_function(_compiled_sin_mul(), my_compiler, cache=tmp_path))
    assert not entries(tmp_path)


class _Affine(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.scale = 2.0

    def forward(self, x):
        return self.lin(x).relu() * self.scale


def test_user_module_class_is_cached_and_attributes_are_keyed(tmp_path, debug_log):
    torch.manual_seed(0)
    model = _Affine(3)
    x = torch.randn(2, 3)
    aotgrad.aot_module(model, compilers.nop, cache=tmp_path)(x)
    assert len(entries(tmp_path)) == 1
    debug_log.clear()
    aotgrad.aot_module(model, compilers.nop, cache=tmp_path)(x)
    assert _loads(debug_log) == 1
    model.scale = 3.0  # baked into the graph at trace time: another key
    debug_log.clear()
    out = aotgrad.aot_module(model, compilers.nop, cache=tmp_path)(x)
    assert _loads(debug_log) == 0
    torch.testing.assert_close(out, model(x), rtol=0, atol=0)


class _Caching(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        self.last = x.shape  # an effect at trace time
        return self.lin(x)


def test_module_forward_that_sets_attributes_is_not_cached(tmp_path):
    aotgrad.aot_module(_Caching(), compilers.nop, cache=tmp_path)(torch.randn(2, 3))
    assert not entries(tmp_path)


def test_storing_and_loading_issue_no_warnings(tmp_path):
    import warnings

    fn = _compiled_sin_mul()
    for _ in range(2):  # a cold compile that stores, then one that loads
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _call(aotgrad.aot_function(fn, compilers.nop, cache=tmp_path))
        assert not [w for w in caught if "LeafSpec" in str(w.message)]


def test_size_limit_from_environment(monkeypatch, caplog):
    monkeypatch.delenv("AOTGRAD_CACHE_MAX_SIZE", raising=False)
    assert cache.size_limit() == cache.DEFAULT_SIZE_LIMIT == 1 << 30
    for text, expected in (("12345", 12345), ("500M", 500 << 20), ("2G", 2 << 30), ("1.5k", 1536),
                           ("64 MiB", 64 << 20), ("0", None), ("-1", None)):
        monkeypatch.setenv("AOTGRAD_CACHE_MAX_SIZE", text)
        assert cache.size_limit() == expected, text
    monkeypatch.setenv("AOTGRAD_CACHE_MAX_SIZE", "lots")
    with caplog.at_level(logging.WARNING, logger="aotgrad"):
        assert cache.size_limit() == cache.DEFAULT_SIZE_LIMIT
    assert "AOTGRAD_CACHE_MAX_SIZE" in caplog.text


def _scaled(k):
    def fn(x):
        return (x.sin() * k).sum()

    return fn


def test_least_recently_used_entries_are_evicted(tmp_path, monkeypatch, debug_log):
    monkeypatch.setenv("AOTGRAD_CACHE_MAX_SIZE", "0")  # no bound while filling
    x = torch.randn(3, requires_grad=True)
    paths = {}
    for k in (1.0, 2.0, 3.0):
        before = set(entries(tmp_path))
        aotgrad.aot_function(_scaled(k), compilers.nop, cache=tmp_path)(x).backward()
        (paths[k],) = set(entries(tmp_path)) - before
    past = 1_000_000_000
    for age, k in enumerate((1.0, 2.0, 3.0)):  # stored in this order, long ago
        os.utime(paths[k], (past + age, past + age))
    debug_log.clear()
    aotgrad.aot_function(_scaled(1.0), compilers.nop, cache=tmp_path)(x).backward()  # a hit: used now
    assert _loads(debug_log) == 1
    sizes = [p.stat().st_size for p in paths.values()]
    limit = sum(sizes) + min(sizes) // 2  # three entries fit, four do not
    monkeypatch.setenv("AOTGRAD_CACHE_MAX_SIZE", str(limit))
    aotgrad.aot_function(_scaled(4.0), compilers.nop, cache=tmp_path)(x).backward()
    left = entries(tmp_path)
    assert paths[2.0] not in left  # the least recently used
    assert paths[1.0] in left and paths[3.0] in left and len(left) == 3
    assert sum(p.stat().st_size for p in left) <= limit
    debug_log.clear()
    aotgrad.aot_function(_scaled(2.0), compilers.nop, cache=tmp_path)(x).backward()  # evicted: traced again
    assert _loads(debug_log) == 0 and len(entries(tmp_path)) == 3


def test_evict_skips_what_vanished_and_removes_stale_temporaries(tmp_path, monkeypatch):
    sub = tmp_path / "ab"
    sub.mkdir()
    for k in range(4):
        (sub / f"{k}.entry").write_bytes(b"x" * 100)
        os.utime(sub / f"{k}.entry", (1000 + k, 1000 + k))
    stale, fresh = sub / ".tmp-old.entry", sub / ".tmp-new.entry"
    stale.write_bytes(b"partial")
    fresh.write_bytes(b"partial")
    os.utime(stale, (1000, 1000))
    real_unlink = os.unlink

    def racing_unlink(path):  # another process deleted entry 0 first
        if str(path).endswith("0.entry"):
            real_unlink(path)
            raise FileNotFoundError(path)
        real_unlink(path)

    monkeypatch.setattr(cache.os, "unlink", racing_unlink)
    deleted = cache.evict(tmp_path, 250, keep=sub / "1.entry")
    monkeypatch.undo()
    assert deleted == 1  # entry 2; entry 0 vanished meanwhile and counts as gone, entry 1 is kept
    assert sorted(p.name for p in sub.iterdir()) == [".tmp-new.entry", "1.entry", "3.entry"]
    assert cache.evict(tmp_path / "missing", 10) == 0


def test_concurrent_writers_under_a_small_bound(tmp_path):
    probe = tmp_path / "probe"
    run_worker(probe)
    largest = max(p.stat().st_size for p in entries(probe))
    limit = 2 * largest  # room for two of the worker's four entries: every store evicts
    outs = run_concurrent_workers(tmp_path / "bounded", AOTGRAD_CACHE_MAX_SIZE=str(limit))
    assert parse(outs[0])[0] == parse(outs[1])[0] == parse(run_worker(probe).stdout)[0]
    left = entries(tmp_path / "bounded")
    assert left and sum(p.stat().st_size for p in left) <= limit
    assert not list((tmp_path / "bounded").rglob(".tmp-*"))


def _hit(fn, tmp_path, debug_log):
    """A cold compile that stores ``fn``'s entry, then a hit on it: the hit's entry."""
    _call(aotgrad.aot_function(fn, compilers.nop, cache=tmp_path))
    debug_log.clear()
    hit = aotgrad.aot_function(fn, compilers.nop, cache=tmp_path)
    _call(hit)
    assert _loads(debug_log) == 1
    return hit.entries[0]


def test_stored_code_is_the_code_of_the_loaded_nodes(tmp_path, debug_log):
    # a hit's graphs run the code stored with them (not generated again): it must be what
    # the loaded nodes generate, and an edit of the graph must still take effect
    entry = _hit(_compiled_sin_mul(), tmp_path, debug_log)
    for gm in entry.graphs.values():
        stored = gm.code
        gm.recompile()
        assert gm.code == stored
    fw = entry.graphs["forward"]
    (mul,) = [n for n in fw.graph.nodes if n.target is torch.ops.aten.mul.Tensor]
    mul.target = torch.ops.aten.add.Tensor
    fw.recompile()
    assert "aten.add.Tensor" in fw.code and "aten.mul.Tensor" not in fw.code


def test_shared_fake_values_load_as_one_object(tmp_path, debug_log):
    # a fake value the graphs' metadata holds in more than one place comes back as one
    # object, as in the cold compile
    def cold_ids(graphs):
        return {
            (name, n.name, k): id(v)
            for name, gm in graphs.items() for n in gm.graph.nodes
            for k, v in enumerate(torch.utils._pytree.tree_leaves(dict(n.meta)))
            if isinstance(v, torch.Tensor)
        }

    fn = _compiled_sin_mul()
    cold = aotgrad.aot_function(fn, compilers.nop, cache=tmp_path)
    _call(cold)
    cold_shared = cold_ids(cold.entries[0].graphs)
    hit_shared = cold_ids(_hit(fn, tmp_path, debug_log).graphs)
    assert hit_shared.keys() == cold_shared.keys()

    def partition(ids):
        groups = {}
        for k, i in ids.items():
            groups.setdefault(i, set()).add(k)
        return sorted(sorted(g) for g in groups.values())

    assert partition(hit_shared) == partition(cold_shared)
    assert any(len(g) > 1 for g in partition(cold_shared))


def _described(value):
    """A node-metadata value with each tensor as its metadata (fake values compared so)."""
    def describe(x):
        if isinstance(x, torch.Tensor):
            assert type(x).__name__ == "FakeTensor", type(x)
            return ("tensor", tuple(x.shape), x.stride(), x.storage_offset(), x.dtype, x.requires_grad)
        return x
    return torch.utils._pytree.tree_map(describe, value)


def test_node_metadata_of_a_hit_is_made_when_read_and_equals_the_cold_compiles(tmp_path, debug_log):
    # a hit decodes a node's fake values only where something reads them: the graphs'
    # interior nodes stay undecoded, and every way of reading the metadata (item, get,
    # items/values, dict(), {**}, copy, deepcopy, pickle, inside a compiler's fake mode)
    # gives the values the cold compile recorded
    import copy
    import pickle

    from torch._subclasses.fake_tensor import FakeTensorMode

    fn = _compiled_sin_mul()
    cold = aotgrad.aot_function(fn, compilers.nop, cache=tmp_path)
    _call(cold)
    cold_graphs = cold.entries[0].graphs
    hit_graphs = _hit(fn, tmp_path, debug_log).graphs
    pending = [
        (name, n) for name, gm in hit_graphs.items() for n in gm.graph.nodes
        if any(type(v) is cache._Deferred for v in dict.values(n.meta))
    ]
    assert pending, "a hit decoded every node's fake values"
    readers = [
        "under a compiler's fake mode",
        lambda m: {k: m[k] for k in m},
        lambda m: {k: m.get(k) for k in m.keys()},
        lambda m: dict(m.items()),
        lambda m: dict(zip(m.keys(), m.values())),
        dict,
        lambda m: {**m},
        copy.copy,
        lambda m: m.copy(),
        copy.deepcopy,
        lambda m: pickle.loads(pickle.dumps(m)) if "val" not in m else dict(m),
    ]
    for read in readers:
        hit_graphs = _hit(fn, tmp_path, debug_log).graphs
        for name, gm in cold_graphs.items():
            cold_nodes = list(gm.graph.nodes)
            hit_nodes = list(hit_graphs[name].graph.nodes)
            assert [n.name for n in hit_nodes] == [n.name for n in cold_nodes]
            for c, h in zip(cold_nodes, hit_nodes):
                if read == "under a compiler's fake mode":
                    with FakeTensorMode():  # a compiler's mode does not make the values its own
                        got = {k: h.meta[k] for k in h.meta}
                else:
                    got = read(h.meta)
                assert type(got) is dict or got is h.meta
                # the same reader on the cold compile's metadata (deepcopy of an expanded fake
                # value is laid out contiguously, as torch copies it)
                expected = dict(c.meta) if read == "under a compiler's fake mode" else read(dict(c.meta))
                assert _described(got) == _described(expected), (name, c.name)
                assert not any(type(v) is cache._Deferred for v in dict.values(h.meta)) or read is copy.copy
    hit_graphs = _hit(fn, tmp_path, debug_log).graphs
    graph_name, node = pending[0]
    meta = next(n for n in hit_graphs[graph_name].graph.nodes if n.name == node.name).meta
    assert "val" in meta and len(meta) == len(node.meta)
    assert isinstance(meta.pop("val"), torch.Tensor) and "val" not in meta



def test_hit_makes_fake_inputs_only_where_read_and_matches_eager(tmp_path, debug_log):
    # a hit hands the forward compiler the primals the entry stores and fakes the call's
    # inputs again only where read: a double backward's retrace, an input whose metadata
    # the program changes; both still give eager's values and gradients
    def double(x, w):
        return (x.sin() * w).sum()

    def relaid(x, w):
        y = x * 1
        w.t_()
        return y.sum() + w.sum(), w

    for fn in (double, relaid):
        for attempt in ("cold", "hit"):
            torch.manual_seed(0)
            x = torch.randn(4, 3, requires_grad=True)
            w0 = torch.randn(4, 3) if fn is relaid else torch.randn(4, 3, requires_grad=True)
            w = w0.clone()
            debug_log.clear()
            f = aotgrad.aot_function(fn, compilers.nop, cache=tmp_path)
            out = f(x, w)
            assert _loads(debug_log) == (attempt == "hit")
            ex = x.detach().clone().requires_grad_()
            ew = w0.clone().requires_grad_(w0.requires_grad)
            expected = fn(ex, ew)
            if fn is double:
                (g,) = torch.autograd.grad(out, x, create_graph=True)
                (eg,) = torch.autograd.grad(expected, ex, create_graph=True)
                torch.testing.assert_close(g, eg)
                torch.testing.assert_close(torch.autograd.grad(g.sum(), x)[0], torch.autograd.grad(eg.sum(), ex)[0])
            else:
                out[0].backward()
                expected[0].backward()
                torch.testing.assert_close(x.grad, ex.grad)
                assert w.shape == ew.shape and w.stride() == ew.stride()
                torch.testing.assert_close(w, ew.detach())


def test_hit_decodes_no_node_and_makes_no_fake_value(tmp_path, debug_log, monkeypatch):
    # a hit with aotgrad's nop compiler builds its runtime from what the entry stores beside
    # the graphs: no node is decoded, no fake tensor made; reading the graphs afterwards
    # gives the cold compile's nodes (test_second_process_hits_and_matches_cold compares them)
    made = []
    real = cache._FakeTable._fake
    monkeypatch.setattr(cache._FakeTable, "_fake", lambda self, *a: made.append(a) or real(self, *a))
    entry = _hit(_compiled_sin_mul(), tmp_path, debug_log)
    assert made == []
    assert all("_graph" not in vars(gm) for gm in entry.graphs.values())
    assert [n.op for n in entry.graphs["forward"].graph.nodes][0] == "placeholder"
    assert "_graph" in vars(entry.graphs["forward"]) and "_graph" not in vars(entry.graphs["backward"])


def test_undecoded_graph_modules_copy_pickle_and_recompile_as_graph_modules(tmp_path, debug_log):
    # every way of reaching a stored graph module's graph decodes it first: deepcopy,
    # copy, pickling, print_readable, recompile, boxed-call check, torch's graph pickler;
    # the results are those of the cold compile's graph module
    import copy
    import pickle

    fn = _compiled_sin_mul()
    cold = aotgrad.aot_function(fn, compilers.nop, cache=tmp_path)
    _call(cold)
    cold_fw = cold.entries[0].graphs["forward"]
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    expected = cold_fw(x, y)
    readers = {
        "deepcopy": lambda gm: copy.deepcopy(gm),
        "copy": lambda gm: copy.copy(gm),
        "pickle": lambda gm: pickle.loads(pickle.dumps(gm)),
        "print_readable": lambda gm: (gm.print_readable(print_output=False), gm)[1],
        "recompile": lambda gm: (gm.recompile(), gm)[1],
        "graph": lambda gm: (gm.graph.lint(), gm)[1],
        "boxed": lambda gm: (gm._boxed_call, gm)[1],
    }
    for name, read in readers.items():
        fw = _hit(fn, tmp_path, debug_log).graphs["forward"]
        assert "_graph" not in vars(fw)
        got, want = read(fw), read(cold_fw)  # (pickling retraces the code: new node names)
        assert isinstance(got, torch.fx.GraphModule), name
        assert got.code == want.code, name
        assert [(n.op, n.name, n.target) for n in got.graph.nodes] == [
            (n.op, n.name, n.target) for n in want.graph.nodes
        ], name
        torch.testing.assert_close(got(x, y), expected, rtol=0, atol=0)
    from torch.fx._graph_pickler import GraphPickler

    fw = _hit(fn, tmp_path, debug_log).graphs["forward"]
    assert "primals_1" in GraphPickler.dumps(fw).decode("latin-1")


def test_stored_graph_module_is_built_as_graph_modules_are(tmp_path, debug_log):
    # a stored graph module is set up without GraphModule's constructor: it must hold the
    # same instance attributes, and its class the same members, as one built by it
    entry = _hit(_compiled_sin_mul(), tmp_path, debug_log)
    reference = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph(), "GraphModule")
    for gm in entry.graphs.values():
        assert set(vars(gm)) - {"_load_graph"} == set(vars(reference)) - {"_graph"}
        assert set(vars(type(gm))) == set(vars(type(reference)))
        assert type(gm).__name__ == "GraphModule"
    fw = entry.graphs["forward"]
    # the stored code object runs as the source compiled under its own name: tracebacks
    # and inspect find the lines
    import inspect
    import linecache

    assert inspect.getsource(fw.forward).startswith("def forward(")
    filename = fw.forward.__code__.co_filename
    assert filename.startswith("<eval_with_key>")
    assert linecache.getline(filename, fw.forward.__code__.co_firstlineno).lstrip().startswith("def forward(")


def test_source_hash_is_remembered_by_file_stats(tmp_path, monkeypatch):
    # the hash of aotgrad's sources is remembered in the cache directory with the sources'
    # stats: read back while they match, recomputed (and rewritten) when they do not or
    # the memo is unreadable
    monkeypatch.setattr(cache, "_SOURCE_HASH", None)
    real = cache._aotgrad_source_hash()
    memo = tmp_path / cache._SOURCE_HASH_MEMO
    assert not memo.exists()
    monkeypatch.setattr(cache, "_SOURCE_HASH", None)
    assert cache._aotgrad_source_hash(tmp_path) == real and memo.exists()
    stats, remembered = memo.read_text().split()
    assert remembered == real
    for text in (f"{stats} another-hash", f"{'0' * 64} another-hash", "garbage", ""):
        memo.write_text(text)
        monkeypatch.setattr(cache, "_SOURCE_HASH", None)
        got = cache._aotgrad_source_hash(tmp_path)
        if text.startswith(stats):
            assert got == "another-hash"  # the stats match: the memo is trusted
        else:
            assert got == real and memo.read_text().split() == [stats, real]


def test_registered_hooks_are_keyed(tmp_path, debug_log):
    # empty hook tables are left out of the key (nn.Module has ~11 per module); a hook
    # registered on a submodule is in it, and runs in the retrace
    model = nn.Sequential(nn.Tanh(), nn.ReLU())  # (no parameters: a graph with constants is not stored)

    def fn(x):
        return model(x)

    x = torch.randn(2, 3)
    expected = fn(x)
    out = aotgrad.aot_function(fn, compilers.nop, cache=tmp_path)(x)
    torch.testing.assert_close(out, expected)
    handle = model[0].register_forward_hook(lambda m, args, out: out * 2)
    debug_log.clear()
    out = aotgrad.aot_function(fn, compilers.nop, cache=tmp_path)(x)
    assert _loads(debug_log) == 0
    torch.testing.assert_close(out, fn(x))
    handle.remove()
    debug_log.clear()
    out = aotgrad.aot_function(fn, compilers.nop, cache=tmp_path)(x)
    assert _loads(debug_log) == 1
    torch.testing.assert_close(out, expected)
