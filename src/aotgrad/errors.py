"""Errors aotgrad raises at compile time, and where in the user's code they come from.

One policy decides which source line is "the user's" (:func:`user_frame`): the innermost
frame outside torch and aotgrad (code run from a string, ``<...>``, counts as the user's);
where there is none (an ``nn.Sequential`` of stock layers, a Dynamo graph), the innermost
frame of torch.nn's layer code or of an fx graph's generated code. torch.nn's
``Module.__call__`` plumbing is never the user's line.
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
import traceback
from collections.abc import Iterable
from types import FrameType, TracebackType

import torch

__all__ = [
    "AotgradCompileError",
    "compile_error_from",
    "current_user_frame",
    "current_user_line",
    "describe_frame",
    "frame_rank",
    "known_limit",
    "note_user_line",
    "user_frame",
    "user_frame_of",
    "where",
]

_TORCH_DIR = os.path.dirname(torch.__file__)
_TORCH_NN_DIR = os.path.join(_TORCH_DIR, "nn") + os.sep
_NN_MODULE_PLUMBING = os.path.join(_TORCH_DIR, "nn", "modules", "module.py")
_AOTGRAD_DIR = os.path.dirname(os.path.abspath(__file__))
#: the pseudo-file of a GraphModule's generated forward
_FX_GENERATED = "<eval_with_key>"


class AotgradCompileError(RuntimeError):
    """A program aotgrad cannot capture faithfully. Raised before anything is run for real,
    so the caller's tensors are untouched."""


def _rank(filename: str) -> int:
    """2: the user's own code; 1: torch.nn layer code or an fx graph's code, a fallback;
    0: aotgrad, torch, and Module.__call__'s plumbing."""
    if filename.startswith("<"):
        return 1 if filename.startswith(_FX_GENERATED) else 2
    f = os.path.abspath(filename)
    if f.startswith(_AOTGRAD_DIR):
        return 0
    if f.startswith(_TORCH_NN_DIR):
        return 0 if f == _NN_MODULE_PLUMBING else 1
    return 0 if f.startswith(_TORCH_DIR) else 2


@functools.lru_cache(maxsize=4096)
def frame_rank(filename: str) -> int:
    """:func:`_rank`, remembered per file name (read once per torch call while a trace
    records source lines, :mod:`aotgrad.core.provenance`)."""
    return _rank(filename)


