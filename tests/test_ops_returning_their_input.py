"""Ops that return their input itself (no new view, no write) on a view whose chain has an
``as_strided`` step reaching outside the tensor it was taken of (issue 12, fuzz seed
20016921: ``a[1:3].as_strided((3, 2), (3, 1), 4)[:, 0].flatten()`` returned).

``flatten()`` of a 1-D tensor, ``to``/``type_as``/``float()`` of its own dtype,
``contiguous()`` of a contiguous tensor, ``requires_grad_()``... return the very tensor they
are given: eager's autograd records nothing, the view keeps its ``grad_fn``, whose
``AsStridedBackward0`` (input geometry: ``a[1:3]``'s) drops the gradient of the storage
elements outside ``a[1:3]``. The analysis took "the op returned its first argument" for an
in-place op that autograd records through the view (``EagerViewGeometry.rebased``), so the
output was rebuilt as ``as_strided`` off the root and its gradient reached those elements.
An in-place op is now told by its input's version moving (or an in-place metadata op):
``stale_views.changed_in_place``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from eager_compare import check

#: ops that return their (1-D, contiguous, float32, real, CPU) input itself
RETURNING_INPUT = {
    "flatten": lambda t: t.flatten(),
    "flatten_dim": lambda t: t.flatten(0, 0),
    "to_dtype": lambda t: t.to(torch.float32),
    "to_device": lambda t: t.to("cpu"),
    "to_like": lambda t: t.to(t),
    "type_as": lambda t: t.type_as(t),
    "float": lambda t: t.float(),
    "contiguous": lambda t: t.contiguous(),
    "cpu": lambda t: t.cpu(),
    "conj": lambda t: t.conj(),
    "resolve_conj": lambda t: t.resolve_conj(),
    "resolve_neg": lambda t: t.resolve_neg(),
    "real": lambda t: torch.real(t),
    "atleast_1d": lambda t: torch.atleast_1d(t),
    "dropout_eval": lambda t: F.dropout(t, 0.5, training=False),
    "requires_grad_": lambda t: t.requires_grad_(),
}


def _beyond(t: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-D view of ``t[1:3]`` (a (4, 3, 1) tensor) on storage elements 10 and 11:
    outside ``t[1:3]``'s (3..8)."""
    return t[1:3].as_strided((2,), (1,), 10)


def _strided_beyond(t: torch.Tensor) -> torch.Tensor:
    """The seed's view: storage elements 4, 7, 10 of ``t``, through ``t[1:3]``."""
    return t[1:3].as_strided((3, 2), (3, 1), 4)[:, 0]


#: where the op's result goes: returned, a view of it returned, used by an op, returned
#: beside the view, all of a tensor the program computed (the root an intermediate)
USES = {
    "returned": lambda a, op: (op(_beyond(a)),),
    "view_of_it_returned": lambda a, op: (op(_beyond(a))[1:],),
    "used": lambda a, op: (op(_beyond(a)) * 2,),
    "returned_with_view": lambda a, op: (op(_beyond(a)), _beyond(a)),
    "intermediate_root": lambda a, op: (op(_beyond(a * 1)),),
    "intermediate_root_view": lambda a, op: (op(_beyond(a * 1))[:1],),
    "strided": lambda a, op: (op(_strided_beyond(a)),) if op is not RETURNING_INPUT["contiguous"] else (a * 1,),
    "twice": lambda a, op: (op(op(_beyond(a))),),
}


@pytest.mark.parametrize("use", sorted(USES))
@pytest.mark.parametrize("op", sorted(RETURNING_INPUT))
def test_op_returning_input_keeps_the_views_gradient(op, use):
    def f(a):
        return USES[use](a, RETURNING_INPUT[op])

    check(f, lambda: (torch.randn(4, 3, 1, requires_grad=True),))


#: ops that leave the elements as they are but return a new view (a step in the chain):
#: these were exact before, kept so
NEW_VIEWS = {
    "reshape_same": lambda t: t.reshape(t.shape),
    "view_same": lambda t: t.view(-1),
    "view_as": lambda t: t.view_as(t),
    "squeeze_none": lambda t: t.squeeze(),
    "expand_as": lambda t: t.expand_as(t),
    "alias": lambda t: torch.ops.aten.alias(t),
    "ellipsis": lambda t: t[...],
    "t_1d": lambda t: t.t(),
}


