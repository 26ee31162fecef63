"""The user's compile options, as one value: :class:`AotConfig`.

Every entry point (``aot_function``, ``aot_module``, ``aot_module_simplified``, the
``torch.compile`` backend) keeps torch's signature, builds one :class:`AotConfig` and passes
it on; nothing below the entry points spells the options out.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from .context import next_aot_id
from .core.symbolic import SymbolicLeaves
from .partition import default_partition

__all__ = ["AotConfig"]


@dataclass(frozen=True)
class AotConfig:
    """Everything the user chose when compiling a function: ``aot_function``'s options after
    ``fn``, in its order (``num_params_buffers`` last: ``aot_module`` passes it itself).

    Defaults are filled in on construction: ``bw_compiler`` and ``inference_compiler``
    default to ``fw_compiler``, ``partition_fn`` to
    :func:`aotgrad.partition.default_partition`.
    """

    fw_compiler: Callable
    bw_compiler: Callable | None = None
    partition_fn: Callable | None = None
    decompositions: dict | None = None
    keep_inference_input_mutations: bool = False
    inference_compiler: Callable | None = None
    #: trace every tensor size and int argument symbolically (see :func:`aotgrad.aot_function`)
    dynamic: bool = False
    #: exactly which leaves of a call are symbolic, overriding ``dynamic``: what the
    #: ``torch.compile`` backend reads off Dynamo's graph
    symbolic_leaves: SymbolicLeaves | None = None
    #: leading inputs that are parameters and buffers: static even with ``dynamic=True``
    #: (torch's ``static_weight_shapes``)
    num_params_buffers: int = 0
    #: the persistent compile cache (:mod:`aotgrad.core.cache`): None follows the
    #: environment (``AOTGRAD_CACHE_DIR``, ``AOTGRAD_CACHE=0``), False disables it, a path
    #: moves it
    cache: str | os.PathLike | bool | None = None
    #: warn (once per compiled function) when it has recompiled more than this many times:
    #: calls keep missing its entries, each a full trace (see ``recompile_reasons``)
    recompile_warn_limit: int = 8
    #: tag each traced node with the user's source line that made it (node.meta, see
    #: :mod:`aotgrad.core.provenance`): what ``aotgrad.explain`` shows; a frame walk per
    #: torch call while tracing, so off unless something will look
    record_source_lines: bool = False
    #: the compiled function's number in the compilation context (torch's ``aot_id``: graph
    #: names ``"{aot_id}_forward"``...); a new one per config, kept by ``dataclasses.replace``
    #: (the same function, other options); no option, so not compared
    aot_id: int = field(default_factory=next_aot_id, compare=False)

    def __post_init__(self) -> None:
        if not callable(self.fw_compiler):
            raise TypeError(f"aotgrad: fw_compiler must be callable, got {type(self.fw_compiler).__name__}")
        # frozen: defaults are filled once, here, so no stage re-derives them
        object.__setattr__(self, "bw_compiler", self.bw_compiler or self.fw_compiler)
        object.__setattr__(self, "inference_compiler", self.inference_compiler or self.fw_compiler)
        object.__setattr__(self, "partition_fn", self.partition_fn or default_partition)

    @property
    def trace_decompositions(self) -> dict | None:
        """The user's decompositions, else the forward compiler's own (e.g. Inductor's)."""
        if self.decompositions is not None:
            return self.decompositions
        return getattr(self.fw_compiler, "decompositions", None)
