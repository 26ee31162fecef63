"""Dynamic shapes (issue 10): one symbolic entry serves every size its guards admit.

Each case runs eagerly and through aotgrad on several sizes and compares what a user sees;
the count of compiled entries (and, under torch.compile, of AOT compiles next to
``aot_eager``'s) is the other half of each check. The eager-comparison suites of
test_core.py and test_aliased_inputs.py also run in a dynamic mode (``shapes`` fixture).
"""

from __future__ import annotations

import copy
import logging
import re

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from eager_compare import Counting, check
from torch import nn

import aotgrad
from aotgrad.backend import backend
from aotgrad.compilers import nop
from aotgrad.module import aot_module
from aotgrad.partition import min_cut_rematerialization_partition


def rg(*shape):
    return torch.randn(*shape, requires_grad=True)


def _mlp(x, w1, w2):
    return torch.relu(x @ w1) @ w2


def test_dynamic_true_one_entry_for_every_size():
    cf = aotgrad.aot_function(_mlp, nop, dynamic=True)
    # (duck sizing: a batch of 3 next to a width of 3 would share a symbol, guarded equal)
    w1, w2 = rg(4, 8), rg(8, 2)
    for n in (3, 5, 9, 17, 4):
        check(_mlp, lambda n=n: (rg(n, 4), w1.detach().clone().requires_grad_(), w2.detach().clone().requires_grad_()),
              compiled=cf, mutate_outputs=False)
    assert len(cf.entries) == 1
    guard = cf.entries[0].guard.shape_guard
    assert guard is not None and "2 <= t0.size(0)" in guard.guards


def test_static_by_default_one_entry_per_size():
    cf = aotgrad.aot_function(_mlp, nop)
    w1, w2 = rg(4, 8), rg(8, 3)
    for n in (3, 5, 3):
        cf(rg(n, 4), w1, w2)
    assert len(cf.entries) == 2
    assert cf.entries[0].guard.shape_guard is None  # nothing symbolic: no Python guard at all


def test_mark_dynamic_makes_only_the_marked_dim_symbolic():
    f = lambda x: (x * 2).sum(1)
    cf = aotgrad.aot_function(f, nop)
    for n in (3, 6, 8):
        x = rg(n, 4)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(cf(x), f(x))
    assert len(cf.entries) == 1
    x = rg(3, 5)  # dim 1 was not marked: static, so a new entry
    torch._dynamo.mark_dynamic(x, 0)
    cf(x)
    assert len(cf.entries) == 2


def test_zero_one_specialisation_and_the_recompile_reason_is_logged(caplog):
    f = lambda x: x.sum(0) * 2
    cf = aotgrad.aot_function(f, nop, dynamic=True)
    cf(rg(4, 3))
    with caplog.at_level(logging.INFO, logger="aotgrad"):
        cf(rg(1, 3))  # size 1 is specialised: a new entry
    assert len(cf.entries) == 2
    assert any("recompiling" in r.getMessage() and "shape guard failed: 2 <= t0.size(0)" in r.getMessage()
               for r in caplog.records)
    for n in (1, 4, 7):
        x = rg(n, 3)
        torch.testing.assert_close(cf(x), f(x))
    assert len(cf.entries) == 2


def test_guard_from_branching_on_a_size():
    def f(x):
        if x.shape[0] > 4:
            return x * 2
        return x - 1

    cf = aotgrad.aot_function(f, nop, dynamic=True)
    for n in (5, 6, 9, 3, 2, 7):
        x = rg(n)
        torch.testing.assert_close(cf(x), f(x))
    assert len(cf.entries) == 2  # x.shape[0] > 4, and not
    assert "5 <= t0.size(0)" in cf.entries[-1].guard.shape_guard.guards  # the first entry's range


def test_int_argument_is_a_symint_input():
    def f(x, n):
        return x.view(n, -1) * 2, n + 1

    cf = aotgrad.aot_function(f, nop, dynamic=True)
    for rows in (2, 3, 4):
        check(f, lambda rows=rows: (rg(rows * 6), rows), compiled=cf)
    assert len(cf.entries) == 1


