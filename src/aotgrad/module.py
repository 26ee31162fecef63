"""Compiling ``nn.Module``s: :func:`aot_module` and :func:`aot_module_simplified`.

Both are thin layers over aot_function's :class:`~aotgrad.core.dispatch.AotFunction`. A
module's parameters and buffers become the leading inputs of a pure function of
``(*state, *user_args)``; inside that function the module's tensors are temporarily swapped
for the traced inputs and the module is called as usual. So:

* parameters and buffers are read **at call time**, never captured at compile time: an
  optimizer step, ``load_state_dict`` or ``module.weight = nn.Parameter(...)`` is seen by
  the next call without recompiling;
* an in-place update of a buffer inside ``forward`` (BatchNorm running stats, a counter
  ``self.steps += 1``) is an input mutation of the compiled function, which aot_function
  writes back to the real buffer; a buffer *reassigned* in ``forward``
  (``self.count = self.count + 1``) is returned as an extra output and assigned back;
* Python state that ``forward`` reads at trace time cannot be seen by aot_function's cache,
  so this module keeps its own cache on top, keyed by every submodule's identity and
  ``training`` flag and by where each parameter/buffer lives (which names share a tensor).
  ``model.eval()`` therefore compiles a second entry instead of reusing the training graph.
  Other Python attributes read by ``forward`` (``self.scale = 2.0``) are baked into the
  graph at trace time; after changing one, make a new ``aot_module``.

Tied parameters (one tensor under several names) are passed once: the leading graph inputs
are the *distinct* parameter and buffer tensors, parameters first, in ``named_parameters`` /
``named_buffers`` order. What the module tree looks like, and whether it changed, is
:mod:`aotgrad.module_state`'s business.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch.fx
import torch.fx.traceback as fx_traceback
from torch import nn

from .config import AotConfig
from .core.dispatch import AotFunction
from .core.provenance import running_with_stack_traces
from .core.symbolic import symbolic_leaves_of_examples
from .errors import note_user_line
from .module_state import (
    SnapshotCache,
    StateLayout,
    locations,
    state_layout,
    swapped_state,
)

__all__ = ["AOTModule", "aot_module", "aot_module_simplified", "compiled_module_forward"]

log = logging.getLogger(__name__)


def _describe_forward(root: nn.Module) -> str:
    fwd = type(root).forward
    try:
        src = inspect.getsourcefile(fwd)
        _, lineno = inspect.getsourcelines(fwd)
        return f"{type(root).__name__}.forward (defined at {src}:{lineno})"
    except (OSError, TypeError):
        return f"{type(root).__name__}.forward"


def _run_traced(root: nn.Module, args: tuple, kwargs: dict) -> Any:
    """Call ``root`` while it is traced. A GraphModule (Dynamo's) runs node by node with its
    node meta preserved, so each ATen node traced from a node carries that node's
    ``stack_trace`` (the user's source line), as torch's AOT Autograd keeps it, and so do
    the backward's nodes (each autograd node records it: ``running_with_stack_traces``)."""
    if isinstance(root, torch.fx.GraphModule) and not kwargs:
        with fx_traceback.preserve_node_meta(), running_with_stack_traces():
            return torch.fx.Interpreter(root).run(*args)
    return root(*args, **kwargs)


class _CompiledForward:
    """The callable both entry points return: ``(*user_args, **kwargs) -> forward(...)``.

    Holds one aot_function per :class:`StateLayout` key. A call checks that the module
    tree is as at the last call (:class:`SnapshotCache`; else it walks it again with
    :func:`snapshot`), picks the entry and calls it with the state tensors prepended;
    aot_function then handles input metadata, grad mode, mutations and aliasing.
    """

    def __init__(self, root: nn.Module, config: AotConfig):
        self.root = root
        self.config = config
        self.entries: dict[tuple, tuple[StateLayout, Callable]] = {}
        self._cache: SnapshotCache | None = None

    def __deepcopy__(self, memo: dict) -> _CompiledForward:
        # Entries close over the original modules; a copy must trace its own.
        return _CompiledForward(copy.deepcopy(self.root, memo), self.config)

    def _entry(self, key: tuple) -> tuple[StateLayout, Callable]:
        layout = state_layout(self.root, key)
        root = self.root
        n_state = len(layout.slots)

        def functional_forward(*flat: Any, **kwargs: Any) -> Any:
            # Runs only while aot_function traces (on fake tensors); never on a real call.
            state, args = flat[:n_state], flat[n_state:]
            with swapped_state(layout, state) as reassigned:
                out = _run_traced(root, args, kwargs)
            # A 1-tuple when nothing was reassigned (the common case): a tuple of tensors
            # is packed without a pytree walk on every call.
            return (out, reassigned) if reassigned else (out,)

        # what logs, recompile warnings and explain reports call it
        functional_forward.__name__ = functional_forward.__qualname__ = f"{type(root).__name__}.forward"
        # The persistent cache keys this function by root's tree, not by its closure:
        # every registered parameter and buffer of it is swapped for a graph input.
        functional_forward._aotgrad_swaps_state_of = root  # type: ignore[attr-defined]

        log.info(
            "aot_module: new entry for %s (%d params, %d buffers, %d modules, training=%s)",
            type(root).__name__, layout.num_params, n_state - layout.num_params,
            len(layout.modules), root.training,
        )
        # The state leads the call: static shapes under dynamic=True, and Dynamo's
        # symbolic leaves (of the user inputs) come after it.
        hint = self.config.symbolic_leaves
        config = dataclasses.replace(
            self.config, num_params_buffers=n_state,
            symbolic_leaves=None if hint is None else hint.shifted(n_state),
        )
        compiled = AotFunction(functional_forward, config)
        return layout, compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        cache = self._cache
        if cache is None or not cache.valid():
            cache = self._cache = SnapshotCache(self.root)
            entry = self.entries.get(cache.key)
            if entry is None:
                entry = self.entries[cache.key] = self._entry(cache.key)
            # Kept on the snapshot: while it is valid, its key (a long tuple, hashed anew
            # on every lookup) needs no dict lookup.
            cache.entry = entry
        layout, compiled = cache.entry
        try:
            result = compiled(*cache.state, *args, **kwargs)
        except Exception as e:
            self._explain_call_error(e, args, kwargs)
            note_user_line(e, _describe_forward(self.root))  # unchanged, plus the line
            raise
        if len(result) == 1:
            return result[0]
        out, reassigned = result
        where = locations(layout)
        for n, value in reassigned.items():
            # forward() did `self.buf = new_tensor`: do the same to the real module.
            i, attr, _ = where[n]
            layout.modules[i]._buffers[attr] = value
        return out

    def _explain_call_error(self, exc: Exception, args: tuple, kwargs: dict) -> None:
        """Turn "the user called with the wrong arguments" into a TypeError saying so.

        Checked only after a failure, so a good call pays nothing for it.
        """
        try:
            inspect.signature(self.root.forward).bind(*args, **kwargs)
        except TypeError as bind_error:
            given = f"{len(args)} positional argument(s)" + (
                f" and keyword argument(s) {', '.join(sorted(kwargs))}" if kwargs else ""
            )
            raise TypeError(
                f"{_describe_forward(self.root)} cannot take the arguments it was called with "
                f"({given}): {bind_error}. Call the compiled module exactly as you would call "
                "the original one."
            ) from exc
        except ValueError:  # no signature available (builtin); nothing better to say
            pass


class AOTModule(nn.Module):
    """An ``nn.Module`` whose forward runs graphs compiled by aot_function.

    It *is* the original module as far as state goes: it shares the original's
    ``_parameters``, ``_buffers`` and ``_modules`` dicts (so ``parameters()``,
    ``state_dict()`` keys and values, ``.to()``, and an optimizer built on either object are
    the same), ``train()``/``eval()`` switch both, and attributes it lacks are looked up on
    the original (``orig_module``). Only ``forward`` differs.
    """

    def __init__(self, orig_module: nn.Module, compiled_forward: _CompiledForward):
        super().__init__()
        # Assigned through __dict__ so that nn.Module does not register orig_module as a
        # child: a child would prefix every state_dict key with "orig_module.".
        d = self.__dict__
        d["orig_module"] = orig_module
        d["_compiled_forward"] = compiled_forward
        d["_parameters"] = orig_module._parameters
        d["_buffers"] = orig_module._buffers
        d["_non_persistent_buffers_set"] = orig_module._non_persistent_buffers_set
        d["_modules"] = orig_module._modules
        d["training"] = orig_module.training

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._compiled_forward(*args, **kwargs)

    def train(self, mode: bool = True) -> AOTModule:
        self.orig_module.train(mode)
        self.training = mode
        return self

    # The original's own state_dict machinery (custom _save_to_state_dict, extra state,
    # hooks registered on it) must produce exactly what it would for the original module.
    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.orig_module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.orig_module.load_state_dict(state_dict, strict=strict, assign=assign)

    def _save_to_state_dict(self, *args: Any) -> None:
        self.orig_module._save_to_state_dict(*args)

    def _load_from_state_dict(self, *args: Any) -> None:
        self.orig_module._load_from_state_dict(*args)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            orig = self.__dict__.get("orig_module")
            if orig is None:
                raise
            return getattr(orig, name)

    def extra_repr(self) -> str:
        return f"orig_module={type(self.orig_module).__name__}"


def aot_module(mod: nn.Module, *args: Any, **kwargs: Any) -> AOTModule:
    """Compile ``mod`` with aot_function; return a module that shares its state.

    The returned :class:`AOTModule` is called like ``mod``. Its parameters, buffers and
    ``state_dict()`` are ``mod``'s (same objects, same keys). Each call passes the current
    parameters and buffers as the leading graph inputs (``num_params_buffers`` = their
    number), so optimizer updates are seen without recompiling; buffer mutations made by
    ``forward`` are written back. A change of any submodule's ``training`` flag, of the
    module tree, or of an input's metadata or grad mode compiles a new graph; tracing
    happens on the first call of each.

    ``args`` and ``kwargs`` are aot_function's options after ``fn``, as in torch's
    ``aot_module``: ``fw_compiler, bw_compiler=None, partition_fn=None,
    decompositions=None, keep_inference_input_mutations=False, inference_compiler=None,
    *, dynamic=False, cache=None`` (:class:`~aotgrad.config.AotConfig`; ``num_params_buffers`` is
    the module's own and not taken).
    """
    if not isinstance(mod, nn.Module):
        raise TypeError(
            f"aot_module expects an nn.Module, got {type(mod).__name__}; use "
            "aotgrad.aot_function for plain functions."
        )
    return AOTModule(mod, _CompiledForward(mod, AotConfig(*args, **kwargs)))


def aot_module_simplified(
    mod: nn.Module,
    args: Sequence[Any],
    fw_compiler: Callable,
    bw_compiler: Callable | None = None,
    partition_fn: Callable | None = None,
    decompositions: dict | None = None,
    keep_inference_input_mutations: bool = False,
    inference_compiler: Callable | None = None,
    *,
    dynamic: bool = False,
    cache: str | os.PathLike | bool | None = None,
) -> Callable:
    """The backend entry point: a plain callable over ``mod``'s user inputs.

    ``mod``'s parameters and buffers become the leading inputs of the compiled graphs (read
    at call time, like :func:`aot_module`); the returned function takes only the user
    inputs. ``args`` are example user inputs, real or fake (Dynamo passes real tensors,
    and SymInts for dynamic sizes); they are checked against ``mod.forward``'s signature
    here, but tracing happens on the first real call, on fake copies aot_function makes
    itself — so fake or real, ``args`` are never computed on and never mutated. Fake
    ``args`` with symbolic sizes, and SymInt ``args``, say which sizes to trace
    symbolically (as Dynamo's graph does for the backend).
    """
    config = AotConfig(fw_compiler, bw_compiler, partition_fn, decompositions,
                       keep_inference_input_mutations, inference_compiler, dynamic, cache=cache)
    symbolic = symbolic_leaves_of_examples(args)
    if symbolic and not dynamic:
        config = dataclasses.replace(config, dynamic=True, symbolic_leaves=symbolic)
    return compiled_module_forward(mod, args, config)


def compiled_module_forward(mod: nn.Module, args: Sequence[Any], config: AotConfig) -> Callable:
    """:func:`aot_module_simplified` with its options as one :class:`AotConfig`."""
    if not isinstance(mod, nn.Module):
        raise TypeError(f"aot_module_simplified expects an nn.Module, got {type(mod).__name__}")
    try:
        inspect.signature(mod.forward).bind(*args)
    except TypeError as e:
        raise TypeError(
            f"aot_module_simplified: the {len(args)} example inputs do not fit "
            f"{_describe_forward(mod)}: {e}"
        ) from None
    except ValueError:
        pass
    return _CompiledForward(mod, config)
