"""The callable ``aot_function`` returns: a cache of compiled entries keyed by guards.

A call flattens its arguments (skipped for the common positional-only call), asks the most
recently used entry's guard whether it may be reused, then the others, and compiles a new
entry on a miss. A hit re-traces nothing.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from ..config import AotConfig
from .frontend import MISS, flatten_call
from .pipeline import CompiledEntry, compile_entry

__all__ = ["AotFunction"]

log = logging.getLogger("aotgrad")


def _always_miss(args: tuple) -> Any:
    return MISS


class AotFunction:
    """``fn`` compiled ahead of time; call it as you would call ``fn``.

    ``entries`` lists the compiled specialisations (see :class:`~aotgrad.core.pipeline.CompiledEntry`:
    its ``metadata``, ``graphs`` and ``guard`` show what was captured).
    """

    def __init__(self, fn: Callable, config: AotConfig) -> None:
        self.fn = fn
        self.config = config
        self.entries: list[CompiledEntry] = []
        #: fused guard-and-run closures of the flat entries, newest first
        self._flat: list[Callable[[tuple], Any]] = []
        #: the positional-only fast path: the outputs, or MISS (see _update_fast)
        self._fast: Callable[[tuple], Any] = _always_miss
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            # Positional-only call of a flat entry: the args are the leaves, no pytree walk.
            out = self._fast(args)
            if out is not MISS:
                return out
        return self._call_slow(args, kwargs)

    def _call_slow(self, args: tuple, kwargs: dict) -> Any:
        leaves, spec = flatten_call(args, kwargs)
        for entry in self.entries:
            if entry.guard.check_leaves(leaves, spec):
                return entry(leaves)
        if self.entries and log.isEnabledFor(logging.INFO):
            log.info(
                "aotgrad: recompiling %s (entry %d): %s", getattr(self.fn, "__name__", self.fn), len(self.entries),
                "; ".join(f"entry {k}: {entry.guard.failure(leaves, spec)}" for k, entry in enumerate(self.entries)),
            )
        entry = compile_entry(self.fn, leaves, spec, self.config)
        self.entries.insert(0, entry)
        fast = entry.guard.fast_call(entry.run_flat)
        if fast is not None:
            self._flat.insert(0, fast)
            self._update_fast()
        return entry(leaves)

    def _update_fast(self) -> None:
        """One flat entry: its closure is the fast path itself (one Python call per hit).
        Several: try each, newest first."""
        flat = tuple(self._flat)
        if len(flat) == 1:
            self._fast = flat[0]
            return

        def try_each(args: tuple) -> Any:
            for fast in flat:
                out = fast(args)
                if out is not MISS:
                    return out
            return MISS

        self._fast = try_each

    @property
    def metadata(self):
        """The metadata of the most recently compiled entry."""
        if not self.entries:
            raise RuntimeError("aotgrad: not compiled yet; call the function once first.")
        return self.entries[0].metadata

    def __repr__(self) -> str:
        return f"AotFunction({getattr(self.fn, '__name__', self.fn)!r}, entries={len(self.entries)})"
