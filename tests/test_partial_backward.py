"""A backward that reaches only some outputs of a compiled call: eager's engine never runs the
nodes only the other outputs' gradients pass through, so their contributions are missing from
every sum, not zeros. Where such a path is not finite at a zero gradient (``log`` at 0, a saved
``inf``), running it with zeros puts ``nan`` into a gradient eager computes finite (fuzz seed
22013348); aotgrad runs the backward pruned of those paths (core/partial_backward.py)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

import pytest
import torch

import aotgrad
from aotgrad.core.partial_backward import prune_absent_tangents

inf = float("inf")


def _inputs_at_zero():
    return (torch.tensor([0.0, 1.0, 2.0], requires_grad=True), torch.tensor([2.0, 0.0, 3.0], requires_grad=True))


def _inputs_with_inf():
    return (torch.tensor([0.0, 1.0, 2.0], requires_grad=True), torch.tensor([inf, 2.0, -inf], requires_grad=True))


def _log_and_clone(x, w):
    return x.log(), x.clone()


def _shared_intermediate(x, w):
    a = x * w
    return a.log(), a.sin(), (a + 1).sqrt()


def _reciprocal_and_exp(x, w):
    return 1 / x, x.exp() * w


def _sqrt_pow_and_sum(x, w):
    return x.sqrt(), x.pow(0.5) + w, (x * w).sum()


def _saved_infinity(x, w):
    # y's backward multiplies its gradient by w (inf): a zero tangent gives nan
    return x * w, x.sin()


def _split_chunks(x, w):
    a, b, c = (x * w).split(1)
    return a.log(), b.exp(), c * 2


def _unbind_rows(x, w):
    rows = torch.stack([x, w]).unbind(0)
    return rows[0].log(), rows[1].cos()


def _view_outputs(x, w):
    a = x.log()
    return a.view(3, 1), a.exp(), w.view(1, 3)


def _mutated_input(x, w):
    x = x * 1
    x.mul_(w)
    return x.log(), x.cos()


def _sum_of_outputs_chain(x, w):
    y = x.log()
    return y, y + w, w.sin()


def _three_branches_one_unused_input(x, w):
    return x.log(), w.log(), (x + w).tanh()


def _matmul_and_where(x, w):
    m = torch.outer(x, w)
    return m.log(), torch.where(x > 0, x, w).abs(), m.t().sum(0)


PROGRAMS = [
    _log_and_clone, _shared_intermediate, _reciprocal_and_exp, _sqrt_pow_and_sum, _saved_infinity,
    _split_chunks, _unbind_rows, _view_outputs, _mutated_input, _sum_of_outputs_chain,
    _three_branches_one_unused_input, _matmul_and_where,
]
INPUTS = {"zero": _inputs_at_zero, "inf": _inputs_with_inf}


def _subsets(n: int) -> list[tuple[int, ...]]:
    return [s for k in range(1, n) for s in itertools.combinations(range(n), k)]


def _grads(fn: Callable, make: Callable, subset: tuple[int, ...]) -> tuple[list, list]:
    """(``torch.autograd.grad`` of the outputs in ``subset``, ``.grad`` after ``backward`` of
    them) for fresh inputs; fixed cotangents."""
    x, w = make()
    outs = fn(x, w)
    picked = [outs[k] for k in subset]
    cots = [torch.full_like(o, 0.5) for o in picked]
    grads = torch.autograd.grad(picked, (x, w), cots, allow_unused=True, retain_graph=True)
    torch.autograd.backward(picked, cots)
    return list(grads), [x.grad, w.grad]


def _assert_same(eager: list, compiled: list, what: str) -> None:
    for k, (a, b) in enumerate(zip(eager, compiled, strict=True)):
        assert (a is None) == (b is None), f"{what} {k}: eager {a}, aotgrad {b}"
        if a is not None:
            torch.testing.assert_close(b, a, equal_nan=True, msg=lambda m: f"{what} {k}: {m}")


@pytest.mark.parametrize("inputs", sorted(INPUTS))
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_backward_through_some_outputs(fn, inputs):
    make = INPUTS[inputs]
    compiled = aotgrad.aot_function(fn, aotgrad.nop)
    n = len(fn(*make()))
    for subset in _subsets(n):
        e_grads, e_dot_grads = _grads(fn, make, subset)
        c_grads, c_dot_grads = _grads(compiled, make, subset)
        _assert_same(e_grads, c_grads, f"outputs {subset}: autograd.grad")
        _assert_same(e_dot_grads, c_dot_grads, f"outputs {subset}: .grad")


def test_double_backward_through_some_outputs():
    """create_graph=True: the differentiable backward is pruned likewise."""

    def fn(x, w):
        a = x * w
        return a.log(), a.sin() * x

    for compiled_or_eager in (fn, aotgrad.aot_function(fn, aotgrad.nop)):
        x, w = _inputs_at_zero()
        y, z = compiled_or_eager(x, w)
        (gx,) = torch.autograd.grad(z.sum(), x, create_graph=True)
        (ggx,) = torch.autograd.grad(gx.sum(), x)
        if compiled_or_eager is fn:
            expected = (gx.detach(), ggx)
        else:
            torch.testing.assert_close(gx.detach(), expected[0])
            torch.testing.assert_close(ggx, expected[1])


class _CountingCompiler:
    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        self.graphs.append(gm)
        return gm


def test_pruned_backward_compiled_once_per_pattern_and_only_where_it_differs():
    """Outputs whose backward paths meet nothing the others need keep the full backward;
    a pattern whose paths meet compiles one pruned backward, once."""
    bw = _CountingCompiler()
    separate = aotgrad.aot_function(lambda x, w: (x.log(), w.sin()), aotgrad.nop, bw_compiler=bw)
    for _ in range(2):
        x, w = _inputs_at_zero()
        separate(x, w)[1].sum().backward()
    assert len(bw.graphs) == 1 and x.grad is None and w.grad is not None

    bw = _CountingCompiler()
    meeting = aotgrad.aot_function(_log_and_clone, aotgrad.nop, bw_compiler=bw)
    for _ in range(3):
        x, w = _inputs_at_zero()
        meeting(x, w)[1].sum().backward()
        torch.testing.assert_close(x.grad, torch.ones(3))
    assert len(bw.graphs) == 2, "the full backward and one pruned for output 0's absence"
    pruned = bw.graphs[1]
    assert not any(n.target is torch.ops.aten.div.Tensor for n in pruned.graph.nodes), pruned.code


def _backward_graph(fn, *args) -> torch.fx.GraphModule:
    bw = _CountingCompiler()
    compiled = aotgrad.aot_function(fn, aotgrad.nop, bw_compiler=bw)
    sum(o.sum() for o in compiled(*args)).backward()
    return bw.graphs[0]


def test_pruned_graph_keeps_placeholders_and_zeros_for_a_partly_absent_cat():
    """``split``'s backward concatenates its outputs' gradients: an absent one is read as zeros."""
    gm = _backward_graph(_split_chunks, *_inputs_at_zero())
    num_tangents = sum(1 for n in gm.graph.nodes if n.op == "placeholder" and n.name.startswith("tangents"))
    pruned = prune_absent_tangents(gm, frozenset({0}), num_tangents)
    assert pruned is not None
    assert [n.name for n in pruned.graph.find_nodes(op="placeholder")] == [
        n.name for n in gm.graph.find_nodes(op="placeholder")
    ]
    assert any(n.target is torch.ops.aten.full.default for n in pruned.graph.nodes), pruned.code


def test_nothing_absent_prunes_nothing():
    gm = _backward_graph(_shared_intermediate, *_inputs_at_zero())
    assert prune_absent_tangents(gm, frozenset(), 3) is None


def test_entry_from_the_persistent_cache_prunes_its_stored_backward(tmp_path, caplog):
    """A hit decodes the stored backward graph to prune it; the pruned one is compiled, not
    loaded in place of the full one's stored artifact."""
    cold = aotgrad.aot_function(_shared_intermediate, aotgrad.nop, cache=tmp_path)
    sum(o.sum() for o in cold(*_inputs_at_zero())).backward()
    caplog.set_level(logging.DEBUG, logger="aotgrad")
    hit = aotgrad.aot_function(_shared_intermediate, aotgrad.nop, cache=tmp_path)
    for subset in _subsets(3):
        e_grads, e_dot_grads = _grads(_shared_intermediate, _inputs_at_zero, subset)
        c_grads, c_dot_grads = _grads(hit, _inputs_at_zero, subset)
        _assert_same(e_grads, c_grads, f"outputs {subset}: autograd.grad")
        _assert_same(e_dot_grads, c_dot_grads, f"outputs {subset}: .grad")
    assert sum("loaded from cache" in r.getMessage() for r in caplog.records) == 1
