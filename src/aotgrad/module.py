"""Compiling ``nn.Module``s: :func:`aot_module` and :func:`aot_module_simplified`.

Both are thin layers over :func:`aotgrad.api.aot_function`. A module's parameters and buffers
become the leading inputs of a pure function of ``(*state, *user_args)``; inside that
function the module's tensors are temporarily swapped for the traced inputs and the module is
called as usual. So:

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

Tied parameters (one tensor under several names) are passed once; ``num_params_buffers``
given to aot_function is the number of *distinct* parameter and buffer tensors, parameters
first, in ``named_parameters`` / ``named_buffers`` order.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import linecache
import logging
import operator
import os
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import torch
from torch import nn

from .api import aot_function

__all__ = ["AOTModule", "aot_module", "aot_module_simplified"]

log = logging.getLogger(__name__)

# Where a state tensor lives: (index into the module list, attribute name, is_parameter).
_Location = tuple[int, str, bool]


@dataclass(frozen=True)
class _StateLayout:
    """The module tree's shape, as far as a traced graph depends on it.

    ``modules`` is ``named_modules(remove_duplicate=False)`` in order (a shared submodule
    appears once per path). ``slots[i]`` lists every place the i-th distinct state tensor
    is stored; parameters come before buffers. ``key`` is hashable and equal for two calls
    exactly when a graph traced for one is valid for the other (same modules, same
    training flags, same storage layout of state).
    """

    modules: tuple[nn.Module, ...]
    names: tuple[str, ...]  # qualified name of each entry of ``modules`` ("" = root)
    slots: tuple[tuple[_Location, ...], ...]
    num_params: int  # distinct tensors that are parameters (the leading slots)
    key: tuple


def _preorder(root: nn.Module) -> list[nn.Module]:
    """``named_modules(remove_duplicate=False)``'s order, without building name strings
    (the names are only needed on a cache miss)."""
    out: list[nn.Module] = []
    stack = [root]
    while stack:
        m = stack.pop()
        out.append(m)
        children = [c for c in m._modules.values() if c is not None]
        children.reverse()
        stack.extend(children)
    return out


def _snapshot(root: nn.Module) -> tuple[tuple, list[torch.Tensor]]:
    """Walk ``root`` once: return (cache key, distinct state tensors in slot order).

    This runs whenever :class:`_SnapshotCache` finds the tree changed, so it builds only the
    key (ids, flags, attribute names) and the tensor list; the full :class:`_StateLayout`
    is built by :func:`_layout` on a miss of the entry cache.
    """
    module_key: list[tuple[int, bool]] = []
    param_slot: dict[int, int] = {}
    buffer_slot: dict[int, int] = {}
    params: list[torch.Tensor] = []
    buffers: list[torch.Tensor] = []
    param_locs: list[tuple[int, str, int]] = []  # (module index, attribute, slot)
    buffer_locs: list[tuple[int, str, int]] = []
    for i, m in enumerate(_preorder(root)):
        module_key.append((id(m), m.training))
        for attr, t in m._parameters.items():
            if t is None:
                continue
            slot = param_slot.setdefault(id(t), len(params))
            if slot == len(params):
                params.append(t)
            param_locs.append((i, attr, slot))
        for attr, t in m._buffers.items():
            if t is None:
                continue
            slot = buffer_slot.setdefault(id(t), len(buffers))
            if slot == len(buffers):
                buffers.append(t)
            buffer_locs.append((i, attr, slot))
    key = (tuple(module_key), tuple(param_locs), tuple(buffer_locs))
    return key, params + buffers


_STATE_DICTS = ("_parameters", "_buffers", "_modules")
_state_dicts = operator.attrgetter(*_STATE_DICTS)
_training = operator.attrgetter("training")
_flatten = chain.from_iterable
_dict_values = dict.values


def _fingerprint(modules: tuple[nn.Module, ...]) -> tuple[list, list, list, list]:
    """What a snapshot depends on, in C-level loops: each module's ``training`` flag and,
    over every module's ``_parameters``, ``_buffers`` and ``_modules`` dicts in turn, the
    dict sizes, keys and the ids of the values (state tensors, child modules, None)."""
    dicts = list(_flatten(map(_state_dicts, modules)))
    return (
        list(map(_training, modules)),
        list(map(len, dicts)),
        list(_flatten(dicts)),
        list(map(id, _flatten(map(_dict_values, dicts)))),
    )


def _state_guard(modules: tuple[nn.Module, ...]) -> Callable[[tuple], bool] | None:
    """A C++ check (dynamo's guard manager) that ``modules``' state dicts are the same
    objects, unmodified since now (``DICT_VERSION``: CPython bumps a dict's version tag on
    every write), and that their ``training`` flags are the same objects. None when the
    modules do not keep these in their instance ``__dict__`` or the guard API is missing;
    the caller then compares :func:`_fingerprint` instead."""
    try:
        from torch._C._dynamo.guards import RootGuardManager
        from torch._dynamo.guards import GuardManagerType

        kind = GuardManagerType.GUARD_MANAGER
        root = RootGuardManager()
        for i, m in enumerate(modules):
            attrs = m.__dict__
            if not all(a in attrs for a in _STATE_DICTS + ("training",)):
                return None
            src = f"modules[{i}]"
            mgr = root.tuple_getitem_manager(i, src, m, kind)
            mgr.add_id_match_guard(id(m), [f"id({src})"], None)
            d = mgr.get_generic_dict_manager(f"{src}.__dict__", attrs, kind)
            for a in _STATE_DICTS:
                v = attrs[a]
                # An OrderedDict can be reordered (move_to_end) without a new version tag,
                # and order matters (Sequential runs its children in _modules order).
                if type(v) is not dict:
                    return None
                am = d.dict_getitem_manager(a, f"{src}.{a}", v, kind)
                am.add_id_match_guard(id(v), [f"id({src}.{a})"], None)
                am.add_dict_version_guard(v, [f"dict_version({src}.{a})"], None)
            t = attrs["training"]
            d.dict_getitem_manager("training", f"{src}.training", t, kind).add_id_match_guard(
                id(t), [f"id({src}.training)"], None
            )
        if not root.check(modules):
            return None
        return root.check
    except Exception:
        log.debug("aot_module: no C++ state guard, using the Python fingerprint", exc_info=True)
        return None


class _SnapshotCache:
    """The last :func:`_snapshot` of a module tree, and a check that it still holds.

    A snapshot depends on each module's ``training`` flag and on the contents of its
    ``_parameters``, ``_buffers`` and ``_modules`` dicts; the preorder walk itself is fixed
    by the root and each module's children. So the check is: the modules of the last walk
    have the same flags and the same, unmodified dicts (:func:`_state_guard`, in C++;
    else :func:`_fingerprint`, re-read and compared). The cache holds the modules, their
    dicts and the state tensors, so no id it compares can be reused by a new object.

    Torch's global module/parameter/buffer registration hooks would not be enough:
    ``Module._apply`` (``.to()``, ``.double()``) stores new buffers straight into
    ``_buffers``, and ``del module.name`` runs no hook. Both modify a dict, so both are seen.
    """

    __slots__ = ("_fingerprint", "_guard", "dicts", "key", "modules", "state")

    def __init__(self, root: nn.Module) -> None:
        self.modules = tuple(_preorder(root))
        self.key, self.state = _snapshot(root)
        self.dicts = tuple(map(_state_dicts, self.modules))
        self._guard = _state_guard(self.modules)
        self._fingerprint = None if self._guard is not None else _fingerprint(self.modules)

    def valid(self) -> bool:
        if self._guard is not None:
            return self._guard(self.modules)
        return _fingerprint(self.modules) == self._fingerprint


def _layout(root: nn.Module, key: tuple) -> _StateLayout:
    """Build the full layout for a snapshot key (on a cache miss only)."""
    named = list(root.named_modules(remove_duplicate=False))
    module_key, param_locs, buffer_locs = key
    # _snapshot walked the tree with _preorder; the two orders must agree.
    assert [id(m) for _, m in named] == [i for i, _ in module_key]
    num_params = 1 + max((s for _, _, s in param_locs), default=-1)
    num_buffers = 1 + max((s for _, _, s in buffer_locs), default=-1)
    slots: list[list[_Location]] = [[] for _ in range(num_params + num_buffers)]
    for i, attr, s in param_locs:
        slots[s].append((i, attr, True))
    for i, attr, s in buffer_locs:
        slots[num_params + s].append((i, attr, False))
    return _StateLayout(
        modules=tuple(m for _, m in named),
        names=tuple(n for n, _ in named),
        slots=tuple(tuple(s) for s in slots),
        num_params=num_params,
        key=key,
    )


def _locations(layout: _StateLayout) -> list[_Location]:
    """Every location of every slot, in slot order (only used when a buffer is reassigned)."""
    return [loc for slot in layout.slots for loc in slot]


def _qualname(layout: _StateLayout, loc: _Location) -> str:
    prefix = layout.names[loc[0]]
    return f"{prefix}.{loc[1]}" if prefix else loc[1]


@contextlib.contextmanager
def _swapped_state(layout: _StateLayout, values: Sequence[torch.Tensor]) -> Iterator[dict]:
    """Temporarily store ``values`` in the module tree in place of its real tensors.

    Writes go straight into ``_parameters`` / ``_buffers``: ``setattr`` would reject a
    plain (traced) tensor under a parameter's name. Yields a dict that, on exit of the
    body, is filled with ``location -> tensor`` for every buffer that ``forward`` reassigned
    (locations numbered in slot order, as :func:`_locations` lists them);
    the real tensors are always restored, even when the body raises.
    """
    saved: list[tuple[dict, str, Any]] = []
    reassigned: dict[int, Any] = {}
    try:
        for slot, value in zip(layout.slots, values):
            for i, attr, is_param in slot:
                table = layout.modules[i]._parameters if is_param else layout.modules[i]._buffers
                saved.append((table, attr, table[attr]))
                table[attr] = value
        yield reassigned
        n = -1  # index of the location in slot order: a tied buffer may be reassigned at
        for slot, value in zip(layout.slots, values):  # one of its names only, as in eager
            for i, attr, is_param in slot:
                n += 1
                m = layout.modules[i]
                table = m._parameters if is_param else m._buffers
                now = table.get(attr, None)
                if now is value:
                    continue
                where = _qualname(layout, (i, attr, is_param))
                if is_param or not isinstance(now, torch.Tensor):
                    raise RuntimeError(
                        f"aot_module: forward() replaced {'parameter' if is_param else 'buffer'} "
                        f"'{where}' with {type(now).__name__}; only reassigning a buffer to a "
                        "tensor is supported. Update it in place instead (e.g. "
                        "`self.x.copy_(new)`)."
                    )
                reassigned[n] = now
    finally:
        for table, attr, old in reversed(saved):
            table[attr] = old


_TORCH_DIR = os.path.dirname(torch.__file__)
_TORCH_NN_DIR = os.path.join(_TORCH_DIR, "nn") + os.sep
_NN_MODULE_PLUMBING = os.path.join(_TORCH_DIR, "nn", "modules", "module.py")
_AOTGRAD_DIR = os.path.dirname(os.path.abspath(__file__))


def _is_internal(filename: str) -> bool:
    """Frames a user cannot act on: aotgrad, and torch apart from torch.nn's layer code.

    torch/nn's layers and functional.py count as user-level source (the error is at
    ``batchnorm.py: float(self.num_batches_tracked)``, say); Module.__call__'s plumbing
    does not.
    """
    if filename.startswith(("<", _AOTGRAD_DIR)):
        return True
    if filename.startswith(_TORCH_NN_DIR):
        return filename == _NN_MODULE_PLUMBING
    return filename.startswith(_TORCH_DIR)


def _user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost user-level source line (see :func:`_is_internal`) behind ``exc``.

    Follows ``__cause__`` / ``__context__``: the core may wrap a tracing failure in its own
    error, and the user's frames are then in the traceback of the wrapped exception.
    """
    found = None
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        for fs in traceback.extract_tb(e.__traceback__):
            if not _is_internal(fs.filename):
                found = fs
        e = e.__cause__ or e.__context__
    return found


