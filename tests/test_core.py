"""aot_function end to end against eager: plain programs, pytrees, non-tensor inputs,
recompilation, input mutations, outputs aliasing inputs and intermediates."""

from __future__ import annotations

import pytest
import torch
from eager_compare import check

import aotgrad
from aotgrad import OutputType
from aotgrad.compilers import nop

pytestmark = pytest.mark.usefixtures("shapes", "tensor_types")


def rg(*shape, requires_grad=True):
    return torch.randn(*shape, requires_grad=requires_grad)


def nonleaf(*shape):
    return torch.randn(*shape, requires_grad=True).mul(1)


# ---------------------------------------------------------------- 1. plain programs

@pytest.mark.parametrize("requires_grad", [True, False])
def test_mlp(requires_grad):
    def f(x, w1, b1, w2):
        return torch.nn.functional.gelu(x @ w1 + b1) @ w2

    check(f, lambda: (torch.randn(4, 8), rg(8, 16, requires_grad=requires_grad), rg(16, requires_grad=requires_grad), rg(16, 3, requires_grad=requires_grad)))


def test_no_grad_call_takes_inference_path():
    def f(x, w):
        return (x @ w).sin()

    cf = check(f, lambda: (rg(3, 4), rg(4, 2)), grad_mode=False)
    assert not cf.entries[0].training
    assert "inference" in cf.entries[0].graphs


def test_grad_mode_is_part_of_the_key():
    def f(x):
        return x.sin() * 2

    cf = aotgrad.aot_function(f, nop)
    x = rg(3)
    with torch.no_grad():
        assert not cf(x).requires_grad
    out = cf(x)
    assert out.requires_grad
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach().cos())
    with torch.no_grad():
        assert not cf(x).requires_grad
    assert len(cf.entries) == 2


def test_pytree_inputs_and_outputs():
    def f(d, pair, lst):
        a = d["a"] * pair[0]
        return {"sum": a + lst[0], "parts": [a.sin(), (pair[1].cos(),)]}, lst[1] * 2

    check(f, lambda: ({"a": rg(3)}, (rg(3), rg(3)), [rg(3), rg(2)]))


def test_tuple_output_stays_tuple_and_list_stays_list():
    cf = aotgrad.aot_function(lambda x: (x + 1, x * 2), nop)
    assert type(cf(rg(2))) is tuple
    cf = aotgrad.aot_function(lambda x: [x + 1, x * 2], nop)
    assert type(cf(rg(2))) is list
    cf = aotgrad.aot_function(lambda x: x + 1, nop)
    assert isinstance(cf(rg(2)), torch.Tensor)


def test_kwargs():
    def f(x, *, scale, w=None):
        return x * scale if w is None else x * w * scale

    cf = aotgrad.aot_function(f, nop)
    x = rg(3)
    w = rg(3)
    torch.testing.assert_close(cf(x, scale=2.0, w=w), f(x, scale=2.0, w=w))
    torch.testing.assert_close(cf(x, scale=3.0), f(x, scale=3.0))


def test_output_not_requiring_grad_is_marked():
    def f(x, w):
        return x @ w, x.detach() * 2, (x > 0)

    check(f, lambda: (rg(3, 3), rg(3, 3)))


# ---------------------------------------------------------------- 2. non-tensor inputs

def test_non_tensor_inputs_recompile_on_new_value():
    def f(x, n, scale, flag, none, name):
        y = x * scale
        if flag:
            y = y + n
        if name == "relu":
            y = y.relu()
        return y if none is None else y * 2

    cf = aotgrad.aot_function(f, nop)
    x = rg(4)
    for args in [(3, 2.0, True, None, "relu"), (3, 2.0, True, None, "id"), (4, 2.0, True, None, "relu"),
                 (3, 0.5, False, None, "relu"), (3, 2.0, True, 1, "relu")]:
        torch.testing.assert_close(cf(x, *args), f(x, *args))
    assert len(cf.entries) == 5
    cf(x, 3, 2.0, True, None, "relu")
    assert len(cf.entries) == 5


