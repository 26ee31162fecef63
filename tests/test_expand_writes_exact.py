"""Writes through a view chain with an ``expand`` step are bit-exact, or refused.

Functionalization replays a write into a view onto its base through each view step's
inverse, and ``expand``'s is ``base + sum_to(new - base)``: it loses ``-0.0``, turns ``inf``
into ``nan`` (``1 - inf + inf``), rounds (``1e8 + (2 - 1e8) == 0`` in float32) and mangles
the bit patterns written through a ``view(dtype)``. core/overlapping_writes.py writes every
such destination into its root's memory locations instead; these tests compare eager's
values and aotgrad's bit for bit (``torch.equal`` of the bits, so ``-0.0``, ``nan`` and
``inf`` count). Where the exact write cannot be expressed (an ``out=`` tuple, a view of
another element size), the write is refused at compile time, naming the op and the line.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from eager_compare import check

import aotgrad
from aotgrad.compilers import nop
from aotgrad.errors import AotgradCompileError

#: old values the lossy inverse gets wrong when written over: 1e8 (rounding), inf and -inf
#: (``nan``), 0.0 (written -0.0: the sign), nan (written a number)
OLD = [1e8, 1e8, float("inf"), float("-inf"), 0.0, float("nan"), 3.0, -2.0]
NEW = [2.0, -3.0, 1.0, 5.0, -0.0, 1.0, float("inf"), float("nan")]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values as integers of its element size (``-0.0``, each ``nan`` its own)."""
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.is_floating_point():
        return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def _leaves(x) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def assert_bit_exact(fn, make_inputs, *, grad_mode: bool = True) -> None:
    """``fn`` through aotgrad gives eager's outputs and leaves its inputs as eager does, bit
    for bit (where eager raises, aotgrad must raise too)."""
    eager_in, comp_in = make_inputs(), make_inputs()
    compiled = aotgrad.aot_function(fn, nop)
    with torch.set_grad_enabled(grad_mode):
        torch.manual_seed(0)
        try:
            eager_out = fn(*eager_in)
        except RuntimeError:
            with pytest.raises(Exception):
                compiled(*comp_in)
            return
        torch.manual_seed(0)
        comp_out = compiled(*comp_in)
    pairs = list(zip(_leaves(eager_out), _leaves(comp_out))) + list(zip(_leaves(eager_in), _leaves(comp_in)))
    for k, (e, c) in enumerate(pairs):
        assert e.dtype == c.dtype and e.shape == c.shape, f"tensor {k}: {e.dtype}{tuple(e.shape)} vs {c.dtype}{tuple(c.shape)}"
        assert torch.equal(_bits(e), _bits(c)), f"tensor {k}: eager {e} vs aotgrad {c}"


def _fitted(src: torch.Tensor, dest: torch.Tensor) -> torch.Tensor:
    """``src``'s first elements, shaped as ``dest``, as ``dest``'s dtype (a bit cast where
    ``dest`` is a ``view(dtype)``: the bit patterns of inf, nan and -0.0 are written)."""
    part = src.reshape(-1)[: dest.numel()].reshape(dest.shape)
    return part if part.dtype == dest.dtype else part.view(dest.dtype)


I32 = torch.int32
# views whose chain from the root has an ``expand`` step, leaving elements that do not share
# memory (t: 8 float32 elements)
CHAINS = {
    "select": lambda t: t.expand(2, 8)[0],
    "slice of select": lambda t: t.expand(2, 8)[1, 2:6],
    "view(int32) after select": lambda t: t.expand(2, 8)[0].view(I32),
    "select after view(int32)": lambda t: t.expand(2, 8).view(I32)[1],
    "view of size-1 expand": lambda t: t.expand(1, 8).view(8),
    "reshape of size-1 expand": lambda t: t.expand(1, 8).reshape(8),
    "view(int32) of size-1 expand": lambda t: t.expand(1, 8).view(I32),
    "transpose": lambda t: t.expand(2, 8).transpose(0, 1)[:, 0],
    "t": lambda t: t.expand(2, 8).t()[:, 1],
    "permute": lambda t: t.expand(2, 8).permute(1, 0)[:, 0],
    "movedim": lambda t: t.expand(2, 8).movedim(0, 1)[:, 1],
    "unsqueeze": lambda t: t.expand(2, 8).unsqueeze(0)[0, 1],
    "unsqueeze then view(int32)": lambda t: t.expand(2, 8)[0].unsqueeze(0).view(I32),
    "unflatten": lambda t: t.expand(2, 8).unflatten(1, (2, 4))[0],
    "diagonal": lambda t: t.expand(2, 8).diagonal(),
    "unbind": lambda t: t.expand(2, 8).unbind(0)[1],
    "chunk": lambda t: t.expand(2, 8).chunk(2)[1],
    "narrow": lambda t: t.expand(2, 8).narrow(0, 1, 1),
    "detach()": lambda t: t.expand(2, 8).detach()[0],
    "detach() after select": lambda t: t.expand(2, 8)[0].detach(),
    "detach() then view(int32)": lambda t: t.expand(1, 8).detach().view(I32),
    "broadcast_to": lambda t: torch.broadcast_to(t, (3, 8))[2],
    "expand_as": lambda t: t.expand_as(torch.empty(2, 8))[0],
    "broadcast_tensors": lambda t: torch.broadcast_tensors(t, torch.empty(2, 1))[0][1],
    "expand of a view": lambda t: t.view(2, 4)[:1].expand(3, 4)[2],
}


