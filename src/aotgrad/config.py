"""The user's compile options, as one value: :class:`AotConfig`.

Every entry point (``aot_function``, ``aot_module``, ``aot_module_simplified``, the
``torch.compile`` backend) keeps torch's signature, builds one :class:`AotConfig` with
:meth:`AotConfig.of` and passes it on; nothing below the entry points spells the options out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .partition import default_partition

__all__ = ["AotConfig"]


@dataclass(frozen=True)
class AotConfig:
    """Everything the user chose when compiling a function."""

    fw_compiler: Callable
    bw_compiler: Callable
    inference_compiler: Callable
    partition_fn: Callable
    decompositions: dict | None
    keep_inference_input_mutations: bool = False
    #: accepted for API compatibility; graphs are traced with static shapes either way (a
    #: call with new shapes compiles a new entry), see :func:`aotgrad.aot_function`
    dynamic: bool = False

    @staticmethod
    def of(
        fw_compiler: Callable,
        bw_compiler: Callable | None = None,
        partition_fn: Callable | None = None,
        decompositions: dict | None = None,
        keep_inference_input_mutations: bool = False,
        inference_compiler: Callable | None = None,
        dynamic: bool = False,
    ) -> AotConfig:
        """The config for torch's ``aot_function`` options, defaults filled in:
        ``bw_compiler`` and ``inference_compiler`` default to ``fw_compiler``,
        ``partition_fn`` to :func:`aotgrad.partition.default_partition`."""
        return AotConfig(
            fw_compiler=fw_compiler,
            bw_compiler=bw_compiler or fw_compiler,
            inference_compiler=inference_compiler or fw_compiler,
            partition_fn=partition_fn or default_partition,
            decompositions=decompositions,
            keep_inference_input_mutations=keep_inference_input_mutations,
            dynamic=dynamic,
        )

    @property
    def trace_decompositions(self) -> dict | None:
        """The user's decompositions, else the forward compiler's own (e.g. Inductor's)."""
        if self.decompositions is not None:
            return self.decompositions
        return getattr(self.fw_compiler, "decompositions", None)
