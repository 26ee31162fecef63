"""Eager calls that functionalization would capture wrongly, rewritten at the call site.

- **Dropout masks.** Eager CPU dropout is ``noise = empty_like(x).bernoulli_(1 - p)``: the in-place fill walks
``x``'s own memory layout. Functionalization turns that into the functional
``aten.bernoulli.p``, whose kernel allocates a *contiguous* tensor, so a non-contiguous ``x``
(a transposed attention output, say) gets a different mask than eager. :class:`EagerRewrites`
reroutes ``torch.dropout`` through ``aotgrad::bernoulli_like``, a functional op whose kernel is
eager's own fill, so the traced graph consumes the generator exactly as eager does.
- **polygamma_.** Its schema puts ``self`` first while the functional ``polygamma`` takes
  ``(n, self)``; functionalization finds no functional twin and rejects it. It is captured
  as ``self.copy_(polygamma(n, self.clone()))``, which eager autograd treats the same way.
- **squeeze_(dim) of a dim whose size is not 1.** Functionalization's ``squeeze_`` of such a
  dim (a no-op in eager) crashes the process in a symbolic trace (torch 2.13); the dims
  that are not 1 are dropped from the call (a symbolic size is never 1: sizes 0 and 1 are
  specialised), leaving ``squeeze_(())``, the same no-op, where none is.
- **as_strided of a view.** ``v.as_strided(size, stride, offset)`` addresses ``v``'s storage,
  so it is the same view as ``v._base.as_strided(...)``; functionalization refuses a mutation
  through an ``as_strided`` that is not the first view of its chain, so it is taken of the
  base where autograd records neither (eager's gradient of ``v.as_strided`` reaches only
  ``v``'s elements) and the dtype is the same.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["EagerRewrites", "bernoulli_like"]


@torch.library.custom_op(
    "aotgrad::bernoulli_like", mutates_args=(), tags=(torch.Tag.nondeterministic_seeded,)
)
def bernoulli_like(x: torch.Tensor, p: float) -> torch.Tensor:
    """``empty_like(x).bernoulli_(p)``: eager's fill order for ``x``'s layout."""
    return torch.empty_like(x).bernoulli_(p)


@bernoulli_like.register_fake
def _(x: torch.Tensor, p: float) -> torch.Tensor:
    return torch.empty_like(x)


_DROPOUTS = {torch.dropout, torch._C._VariableFunctions.dropout}
_DROPOUTS_INPLACE = {torch.dropout_, torch._C._VariableFunctions.dropout_}
_FUNCTIONAL_DROPOUT = torch.nn.functional.dropout
_POLYGAMMA_INPLACE = torch.Tensor.polygamma_
_SQUEEZE_INPLACE = torch.Tensor.squeeze_
_AS_STRIDED = {torch.Tensor.as_strided, torch.as_strided}


class EagerRewrites(TorchFunctionMode):
    """Applies the rewrites of this module while the program is analysed and traced.

    Dropout: same values as ``at::native::_dropout_impl``,
    ``noise = bernoulli_like(x, 1 - p) / (1 - p)`` then ``x * noise``; other cases (p of 0 or
    1, eval mode, empty input) are left to torch.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _POLYGAMMA_INPLACE:
            x, n = args[0], args[1] if len(args) > 1 else kwargs["n"]
            return x.copy_(torch.polygamma(n, x.clone()))  # the clone is what backward reads
        if func is _SQUEEZE_INPLACE and (len(args) > 1 or "dim" in kwargs):
            return _squeeze_(args[0], args[1] if len(args) > 1 else kwargs["dim"])
        if func in _AS_STRIDED and args and _as_strided_of_base(args[0]):
            return func(args[0]._base, *args[1:], **kwargs)
        if func is _FUNCTIONAL_DROPOUT:
            x, p, train, inplace = _bind(args, kwargs, ("input", "p", "training", "inplace"), (0.5, True, False))
        elif func in _DROPOUTS or func in _DROPOUTS_INPLACE:
            x, p, train = _bind(args, kwargs, ("input", "p", "train"), ())
            inplace = func in _DROPOUTS_INPLACE
        else:
            return func(*args, **kwargs)
        if train and 0 < p < 1 and x.numel() > 0 and x.device.type == "cpu" and x.is_floating_point():
            noise = bernoulli_like(x.detach(), 1 - p).div_(1 - p)
            return x.mul_(noise) if inplace else x * noise
        return func(*args, **kwargs)


def _as_strided_of_base(v: torch.Tensor) -> bool:
    """``v.as_strided(...)`` may be taken of ``v._base`` instead (see the module docstring):
    not where autograd records it, as its gradient then reaches only ``v``'s elements."""
    base = getattr(v, "_base", None)
    return base is not None and base.dtype == v.dtype and not v.requires_grad and not base.requires_grad


def _squeeze_(x: torch.Tensor, dim: int | tuple[int, ...]) -> torch.Tensor:
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if x.dim() == 0:
        return torch.Tensor.squeeze_(x, dim)
    # x.shape, not x.size(d): the latter dispatches to functionalization. A bad dim raises
    # the IndexError eager's squeeze_ raises.
    shape = x.shape
    for d in dims:
        if not -len(shape) <= d < len(shape):
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-len(shape)}, {len(shape) - 1}], but got {d})"
            )
    return torch.Tensor.squeeze_(x, tuple(d for d in dims if shape[d] == 1))


def _bind(args: tuple, kwargs: dict, names: tuple, defaults: tuple) -> list:
    """Positional values of ``names`` from args/kwargs, trailing ones defaulted."""
    values = list(args)
    first_default = len(names) - len(defaults)
    for k in range(len(args), len(names)):
        values.append(kwargs[names[k]] if names[k] in kwargs else defaults[k - first_default])
    return values
