"""The layout of a leaf's ``.grad`` in its size-1 dims, compared with eager (issue 12).

A leaf's ``AccumulateGrad`` steals the incoming gradient where it obeys the layout contract
(the leaf's strides in every dim of size != 1), so the strides of its size-1 dims are
whatever eager's last backward op produced. The cases here are those where that is decided
by autograd's structure around the compiled function rather than by kernels: an input that
is an autograd view whose data the program writes gets its history rerouted through its base
(``CopySlices`` after a recorded write, a regenerated ``AsStridedBackward0`` after a no_grad
one), which lays the gradient out as the base (``runtime._as_input_in_size1_dims``)."""
import pytest

from fuzz.harness import check_case

#: (leaf shape, the view of it (or of a copy of it) the program gets): each has size-1 dims
#: whose stride in the view differs from the contiguous one
VIEWS = {
    "t_of_row": ([1, 4], "x.t()"),
    "t_of_column": ([4, 1], "x.t()"),
    "transpose_3d": ([3, 1, 2], "x.transpose(0, 1)"),
    "permute_3d": ([2, 1, 3], "x.permute(2, 0, 1)"),
    "transpose_last": ([4, 1, 2], "x.transpose(-1, -2)"),
    "unsqueeze_t": ([1, 3], "x.t().unsqueeze(0)"),
}

#: in-place writes of ``a`` (a no_grad region's, or recorded)
WRITES = {
    "add_": "a.add_(1.5)",
    "mul_": "a.mul_(2)",
    "sin_": "a.sin_()",
    "copy_": "a.copy_(torch.ones_like(a))",
    "fill_": "a.fill_(0.5)",
    "setitem": "a[0] = 2.0",
    "clamp_": "a.clamp_(-0.5, 0.5)",
}

#: what the program computes from ``a`` after the write
USES = {
    "scale": "return a * 2,",
    "sigmoid": "return a.sigmoid(), torch.ones_like(a)",
    "sum_of_two": "return a * 3, a.exp()",
}


def _check(source: str, shape: list[int], expr: str) -> None:
    check_case(
        source=source,
        inputs={"bases": [{"shape": shape, "dtype": "float32", "rg": True}], "args": [{"kind": "tensor", "base": 0, "expr": expr}]},
        modes=["grad", "grad"],
        seed=5,
    )


@pytest.mark.parametrize("use", sorted(USES))
@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_view_of_leaf_written_under_no_grad(view: str, write: str, use: str) -> None:
    """Eager regenerates the view's grad_fn as ``AsStridedBackward0`` off the leaf: the
    leaf's ``.grad`` is laid out as the leaf, also in its size-1 dims."""
    shape, expr = VIEWS[view]
    _check(f"def f(a):\n    with torch.no_grad():\n        {WRITES[write]}\n    {USES[use]}\n", shape, expr)


@pytest.mark.parametrize("use", sorted(USES))
@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_recorded_write_of_view_of_copy(view: str, write: str, use: str) -> None:
    """A recorded write through a view of the leaf's copy: eager's ``CopySlices`` lays the
    copy's gradient out as the copy, which reaches the leaf through ``CloneBackward0``."""
    shape, expr = VIEWS[view]
    _check(f"def f(a):\n    {WRITES[write]}\n    {USES[use]}\n", shape, expr.replace("x.", "x.clone().", 1))


def test_fuzz_seed_421811() -> None:
    """A recorded sin_ of a transposed copy of a [3, 1] leaf (seed 420000 run)."""
    check_case(
        source="""
def f(s, a, b, mode):
    b.sin_()
    t0 = b * 2
    t0.copy_(b)
    return t0, t0, t0
""",
        inputs={'bases': [{'shape': [4, 2, 2], 'dtype': 'float32', 'rg': True}, {'shape': [3, 1], 'dtype': 'float64', 'rg': True}, {'shape': [2, 4, 3], 'dtype': 'float32', 'rg': True}], 'args': [{'kind': 'value', 'value': 2.0}, {'kind': 'tensor', 'base': 0, 'expr': 'x.transpose(0, 1)'}, {'kind': 'tensor', 'base': 1, 'expr': 'x.clone().t()'}, {'kind': 'value', 'value': 'sum'}]},
        modes=['no_grad', 'grad'],
        seed=21811,
    )


