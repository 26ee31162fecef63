"""Views eager invalidates (issue 12, class 5): a multi-output view (``unbind``, ``split``,
``chunk``, ``split_with_sizes``) whose storage an in-place op changes after it was made raises
on every later use of its history -- reading ``grad_fn`` or ``is_leaf``, backward -- with
eager's message, which names the op and the output (``Output 1 of Split is a view and its
base ... has been modified inplace``). aotgrad rebuilds such an output invalidated too, with
the op that made it, so the message is eager's (it named ``AsStrided`` or the replayed chain's
last op before: fuzz seeds 420179, 420250, 420317, 420682, 421912)."""

from __future__ import annotations

import functools

import pytest

from tests.fuzz import harness

check_case = functools.partial(harness.check_case, impl=harness.aotgrad_impl)

#: multi-output views of ``b`` (a tensor requiring grad)
VIEWS = {
    "unbind0": "b.unbind(0)[1]",
    "unbind1": "b.unbind(1)[2]",
    "unbind_last": "b.unbind(-1)[0]",
    "split": "b.split(1, 0)[1]",
    "split_uneven": "b.split(2, 1)[1]",
    "chunk": "b.chunk(2, 1)[1]",
    "split_with_sizes": "b.split_with_sizes([1, 2], 1)[1]",
    # one output: the whole tensor (crashed: the rebuilt view was taken as a truth value)
    "split_whole": "b.split(3, 0)[0]",
}

#: what invalidates it afterwards
AFTER = {
    "no_grad_mul_": "with torch.no_grad():\n        b.mul_(2)",
    "no_grad_t_of_base": "with torch.no_grad():\n        b.t_()",
    "no_grad_t_of_view": "with torch.no_grad():\n        v.t_()",
    "no_grad_transpose_of_view": "with torch.no_grad():\n        v.transpose_(0, 1)",
    "no_grad_unsqueeze_of_view": "with torch.no_grad():\n        v.unsqueeze_(0)",
}


