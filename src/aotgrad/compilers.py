"""Ready-made forward/backward compilers, and the two calling conventions of what they return.

A compiler is any callable ``compiler(gm: torch.fx.GraphModule, example_inputs: list)
-> callable``. ``example_inputs`` are fake tensors (and ints) describing the inputs the
compiled callable will receive. The compiled callable either takes the graph's inputs as
positional arguments (a ``GraphModule``, a plain function), or is *boxed*, torch's
convention: it has ``_boxed_call = True`` and takes one list of the inputs, which it may
clear to free them early (:func:`make_boxed_func`, :func:`make_boxed_compiler`; torch's own
``nop``, ``print_compile`` and ``compile_fx_inner`` return boxed callables). Either works
as any of aotgrad's compilers; :func:`positional` is the one place that tells them apart.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch.fx

from .core.signature import is_tangent

__all__ = [
    "InductorCompiler",
    "default_decompositions",
    "inductor",
    "inductor_bw",
    "inductor_inference",
    "make_boxed_compiler",
    "make_boxed_func",
    "nop",
    "positional",
    "print_compile",
    "print_graph",
]


def make_boxed_func(f: Callable) -> Callable:
    """``f`` in torch's boxed convention: ``g(args_list) -> f(*args_list)``, with
    ``g._boxed_call = True``. (The list is the caller's to give away: ``g`` may clear it.)"""

    def g(args: list) -> Any:
        return f(*args)

    g._boxed_call = True  # type: ignore[attr-defined]
    g.__wrapped__ = f  # type: ignore[attr-defined]
    return g


def make_boxed_compiler(compiler: Callable) -> Callable:
    """``compiler`` returning its compiled callable boxed (:func:`make_boxed_func`)."""

    @functools.wraps(compiler)
    def boxed_compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        return make_boxed_func(compiler(gm, example_inputs))

    return boxed_compiler


def positional(compiled: Callable) -> Callable:
    """A compiled callable as ``call(*inputs)``, whichever convention it follows.

    A ``GraphModule`` is called through its ``forward`` (``nn.Module.__call__`` costs µs per
    call); a boxed callable (``_boxed_call``) gets a fresh list of the inputs that nothing
    else holds, so it may free them as it goes; anything else is called as it is.
    """
    if isinstance(compiled, torch.fx.GraphModule):
        return compiled.forward
    if getattr(compiled, "_boxed_call", False):
        return lambda *args: compiled(list(args))
    return compiled


def nop(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    """Return the graph module itself: the traced graph runs op by op in Python."""
    return gm


def print_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    """Print the graph's Python code, then run it as :func:`nop` does."""
    print(gm.code)
    return gm


#: torch's name for :func:`print_graph`
print_compile = print_graph


def _default_decompositions() -> dict:
    aten = torch.ops.aten
    from torch._decomp import get_decompositions

    # Backward formulas and activations that torch's compilers also get decomposed by
    # default (``torch._functorch.compilers.default_decompositions`` names the same ops).
    return get_decompositions([
        aten.detach, aten.gelu_backward, aten.leaky_relu_backward, aten.sigmoid_backward,
        aten.threshold_backward, aten.hardtanh_backward, aten.hardsigmoid_backward,
        aten.hardswish_backward, aten.tanh_backward, aten.silu_backward, aten.elu_backward,
        aten.cudnn_batch_norm, aten.cudnn_batch_norm_backward, aten.masked_fill.Scalar,
        aten.masked_fill.Tensor, aten.elu, aten.leaky_relu, aten.hardtanh, aten.hardswish,
        aten.hardsigmoid, aten.conj_physical, aten.is_same_size,
    ])


#: a decomposition table to pass as ``decompositions=`` (torch's ``default_decompositions``)
default_decompositions = _default_decompositions()


# --------------------------------------------------------------------------------------
# TorchInductor
# --------------------------------------------------------------------------------------


class InductorCompiler:
    """Hand a traced graph to TorchInductor (``compile_fx_inner``) and return a callable.

    Use an instance as ``fw_compiler``, ``bw_compiler`` and ``inference_compiler``. The
    module-level instances are :data:`inductor` (the phase is detected from the graph),
    :data:`inductor_bw` (always backward) and :data:`inductor_inference` (always inference).

    * **Decompositions.** Inductor lowers only graphs traced with its own decomposition table
      (without it, compilation fails with "both a fallback and a decomp for same op"). The
      table is exposed as the :attr:`decompositions` attribute, which tracing uses when the
      user passes no ``decompositions`` (docs/contracts.md). It is computed on first access:
      importing Inductor takes seconds.
    * **Phase.** ``compile_fx_inner`` takes ``is_backward`` / ``is_inference`` flags. With
      ``phase="auto"`` (:data:`inductor`) a graph with a tangent placeholder
      (:func:`aotgrad.core.signature.is_tangent`: tagged when the joint is traced, else named
      ``tangents_*`` as torch names them) is compiled as a backward graph, any other graph
      as a training forward. Pass ``phase="inference"`` (:data:`inductor_inference`) as the
      ``inference_compiler`` to let Inductor apply its inference-only optimizations; the
      flag changes performance, not results.
    * **Strides.** Every output of the graph keeps the strides recorded in its
      ``meta["val"]``: user outputs then match eager, and the saved tensors a forward
      returns have exactly the layout the backward graph was traced (and compiled) for.
      Tangents arriving at a compiled backward with a layout other than the one it was
      compiled for are copied into that layout first (Inductor's kernels assume the
      compiled strides).
    * **Calling convention.** ``compile_fx_inner`` returns a boxed callable (takes one list,
      may clear it). The returned callable takes the inputs positionally, like ``gm`` does.
    * **Cache.** Inductor's FX graph cache (``torch._inductor.config.fx_graph_cache``) is
      switched on while compiling, so compiling the same graph again (same process or not)
      is a cache hit. The cache only works when the fake mode has a ``ShapeEnv``; example
      inputs from a mode without one (static tracing) are re-faked, statically, in a mode
      that has one.
    * **Graph ownership.** Inductor rewrites the graph it is given; it gets a copy, so ``gm``
      is left as it was.
    * **aotgrad's persistent cache.** The returned callable carries a ``cache_artifact``:
      the FX graph cache's key of the compiled graph and a digest of everything besides the
      graph and its example inputs that Inductor's key holds (Inductor's configuration, the
      system, the global settings: :func:`_fx_key_context`), with the tangents' positions and
      whether the graph returns one value (read off ``gm``), or None where the graph was not
      cached by key. A stored aotgrad entry keeps it, and a hit hands it back to
      :meth:`load_cached`, which loads the compiled graph by that key (as torch's
      AOTAutogradCache does) instead of copying the graph and computing its key again, and
      reads nothing of the graph.
    """

    _PHASES = ("auto", "forward", "backward", "inference")

    def __init__(self, phase: str = "auto") -> None:
        if phase not in self._PHASES:
            raise ValueError(f"phase must be one of {self._PHASES}, got {phase!r}")
        self.phase = phase

    def __repr__(self) -> str:
        return f"InductorCompiler(phase={self.phase!r})"

    @property
    def decompositions(self) -> dict:
        """Inductor's decomposition table (``select_decomp_table()``), computed lazily."""
        return _inductor_decompositions()

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        import copy

        import torch
        from torch._guards import TracingContext, tracing
        from torch._inductor import config as inductor_config
        from torch._inductor.compile_fx import compile_fx_inner
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        tangent_idxs = [i for i, node in enumerate(gm.graph.find_nodes(op="placeholder")) if is_tangent(node)]
        phase = self.phase
        if phase == "auto":
            phase = "backward" if tangent_idxs else "forward"
        is_backward = phase == "backward"

        gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        output = gm.graph.find_nodes(op="output")[0]
        outs = output.args[0]
        if not isinstance(outs, (tuple, list)):  # Inductor compiles tuple/list outputs only
            outs = (outs,)
            output.args = (outs,)
            unwrap = True
        else:
            unwrap = False
        output.meta["user_visible_output_idxs"] = [
            i for i, o in enumerate(outs) if isinstance(o, torch.fx.Node)
        ]
        gm.recompile()

        fake_mode = next(
            (x.fake_mode for x in example_inputs if isinstance(x, FakeTensor)), None
        )
        if fake_mode is None or fake_mode.shape_env is None:
            # Real example inputs, or fakes of a mode without a ShapeEnv (static tracing):
            # Inductor's FX graph cache refuses to work without a ShapeEnv ("Bypassing FX
            # Graph Cache because 'No shape env'"), so re-fake the inputs, statically, in
            # a mode that has one.
            fake_mode = FakeTensorMode(
                allow_non_fake_inputs=True, shape_env=ShapeEnv(), static_shapes=True
            )
            example_inputs = [
                fake_mode.from_tensor(x) if isinstance(x, torch.Tensor) else x
                for x in example_inputs
            ]
        # Inductor takes the fake mode from the active TracingContext when there is one
        # (before looking at the inputs); an enclosing context of another trace (Dynamo's)
        # must not leak its mode in.
        context = TracingContext.try_get()
        if context is None or context.fake_mode is not fake_mode:
            context = TracingContext(fake_mode)
        with (
            tracing(context),
            inductor_config.patch(fx_graph_cache=True),
        ):
            compiled = compile_fx_inner(
                gm,
                list(example_inputs),
                is_backward=is_backward,
                is_inference=phase == "inference",
                # No input is "static" (fixed address across calls): that is a promise
                # only a CUDA-graph runtime can use, and ours makes none.
                static_input_idxs=(),
            )
            key = getattr(compiled, "_fx_graph_cache_key", None)
            context_digest = None if key is None else _fx_key_context(example_inputs, phase)

        coerce = _tangent_layouts(example_inputs, tangent_idxs) if is_backward else ()
        call = _boxed_caller(compiled, coerce, unwrap)
        call.cache_artifact = (
            None if context_digest is None
            else (key, getattr(compiled, "guards_expr", None), context_digest, tuple(tangent_idxs), unwrap)
        )
        return call

    def load_cached(self, gm: torch.fx.GraphModule, example_inputs: list[Any], artifact: Any) -> Callable | None:
        """What ``self(gm, example_inputs)`` returns, loaded from Inductor's FX graph cache by
        the key a compile of this very graph over these example inputs stored (``artifact``:
        the ``cache_artifact`` of what that call returned; aotgrad's cache entry, whose key
        determines the graph and the example inputs, keeps it). None, and the caller compiles,
        where anything else Inductor's key holds differs now (its configuration, the
        system, the global settings), where the FX graph cache is off, remote or bundled, or
        where the compiled graph is no longer in it."""
        import torch
        from torch._guards import TracingContext, tracing
        from torch._inductor import async_compile
        from torch._inductor import config as inductor_config
        from torch._inductor.codecache import FxGraphCache
        from torch._inductor.output_code import CompiledFxGraphConstants
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        # (the tangents' positions and the output's form as read off ``gm`` at that compile:
        # a graph loaded from aotgrad's cache is then not decoded to read them again)
        key, guards_expr, context_digest, tangent_idxs, unwrap = artifact
        phase = self.phase
        if phase == "auto":
            phase = "backward" if tangent_idxs else "forward"
        if (
            inductor_config.force_disable_caches
            or torch._functorch.config.bundled_autograd_cache
            or _fx_remote_cache()
            or any(isinstance(x, torch.SymInt) for x in example_inputs)
        ):
            return None
        # the lookup reads the ShapeEnv of the tracing context's fake mode (no guards in a
        # static graph: the stored guard expression is compared, as torch's cache does)
        context = TracingContext(FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv(), static_shapes=True))
        with tracing(context), inductor_config.patch(fx_graph_cache=True):
            if context_digest is None or _fx_key_context(example_inputs, phase) != context_digest:
                return None
            async_compile.CompiledTritonKernels.cache_clear()
            constants = CompiledFxGraphConstants()
            compiled, _ = FxGraphCache.load_with_key(
                key, [], example_inputs, local=True, remote_cache=None, is_backward=phase == "backward",
                constants=constants, evaluate_guards=lambda expr, _hints: expr == guards_expr,
            )
            if compiled is None:
                return None
            compiled.post_compile(example_inputs, constants, _fx_kwargs(phase))
            policy = inductor_config.cudagraph_policy
            if policy is not None:
                compiled = policy.wrap_output(compiled)
        coerce = _tangent_layouts(example_inputs, list(tangent_idxs)) if phase == "backward" else ()
        call = _boxed_caller(compiled, coerce, unwrap)
        call.cache_artifact = artifact
        return call


def _fx_kwargs(phase: str) -> dict:
    """The keyword arguments ``compile_fx_inner`` compiles a graph of ``phase`` with (as
    :meth:`InductorCompiler.__call__` passes them, with ``compile_fx_inner``'s defaults)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import BoxedBool

    return {
        "cudagraphs": BoxedBool(inductor_config.triton.cudagraphs), "static_input_idxs": (),
        "is_backward": phase == "backward", "graph_id": None, "cpp_wrapper": False, "fx_wrapper": False,
        "is_inference": phase == "inference", "boxed_forward_device_index": None, "layout_opt": None,
        "extern_node_serializer": None,
    }


def _fx_remote_cache() -> bool:
    from torch._inductor.compile_fx import should_use_remote_fx_graph_cache

    return bool(should_use_remote_fx_graph_cache())


def _fx_key_context(example_inputs: list[Any], phase: str) -> str | None:
    """A digest of what Inductor's FX graph cache key holds besides the graph and its
    example inputs (``FxGraphHashDetails`` built over no graph: Inductor's and its comms'
    configuration, custom passes, system and torch versions, deterministic-algorithm,
    matmul, default-dtype and thread settings, the compile keywords); the example inputs
    only decide whether the thread count is in it. None where it cannot be computed (a
    custom pass Inductor's own key refuses: its cache is bypassed then) or pickled."""
    import hashlib
    import pickle

    from torch._inductor.codecache import FxGraphHashDetails

    try:
        details = FxGraphHashDetails(None, example_inputs, _fx_kwargs(phase), [])
        fields = sorted((k, v) for k, v in vars(details).items() if k not in ("gm", "example_inputs"))
        return hashlib.sha256(pickle.dumps(fields, protocol=4)).hexdigest()
    except Exception:  # noqa: BLE001 - no stored key (cold), no loading by it (hit)
        return None


def _inductor_decompositions() -> dict:
    global _INDUCTOR_DECOMPS
    if _INDUCTOR_DECOMPS is None:
        from torch._inductor.decomposition import select_decomp_table

        _INDUCTOR_DECOMPS = select_decomp_table()
    return _INDUCTOR_DECOMPS


_INDUCTOR_DECOMPS: dict | None = None


def _tangent_layouts(example_inputs: list[Any], tangent_idxs: list[int]) -> tuple:
    """(index, shape, strides) of each tangent whose compiled layout is statically known."""
    import torch

    layouts = []
    for i in tangent_idxs:
        x = example_inputs[i]
        if not isinstance(x, torch.Tensor):
            continue
        shape, stride = tuple(x.shape), tuple(x.stride())
        if all(type(s) is int for s in shape + stride):
            layouts.append((i, shape, stride))
    return tuple(layouts)


def _boxed_caller(compiled: Callable, coerce: tuple, unwrap: bool) -> Callable:
    """Adapt a boxed callable (one list argument) to positional arguments."""
    import torch

    if coerce:

        def call(*args):
            args = list(args)
            for i, shape, stride in coerce:
                t = args[i]
                if type(t) is torch.Tensor and t.stride() != stride and t.shape == shape:
                    fixed = torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device)
                    args[i] = fixed.copy_(t)
            out = compiled(args)
            return out[0] if unwrap else out

    elif unwrap:

        def call(*args):
            return compiled(list(args))[0]

    else:

        def call(*args):
            return compiled(list(args))

    call.compiled = compiled  # the OutputCode, for inspection
    return call


inductor = InductorCompiler("auto")
"""Inductor for any graph: backward if it has ``tangents*`` placeholders, else forward."""

inductor_bw = InductorCompiler("backward")
"""Inductor, always compiling with ``is_backward=True``."""

inductor_inference = InductorCompiler("inference")
"""Inductor, always compiling with ``is_inference=True`` (for ``inference_compiler``)."""