def test_bool_and_int_constants_are_distinct_keys():
    def f(x, k):
        return x * (10 if k is True else k)

    cf = aotgrad.aot_function(f, nop)
    x = rg(2)
    torch.testing.assert_close(cf(x, 1), x * 1)
    torch.testing.assert_close(cf(x, True), x * 10)


def test_non_tensor_output():
    check(lambda x, n: (x * n, n, None, "s"), lambda: (rg(2), 3))


# ---------------------------------------------------------------- 3. recompilation

def test_cache_hits_do_not_retrace():
    calls = []

    def f(x):
        calls.append(1)
        return x * 2

    cf = aotgrad.aot_function(f, nop)
    x = rg(3)
    cf(x)
    n = len(calls)
    for _ in range(3):
        cf(rg(3))
    assert len(calls) == n
    assert len(cf.entries) == 1


@pytest.mark.parametrize(
    "other",
    [
        lambda: torch.randn(4, requires_grad=True),
        lambda: torch.randn(3, dtype=torch.float64, requires_grad=True),
        lambda: torch.randn(3),
        lambda: torch.randn(6, requires_grad=True)[::2],
    ],
    ids=["shape", "dtype", "requires_grad", "stride"],
)
def test_recompiles_on_metadata_change(other):
    cf = aotgrad.aot_function(lambda x: x.sin(), nop)
    cf(torch.randn(3, requires_grad=True))
    x = other()
    out = cf(x)
    torch.testing.assert_close(out, x.sin())
    assert out.requires_grad == x.requires_grad
    assert out.stride() == x.sin().stride()
    assert len(cf.entries) == 2


# ---------------------------------------------------------------- 4. input data mutations

@pytest.mark.parametrize("requires_grad", [False, True])
def test_input_data_mutation(requires_grad):
    def f(x, y):
        x.add_(1)
        return x * y

    make = (lambda: (nonleaf(3), rg(3))) if requires_grad else (lambda: (torch.randn(3), rg(3)))
    check(f, make)


def test_mutation_through_view_of_input():
    def f(x):
        x[0].mul_(3)
        x[1:].add_(1)
        return x.sum()

    check(f, lambda: (nonleaf(3, 2),))
    check(f, lambda: (torch.randn(3, 2),))


def test_mutation_of_input_that_is_a_view():
    def f(x):
        x.mul_(2)
        return x + 1

    def make():
        base = torch.randn(4, 4, requires_grad=True).clone()
        return (base[1:3],)

    check(f, make)


def test_mutation_under_no_grad_is_hidden_from_autograd():
    def f(x, w):
        with torch.no_grad():
            x.mul_(2)
        return x * w

    check(f, lambda: (rg(3), rg(3)))
    check(f, lambda: (nonleaf(3), rg(3)))


def test_copy_from_requires_grad_makes_input_require_grad():
    def f(x, y):
        x.copy_(y * 2)
        return x.sum()

    check(f, lambda: (torch.randn(3), rg(3)))


def test_inplace_on_leaf_requiring_grad_raises_like_eager():
    def f(x):
        x.add_(1)
        return x

    cf = aotgrad.aot_function(f, nop)
    x = rg(3)
    before = x.detach().clone()
    with pytest.raises(RuntimeError, match="leaf Variable"):
        cf(x)
    assert torch.equal(x.detach(), before)
    # A cached entry compiled for a non-leaf must not accept a leaf either.
    cf(nonleaf(3))
    with pytest.raises(RuntimeError, match="leaf Variable"):
        cf(x)
    assert torch.equal(x.detach(), before)


def test_mutation_then_return_input():
    def f(x):
        x.mul_(2)
        return x, x.view(-1)

    check(f, lambda: (nonleaf(2, 2),))
    check(f, lambda: (torch.randn(2, 2),))


def test_keep_inference_input_mutations():
    def f(x):
        x.add_(1)
        return x * 2

    cf = aotgrad.aot_function(f, nop, keep_inference_input_mutations=True)
    x = torch.randn(3)
    ref = x.clone()
    out = cf(x)
    torch.testing.assert_close(x, ref + 1)
    torch.testing.assert_close(out, (ref + 1) * 2)
    assert "copy_" in cf.entries[0].graphs["inference"].code


