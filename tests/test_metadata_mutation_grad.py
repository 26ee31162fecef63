"""Metadata mutation of a non-leaf input that requires grad (issue 12, class 4): eager
records it (``x.t_()`` gives ``x`` a TBackward) and later uses of ``x`` differentiate through
it; aotgrad must give eager's outputs, input afterwards and gradients, not autograd's "view
created in no_grad mode" error."""

from __future__ import annotations

import pytest
import torch
from eager_compare import check

import aotgrad
from aotgrad.compilers import nop
from aotgrad.errors import AotgradCompileError

METADATA_MUTATIONS = {
    "t_": lambda x: x.t_(),
    "transpose_": lambda x: x.transpose_(0, 1),
    "swapdims_": lambda x: x.swapdims_(0, 1),
    "unsqueeze_": lambda x: x.unsqueeze_(1),
    "squeeze_": lambda x: x.unsqueeze_(0).squeeze_(0),
    "as_strided_": lambda x: x.as_strided_((3, 2), (1, 3), 0),
}

USES = {
    "sin": lambda x, w: x.sin(),
    "matmul": lambda x, w: x.reshape(3, 2) @ w,
    "mul_view": lambda x, w: (x * 2).view(-1) * w.view(-1)[0],
    "none": lambda x, w: w * 2,
}


def _inputs():
    leaf = torch.randn(2, 3, requires_grad=True)
    return (leaf * 1, torch.randn(2, 2, requires_grad=True))


@pytest.mark.parametrize("use", sorted(USES))
@pytest.mark.parametrize("meta", sorted(METADATA_MUTATIONS))
def test_metadata_mutation_of_nonleaf_input_then_use(meta, use):
    def f(x, w):
        METADATA_MUTATIONS[meta](x)
        return USES[use](x, w), x

    check(f, _inputs)


DATA_WRITES_AFTER = {
    "row_mul_": lambda x: x[0].mul_(2),
    "whole_add_": lambda x: x.add_(1),
    "column_fill_": lambda x: x.select(-1, 0).mul_(3),
}


@pytest.mark.parametrize("write", sorted(DATA_WRITES_AFTER))
@pytest.mark.parametrize("meta", ["t_", "transpose_", "as_strided_", "unsqueeze_"])
def test_metadata_mutation_then_data_write_gradient_reaches_the_leaf(meta, write):
    """A write through a view of the input *after* its metadata changed lands where eager's
    does, and the gradient that reaches the leaf behind the input is eager's (it came back
    transposed when the joint wrote through a view of a view after ``t_``)."""
    import aotgrad
    from aotgrad.compilers import nop

    def f(x):
        METADATA_MUTATIONS[meta](x)
        DATA_WRITES_AFTER[write](x)
        return x.view(x.shape) * torch.arange(float(x.numel())).view(x.shape)

    results = []
    for fn in (f, aotgrad.aot_function(f, nop)):
        leaf = torch.arange(6.0).reshape(2, 3).requires_grad_()
        x = leaf * 1
        out = fn(x)
        out.sum().backward()
        results.append((out.detach(), x.detach(), x.stride(), leaf.grad))
    (out_e, x_e, st_e, g_e), (out_a, x_a, st_a, g_a) = results
    torch.testing.assert_close(out_a, out_e)
    torch.testing.assert_close(x_a, x_e)
    assert st_a == st_e
    torch.testing.assert_close(g_a, g_e)


DATA_WRITES_BEFORE = {
    "masked_fill_": lambda x: x.masked_fill_(x > 0, 0.0),
    "mul_": lambda x: x.mul_(2),
    "clamp_": lambda x: x.clamp_(-0.5, 0.5),
}


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("write", sorted(DATA_WRITES_BEFORE))
@pytest.mark.parametrize("meta", ["t_", "transpose_", "swapdims_", "unsqueeze_", "as_strided_"])
@pytest.mark.parametrize("layout", ["transposed", "contiguous"])
def test_data_write_under_no_grad_then_metadata_mutation_keeps_the_elements(layout, meta, write, grad_mode):
    """A non-leaf input requiring grad, written under no_grad and then re-strided: its new
    data is read back in the input's entry geometry. That read went through the storage of
    the written value, whose layout the kernels chose differently from the trace for a
    transposed input: the caller's tensor came back with its elements permuted (silently;
    fuzz seed 100316)."""

    def f(a):
        with torch.no_grad():
            DATA_WRITES_BEFORE[write](a)
        METADATA_MUTATIONS[meta](a)
        return a, a.sum()

    def inputs():
        if layout == "contiguous":
            return (torch.randn(3, 2, requires_grad=True) * 1,)
        return (torch.randn(2, 3, requires_grad=True).clone().t(),)  # strides (1, 3)

    if layout == "transposed" and meta == "as_strided_":
        # as_strided_ of a non-contiguous input after an in-place op on it is exact, or
        # refused where the written value's traced layout is not eager's (masked_fill_):
        # a clear error naming the line
        try:
            with torch.set_grad_enabled(grad_mode):
                aotgrad.aot_function(f, nop)(*inputs())
        except AotgradCompileError as e:
            assert "as_strided_ at" in str(e) and "test_metadata_mutation_grad" in str(e), e
            return
    check(f, inputs, grad_mode=grad_mode)


