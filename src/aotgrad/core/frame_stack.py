"""Run a compile on a fresh, large chunk of CPython's frame stack.

CPython (3.11 and later) keeps the frames of Python calls on a per-thread *data stack*
made of chunks (16 KiB each by default). A call whose frame does not fit in the current
chunk maps a new chunk (``mmap``), and the chunk is unmapped as soon as the first frame in
it returns (``_PyThreadState_PopFrame``). Tracing a program (fake tensors,
functionalization, ``make_fx``, the analysis's torch-function modes) makes thousands of
short calls a few hundred frames deep; where the depth they run at straddles a chunk
boundary, each of those calls maps and unmaps a chunk, with its page faults. Whether that
happens depends only on how deep the caller's stack is: measured with ``strace`` on
``bench/compile_time.py``, 740 (resnet) and 1200 (transformer) map/unmap pairs per
inference compile, none for mlp8, about a fifth of those compiles' time.

:func:`in_fresh_chunk` calls a function from a frame too large for any ordinary chunk: that
frame gets a chunk of its own (1 MiB), and every frame the call makes below it is
allocated in the ~0.5 MiB left in that chunk (tens of thousands of slots, far deeper than a
trace goes), so no chunk is mapped or unmapped during the call, whatever the caller's
depth. The frame's unused slots are never written, so their pages are never touched.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["in_fresh_chunk"]

R = TypeVar("R")

#: extra value-stack slots of the trampoline's frame (8 bytes each): more than the 512 KiB
#: that a chunk can hold besides CPython's reserve, so the frame starts a 1 MiB chunk
_FRAME_SLOTS = 65_000


def _trampoline(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    return fn(*args, **kwargs)


# The same function, its frame made large by declaring a deeper value stack than its code
# uses (CPython sizes a frame as locals + co_stacksize); the behaviour is _trampoline's.
_large_frame_trampoline = types.FunctionType(
    _trampoline.__code__.replace(co_stacksize=_trampoline.__code__.co_stacksize + _FRAME_SLOTS),
    _trampoline.__globals__,
    "_large_frame_trampoline",
)


def in_fresh_chunk(fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """``fn(*args, **kwargs)``, with its frames on a data-stack chunk of their own (see the
    module docstring). Return value and exceptions are ``fn``'s, unchanged."""
    return _large_frame_trampoline(fn, args, kwargs)