def test_sizes_saved_for_backward_not_the_tensor():
    """The backward of a sum needs x's size, not x: min-cut saves a SymInt only."""
    fw = Counting()
    cf = aotgrad.aot_function(lambda x: x.sum(0), fw, nop, partition_fn=min_cut_rematerialization_partition,
                              dynamic=True)
    for n in (3, 5):
        x = rg(n, 4)
        cf(x).sum().backward()
        torch.testing.assert_close(x.grad, torch.ones(n, 4))
    sig = cf.entries[0].signature
    assert sig.num_saved_tensors == 0 and sig.num_saved_symints >= 1, sig
    assert len(cf.entries) == 1 and len(fw.graphs) == 1


def test_input_data_and_metadata_mutation():
    def f(x, y):
        x.add_(1)
        flat = y.view(-1)
        y.t_()
        return x * 2, y, flat

    cf = aotgrad.aot_function(f, nop, dynamic=True)
    for n in (2, 3, 5):
        check(f, lambda n=n: (torch.randn(n, 3), torch.randn(n, 4)), compiled=cf)
    assert len(cf.entries) == 1


def test_outputs_alias_input_and_intermediate():
    def f(x):
        t = x * 2
        return x.view(-1), x[1:], t.t(), t.view(-1), t[:, 0]

    cf = aotgrad.aot_function(f, nop, dynamic=True)
    for n in (3, 4, 6):
        check(f, lambda n=n: (rg(n, 5),), compiled=cf)
    assert len(cf.entries) == 1


def test_tangent_of_an_unused_output_is_materialised_with_this_calls_shape():
    def f(x):
        return x * 2, x.sum(1)

    cf = aotgrad.aot_function(f, nop, dynamic=True)
    for n in (3, 7):
        x = rg(n, 2)
        a, _ = cf(x)
        a.sum().backward()  # the second output gets no gradient: zeros of shape (n,)
        torch.testing.assert_close(x.grad, torch.full((n, 2), 2.0))
    assert len(cf.entries) == 1


def test_dropout_masks_match_eager_at_every_size():
    f = lambda x: F.dropout(x, 0.5, training=True) * 3
    cf = aotgrad.aot_function(f, nop, dynamic=True)
    for n in (4, 6, 9):
        x = rg(n, 3)
        torch.manual_seed(7)
        out = cf(x)
        torch.manual_seed(7)
        torch.testing.assert_close(out, f(x))
    assert len(cf.entries) == 1


def test_data_dependent_size_is_a_clear_compile_error():
    def f(x):
        return x[x > 0].sum() + torch.nonzero(x).shape[0]

    cf = aotgrad.aot_function(f, nop, dynamic=True)
    with pytest.raises(aotgrad.AotgradCompileError, match=r"nonzero|masked_select|index") as info:
        cf(torch.randn(5))
    assert "test_dynamic.py" in str(info.value)


def test_aliased_mutated_inputs_fall_back_to_a_static_entry():
    def f(a, b):
        a.add_(1)
        return b * 2

    def overlapping_views():
        base = torch.zeros(6)
        return base[0:4], base[2:6]

    cf = aotgrad.aot_function(f, nop, dynamic=True)
    check(f, overlapping_views, compiled=cf)
    assert "synthetic bases" in cf.entries[0].static_reason


def test_module_with_buffers_one_entry_params_static():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))
    ref = copy.deepcopy(m)
    cm = aot_module(m, nop, dynamic=True)
    for n in (3, 5, 8, 4):
        x = torch.randn(n, 4)
        out, e = cm(x), ref(x)
        torch.testing.assert_close(out, e)
        out.sum().backward()
        e.sum().backward()
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    torch.testing.assert_close(m[1].running_mean, ref[1].running_mean)
    assert m[1].num_batches_tracked.item() == ref[1].num_batches_tracked.item() == 4
    (entries,) = [compiled.entries for _, compiled in cm._compiled_forward.entries.values()]
    assert len(entries) == 1
    guard = entries[0].guard.shape_guard
    # parameters are static (TensorGuards checks them); only the batch is symbolic
    assert all("t0." not in g and "t1." not in g for g in guard.guards), guard