@pytest.mark.parametrize("meta", ["transpose_", "t_", "unsqueeze_", "as_strided_"])
@pytest.mark.parametrize("root", ["intermediate", "input"])
def test_write_through_view_taken_before_base_metadata_mutation(root, meta):
    """A view of a tensor, then an in-place metadata op on that tensor, then a write through
    the older view that autograd records: eager's gradient skips the written elements as the
    view addressed them at creation. aotgrad gives eager's results or refuses it at compile
    time naming the write (the traced autograd replays the view on the re-laid-out base; the
    gradient went to other elements, silently; fuzz seed 109681)."""
    metas = {
        "transpose_": lambda t: t.transpose_(0, 2),
        "t_": lambda t: t.squeeze_(1).t_(),
        "unsqueeze_": lambda t: t.unsqueeze_(0),
        "as_strided_": lambda t: t.as_strided_((4, 1, 4), (1, 16, 4)),
    }

    def f(a):
        t0 = a.clone() if root == "intermediate" else a
        t1 = t0.select(1, 0)
        metas[meta](t0)
        t1[0] = 1.0
        return t0 * 2

    def inputs():
        return (torch.randn(4, 1, 4, requires_grad=True) * 1,)

    try:
        aotgrad.aot_function(f, nop)(*inputs())
    except AotgradCompileError as e:
        assert "writes through a view taken before" in str(e) and "t1[0] = 1.0" in str(e), e
        return
    check(f, inputs)


# ------------------------------------------------- under no_grad, on an input that views a leaf

VIEWS_OF_LEAF = {
    "permute": lambda leaf: leaf.permute(2, 0, 1),
    "as_strided": lambda leaf: leaf.as_strided((1, 2), (2, 1), 5),
    "slice": lambda leaf: leaf[1:],
    "transpose": lambda leaf: leaf.transpose(0, 2),
    "select": lambda leaf: leaf[0],
}
NO_GRAD_METADATA_MUTATIONS = {
    "t_": lambda x: x.t_() if x.dim() <= 2 else x.transpose_(0, 1),
    "transpose_": lambda x: x.transpose_(0, -1),
    "unsqueeze_": lambda x: x.unsqueeze_(1),
    "squeeze_": lambda x: x.unsqueeze_(0).squeeze_(0),
    "as_strided_": lambda x: x.as_strided_((1,), (1,), x.storage_offset()),
}
AFTERWARDS = {
    "returned": lambda x: (x,),
    "used": lambda x: (x.sin(), x),
    "used under no_grad": lambda x: (torch.no_grad()(lambda: x * 2)(), x.pow(2)),
}


@pytest.mark.parametrize("after", sorted(AFTERWARDS))
@pytest.mark.parametrize("meta", sorted(NO_GRAD_METADATA_MUTATIONS))
@pytest.mark.parametrize("view", sorted(VIEWS_OF_LEAF))
def test_no_grad_metadata_mutation_of_input_viewing_a_leaf(view, meta, after):
    """Eager allows an in-place metadata op on a view of a leaf under no_grad, and the view's
    grad_fn then follows its new geometry. aotgrad raised 'a view of a leaf Variable that
    requires grad is being used in an in-place operation' writing the geometry back (grad
    mode on), or kept the view's old grad_fn (wrong gradient shape; fuzz seeds 200085,
    200843, 200975, 201006, 201277). Returned, it is eager's; used afterwards with grad
    recording in its new geometry: as eager where the op permutes the dims or changes size-1
    dims (the trace records it on a copy of the input: InputInfo.relaid_out_under_no_grad;
    without it the gradient went through the old geometry, silently wrong where the shapes
    agree, as for transpose_ of a 2x4x2 slice); refused naming both lines after as_strided_,
    whose new geometry may name other elements."""

    def f(x):
        with torch.no_grad():
            NO_GRAD_METADATA_MUTATIONS[meta](x)
        return AFTERWARDS[after](x)

    def make():
        return (VIEWS_OF_LEAF[view](torch.randn(3, 4, 2, requires_grad=True)),)

    if after == "returned" or meta != "as_strided_":
        check(f, make)
        return
    with pytest.raises(AotgradCompileError, match="used with grad recording"):
        aotgrad.aot_function(f, nop)(*make())


