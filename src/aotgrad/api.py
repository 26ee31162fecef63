"""The public entry points. Keep this file thin: it only fills in defaults."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from .config import AotConfig
from .core.dispatch import AotFunction

__all__ = ["aot_function"]

log = logging.getLogger("aotgrad")


def aot_function(
    fn: Callable,
    fw_compiler: Callable,
    bw_compiler: Callable | None = None,
    partition_fn: Callable | None = None,
    decompositions: dict | None = None,
    num_params_buffers: int = 0,
    keep_inference_input_mutations: bool = False,
    inference_compiler: Callable | None = None,
    *,
    dynamic: bool = False,
    cache: str | os.PathLike | bool | None = None,
    recompile_warn_limit: int = 8,
) -> AotFunction:
    """Capture ``fn``'s forward and backward ahead of time and compile them.

    Returns a callable that behaves like ``fn``: same outputs (values, strides,
    requires_grad, aliasing), same in-place effects on its inputs, same gradients. It is
    traced on its first call with given input metadata and grad mode, and re-traced when a
    call differs in any of them (or in a non-tensor argument's value).

    ``fw_compiler(gm, example_inputs) -> callable`` compiles the forward graph;
    ``bw_compiler`` (default: ``fw_compiler``) the backward graph; ``inference_compiler``
    (default: ``fw_compiler``) the graph used when no gradient is needed.
    ``partition_fn(joint_module, joint_inputs, *, num_fwd_outputs)`` splits the joint graph
    (default :func:`aotgrad.partition.default_partition`). ``decompositions`` maps ATen ops to
    decompositions applied while tracing. ``num_params_buffers``: leading inputs that are
    parameters and buffers; their shapes stay static under ``dynamic=True`` (their
    mutations and aliasing are analysed like any input's). With
    ``keep_inference_input_mutations`` the inference graph keeps input data mutations as
    ``copy_`` ops instead of returning new values.

    ``dynamic=True`` traces every tensor size and every int argument symbolically (equal
    sizes share a symbol, and sizes 0 and 1 are specialised, as in torch's
    ``aot_function(dynamic=True)``): one entry then serves every call whose sizes satisfy
    the guards the trace recorded, and a call that violates them compiles a new entry
    (the failing guard is logged at INFO). Without it, shapes are static, except the dims
    marked with ``torch._dynamo.mark_dynamic`` (torch's ``aot_function`` ignores those
    marks unless ``dynamic=True``; aotgrad honours them).

    ``cache``: the persistent compile cache, which lets a new process skip analysis,
    tracing and partitioning of an entry an earlier one compiled (docs/user-guide.md,
    "The compile cache"). None (default): ``$AOTGRAD_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/aotgrad`` or ``~/.cache/aotgrad``, off when ``AOTGRAD_CACHE=0``;
    False: off; a path: that directory.

    Each recompile's reason (which guard failed, the entry's value and the call's) is logged
    at INFO and kept in the returned function's ``recompile_reasons``; past
    ``recompile_warn_limit`` recompiles a warning is issued, once.
    """
    config = AotConfig(
        fw_compiler, bw_compiler, partition_fn, decompositions,
        keep_inference_input_mutations, inference_compiler, dynamic, num_params_buffers=num_params_buffers,
        cache=cache, recompile_warn_limit=recompile_warn_limit,
    )
    return AotFunction(fn, config)