def _count_aot_eager():
    from torch._dynamo.backends.common import aot_autograd

    fw = Counting()
    return fw, aot_autograd(fw_compiler=fw, bw_compiler=nop_boxed)


def nop_boxed(gm, example_inputs):
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(gm.forward)


def _train(model, compiled, sizes, make):
    ref = copy.deepcopy(model)
    for n in sizes:
        x = make(n)
        torch.manual_seed(n)
        out = compiled(x)
        torch.manual_seed(n)
        e = ref(x)
        torch.testing.assert_close(out, e, rtol=1e-4, atol=1e-5)
        out.sum().backward()
        e.sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model_name", ["mlp", "transformer"])
def test_torch_compile_compiles_as_often_as_aot_eager(model_name):
    sizes = (4, 8, 5, 7, 12, 3)
    if model_name == "mlp":
        make_model = lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        make = lambda n: torch.randn(n, 8)
    else:
        make_model = lambda: nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        make = lambda n: torch.randn(2, n, 16)
    counts = {}
    for side in ("aot_eager", "aotgrad"):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = make_model()
        if side == "aot_eager":
            fw, be = _count_aot_eager()
        else:
            fw = Counting()
            be = backend(fw, nop)
        _train(model, torch.compile(model, backend=be), sizes, make)
        counts[side] = len(fw.graphs)
    torch._dynamo.reset()
    assert counts["aotgrad"] == counts["aot_eager"], counts


def test_aot_module_simplified_traces_the_example_inputs_symbolic_sizes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from aotgrad.module import aot_module_simplified

    m = nn.Linear(3, 2)
    mode = FakeTensorMode(shape_env=ShapeEnv())
    example = mode.from_tensor(torch.randn(4, 3), static_shapes=False)
    fw = Counting()
    cf = aot_module_simplified(m, [example], fw, nop)
    for n in (4, 6, 9):
        x = torch.randn(n, 3)
        torch.testing.assert_close(cf(x), m(x))
    assert len(fw.graphs) == 1


def test_a_size_the_trace_specialised_leaves_no_symint_in_real_tensors():
    """``view(1, 3, 1, 1)`` specialises the symbolic width to 3; the new geometry of the
    metadata-mutated input is then a SymInt constant, which must reach the caller's tensor
    as a plain int (a real tensor with symbolic sizes cannot even be cloned)."""

    def f(a):
        a.unsqueeze_(-3)
        t = torch.tanh(a).transpose(1, 2).view(1, 3, 1, 1)
        return t.sigmoid(), a

    cf = aotgrad.aot_function(f, nop, dynamic=True)
    for _ in range(2):
        check(f, lambda: (torch.randn(1, 3),), compiled=cf)
    x = torch.randn(1, 3)
    _, same = cf(x)
    assert same is x and x.clone().shape == (1, 1, 3)


def test_dynamo_symbols_stay_symbolic_and_equal_sizes_share_one():
    """What Dynamo made symbolic, aotgrad's trace keeps symbolic (no guard pins a size to a
    number beyond 0/1), and sizes Dynamo knows equal (``x + y``, ``x.shape[0]`` passed as a
    SymInt input) are one symbol: the shape guard relates them instead of re-checking each."""
    returned = []
    be = backend(nop)

    def recording(gm, example_inputs):
        returned.append(be(gm, example_inputs))
        return returned[-1]

    def f(x, y):
        return (x + y).sum(0) * x.shape[0]

    cf = torch.compile(f, backend=recording, dynamic=True)
    for n, m in ((3, 4), (5, 4), (9, 6), (2, 7)):
        x, y = torch.randn(n, m), torch.randn(n, m)
        torch.testing.assert_close(cf(x, y), f(x, y))
    torch._dynamo.reset()
    assert len(returned) == 1
    (entry,) = [e for _, compiled in returned[0].entries.values() for e in compiled.entries]
    guards = entry.guard.shape_guard.guards
    assert not [g for g in guards if re.search(r"== \d+\b", g)], guards
    assert "t1.size(0) == t0.size(0)" in guards and "t2 == t0.size(0)" in guards, guards
