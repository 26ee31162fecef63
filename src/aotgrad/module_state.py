"""The state of an ``nn.Module`` tree, as far as a traced graph depends on it.

:func:`snapshot` walks a module tree once and returns a hashable key (every submodule's
identity and ``training`` flag, where each parameter and buffer lives) and the distinct state
tensors; :class:`SnapshotCache` tells cheaply whether the tree changed since (a C++ guard on
the modules' state dicts, else a Python fingerprint); :func:`swapped_state` temporarily puts
traced tensors in the tree's place while :mod:`aotgrad.module` traces ``forward``.
"""

from __future__ import annotations

import contextlib
import logging
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import torch
from torch import nn

__all__ = ["Location", "SnapshotCache", "StateLayout", "locations", "qualname", "snapshot", "state_layout", "swapped_state"]

log = logging.getLogger("aotgrad.module")

# Where a state tensor lives: (index into the module list, attribute name, is_parameter).
Location = tuple[int, str, bool]


@dataclass(frozen=True)
class StateLayout:
    """The module tree's shape, as far as a traced graph depends on it.

    ``modules`` is ``named_modules(remove_duplicate=False)`` in order (a shared submodule
    appears once per path). ``slots[i]`` lists every place the i-th distinct state tensor
    is stored; parameters come before buffers. ``key`` is hashable and equal for two calls
    exactly when a graph traced for one is valid for the other (same modules, same
    training flags, same storage layout of state).
    """

    modules: tuple[nn.Module, ...]
    names: tuple[str, ...]  # qualified name of each entry of ``modules`` ("" = root)
    slots: tuple[tuple[Location, ...], ...]
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


def snapshot(root: nn.Module) -> tuple[tuple, list[torch.Tensor]]:
    """Walk ``root`` once: return (cache key, distinct state tensors in slot order).

    This runs whenever :class:`SnapshotCache` finds the tree changed, so it builds only the
    key (ids, flags, attribute names) and the tensor list; the full :class:`StateLayout`
    is built by :func:`state_layout` on a miss of the entry cache.
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
        _add_slots(i, m._parameters, param_slot, params, param_locs)
        _add_slots(i, m._buffers, buffer_slot, buffers, buffer_locs)
    key = (tuple(module_key), tuple(param_locs), tuple(buffer_locs))
    return key, params + buffers


def _add_slots(
    module_index: int,
    table: dict[str, torch.Tensor | None],
    slot_of: dict[int, int],
    tensors: list[torch.Tensor],
    locs: list[tuple[int, str, int]],
) -> None:
    """Record where each tensor of one module's ``_parameters`` or ``_buffers`` lives; a
    tensor seen before (tied) keeps its slot."""
    for attr, t in table.items():
        if t is None:
            continue
        slot = slot_of.setdefault(id(t), len(tensors))
        if slot == len(tensors):
            tensors.append(t)
        locs.append((module_index, attr, slot))


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


def state_guard(modules: tuple[nn.Module, ...]) -> Callable[[tuple], bool] | None:
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


class SnapshotCache:
    """The last :func:`snapshot` of a module tree, and a check that it still holds.

    A snapshot depends on each module's ``training`` flag and on the contents of its
    ``_parameters``, ``_buffers`` and ``_modules`` dicts; the preorder walk itself is fixed
    by the root and each module's children. So the check is: the modules of the last walk
    have the same flags and the same, unmodified dicts (:func:`state_guard`, in C++;
    else :func:`_fingerprint`, re-read and compared). The cache holds the modules, their
    dicts and the state tensors, so no id it compares can be reused by a new object.

    Torch's global module/parameter/buffer registration hooks would not be enough:
    ``Module._apply`` (``.to()``, ``.double()``) stores new buffers straight into
    ``_buffers``, and ``del module.name`` runs no hook. Both modify a dict, so both are seen.
    """

    __slots__ = ("_fingerprint", "_guard", "dicts", "entry", "key", "modules", "state")

    def __init__(self, root: nn.Module) -> None:
        self.modules = tuple(_preorder(root))
        self.key, self.state = snapshot(root)
        self.dicts = tuple(map(_state_dicts, self.modules))
        self._guard = state_guard(self.modules)
        self._fingerprint = None if self._guard is not None else _fingerprint(self.modules)
        #: what the module tree's owner compiled for ``key`` (set by the owner)
        self.entry: Any = None

    def valid(self) -> bool:
        if self._guard is not None:
            return self._guard(self.modules)
        return _fingerprint(self.modules) == self._fingerprint


def state_layout(root: nn.Module, key: tuple) -> StateLayout:
    """Build the full layout for a snapshot key (on a cache miss only)."""
    named = list(root.named_modules(remove_duplicate=False))
    module_key, param_locs, buffer_locs = key
    # snapshot walked the tree with _preorder; the two orders must agree.
    assert [id(m) for _, m in named] == [i for i, _ in module_key]
    num_params = 1 + max((s for _, _, s in param_locs), default=-1)
    num_buffers = 1 + max((s for _, _, s in buffer_locs), default=-1)
    slots: list[list[Location]] = [[] for _ in range(num_params + num_buffers)]
    for i, attr, s in param_locs:
        slots[s].append((i, attr, True))
    for i, attr, s in buffer_locs:
        slots[num_params + s].append((i, attr, False))
    return StateLayout(
        modules=tuple(m for _, m in named),
        names=tuple(n for n, _ in named),
        slots=tuple(tuple(s) for s in slots),
        num_params=num_params,
        key=key,
    )


def locations(layout: StateLayout) -> list[Location]:
    """Every location of every slot, in slot order (only used when a buffer is reassigned)."""
    return [loc for slot in layout.slots for loc in slot]


def qualname(layout: StateLayout, loc: Location) -> str:
    prefix = layout.names[loc[0]]
    return f"{prefix}.{loc[1]}" if prefix else loc[1]


@contextlib.contextmanager
def swapped_state(layout: StateLayout, values: Sequence[torch.Tensor]) -> Iterator[dict]:
    """Temporarily store ``values`` in the module tree in place of its real tensors.

    Writes go straight into ``_parameters`` / ``_buffers``: ``setattr`` would reject a
    plain (traced) tensor under a parameter's name. Yields a dict that, on exit of the
    body, is filled with ``location -> tensor`` for every buffer that ``forward`` reassigned
    (locations numbered in slot order, as :func:`locations` lists them);
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
                where = qualname(layout, (i, attr, is_param))
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