VIEWS_IN_PROGRAM = {
    "input itself": lambda x: x,
    "flatten": lambda x: x.flatten(),
    "view_as": lambda x: x.view_as(x),
    "t().t()": lambda x: x.t().t() if x.dim() == 2 else x.unsqueeze(0).squeeze(0),
}


@pytest.mark.parametrize("meta", sorted(NO_GRAD_METADATA_MUTATIONS))
@pytest.mark.parametrize("inner", sorted(VIEWS_IN_PROGRAM))
@pytest.mark.parametrize("view", ["as_strided", "select", "slice", "leaf itself"])
def test_grad_mode_metadata_mutation_of_a_view_of_a_leaf_raises_as_eager(view, inner, meta):
    """In grad mode eager refuses an in-place metadata op on a view of a leaf that requires
    grad ('a view of a leaf Variable ...'): an input viewing a leaf, or a view the program
    takes of such an input or of a leaf input (fuzz seeds 109406, 110102: aotgrad ran it)."""

    def f(x):
        NO_GRAD_METADATA_MUTATIONS[meta](VIEWS_IN_PROGRAM[inner](x))
        return x * 2

    def make():
        leaf = torch.randn(3, 4, 2, requires_grad=True)
        return (leaf if view == "leaf itself" else VIEWS_OF_LEAF[view](leaf),)

    check(f, make)


#: in-place metadata ops that leave the geometry as it was
NO_OP_METADATA = {
    "transpose_0_0": "a.transpose_(0, 0)",
    "transpose_-1_-1": "a.transpose_(-1, -1)",
    "t_twice": "a.t_().t_()",
    "as_strided_same": "a.as_strided_(a.shape, a.stride(), a.storage_offset())",
}


# (a use with grad after a no_grad metadata op of a view is
# test_no_grad_metadata_mutation_of_input_viewing_a_leaf's)
@pytest.mark.parametrize("ret,grad_mode", [("input", "grad"), ("use", "grad"), ("input", "no_grad")])
@pytest.mark.parametrize("layout", ["x.clone().t()", "x * 1", "x.clone()[:, :1]"])
@pytest.mark.parametrize("meta", sorted(NO_OP_METADATA))
def test_no_op_metadata_mutation_keeps_the_gradient_layout(meta, layout, ret, grad_mode):
    """Was .grad stride (2, 1) where eager has (1, 1) (fuzz seed 412251): the write back of a
    recorded metadata op that changed nothing was an as_strided_, whose backward lays the
    gradient out as the base; eager's history gains a view op that changes nothing (an
    as_strided_ of the same geometry, and any under no_grad, do go through as_strided)."""
    from tests.fuzz import harness

    body = NO_OP_METADATA[meta]
    if grad_mode == "no_grad":
        body = f"with torch.no_grad():\n        {body}"
    result = "a" if ret == "input" else "a.sin()"
    harness.check_case(
        source=f"def f(a):\n    {body}\n    return {result},\n",
        inputs={"bases": [{"shape": [1, 2], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": layout}]},
        impl=harness.aotgrad_impl,
        seed=7,
    )


@pytest.mark.parametrize("caller", ["grad", "no_grad"])
@pytest.mark.parametrize("meta", ["a.unsqueeze_(1)", "a.t_()", "a.transpose_(0, 1)", "a.squeeze_(0).unsqueeze_(-1)"])
def test_metadata_mutation_under_no_grad_of_non_leaf_input_is_not_recorded(meta, caller):
    """Was a recorded as_strided_ (AsStridedBackward1) under a no_grad caller, whose entry
    runs its write backs with grad enabled (an output requires grad): eager records nothing,
    the input keeps its grad_fn (CloneBackward0), and the backward raises eager's shape error
    (fuzz seed 432613)."""
    from tests.fuzz import harness

    harness.check_case(
        source=f"def f(a):\n    with torch.no_grad():\n        {meta}\n    return a,\n",
        inputs={"bases": [{"shape": [1, 3], "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": "x.clone()"}]},
        modes=[caller],
        impl=harness.aotgrad_impl,
        seed=11,
    )