def test_mutated_saved_input_backward():
    # sin's backward needs the input's value before the mutation.
    def f(x, w):
        x.sin_()
        return x * w

    check(f, lambda: (nonleaf(3), rg(3)))


# ---------------------------------------------------------------- 5. input metadata mutations

@pytest.mark.parametrize(
    "op",
    [lambda x: x.t_(), lambda x: x.transpose_(0, 1), lambda x: x.unsqueeze_(0),
     lambda x: x.as_strided_((2, 2), (1, 2))],
    ids=["t_", "transpose_", "unsqueeze_", "as_strided_"],
)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_input_metadata_mutation(op, requires_grad):
    def f(x):
        op(x)
        return x * 2

    make = (lambda: (nonleaf(2, 2),)) if requires_grad else (lambda: (torch.randn(2, 2),))
    # as_strided_ to a constant geometry is only valid for the sizes it was written for
    check(f, make, specialises="as_strided_" in op.__code__.co_names)


def test_metadata_and_data_mutation():
    def f(x):
        x.t_()
        x.add_(1)
        return x[0]

    check(f, lambda: (nonleaf(2, 3),))
    check(f, lambda: (torch.randn(2, 3),))


def test_t_on_leaf_raises():
    cf = aotgrad.aot_function(lambda x: x.t_(), nop)
    with pytest.raises(RuntimeError):
        cf(rg(2, 2))


# ---------------------------------------------------------------- 6. outputs aliasing inputs

ALIAS_OF_INPUT = {
    "view": lambda x: x.view(-1),
    "transpose": lambda x: x.transpose(0, 1),
    "slice": lambda x: x[1:],
    "select": lambda x: x[0],
    "unbind": lambda x: x.unbind(0),
    "split": lambda x: x.split(1),
    "view_of_view": lambda x: x.t()[1:].unsqueeze(0),
    "identity": lambda x: x,
    "same_alias_twice": lambda x: (lambda v: (v, v))(x.view(-1)),
    "input_twice": lambda x: (x, x),
    "detach": lambda x: x.detach(),
    "dtype_view": lambda x: x.view(torch.int32),
    "mixed": lambda x: (x * 2, x[0], x.t()),
}


#: programs whose number of outputs is a size: each size is its own entry
SIZE_DEPENDENT_OUTPUTS = ("unbind", "split")


@pytest.mark.parametrize("name", list(ALIAS_OF_INPUT))
@pytest.mark.parametrize("kind", ["leaf", "nonleaf", "nograd"])
def test_output_aliases_input(name, kind):
    fn = ALIAS_OF_INPUT[name]
    make = {"leaf": lambda: (rg(3, 3),), "nonleaf": lambda: (nonleaf(3, 3),), "nograd": lambda: (torch.randn(3, 3),)}[kind]
    cf = check(fn, make, specialises=name in SIZE_DEPENDENT_OUTPUTS)
    if kind != "nograd" and name not in ("identity", "input_twice", "mixed"):
        types = {o.output_type for o in cf.metadata.output_info}
        assert types <= {OutputType.alias_of_input}


def test_aliased_output_regenerated_from_real_input():
    cf = aotgrad.aot_function(lambda x: x[1:], nop)
    x = torch.randn(4, requires_grad=True).clone()
    out = cf(x)
    assert out._base is x
    with torch.no_grad():
        out.fill_(7)
    assert torch.equal(x.detach()[1:], torch.full((3,), 7.0))


def test_alias_output_backward_and_later_mutation():
    def f(x, w):
        return x.t(), (x * w).sum()

    check(f, lambda: (nonleaf(2, 3), rg(2, 3)))


# ---------------------------------------------------------------- 7. outputs aliasing intermediates