def test_fuzz_seed_420613() -> None:
    """A no_grad fill_ then a recorded mul_ of a transposed copy of a [4, 1, 2] leaf (seed 420000 run)."""
    check_case(
        source="""
def f(a, k, s, mode):
    with torch.no_grad():
        a.fill_(0.5)
    t0 = a * 2
    a.mul_(t0)
    t1 = t0.prod()
    t2 = torch.where(t0 > 0, t0, t1)
    return t2,
""",
        inputs={'bases': [{'shape': [4, 1, 2], 'dtype': 'float32', 'rg': True}, {'shape': [4, 4], 'dtype': 'float64', 'rg': True}], 'args': [{'kind': 'tensor', 'base': 0, 'expr': 'x.clone().transpose(-1, -2)'}, {'kind': 'value', 'value': 3}, {'kind': 'value', 'value': -1.5}, {'kind': 'value', 'value': 'sum'}]},
        modes=['no_grad', 'grad'],
        seed=20613,
    )


#: in-place dim permutations autograd records on a non-leaf input
PERMUTING = {
    "t_": "a.t_()",
    "transpose_": "a.transpose_(0, -1)",
    "swapdims_": "a.swapdims_(-2, -1)",
    "two_transposes": "a.transpose_(0, 1).transpose_(1, -1)",
}

#: (leaf shape, the non-leaf input made from it): 2-D ones for t_
COPIES = {
    "column": ([2, 1], "x.clone()"),
    "row": ([1, 3], "x.clone()"),
    "column_times": ([3, 1], "x * 2"),
    "3d": ([2, 1, 3], "x.clone()"),
    "3d_front": ([1, 2, 2], "x.clone()"),
}


@pytest.mark.parametrize("after", ["return a,", "return a.sin(),", "return a.detach(), a"])
@pytest.mark.parametrize("op", sorted(PERMUTING))
@pytest.mark.parametrize("copy", sorted(COPIES))
def test_recorded_permutation_of_non_leaf_input(copy: str, op: str, after: str) -> None:
    """A non-leaf input whose dims the program permutes in place with grad recording: eager's
    history holds the transposes, whose backward transposes the gradient back (the runtime
    replays them as transposes, not as ``as_strided_``, whose backward lays the gradient out
    as the input). Fuzz seed 422539 (seed 420000 run), minimized: ``a.t_()`` of ``x.clone()``
    for a [2, 1] leaf."""
    shape, expr = COPIES[copy]
    if op == "t_" and len(shape) != 2:
        pytest.skip("t_ is 2-D only")
    _check(f"def f(a):\n    {PERMUTING[op]}\n    {after}\n", shape, expr)


#: a view of an input returned by the program, whose strides FakeTensor's view kernels
#: compute otherwise than ATen's in size-1 dims
RESHAPES = {
    "reshape": "return a.reshape(1, -1),",
    "view": "return a.view(-1),",
    "flatten": "return a.flatten(),",
    "view_and_use": "return a.view(1, -1), a * 2",
}

#: inputs with size-1 dims whose strides are not the contiguous ones
PERMUTED = {
    "permute_131": ([1, 3, 1], "x.permute(2, 0, 1)"),
    "permute_113": ([1, 1, 3], "x.permute(2, 1, 0)"),
    "t_13": ([1, 3], "x.t()"),
    "transpose_213": ([2, 1, 3], "x.transpose(0, 1)"),
}


@pytest.mark.parametrize("out", sorted(RESHAPES))
@pytest.mark.parametrize("inp", sorted(PERMUTED))
def test_returned_view_replayed_as_eager_took_it(inp: str, out: str) -> None:
    """The runtime rebuilds a returned view of an input by replaying its view ops (eager's
    ``ViewBackward0``, whose gradient keeps the view's stride order) where that gives eager's
    geometry, checked with ATen's meta kernels where FakeTensor's disagree in size-1 dims;
    ``as_strided``'s backward would lay the gradient out as the input. Fuzz seed 430394
    (seed 430000 run), minimized: ``d.reshape(1, 3)`` of ``x.permute(2, 0, 1)``, x [1, 3, 1]."""
    shape, expr = PERMUTED[inp]
    _check(f"def f(a):\n    {RESHAPES[out]}\n", shape, expr)
