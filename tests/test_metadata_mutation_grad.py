"""Metadata mutation of a non-leaf input that requires grad (issue 12, class 4): eager
records it (``x.t_()`` gives ``x`` a TBackward) and later uses of ``x`` differentiate through
it; aotgrad must give eager's outputs, input afterwards and gradients, not autograd's "view
created in no_grad mode" error."""

from __future__ import annotations

import pytest
import torch
from eager_compare import check

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