ALIAS_OF_INTERMEDIATE = {
    "view": lambda x: (x * 2).view(-1),
    "two_views_one_base": lambda x: (lambda y: (y[0], y.t()))(x * 2),
    "base_is_output": lambda x: (lambda y: (y, y.view(-1)))(x * 2),
    "base_is_output_after": lambda x: (lambda y: (y.view(-1), y))(x * 2),
    "unbind": lambda x: (x * 2).unbind(0),
    "view_under_no_grad": lambda x: (lambda y: (y, y.detach().view(-1)))(x * 2),
    "chain": lambda x: (x.sin()).t()[0].unsqueeze(1),
    "duplicate_intermediate": lambda x: (lambda y: (y, y))(x.cos()),
}


@pytest.mark.parametrize("name", list(ALIAS_OF_INTERMEDIATE))
@pytest.mark.parametrize("requires_grad", [True, False])
def test_output_aliases_intermediate(name, requires_grad):
    fn = ALIAS_OF_INTERMEDIATE[name]
    check(fn, lambda: (rg(3, 3, requires_grad=requires_grad),), specialises=name in SIZE_DEPENDENT_OUTPUTS)


def test_mutate_alias_of_intermediate_then_backward():
    def f(x):
        return (x * 2).view(-1)

    cf = aotgrad.aot_function(f, nop)
    x = rg(2, 2)
    out = cf(x)
    out.mul_(3)  # eager allows this: the view was not created inside a custom Function
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((2, 2), 6.0))


def test_metadata_table_repr():
    def f(x, y):
        x.add_(1)
        return x.view(-1), y * 2, (y * 3).t()

    cf = aotgrad.aot_function(f, nop)
    cf(torch.randn(2, 2), rg(2, 2))
    text = repr(cf.metadata)
    assert "alias_of_input" in text and "non_alias" in text
    assert "alias_of_intermediate_save_as_output" in text
    md = cf.metadata
    assert md.mutated_input_indices == (0,)
    assert md.aliased_output_indices == (0, 2)


# ---------------------------------------------------------------- errors

def test_data_dependent_control_flow_names_user_line():
    def f(x):
        if x.sum() > 0:  # the user's line
            return x * 2
        return x

    cf = aotgrad.aot_function(f, nop)
    with pytest.raises(aotgrad.AotgradCompileError, match="test_core.py"):
        cf(torch.randn(3))


def test_item_is_rejected_with_a_clear_error():
    cf = aotgrad.aot_function(lambda x: x * x.sum().item(), nop)
    with pytest.raises(aotgrad.AotgradCompileError, match="item|data-dependent|test_core"):
        cf(torch.randn(3))


def test_closure_parameter_requiring_grad_is_rejected():
    w = torch.randn(3, requires_grad=True)
    cf = aotgrad.aot_function(lambda x: x * w, nop)
    with pytest.raises(aotgrad.AotgradCompileError, match="requires grad"):
        cf(torch.randn(3))


def test_closure_constant_tensor_is_fine():
    c = torch.randn(3)
    check(lambda x: x * c, lambda: (rg(3),))


def test_eager_errors_are_raised_unchanged():
    cf = aotgrad.aot_function(lambda x, y: x @ y, nop)
    with pytest.raises(RuntimeError):
        cf(torch.randn(2, 3), torch.randn(2, 3))


# ---------------------------------------------------------------- compilers and partitioner hooks

def test_custom_compilers_and_partition_fn_are_used():
    seen = []

    def fw(gm, example_inputs):
        seen.append(("fw", [n.name for n in gm.graph.nodes if n.op == "placeholder"]))
        return gm

    def bw(gm, example_inputs):
        seen.append(("bw", len(example_inputs)))
        return gm

    def part(joint, joint_inputs, *, num_fwd_outputs):
        names = [n.name for n in joint.graph.nodes if n.op == "placeholder"]
        assert names == ["primals_1", "primals_2", "tangents_1"]
        seen.append(("part", num_fwd_outputs))
        return aotgrad.partition.default_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs)

    cf = aotgrad.aot_function(lambda x, y: (x * y).sum(), fw, bw, part)
    x, y = rg(3), rg(3)
    cf(x, y).backward()
    torch.testing.assert_close(x.grad, y.detach())
    assert [s[0] for s in seen] == ["part", "fw", "bw"]
    assert seen[1][1] == ["primals_1", "primals_2"]


