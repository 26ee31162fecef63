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
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from . import compilers
from .config import AotConfig
from .context import next_aot_id
from .core.symbolic import SymbolicLeaves, symbolic_leaves_of_examples
from .module import compiled_module_forward

__all__ = ["AotgradBackend", "aotgrad_backend", "aotgrad_inductor_backend", "backend"]

log = logging.getLogger(__name__)


def symbolic_leaves_of(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> SymbolicLeaves:
    """Which of a Dynamo graph's inputs Dynamo made symbolic, read off the placeholders'
    ``example_value`` (fake tensors with symbolic sizes, SymInts; the example inputs
    themselves are real tensors): see :func:`aotgrad.core.symbolic.symbolic_leaves_of_examples`."""
    values = [n.meta.get("example_value") for n in gm.graph.find_nodes(op="placeholder")]
    return symbolic_leaves_of_examples(values if len(values) == len(example_inputs) else example_inputs)


class AotgradBackend:
    """A Dynamo backend: ``backend(gm, example_inputs) -> callable``.

    Holds the compile options (:class:`~aotgrad.config.AotConfig`); each call compiles one
    Dynamo graph through :func:`aotgrad.module.aot_module_simplified`.

    ``dynamic=None`` (the default) follows Dynamo: the sizes Dynamo made symbolic
    (automatic dynamic after a size change, ``dynamic=True``, ``mark_dynamic``) and its
    SymInt inputs are traced symbolically, so each Dynamo graph compiles once, as with
    ``aot_eager``. ``dynamic=False`` traces static shapes (an int input is baked into the
    graph; each new size compiles a new aotgrad entry under Dynamo's one graph).
    """

    def __init__(self, config: AotConfig, dynamic: bool | None = None, name: str = "aotgrad") -> None:
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
        symbolic = symbolic_leaves_of(gm, example_inputs) if self.dynamic is not False else SymbolicLeaves()
        log.info(
            "%s backend: graph with %d nodes, %d inputs (%s)", self.name, len(gm.graph.nodes), len(example_inputs),
            f"symbolic: {symbolic}" if symbolic else "static",
        )
        # each Dynamo graph is a compiled function of its own (its aot_id), as in torch
        config = dataclasses.replace(
            self.config, dynamic=bool(symbolic), symbolic_leaves=symbolic, aot_id=next_aot_id()
        )
        return compiled_module_forward(gm, example_inputs, config)


def backend(
    fw_compiler: Callable | None = None,
    bw_compiler: Callable | None = None,
    partition_fn: Callable | None = None,
    decompositions: dict | None = None,
    keep_inference_input_mutations: bool = False,
    inference_compiler: Callable | None = None,
    dynamic: bool | None = None,
    cache: str | os.PathLike | bool | None = None,
) -> AotgradBackend:
    """A configured backend for ``torch.compile(model, backend=aotgrad.backend(...))``.

    The arguments are aot_function's; ``fw_compiler`` defaults to
    :func:`aotgrad.compilers.nop`, ``bw_compiler`` and ``inference_compiler`` to
    ``fw_compiler``; ``dynamic`` is described in :class:`AotgradBackend`; ``cache`` is
    :func:`aotgrad.aot_function`'s (the persistent compile cache).
    """
    config = AotConfig(
        fw_compiler if fw_compiler is not None else compilers.nop, bw_compiler, partition_fn,
        decompositions, keep_inference_input_mutations, inference_compiler, cache=cache,
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
