"""Errors aotgrad raises at compile time, and where in the user's code they come from."""

from __future__ import annotations

import os
import traceback
from types import TracebackType

import torch

__all__ = ["AotgradCompileError", "compile_error_from", "current_user_line", "user_frame", "where"]

_TORCH_DIR = os.path.dirname(torch.__file__)
_AOTGRAD_DIR = os.path.dirname(__file__)


class AotgradCompileError(RuntimeError):
    """A program aotgrad cannot capture faithfully. Raised before anything is run for real,
    so the caller's tensors are untouched."""


def _innermost_user_frame(frames: traceback.StackSummary) -> traceback.FrameSummary | None:
    found = None
    for frame in frames:
        f = os.path.abspath(frame.filename)
        if not f.startswith((_TORCH_DIR, _AOTGRAD_DIR)):
            found = frame
    return found


def user_frame(tb: TracebackType | None) -> traceback.FrameSummary | None:
    """The innermost frame of ``tb`` that belongs to neither torch nor aotgrad."""
    return _innermost_user_frame(traceback.extract_tb(tb))


def _describe(frame: traceback.FrameSummary | None) -> str:
    if frame is None:
        return "<unknown location>"
    return f'{frame.filename}:{frame.lineno} in {frame.name}: "{(frame.line or "").strip()}"'


def where(tb: TracebackType | None) -> str:
    """``file:line in fn: "code"`` of the user's frame in ``tb``, or a placeholder."""
    return _describe(user_frame(tb))


def current_user_line() -> str:
    """``file:line in fn: "code"`` of the user's code now running (called from inside a trace)."""
    return _describe(_innermost_user_frame(traceback.extract_stack()))


def compile_error_from(exc: BaseException, what: str) -> AotgradCompileError:
    """Wrap an exception raised while tracing user code into an error naming the user line."""
    op = getattr(exc, "func", None)
    op_text = f" (op {op})" if op is not None else ""
    return AotgradCompileError(
        f"aotgrad could not {what}{op_text} at {where(exc.__traceback__)}: "
        f"{type(exc).__name__}: {exc}"
    )