def _innermost_user_frame(frames: Iterable[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    best: traceback.FrameSummary | None = None
    best_rank = 0
    for frame in frames:
        rank = _rank(frame.filename)
        if rank and rank >= best_rank:
            best, best_rank = frame, rank
    return best


def user_frame(tb: TracebackType | None) -> traceback.FrameSummary | None:
    """The user's frame (see the module docstring) in ``tb``."""
    return _innermost_user_frame(traceback.extract_tb(tb))


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (``__cause__`` / ``__context__``), outermost first."""
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and all(e is not seen for seen in out):
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def user_frame_of(exc: BaseException) -> traceback.FrameSummary | None:
    """The user's frame behind ``exc``, looking through the exceptions it wraps: a tracing
    failure wrapped in our own error has the user's frames in the wrapped traceback."""
    return _innermost_user_frame(fs for e in _chain(exc) for fs in traceback.extract_tb(e.__traceback__))


def _describe(frame: traceback.FrameSummary | None) -> str:
    if frame is None:
        return "<unknown location>"
    return f'{frame.filename}:{frame.lineno} in {frame.name}: "{(frame.line or "").strip()}"'


def where(tb: TracebackType | None) -> str:
    """``file:line in fn: "code"`` of the user's frame in ``tb``, or a placeholder."""
    return _describe(user_frame(tb))


def current_user_line() -> str:
    """``file:line in fn: "code"`` of the user's code now running (called from inside a trace).

    The frame :func:`_innermost_user_frame` picks from the whole stack (the innermost of the
    highest rank), found walking out from here: only that frame's source line is read."""
    frame = _current_user_frame()
    if frame is None:
        return _describe(None)
    linecache.checkcache(frame.f_code.co_filename)  # (as traceback.extract_stack does)
    return _describe(traceback.FrameSummary(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))


def current_user_frame() -> traceback.FrameSummary | None:
    """The frame :func:`current_user_line` describes, its source line not read yet: cheap
    enough to remember for each op of a trace (:func:`describe_frame` reads it on an error)."""
    frame = _current_user_frame()
    if frame is None:
        return None
    return traceback.FrameSummary(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, lookup_line=False)


def _current_user_frame() -> FrameType | None:
    """The innermost running frame of the highest rank (:func:`frame_rank`: 2 is the most),
    walking out from the caller: it stops at the first of rank 2."""
    frame = sys._getframe(1)
    fallback = None
    while frame is not None:
        rank = frame_rank(frame.f_code.co_filename)
        if rank == 2:
            return frame
        if rank == 1 and fallback is None:
            fallback = frame
        frame = frame.f_back
    return fallback


def describe_frame(frame: traceback.FrameSummary | None) -> str:
    """``file:line in fn: "code"`` of ``frame`` (from :func:`current_user_frame`)."""
    return _describe(frame)


#: torch's errors on the traced program's functional tensors that are no error of the
#: program (eager runs it), by a fragment of torch's text: what aotgrad cannot express there,
#: in plain words, and what to do instead (issue 12, fuzz seeds 34006277, 33001712, 28007605)
_KNOWN_LIMITS = (
    (
        "as_strided() is non-compositional",
        "the in-place op writes through a chain of views whose as_strided() step is not the "
        "first (as_strided of a slice, of a diagonal, of a view an in-place metadata op such as "
        "unsqueeze_ changed, or reaching outside the view it is taken of while autograd records "
        "the write): functionalization cannot replay that write onto the chain's base as eager "
        "writes it. Take as_strided of the tensor that owns the storage, or of a clone()",
    ),
    (
        "new_fn INTERNAL ASSERT FAILED",
        "a view is used after its base was detached in place (detach_()) and then written: "
        "autograd cannot regenerate that view's history on the traced program's tensors as "
        "eager does. Take the view after detach_(), or use detach() (out of place)",
    ),
    (
        "Autograd not support dtype",
        "a value that requires grad is written, with grad enabled, into an integer or bool "
        "tensor (t[1:] = x): eager gives the integer tensor an autograd history (CopySlices), "
        "which the traced program's autograd refuses. Write x.detach(), or write under "
        "torch.no_grad()",
    ),
)


def known_limit(exc: BaseException) -> str | None:
    """What aotgrad cannot express, in plain words, where ``exc`` is one of torch's errors
    on the traced program's tensors listed in :data:`_KNOWN_LIMITS`; else None."""
    text = str(exc)
    return next((plain for fragment, plain in _KNOWN_LIMITS if fragment in text), None)


def compile_error_from(exc: BaseException, what: str) -> AotgradCompileError:
    """Wrap an exception raised while tracing user code into an error naming the user line
    (and saying in plain words what aotgrad cannot express, for :func:`known_limit`'s errors:
    torch's own text stays on the chained cause)."""
    op = getattr(exc, "func", None)
    op_text = f" (op {op})" if op is not None else ""
    plain = known_limit(exc)
    reason = f"{type(exc).__name__}: {exc}" if plain is None else f"aotgrad does not support this: {plain}"
    return AotgradCompileError(f"aotgrad could not {what}{op_text} at {where(exc.__traceback__)}: {reason}")


def _is_data_dependent(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is tracing refusing to produce a concrete value."""
    text = "\n".join(
        part for e in _chain(exc) for part in (str(e), *getattr(e, "__notes__", ()))
    )
    return "DataDependent" in text or "_local_scalar_dense" in text


def note_user_line(exc: BaseException, what: str) -> None:
    """Attach the user's source line to an error raised while compiling ``what``, unless the
    error already names it; the exception itself is not changed (a safety net for errors
    that do not come through :func:`compile_error_from`, e.g. eager's own)."""
    fs = user_frame_of(exc)
    if fs is None:
        return
    location = f"{fs.filename}:{fs.lineno}"
    if location in str(exc) or any(location in n for n in getattr(exc, "__notes__", ())):
        return
    line = (fs.line or linecache.getline(fs.filename, fs.lineno)).strip()
    note = f"aotgrad: error in {what}, at {location}: {line}"
    if _is_data_dependent(exc):
        note += (
            "\n  This line needs a tensor's value in Python (data-dependent control flow, "
            "bool(tensor), .item()), which cannot be captured in a graph. Express it with "
            "tensor ops (torch.where) or move it out of forward."
        )
    exc.add_note(note)