def _intermediate(chain, write):
    def f(a, s):
        t = a * 1
        write(chain(t), s)
        return t, t + 0

    return f


def _input(chain, write):
    def f(a, s):
        write(chain(a), s)
        return a + 0

    return f


def _values() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor(OLD), torch.tensor(NEW)


def _copy(v, s):
    v.copy_(_fitted(s, v))


@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("of", ["input", "intermediate"])
def test_copy_through_chain_with_expand_is_bit_exact(chain, of):
    """The copied values land as eager's: ``1e8`` overwritten by ``2``, ``inf`` by ``1``,
    ``0.0`` by ``-0.0``, ``nan`` by ``1`` (and their bit patterns through ``view(int32)``)."""
    fn = (_input if of == "input" else _intermediate)(CHAINS[chain], _copy)
    assert_bit_exact(fn, _values)


def _out_mul(v, s):
    torch.mul(_fitted(s, v), 1, out=v)


WRITES = {
    "copy_": _copy,
    "add_": lambda v, s: v.add_(_fitted(s, v)),
    "iadd": lambda v, s: v.__iadd__(_fitted(s, v)),
    "mul_": lambda v, s: v.mul_(2),
    "fill_": lambda v, s: v.fill_(2),
    "fill_ of -0.0": lambda v, s: v.fill_(-0.0),
    "zero_": lambda v, s: v.zero_(),
    "masked_fill_": lambda v, s: v.masked_fill_(torch.ones(v.shape, dtype=torch.bool), -0.0),
    "setitem": lambda v, s: v.__setitem__(slice(None), _fitted(s, v)),
    "setitem of a scalar": lambda v, s: v.__setitem__(0, 2),
    "pow_": lambda v, s: v.pow_(2),
    "clamp_": lambda v, s: v.clamp_(min=5),
    "neg_": lambda v, s: v.neg_(),
    "out=": _out_mul,
    "F.relu(inplace=True)": lambda v, s: F.relu(v, inplace=True),
    "F.hardtanh(inplace=True)": lambda v, s: F.hardtanh(v, -1.0, 1.0, True),
    "F.leaky_relu(inplace=True)": lambda v, s: F.leaky_relu(v, inplace=True),
    "polygamma_": lambda v, s: v.polygamma_(1),
}
WRITE_CHAINS = ["select", "view(int32) after select", "detach() then view(int32)", "t"]


@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("chain", WRITE_CHAINS)
@pytest.mark.parametrize("of", ["input", "intermediate"])
def test_inplace_ops_through_chain_with_expand_are_bit_exact(write, chain, of):
    if ("F." in write or write == "polygamma_") and "int32" in chain:
        pytest.skip("no int kernel")
    fn = (_input if of == "input" else _intermediate)(CHAINS[chain], WRITES[write])
    assert_bit_exact(fn, _values)


@pytest.mark.parametrize("write", ["copy_", "add_", "setitem", "fill_ of -0.0", "F.relu(inplace=True)"])
@pytest.mark.parametrize("chain", ["select", "t", "unflatten", "detach() after select"])
@pytest.mark.parametrize("grad_mode", [True, False])
def test_with_grad_through_chain_with_expand(write, chain, grad_mode):
    """Through an intermediate of a leaf requiring grad: bit-exact values, and eager's
    gradients (tests/eager_compare.py)."""
    fn = _intermediate(CHAINS[chain], WRITES[write])
    if chain.startswith("detach()") and grad_mode and write in ("copy_", "add_", "setitem"):
        # eager records the write on the detach()ed alias alone (its source requires grad)
        with pytest.raises(AotgradCompileError, match=r"detach\(\)ed or view\(dtype\) alias.*recorded|recorded.*alias"):
            aotgrad.aot_function(fn, nop)(*(t.requires_grad_() for t in _values()))
        return

    def make():
        a, s = _values()
        return a.requires_grad_(), s.requires_grad_()

    assert_bit_exact(fn, make, grad_mode=grad_mode)
    finite = lambda: (torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True))  # noqa: E731
    check(fn, finite, grad_mode=grad_mode)


