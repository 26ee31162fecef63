"""The public entry points. Keep this file thin: it only fills in defaults."""

from __future__ import annotations

import logging
from collections.abc import Callable

from .config import AotConfig
from .dispatch import AotFunction

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
    decompositions applied while tracing. ``num_params_buffers`` (leading inputs that are
    parameters and buffers) is accepted for torch's signature and not needed: every input's
    mutations and aliasing are analysed alike. With
    ``keep_inference_input_mutations`` the inference graph keeps input data mutations as
    ``copy_`` ops instead of returning new values.

    ``dynamic=True`` is accepted but does not trace symbolic shapes yet: graphs are
    specialised to the call's shapes, and a call with other shapes compiles a new entry.
    Results are the same; only the number of compilations differs (logged at INFO).
    """
    if dynamic:
        log.info(
            "aotgrad: dynamic=True traces static shapes for now (one entry per input shape) for %s",
            getattr(fn, "__name__", fn),
        )
    config = AotConfig(
        fw_compiler, bw_compiler, partition_fn, decompositions,
        keep_inference_input_mutations, inference_compiler, dynamic,
    )
    return AotFunction(fn, config)
