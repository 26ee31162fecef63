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
