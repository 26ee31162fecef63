"""The callable ``aot_function`` returns: a cache of compiled entries keyed by guards.

A call flattens its arguments (skipped for the common positional-only call), asks the most
recently used entry's guard whether it may be reused, then the others, and compiles a new
entry on a miss. A hit re-traces nothing.

A miss (after the first compile) is explained: each entry's :class:`~aotgrad.core.frontend.GuardMismatch`
goes into a :class:`RecompileReason` in ``AotFunction.recompile_reasons``, logged at INFO, and
a function that recompiles more than ``AotConfig.recompile_warn_limit`` times warns once.
Every new entry is also handed to the functions in :data:`compile_listeners` (what
``aotgrad.explain`` and ``python -m aotgrad explain`` use to see compiles they did not start).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import AotConfig
from .frame_stack import in_fresh_chunk
from .frontend import MISS, GuardMismatch, flatten_call
from .pipeline import CompiledEntry, compile_entry

__all__ = ["AotFunction", "RecompileReason", "compile_listeners"]

log = logging.getLogger("aotgrad")

#: called as ``listener(aot_function, entry)`` after each new entry of any AotFunction is
#: compiled (append to observe compiles, remove when done; a listener must not raise).
#: While any is registered, entries are traced afresh (not loaded from the persistent
#: cache) with the user's source lines recorded on their nodes (``record_source_lines``).
compile_listeners: list[Callable[[AotFunction, CompiledEntry], None]] = []


@dataclass(frozen=True)
class RecompileReason:
    """Why one call compiled a new entry: it missed every existing entry.

    ``number``: which recompile this was (1 for the function's second entry).
    ``mismatches``: for each entry there was, newest first, the first of its guard's checks
    the call failed (kind, the entry's value, the call's value).
    """

    number: int
    mismatches: tuple[GuardMismatch, ...]

    @property
    def kinds(self) -> tuple[str, ...]:
        """The failed check of each entry (``"shape"``, ``"grad_mode"``, ...), newest first."""
        return tuple(m.kind for m in self.mismatches)

    def __str__(self) -> str:
        return f"recompile {self.number}: " + "; ".join(
            f"entry {k}: {m}" for k, m in enumerate(self.mismatches)
        )


def _always_miss(args: tuple) -> Any:
    return MISS


class AotFunction:
    """``fn`` compiled ahead of time; call it as you would call ``fn``.

    ``entries`` lists the compiled specialisations, newest first (see
    :class:`~aotgrad.core.pipeline.CompiledEntry`: its ``metadata``, ``graphs`` and ``guard``
    show what was captured); ``recompile_reasons`` says, for each entry after the first,
    why the call that compiled it missed the others (:class:`RecompileReason`).
    """

    def __init__(self, fn: Callable, config: AotConfig) -> None:
        self.fn = fn
        self.config = config
        self.entries: list[CompiledEntry] = []
        self.recompile_reasons: list[RecompileReason] = []
        self._warned_recompiles = False
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
        if self.entries:
            self._note_recompile(leaves, spec)
        config = self.config
        if compile_listeners:
            # Someone will look inside: trace afresh (no cache) with source lines recorded.
            config = dataclasses.replace(config, record_source_lines=True, cache=False)
        # on a data-stack chunk of its own: the trace's deep, short calls then never map and
        # unmap a chunk, whatever the caller's depth (core/frame_stack.py)
        entry = in_fresh_chunk(compile_entry, self.fn, leaves, spec, config)
        self.entries.insert(0, entry)
        for listener in tuple(compile_listeners):
            listener(self, entry)
        fast = entry.guard.fast_call(entry.run_flat)
        if fast is not None:
            self._flat.insert(0, fast)
            self._update_fast()
        return entry(leaves)

    def _note_recompile(self, leaves: list, spec: Any) -> None:
        """Record (and log) why this call missed every entry; warn once past the limit."""
        reason = RecompileReason(
            len(self.recompile_reasons) + 1,
            tuple(entry.guard.mismatch(leaves, spec) for entry in self.entries),
        )
        self.recompile_reasons.append(reason)
        name = getattr(self.fn, "__name__", self.fn)
        log.info("aotgrad: recompiling %s: %s", name, reason)
        limit = self.config.recompile_warn_limit
        if reason.number > limit and not self._warned_recompiles:
            self._warned_recompiles = True
            message = (
                f"aotgrad: {name} has recompiled {reason.number} times (recompile_warn_limit={limit}); "
                f"each recompile traces the program again. Last reason: {reason.mismatches[0]}. "
                f"See its .recompile_reasons; dynamic=True serves many sizes with one entry."
            )
            warnings.warn(message, RuntimeWarning, stacklevel=4)

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
