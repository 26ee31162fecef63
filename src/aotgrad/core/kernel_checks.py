"""Eager's per-dtype kernel errors, which the traced program's ops do not raise.

Two of eager's errors depend only on the dtypes an op meets, and never reach the trace:

- an in-place or ``out=`` op whose result dtype cannot be cast to the written tensor's
  (``t.mul_(x)``, ``torch.mul(a, 2, out=t)`` for an integer ``t`` and a float result:
  ``result type Float can't be cast to the desired output type Int``). Functionalization runs
  such an op as its out-of-place op and a copy into ``t``, which casts;
- a kernel that was not built for a dtype (``t.softmax(0)`` of an integer ``t``:
  ``"softmax_lastdim_kernel_impl" not implemented for 'Int'``). Fake tensors run meta
  functions, which have no per-dtype kernels.

:func:`raise_eager_dtype_error` runs an op whose tensors include an integer or bool one on
small CPU tensors of the same dtypes (each dim of size 1, or 0 where the op's tensor's is
0) and raises the error eager's kernel raised there, where it is one of these. Any other
error of that run (an index or shape the small tensors do not meet) is ignored: the op
itself raises eager's error where eager's does. The run draws nothing from the global
generator (its state is restored) and records no autograd history.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["raise_eager_dtype_error"]

#: calls that run no kernel of their own on the tensors' data, or act on autograd / Python state
_NOT_KERNELS = frozenset(
    {"__get__", "__set__", "size", "stride", "dim", "ndimension", "numel", "nelement", "storage_offset",
     "is_contiguous", "element_size", "untyped_storage", "data_ptr", "__len__", "__repr__", "__format__",
     "__str__", "__hash__", "__bool__", "__index__", "__int__", "__float__", "item", "tolist", "backward",
     "register_hook", "retain_grad", "requires_grad_", "detach", "detach_", "is_floating_point",
     "is_complex", "type", "__reduce_ex__", "__deepcopy__", "_make_subclass", "grad", "numpy"}
)

_MESSAGES = ("can't be cast to the desired output type", "not implemented for '")


def raise_eager_dtype_error(func: Any, args: tuple, kwargs: dict) -> None:
    """Raise the dtype error (see the module docstring) eager's kernel raises for
    ``func(*args, **kwargs)``; nothing where it raises none, or the op is not checked (no
    integer or bool tensor, not all tensors strided on the CPU, symbolic values)."""
    name = getattr(func, "__name__", "")
    if name in _NOT_KERNELS:
        return
    module = getattr(func, "__module__", None) or ""
    if "distributed" in module or "c10d" in module:
        return  # a collective: run on this rank's small tensors alone, it would wait for the others
    leaves = pytree.tree_leaves((args, kwargs))
    with torch._C.DisableTorchFunction():
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        if not any(not t.is_floating_point() and not t.is_complex() for t in tensors):
            return
        if any(t.device.type != "cpu" or t.layout != torch.strided for t in tensors):
            return
        if any(isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) for v in leaves):
            return
        sizes = {id(t): [0 if type(n) is int and n == 0 else 1 for n in t.shape] for t in tensors}
    state = torch.default_generator.get_state()
    try:
        with _outside_modes(), torch.no_grad():
            small_args, small_kwargs = pytree.tree_map(
                lambda v: torch.zeros(sizes[id(v)], dtype=v.dtype) if isinstance(v, torch.Tensor) else v,
                (args, kwargs),
            )
            func(*small_args, **small_kwargs)
    except (RuntimeError, NotImplementedError) as e:
        if any(m in str(e) for m in _MESSAGES):
            raise type(e)(str(e)) from None
    except Exception:  # noqa: BLE001 - another error of the small tensors: not eager's
        pass
    finally:
        torch.default_generator.set_state(state)


@contextlib.contextmanager
def _outside_modes() -> Iterator[None]:
    """No dispatch mode (fake, functional, proxy) and no torch-function mode sees the run."""
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        yield