def test_issue_12_reproduction():
    """A 0-d input written through ``expand(1).view(int32)``: eager 2.0, was 0.0."""

    def k(x, y):
        v = x.expand(1).view(torch.int32)
        v.copy_(y)
        return x + 0

    assert_bit_exact(k, lambda: (torch.tensor(1e8), torch.tensor([2**30], dtype=torch.int32)))


def test_fuzz_seed_9015656_shape():
    """``t().expand(1).view(int32)`` of a 0-d float, ``pow_`` then ``copy_``."""

    def k(x, y):
        v = x.t().expand(1).view(torch.int32)
        v.pow_(3)
        v.copy_(y)
        return x * 1, v + 0

    assert_bit_exact(k, lambda: (torch.tensor(-1.5e-7), torch.tensor([-(2**31)], dtype=torch.int32)))


@pytest.mark.parametrize("value", [1e8, float("inf"), float("nan"), -0.0])
def test_1x1_expand_of_0d_copy(value):
    def k(x, y):
        x.expand(1, 1).copy_(y)
        return x + 0

    assert_bit_exact(k, lambda: (torch.tensor(value), torch.tensor([[2.0 if value == value else -0.0]])))


def test_multiple_writes_through_one_chain():
    def k(a, s):
        t = a * 1
        v = t.expand(2, 8)[0].view(I32)
        v.add_(s.view(I32))
        v[2:4] = 7
        t.expand(3, 8)[1].mul_(-0.0)
        return t

    assert_bit_exact(k, _values)


def test_out_tuple_into_chain_with_expand_is_refused():
    """``torch.max(..., out=(values, indices))`` with ``values`` through an ``expand``: the
    exact write is not expressed for an ``out=`` tuple."""

    def k(a, s):
        t = a * 1
        torch.max(s.view(2, 4), 0, out=(t.expand(2, 8)[0, :4], torch.empty(4, dtype=torch.long)))
        return t

    with pytest.raises(AotgradCompileError, match=r"max.*test_expand_writes_exact.py:\d+"):
        aotgrad.aot_function(k, nop)(*_values())


def test_view_of_another_element_size_is_refused():
    """``view_as_real`` of an expanded complex tensor: the view's element is half the
    root's; refused, naming the op and the line."""

    def k(c, s):
        t = c * 1
        torch.view_as_real(t.expand(2, 4)[0]).copy_(s.view(4, 2))
        return t

    with pytest.raises(AotgradCompileError, match=r"copy_.*test_expand_writes_exact.py:\d+"):
        aotgrad.aot_function(k, nop)(torch.full((4,), 1e8, dtype=torch.complex64), torch.tensor(NEW))


def test_foreach_into_chain_with_expand_is_refused():
    def k(a, s):
        t = a * 1
        torch._foreach_add_([t.expand(2, 8)[0]], [s])
        return t

    with pytest.raises(AotgradCompileError, match=r"_foreach_add_.*test_expand_writes_exact.py:\d+"):
        aotgrad.aot_function(k, nop)(*_values())


@pytest.mark.parametrize("of", ["input", "intermediate"])
def test_inplace_dropout_through_chain_with_expand(of):
    """``F.dropout(v, inplace=True)``: aotgrad's own rewrite (eager's mask) multiplies ``v``
    in place; through the expand, exactly."""
    write = lambda v, s: F.dropout(v, 0.5, True, True)  # noqa: E731
    fn = (_input if of == "input" else _intermediate)(CHAINS["select"], write)
    assert_bit_exact(fn, _values)


# Writes into an input the caller expanded (stride 0): no expand step in the program's chain;
# the input is written as a view of a synthetic base over its storage, whose write back
# (``as_strided_scatter`` through the stride-0 dim) keeps, per location, the element whose
# bits changed (scatter_once_per_location): by value, -0.0 == 0.0 and nan != nan.
EXPANDED_INPUT_WRITES = {
    "row copy_": lambda a, s: a[1].copy_(s),
    "row add_": lambda a, s: a[0].add_(s),
    "column of t() copy_": lambda a, s: a.t()[:, 0].copy_(s),
    "row of detach() copy_": lambda a, s: a.detach()[1].copy_(s),
    "row view(int32) copy_": lambda a, s: a[0].view(I32).copy_(s.view(I32)),
    "view(int32) row copy_": lambda a, s: a.view(I32)[1].copy_(s.view(I32)),
    "row of expand copy_": lambda a, s: a.expand(3, 2, 8)[2, 1].copy_(s),
    "row setitem": lambda a, s: a[1].__setitem__(slice(None), s),
}


