"""aotgrad as a ``torch.compile`` backend.

``torch.compile(model, backend="aotgrad")`` works once the package is installed: the
``torch_dynamo_backends`` entry points in pyproject.toml name :data:`aotgrad_backend` (the
nop compiler: graphs run op by op in Python) and :func:`aotgrad_inductor_backend`.
:func:`backend` builds a backend with your own compilers.

What Dynamo (torch 2.13) hands a backend, and how it is handled:

* an ``fx.GraphModule`` of torch-level ops; each graph break gives a separate graph and a
  separate backend call, each compiled on its own;
* ``example_inputs``: *real* tensors by default, with parameters and buffers lifted into
  ordinary graph inputs (``inline_inbuilt_nn_modules``, always on in 2.13), interleaved with the
  user's inputs; SymInt values for sizes marked dynamic (the call then passes ints).
  A GraphModule that owns its parameters
  (other front ends, older Dynamo) is handled too. Both shapes go through
  :func:`aotgrad.module.aot_module_simplified`, which lifts whatever state the
  GraphModule still owns; lifted inputs are ordinary inputs to aot_function, whose
  input-mutation handling writes BatchNorm's running stats back.
* Example inputs are never computed on, so fake example inputs (another wrapper may pass
  them) work the same; the returned callable is invoked with real tensors (and ints), and
  traces on the first call.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from . import compilers
from .config import AotConfig
from .module import compiled_module_forward

__all__ = ["AotgradBackend", "aotgrad_backend", "aotgrad_inductor_backend", "backend"]

log = logging.getLogger(__name__)


def _has_symbolic(example_inputs: list[Any]) -> bool:
    """True when Dynamo marked something dynamic (a SymInt input, or a symbolic size)."""
    for x in example_inputs:
        if isinstance(x, torch.SymInt):
            return True
        if isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape):
            return True
    return False


class AotgradBackend:
    """A Dynamo backend: ``backend(gm, example_inputs) -> callable``.

    Holds the compile options (:class:`~aotgrad.config.AotConfig`); each call compiles one
    Dynamo graph through :func:`aotgrad.module.aot_module_simplified`.

    ``dynamic=False`` (the default) is always correct: a graph Dynamo made dynamic receives
    its sizes as plain ``int`` inputs, which aot_function bakes into the graph, so each new
    size compiles a new aotgrad entry under Dynamo's single graph. ``dynamic=None`` follows
    Dynamo (``dynamic=True`` for a graph with symbolic sizes); aot_function accepts it but
    still traces static shapes (one entry per size), so today it behaves like ``False``.
    """

    def __init__(self, config: AotConfig, dynamic: bool | None = False, name: str = "aotgrad") -> None:
        self.config = config
        self.dynamic = dynamic
        self.name = name

    @property
    def fw_compiler(self) -> Callable:
        return self.config.fw_compiler

    def __repr__(self) -> str:
        return f"AotgradBackend(name={self.name!r}, fw_compiler={getattr(self.fw_compiler, '__name__', self.fw_compiler)!r})"

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        if not isinstance(gm, torch.fx.GraphModule):
            raise TypeError(
                f"{self.name} backend: expected a torch.fx.GraphModule from Dynamo, got "
                f"{type(gm).__name__}; pass this backend to torch.compile(backend=...)."
            )
        dynamic = _has_symbolic(example_inputs) if self.dynamic is None else self.dynamic
        log.info(
            "%s backend: graph with %d nodes, %d inputs (dynamic=%s)",
            self.name, len(gm.graph.nodes), len(example_inputs), dynamic,
        )
        return compiled_module_forward(gm, example_inputs, dataclasses.replace(self.config, dynamic=dynamic))


def backend(
    fw_compiler: Callable | None = None,
    bw_compiler: Callable | None = None,
    partition_fn: Callable | None = None,
    decompositions: dict | None = None,
    keep_inference_input_mutations: bool = False,
    inference_compiler: Callable | None = None,
    dynamic: bool | None = False,
) -> AotgradBackend:
    """A configured backend for ``torch.compile(model, backend=aotgrad.backend(...))``.

    The arguments are aot_function's; ``fw_compiler`` defaults to
    :func:`aotgrad.compilers.nop`, ``bw_compiler`` and ``inference_compiler`` to
    ``fw_compiler``; ``dynamic`` is described in :class:`AotgradBackend`.
    """
    config = AotConfig(
        fw_compiler if fw_compiler is not None else compilers.nop, bw_compiler, partition_fn,
        decompositions, keep_inference_input_mutations, inference_compiler,
    )
    return AotgradBackend(config, dynamic)


#: ``torch.compile(..., backend="aotgrad")``: the nop compiler (graphs run op by op).
aotgrad_backend = backend()


def aotgrad_inductor_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    """``torch.compile(..., backend="aotgrad_inductor")``: aotgrad graphs, Inductor code.

    ``aotgrad.compilers.inductor`` is looked up at call time so that importing this module
    (which Dynamo does for every entry point it lists) never fails where it is missing.
    """
    inductor = getattr(compilers, "inductor", None)
    if inductor is None:
        raise RuntimeError(
            "aotgrad_inductor backend: aotgrad.compilers.inductor is not available in this "
            "version of aotgrad; use backend='aotgrad' or pass your own compiler to "
            "aotgrad.backend(fw_compiler=...)."
        )
    return AotgradBackend(AotConfig(inductor), name="aotgrad_inductor")(gm, example_inputs)