def test_print_graph(capsys):
    cf = aotgrad.aot_function(lambda x: x.sin(), aotgrad.compilers.print_graph)
    cf(rg(2))
    out = capsys.readouterr().out
    assert "aten.sin" in out and "aten.cos" in out


def test_torch_partitioner_works_unchanged():
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    def f(x, w):
        return (x @ w).sin().cos().sum()

    cf = aotgrad.aot_function(f, nop, partition_fn=min_cut_rematerialization_partition)
    check(f, lambda: (rg(3, 4), rg(4, 5)), compiled=cf, mutate_outputs=False)


def test_torch_default_partitioner_works_unchanged():
    from torch._functorch.partitioners import default_partition as torch_default

    def f(x, w):
        return torch.nn.functional.dropout((x @ w).relu(), 0.0).sum()

    cf = aotgrad.aot_function(f, nop, partition_fn=torch_default)
    check(f, lambda: (rg(3, 4), rg(4, 5)), compiled=cf, mutate_outputs=False)
    bw = cf.entries[0].graphs["backward"].code
    assert "aten.mm" in bw and bw.count("aten.mm") == 2  # only the two grad matmuls


def test_unused_random_op_still_draws():
    def f(x):
        torch.rand(3)  # unused, but it advances the generator in eager
        return x + torch.rand(3)

    cf = aotgrad.aot_function(f, nop)
    x = torch.randn(3)
    torch.manual_seed(0)
    out = cf(x)
    torch.manual_seed(0)
    torch.testing.assert_close(out, f(x))


def test_dropout_on_non_contiguous_input_matches_eager_mask():
    def f(x):
        return torch.nn.functional.dropout(x.t(), 0.5)

    cf = aotgrad.aot_function(f, nop)
    x = rg(4, 6)
    torch.manual_seed(0)
    a = cf(x)
    torch.manual_seed(0)
    b = f(x)
    torch.testing.assert_close(a, b)
    a.sum().backward()
    ga = x.grad.clone()
    x.grad = None
    b.sum().backward()
    torch.testing.assert_close(ga, x.grad)


def test_input_unused_by_outputs_keeps_grad_none():
    def f(a, b):
        b.copy_(b.sum(0, keepdim=True))
        return (a * 2).sum()

    leaf_a, leaf_b = rg(3), rg(1, 3)
    cf = aotgrad.aot_function(f, nop)
    cf(leaf_a, leaf_b.mul(1)).backward()
    assert leaf_b.grad is None
    torch.testing.assert_close(leaf_a.grad, torch.full((3,), 2.0))


def test_detach_inplace_of_input_detaches_the_callers_tensor():
    # (tests/test_detach_inplace.py has the cases)
    def f(a):
        y = a * 3
        a.detach_()
        return y, a * 2

    w = rg(3)
    a = w.mul(1)
    y, z = aotgrad.aot_function(f, nop)(a)
    assert (a.requires_grad, a.is_leaf, z.requires_grad) == (False, True, False)
    y.sum().backward()
    torch.testing.assert_close(w.grad, torch.full((3,), 3.0))


def test_mutation_through_detached_alias_is_hidden_from_autograd():
    def f(a, w):
        a.detach().add_(1)
        return a * w

    check(f, lambda: (rg(3), rg(3)))


def test_double_backward_has_every_term():
    """Second derivatives through a compiled function are eager's (tests/test_double_backward.py
    covers the rest)."""
    x = rg(3)
    cf = aotgrad.aot_function(lambda x: (x ** 3).sum(), nop)
    (g,) = torch.autograd.grad(cf(x), x, create_graph=True)
    g.sum().backward()
    torch.testing.assert_close(x.grad, 6 * x.detach())


def test_sparse_input_is_rejected_before_anything_runs():
    a = torch.eye(3).to_sparse_csr()
    cf = aotgrad.aot_function(lambda a, b: torch.sparse.mm(a, b), nop)
    with pytest.raises(aotgrad.AotgradCompileError, match="layout"):
        cf(a, torch.randn(3, 2))