@pytest.mark.parametrize("use", sorted(USES))
@pytest.mark.parametrize("op", sorted(NEW_VIEWS))
def test_new_view_keeps_the_views_gradient(op, use):
    def f(a):
        return USES[use](a, NEW_VIEWS[op])

    check(f, lambda: (torch.randn(4, 3, 1, requires_grad=True),))


@pytest.mark.parametrize("op", sorted(RETURNING_INPUT))
def test_op_returning_input_on_view_input(op):
    """The caller passes a view (the seed's ``x[:, 1:]``)."""

    def f(b):
        return (RETURNING_INPUT[op](b[1:3].as_strided((2,), (1,), 9)),)

    def make():
        x = torch.randn(4, 3, 1, requires_grad=True)
        return (x[:, 1:],)

    check(f, make)


@pytest.mark.parametrize("returned", ["view", "use"])
@pytest.mark.parametrize("op", sorted(RETURNING_INPUT))
def test_op_returning_input_on_stale_view(op, returned):
    """A view made stale by a write into its root keeps its staleness through the op: eager
    regenerates its grad_fn off the root on the next use."""

    def f(a):
        b = a * 1
        v = _strided_beyond(b)
        b.mul_(2)
        RETURNING_INPUT[op](v)
        return (v,) if returned == "view" else (v * 1,)

    check(f, lambda: (torch.randn(4, 3, 1, requires_grad=True),))


WRITES = {
    "add_": lambda t, w: t.add_(w),
    "aten_add_": lambda t, w: torch.ops.aten.add_.Tensor(t, w),
    "mul_": lambda t, w: t.mul_(w),
    "iadd": lambda t, w: t.__iadd__(w),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_write_returning_its_input_still_rebases_the_view(write):
    """An in-place op returns its input too: by its version moving it is still a write
    autograd records through the view (the output rebuilt off the root: fuzz seed
    18000437's class), whatever its name (an aten overload's is ``add_.Tensor``)."""

    def f(w, b):
        b.relu_()
        v = b.as_strided((2,), (1,), 0)
        WRITES[write](v, w)
        return (v,)

    def make():
        return torch.randn((), requires_grad=True), torch.randn(3, requires_grad=True)[1:]

    check(f, make)


def test_seed_20016921_shape():
    def f(a):
        t4 = a[1:3].as_strided((3, 2), (3, 1), 4)
        t6, _ = t4.split(3, 0)[0].unbind(1)
        return (t6.flatten(),)

    check(f, lambda: (torch.randn(4, 3, 1, requires_grad=True),))


@pytest.mark.parametrize("use", ["returned", "returned_twice", "used"])
@pytest.mark.parametrize("op", sorted(RETURNING_INPUT))
def test_op_returning_input_keeps_a_no_grad_views_prefix(op, use):
    """A view taken with grad recording of a view made under no_grad, stale after a recorded
    write into their base: the op is no grad-mode in-place op on it (which would regenerate
    its grad_fn off the base and drop its no_grad prefix), so eager's error for using it is
    kept (fuzz seeds 10017441, 18002385, 18006940, 19009525)."""

    def f(a):
        t = torch.tanh(a)
        with torch.no_grad():
            u = t[1:]
        v = u[:2]
        t.relu_()
        RETURNING_INPUT[op](v)
        if use == "used":
            return (v * 2,)
        return (v, v) if use == "returned_twice" else (v,)

    check(f, lambda: (torch.randn(4, requires_grad=True),))


@pytest.mark.parametrize("returned", ["view", "result"])
@pytest.mark.parametrize("op", sorted(set(RETURNING_INPUT) - {"requires_grad_"}))
def test_op_returning_input_keeps_restride_steps(op, returned):
    """A stale view re-strided by ``as_strided_`` with grad recording (fuzz seed 16006573's
    shape): the op returning it is no write through it, so its ``AsStridedBackward1`` step
    (which drops the gradient outside its old element) stays (``_note_restride_steps``).
    (``requires_grad_()`` there is refused as a write through an outdated view, by name.)"""

    def f(a):
        t0 = a.unbind(1)[1]
        t2 = t0.diagonal(0, 1, 0) * 3
        t7 = t0.unsqueeze(1) @ t2
        t8 = t7.as_strided((1,), (2,), 2)
        t7.t_()
        t8.as_strided_((3, 1), (1, 1), 0)
        out = RETURNING_INPUT[op](t8)
        return (t8,) if returned == "view" else (out,)

    check(f, lambda: (torch.randn(4, 4, 3, requires_grad=True),))