def _chain_text(exc: BaseException) -> str:
    parts, seen = [], set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        parts.append(str(e))
        parts.extend(getattr(e, "__notes__", ()))
        e = e.__cause__ or e.__context__
    return "\n".join(parts)


def _note_user_line(exc: BaseException, what: str) -> None:
    """Attach the user's source line to a trace-time error, unless it already names it.

    The core names the user's line itself where it finds one outside torch; this is the
    module-level safety net: it also accepts torch.nn layer code as the "user" line (an
    ``nn.Sequential`` of stock layers has no other) and never changes the exception.
    """
    fs = _user_frame(exc)
    if fs is None:
        return
    where = f"{fs.filename}:{fs.lineno}"
    if where in str(exc) or any(where in n for n in getattr(exc, "__notes__", ())):
        return
    line = (fs.line or linecache.getline(fs.filename, fs.lineno)).strip()
    note = f"aotgrad: error in {what}, at {where}: {line}"
    if _is_data_dependent(exc):
        note += (
            "\n  This line needs a tensor's value in Python (data-dependent control flow, "
            "bool(tensor), .item()), which cannot be captured in a graph. Express it with "
            "tensor ops (torch.where) or move it out of forward."
        )
    exc.add_note(note)


def _is_data_dependent(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is tracing refusing to produce a concrete value."""
    text = _chain_text(exc)
    return "DataDependent" in text or "_local_scalar_dense" in text


def _describe_forward(root: nn.Module) -> str:
    fwd = type(root).forward
    try:
        src = inspect.getsourcefile(fwd)
        _, lineno = inspect.getsourcelines(fwd)
        return f"{type(root).__name__}.forward (defined at {src}:{lineno})"
    except (OSError, TypeError):
        return f"{type(root).__name__}.forward"


class _CompiledForward:
    """The callable both entry points return: ``(*user_args, **kwargs) -> forward(...)``.

    Holds one aot_function per :class:`_StateLayout` key. A call checks that the module
    tree is as at the last call (:class:`_SnapshotCache`; else it walks it again with
    :func:`_snapshot`), picks the entry and calls it with the state tensors prepended;
    aot_function then handles input metadata, grad mode, mutations and aliasing.
    """

    def __init__(self, root: nn.Module, aot_kwargs: dict[str, Any]):
        self.root = root
        self.aot_kwargs = aot_kwargs
        self.entries: dict[tuple, tuple[_StateLayout, Callable]] = {}
        self._cache: _SnapshotCache | None = None

    def __deepcopy__(self, memo: dict) -> _CompiledForward:
        # Entries close over the original modules; a copy must trace its own.
        return _CompiledForward(copy.deepcopy(self.root, memo), dict(self.aot_kwargs))

    def _entry(self, key: tuple) -> tuple[_StateLayout, Callable]:
        layout = _layout(self.root, key)
        root = self.root
        n_state = len(layout.slots)

        def functional_forward(*flat: Any, **kwargs: Any) -> Any:
            # Runs only while aot_function traces (on fake tensors); never on a real call.
            state, args = flat[:n_state], flat[n_state:]
            with _swapped_state(layout, state) as reassigned:
                out = root(*args, **kwargs)
            # A 1-tuple when nothing was reassigned (the common case): a tuple of tensors
            # is packed without a pytree walk on every call.
            return (out, reassigned) if reassigned else (out,)

        log.info(
            "aot_module: new entry for %s (%d params, %d buffers, %d modules, training=%s)",
            type(root).__name__, layout.num_params, n_state - layout.num_params,
            len(layout.modules), root.training,
        )
        compiled = aot_function(functional_forward, num_params_buffers=n_state, **self.aot_kwargs)
        return layout, compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        cache = self._cache
        if cache is None or not cache.valid():
            cache = self._cache = _SnapshotCache(self.root)
        entry = self.entries.get(cache.key)
        if entry is None:
            entry = self.entries[cache.key] = self._entry(cache.key)
        layout, compiled = entry
        try:
            result = compiled(*cache.state, *args, **kwargs)
        except Exception as e:
            self._explain_call_error(e, args, kwargs)
            _note_user_line(e, _describe_forward(self.root))  # unchanged, plus the line
            raise
        if len(result) == 1:
            return result[0]
        out, reassigned = result
        locations = _locations(layout)
        for n, value in reassigned.items():
            # forward() did `self.buf = new_tensor`: do the same to the real module.
            i, attr, _ = locations[n]
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


def _aot_kwargs(
    fw_compiler: Callable,
    bw_compiler: Callable | None,
    partition_fn: Callable | None,
    decompositions: dict | None,
    keep_inference_input_mutations: bool,
    inference_compiler: Callable | None,
    dynamic: bool,
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "fw_compiler": fw_compiler,
        "bw_compiler": bw_compiler,
        "decompositions": decompositions,
        "keep_inference_input_mutations": keep_inference_input_mutations,
        "inference_compiler": inference_compiler,
        "dynamic": dynamic,
    }
    if partition_fn is not None:  # let aot_function pick its own default partitioner
        kwargs["partition_fn"] = partition_fn
    return kwargs


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


def aot_module(
    mod: nn.Module,
    fw_compiler: Callable,
    bw_compiler: Callable | None = None,
    partition_fn: Callable | None = None,
    decompositions: dict | None = None,
    keep_inference_input_mutations: bool = False,
    inference_compiler: Callable | None = None,
    *,
    dynamic: bool = False,
) -> AOTModule:
    """Compile ``mod`` with aot_function; return a module that shares its state.

    The returned :class:`AOTModule` is called like ``mod``. Its parameters, buffers and
    ``state_dict()`` are ``mod``'s (same objects, same keys). Each call passes the current
    parameters and buffers as the leading graph inputs (``num_params_buffers`` = their
    number), so optimizer updates are seen without recompiling; buffer mutations made by
    ``forward`` are written back. A change of any submodule's ``training`` flag, of the
    module tree, or of an input's metadata or grad mode compiles a new graph; tracing
    happens on the first call of each.

    The remaining arguments have aot_function's meaning.
    """
    if not isinstance(mod, nn.Module):
        raise TypeError(
            f"aot_module expects an nn.Module, got {type(mod).__name__}; use "
            "aotgrad.aot_function for plain functions."
        )
    kwargs = _aot_kwargs(fw_compiler, bw_compiler, partition_fn, decompositions,
                         keep_inference_input_mutations, inference_compiler, dynamic)
    return AOTModule(mod, _CompiledForward(mod, kwargs))


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
) -> Callable:
    """The backend entry point: a plain callable over ``mod``'s user inputs.

    ``mod``'s parameters and buffers become the leading inputs of the compiled graphs (read
    at call time, like :func:`aot_module`); the returned function takes only the user
    inputs. ``args`` are example user inputs, real or fake (Dynamo passes real tensors,
    and SymInts for dynamic sizes); they are checked against ``mod.forward``'s signature
    here, but tracing happens on the first real call, on fake copies aot_function makes
    itself — so fake or real, ``args`` are never computed on and never mutated.
    """
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
    kwargs = _aot_kwargs(fw_compiler, bw_compiler, partition_fn, decompositions,
                         keep_inference_input_mutations, inference_compiler, dynamic)
    return _CompiledForward(mod, kwargs)
