"""The callable ``aot_function`` returns: a cache of compiled entries keyed by guards.

A call flattens its arguments (skipped for the common positional-only call), asks the most
recently used entry's guard whether it may be reused, then the others, and compiles a new
entry on a miss. A hit re-traces nothing.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

from .frontend import flatten_call
from .pipeline import AotConfig, CompiledEntry, compile_entry

__all__ = ["AotFunction"]

log = logging.getLogger("aotgrad")


class AotFunction:
    """``fn`` compiled ahead of time; call it as you would call ``fn``.

    ``entries`` lists the compiled specialisations (see :class:`~aotgrad.pipeline.CompiledEntry`:
    its ``metadata``, ``graphs`` and ``guard`` show what was captured).
    """

    def __init__(self, fn: Callable, config: AotConfig) -> None:
        self.fn = fn
        self.config = config
        self.entries: list[CompiledEntry] = []
        self._flat: list[tuple[Callable, Callable]] = []
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            # Positional-only call of a flat entry: the args are the leaves, no pytree walk.
            for check, run in self._flat:
                if check(args):
                    return run(args)
        leaves, spec = flatten_call(args, kwargs)
        for entry in self.entries:
            if entry.guard.check_leaves(leaves, spec):
                return entry(leaves)
        entry = compile_entry(self.fn, leaves, spec, self.config)
        if self.entries:
            log.info("aotgrad: recompiling %s (entry %d)", getattr(self.fn, "__name__", self.fn), len(self.entries))
        self.entries.insert(0, entry)
        if entry.guard.check_flat is not None:
            self._flat.insert(0, (entry.guard.check_flat, entry.run_flat))
        return entry(leaves)

    @property
    def metadata(self):
        """The metadata of the most recently compiled entry."""
        if not self.entries:
            raise RuntimeError("aotgrad: not compiled yet; call the function once first.")
        return self.entries[0].metadata

    def __repr__(self) -> str:
        return f"AotFunction({getattr(self.fn, '__name__', self.fn)!r}, entries={len(self.entries)})"