@pytest.mark.parametrize("after", sorted(AFTER))
@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("layout", ["x * 1", "x.t() * 1"])
def test_invalidated_multi_output_view_raises_eager_message(view, after, layout):
    """(A split view re-strided in place under no_grad, ``no_grad_t_of_view``, is made by a
    split whose arguments give its new geometry: fuzz seeds 2015548, 2000243.)"""
    check_case(
        source=f"def f(a):\n    b = a\n    v = {VIEWS[view]}\n    {AFTER[after]}\n    return v, b.sum()\n",
        inputs={"bases": [{"shape": [3, 3], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": layout}]},
        seed=5,
    )


#: inputs aliasing ``a`` (the first is the one the multi-output view is taken of)
ALIASED = {
    "detached_alias": ["x", "x.detach()"],
    "slice_and_detached": ["x[:, ::2]", "x.detach()"],
    "expanded_member": ["x", "x.detach()", "x.expand(2, 3, 4)"],
}


@pytest.mark.parametrize("view", ["a.unbind(1)[1]", "a.split(1, 0)[1]", "a.chunk(2, 1)[0]"])
@pytest.mark.parametrize("aliased", sorted(ALIASED))
def test_multi_output_view_invalidated_through_another_input(aliased, view):
    """Was a usable view (silent: eager's grad_fn read and backward raise; fuzz seeds 421575,
    430405): a write through another input on the same storage (a detach()ed alias)
    invalidates eager's multi-output view of the first; only the run over the synthetic base
    sees the shared version counter, and the output took the run over the call's inputs."""
    exprs = ALIASED[aliased]
    params = ", ".join(f"i{k}" for k in range(len(exprs)))
    check_case(
        source=f"def f({params}):\n    a = i0\n    v = {view}\n    i1.zero_()\n    return v, a * 1\n",
        inputs={"bases": [{"shape": [3, 4], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": e} for e in exprs]},
        seed=6,
    )


@pytest.mark.parametrize("view", ["t.unbind(1)[1]", "t.split(1, 0)[1]", "t.chunk(2, 1)[0]", "t.split(3, 0)[0]"])
@pytest.mark.parametrize("made", ["detached", "no_grad"])
def test_multi_output_view_made_without_grad_fn(view, made):
    """Eager's view was made while its base required no grad (a detach()ed value, or under
    no_grad), so it has no grad_fn; an in-place op with an operand requiring grad then gives
    the base a history and invalidates it, and autograd says "A view was created in no_grad
    mode" (was "Output 1 of Split": fuzz seed 440001)."""
    make = "t = a.detach() * 2" if made == "detached" else "with torch.no_grad():\n        t = a * 2"
    check_case(
        source=f"def f(a):\n    {make}\n    v = {view}\n    t.mul_(a)\n    return v, t.sum()\n",
        inputs={"bases": [{"shape": [3, 4], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": "x"}]},
        seed=8,
    )


def test_whole_tensor_split_made_without_grad_fn_direct():
    """Crashed ("Boolean value of Tensor with more than one value is ambiguous"): the rebuilt
    multi-output view was taken as a truth value to choose the fallback rebuild."""
    import torch

    import aotgrad

    def f(a):
        t = a.detach() * 2
        (v,) = t.split(3, 0)
        t.mul_(a)
        return v, t.sum()

    messages = []
    for fn in (f, aotgrad.aot_function(f, aotgrad.nop)):
        out = fn(torch.randn(3, 4, requires_grad=True))[0]
        with pytest.raises(RuntimeError) as err:
            out.grad_fn  # noqa: B018
        messages.append(str(err.value))
    assert messages[0] == messages[1]



@pytest.mark.parametrize("post", [1, 2])
@pytest.mark.parametrize("restride", ["t1.t_()", "t1.unsqueeze_(0).squeeze_(0)", "pass"])
def test_stale_view_stays_stale_after_the_callers_write(restride, post):
    """Was wrong gradients, silently (reported from a stale-view test): eager's t1 is stale
    (t0.mul_ after it was made), so its grad_fn is regenerated off t0 when first read; the
    rebuilt t1 was made one version past the counter at 0 (or its replayed t_ recorded the
    raised count), and the caller's one write to t0 made it current again: its grad_fn stayed
    the replayed chain's and missed that write's factor. (The fuzz harness reads every
    grad_fn before it writes, which regenerates it: this reads none.)"""
    import torch

    import aotgrad

    source = f"def f(a, b):\n    t0 = b @ b.mT\n    t1 = t0.transpose(1, 0)\n    {restride}\n    t0.mul_(a)\n    return t0 + 1, t0, t1\n"
    namespace: dict = {"torch": torch}
    exec(source, namespace)  # noqa: S102
    f = namespace["f"]
    grads = []
    for fn in (f, aotgrad.aot_function(f, aotgrad.nop)):
        torch.manual_seed(0)
        a, b = torch.randn(2, requires_grad=True), torch.randn(2, 3, requires_grad=True)
        outs = fn(a, b)
        outs[post].mul_(2)
        torch.manual_seed(1)
        grads.append(torch.autograd.grad(outs, [a, b], [torch.randn(2, 2) for _ in outs]))
    for e, c in zip(*grads):
        torch.testing.assert_close(c, e)


#: in-place metadata ops on another input on ``a``'s storage (or on a view / detached alias of it)
PEER_METADATA_OPS = {
    "t_ of a slice input": ("x[1:]", "i1.t_()"),
    "unsqueeze_ of a detached alias": ("x.detach()", "i1.unsqueeze_(0)"),
    "as_strided_ of a view of it": ("x.detach()", "i1[0].as_strided_((1,), (1,), 1)"),
    "squeeze_ of its detach()": ("x[:1]", "i1.detach().squeeze_(0)"),
}
#: views of ``a`` eager invalidates once its counter moves (made in no_grad mode, or by a
#: multi-output op)
INVALIDATED = {
    "no_grad unsqueeze": "with torch.no_grad():\n        v = a.unsqueeze(-3)",
    "no_grad slice": "with torch.no_grad():\n        v = a[1:]",
    "unbind": "v = a.unbind(0)[1]",
    "split": "v = a.split(1, 0)[1]",
    "ordinary view (not invalidated)": "v = a.t()",
}


@pytest.mark.parametrize("mode", ["grad", "no_grad"])
@pytest.mark.parametrize("view", sorted(INVALIDATED))
@pytest.mark.parametrize("op", sorted(PEER_METADATA_OPS))
def test_view_invalidated_by_a_metadata_op_on_another_input(op, view, mode):
    """Was a usable view (eager's grad_fn read and backward raise; fuzz seed 2013575): the
    metadata op on another input moves the version counter eager's inputs on one storage
    share; the trace's inputs have their own (no data write: no synthetic base), so the
    analysis moves their counters together (``_EagerChecks.storage_peers``)."""
    expr, inplace = PEER_METADATA_OPS[op]
    check_case(
        source=f"def f(a, i1):\n    {INVALIDATED[view]}\n    with torch.no_grad():\n        {inplace}\n    return v, a * 1\n",
        inputs={"bases": [{"shape": [3, 3], "dtype": "float32", "rg": True}],
                "args": [{"kind": "tensor", "base": 0, "expr": "x"}, {"kind": "tensor", "base": 0, "expr": expr}]},
        modes=[mode],
        seed=6,
    )


def test_saved_multi_output_view_invalidated_by_a_metadata_op_on_another_input():
    """Eager's backward unpacks a saved multi-output view whose counter moved since and
    raises its view error (fuzz seed 1016383): recorded as a saved tensor the program changed."""
    check_case(
        source="def f(a, b):\n    t = b.unbind(0)[1].unsqueeze(-1)\n    u = t * t\n"
        "    with torch.no_grad():\n        a.view(torch.int32).view(-1).t_()\n    return u,\n",
        inputs={"bases": [{"shape": [3], "dtype": "float32", "rg": True}],
                "args": [{"kind": "tensor", "base": 0, "expr": "x[1:]"}, {"kind": "tensor", "base": 0, "expr": "x"}]},
        seed=6,
    )


#: in-place ops on the intermediate ``t0`` between the two views
BETWEEN = {"unsqueeze_": "t0.unsqueeze_(-2)", "t_": "t0.t_()", "mul_": "t0.mul_(2)"}
#: the view eager makes before the op (stale or invalidated by it)
EARLIER = {"reshape": "t0.reshape(-1)", "unbind": "t0.unbind(0)[0]", "no_grad view": "NO_GRAD t0[0]"}


@pytest.mark.parametrize("order", ["later first", "earlier first"])
@pytest.mark.parametrize("earlier", sorted(EARLIER))
@pytest.mark.parametrize("op", sorted(BETWEEN))
def test_no_grad_view_made_after_the_op_that_invalidates_another(op, earlier, order):
    """Was an error on the later view's grad_fn where eager's is a leaf without one (fuzz seed
    1011341): the no_grad view eager made after the in-place op was rebuilt before the view
    that op invalidated, whose rebuild moves the counter; the invalidated ones come first."""
    made = EARLIER[earlier]
    first = (f"with torch.no_grad():\n        e = {made[8:]}" if made.startswith("NO_GRAD ") else f"e = {made}")
    ret = "return v, e" if order == "later first" else "return e, v"
    check_case(
        source=f"def f(a):\n    t0 = a * 2\n    {first}\n    {BETWEEN[op]}\n"
        f"    with torch.no_grad():\n        v = t0.select(0, 0)\n    {ret}\n",
        inputs={"bases": [{"shape": [2, 2], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": "x"}]},
        seed=7,
    )