@pytest.mark.parametrize("write", sorted(EXPANDED_INPUT_WRITES))
def test_write_into_expanded_input_is_bit_exact(write):
    def f(a, s):
        EXPANDED_INPUT_WRITES[write](a, s)
        return a + 0

    assert_bit_exact(f, lambda: (torch.tensor(OLD).expand(2, 8), torch.tensor(NEW)))


def test_write_into_expanded_complex_input_is_bit_exact():
    def f(a, s):
        a[1].copy_(s)
        return a + 0

    old = torch.complex(torch.tensor(OLD), torch.tensor(NEW))
    new = torch.complex(torch.tensor(NEW), torch.tensor([-0.0] * 8))
    assert_bit_exact(f, lambda: (old.clone().expand(2, 8), new.clone()))


def test_write_into_expanded_input_with_grad():
    def f(a, s):
        a[1].mul_(s)
        return a + 0

    def make():
        leaf = torch.randn(8, requires_grad=True)
        return leaf.mul(1).expand(2, 8), torch.randn(8, requires_grad=True)

    check(f, make)


def test_0d_input_expanded_by_the_caller_and_again():
    def f(a, s):
        a.expand(1, 1).view(I32).copy_(s.view(I32).view(1, 1))
        return a + 0

    assert_bit_exact(f, lambda: (torch.tensor(1e8).expand(1), torch.tensor([2.0])))


# ``unfold``'s inverse (``unfold_backward``) zeroes the elements between windows: a write
# through windows that leave gaps (size 2, step 3) must keep them
UNFOLD_WRITES = {
    "F.relu(inplace=True)": lambda t, s: F.relu(t.unfold(0, 2, 3), inplace=True),
    "F.elu(inplace=True)": lambda t, s: F.elu(t.unfold(0, 2, 3), inplace=True),
    "add_ through detach()": lambda t, s: t.unfold(0, 2, 3).detach()[1].add_(s[:2]),
    "copy_ through view(int32)": lambda t, s: t.unfold(0, 2, 3)[0].view(I32).copy_(s[:2].view(I32)),
    "mul_": lambda t, s: t.unfold(0, 2, 3).mul_(-0.0),
}


@pytest.mark.parametrize("write", sorted(UNFOLD_WRITES))
@pytest.mark.parametrize("of", ["input", "intermediate"])
def test_write_through_unfold_with_gaps_is_bit_exact(write, of):
    def f(a, s):
        t = a if of == "input" else a * 1
        UNFOLD_WRITES[write](t, s)
        return t + 0

    assert_bit_exact(f, _values)


def test_foreach_through_unfold_is_refused():
    def k(a, s):
        t = a * 1
        torch._foreach_mul_([t.unfold(0, 2, 3)], 2.0)
        return t

    with pytest.raises(AotgradCompileError, match=r"_foreach_mul_.*test_expand_writes_exact.py:\d+"):
        aotgrad.aot_function(k, nop)(*_values())


def test_inplace_functional_through_overlapping_as_strided_is_refused():
    """``F.elu(v, inplace=True)`` of an overlapping ``as_strided`` view: eager's result is
    its loop order's (a location shared by two elements is transformed twice)."""

    def k(a, s):
        t = a * 1
        F.elu(t.as_strided((3, 2), (1, 1)), inplace=True)
        return t

    with pytest.raises(AotgradCompileError, match=r"elu_.*test_expand_writes_exact.py:\d+.*order its kernel visits"):
        aotgrad.aot_function(k, nop)(*_values())


@pytest.mark.parametrize("write", ["copy_", "add_", "mul_", "setitem", "F.relu(inplace=True)"])
@pytest.mark.parametrize("chain", ["select", "t", "view of size-1 expand", "unsqueeze"])
def test_write_into_input_requiring_grad_through_chain_with_expand(write, chain):
    """The input is a non-leaf requiring grad (eager lets it be written in place)."""
    fn = _input(CHAINS[chain], WRITES[write])

    def make():
        a, s = _values()
        return a.requires_grad_().mul(1), s.requires_grad_()

    assert_bit_exact(fn, make)
    check(fn, lambda: (torch.randn(8, requires_grad=True).mul(1), torch.randn(8, requires_grad=True)))
