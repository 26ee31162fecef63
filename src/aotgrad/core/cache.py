"""The persistent compile cache: traced and partitioned graphs kept on disk between processes.

A compiled entry is a pure function of its *key*: the user function (its code, closure
constants and the globals it reads, recursively; a ``GraphModule``'s code and node
metadata; an ``nn.Module``'s classes and attributes), the call's input metadata and
aliasing pattern, grad mode and the other global modes tracing reads, the compile options
(partitioner, decompositions, compilers, ...), and the versions of Python, torch and
aotgrad (aotgrad's by a hash of its sources). :func:`EntryStore.for_call` computes it; a
stored entry holds what analysis, tracing and partitioning produced (the ``Analysis`` and
the graphs, node metadata and fake values included, and the compiled graphs' Python code,
so that a hit does not generate it again). On a hit the pipeline skips those three stages
and runs the rest (compilers, runtime, guard) as on a cold compile.

Safety, by construction:

* only what can be keyed completely is cached: a key that cannot be computed (a global or
  closure value with no stable fingerprint, code that writes globals, nonlocals or
  attributes, a tensor subclass or a symbolic trace, a partitioner or compiler with no
  stable identity) means no caching, logged at DEBUG with the reason;
* a stored entry is checked (magic, key, SHA-256 of the payload) before use; a corrupt or
  truncated one is ignored (the cold compile then rewrites it);
* entries are written to a temporary file in the same directory, then ``os.replace``d: a
  reader sees a whole entry or none, whichever writer wins;
* the torch, Python and aotgrad versions are part of the key: another version never
  loads an entry.

Where: the ``cache`` option (``aot_function(..., cache=...)``): ``False`` disables it, a
path moves it; by default ``$AOTGRAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/aotgrad``, else
``~/.cache/aotgrad``; ``AOTGRAD_CACHE=0`` disables the default.

Size: the directory is kept under ``$AOTGRAD_CACHE_MAX_SIZE`` (bytes, or with a ``K``/``M``/
``G`` suffix; default 1 GiB; ``0`` for no bound) by evicting the least recently used
entries (:func:`evict`): a hit sets its entry's modification time, and a store scans the
directory now and then (on average once per 1/16 of the bound written, by any process).
Concurrent processes need no lock: a reader that loses an entry to eviction has a miss.
"""

from __future__ import annotations

import builtins
import copy
import dis
import enum
import functools
import hashlib
import importlib
import io
import logging
import marshal
import os
import pickle
import random
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.fx.experimental._config
import torch.fx.immutable_collections
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch._C import _functionalization
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import _disable_current_modes

from .fake_mode import OffsetKeepingFakeTensorMode

__all__ = ["EntryStore", "StoredEntry", "Uncacheable", "cache_location", "evict", "size_limit"]

log = logging.getLogger("aotgrad")

#: bump when the stored layout changes (the aotgrad source hash changes anyway)
FORMAT = 6
_MAGIC = b"AOTGRAD-CACHE-1\n"


class Uncacheable(Exception):
    """The key (or the stored form) of an entry cannot be computed; the message says why."""


# --------------------------------------------------------------------------------------
# Where the cache lives
# --------------------------------------------------------------------------------------


def cache_location(setting: Any) -> Path | None:
    """The cache directory for a config's ``cache`` option, None when caching is off.

    ``False``: off. A path: that directory. ``None``/``True``: ``$AOTGRAD_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/aotgrad``, else ``~/.cache/aotgrad``; off when ``$AOTGRAD_CACHE`` is
    ``0``/``false``/``off``/``no`` (``None`` only: ``True`` and a path are explicit)."""
    if setting is False:
        return None
    if setting is not None and setting is not True:
        return Path(setting)
    if setting is None and os.environ.get("AOTGRAD_CACHE", "1").strip().lower() in ("0", "false", "off", "no"):
        return None
    where = os.environ.get("AOTGRAD_CACHE_DIR")
    if where:
        return Path(where)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "aotgrad"


#: the default bound on the cache directory's size (``$AOTGRAD_CACHE_MAX_SIZE``)
DEFAULT_SIZE_LIMIT = 1 << 30
_SIZE_SUFFIXES = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
                  "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40,
                  "TIB": 1 << 40}


def size_limit() -> int | None:
    """The bound on the cache directory's size in bytes, None for none:
    ``$AOTGRAD_CACHE_MAX_SIZE`` (``1073741824``, ``500M``, ``2G``; ``0``: no bound), else
    :data:`DEFAULT_SIZE_LIMIT` (1 GiB). A value that does not parse is logged at WARNING and
    the default used."""
    text = os.environ.get("AOTGRAD_CACHE_MAX_SIZE", "").strip()
    if not text:
        return DEFAULT_SIZE_LIMIT
    number = text.rstrip("KMGTBIkmgtbi ")
    try:
        value = float(number) * _SIZE_SUFFIXES[text[len(number):].strip().upper()]
    except (KeyError, ValueError):
        log.warning("aotgrad: AOTGRAD_CACHE_MAX_SIZE=%r is not a size (e.g. 500M, 2G, 0); using 1G", text)
        return DEFAULT_SIZE_LIMIT
    return None if value <= 0 else int(value)


#: decides when a store scans the directory; its own generator, so that the user's
#: ``random`` stream is not advanced by a compile
_SCAN_DRAW = random.Random()

#: a temporary file older than this is a crashed writer's, removed by :func:`evict`
_STALE_TEMPORARY_SECONDS = 3600.0


def evict(directory: Path, limit: int, keep: Path | None = None) -> int:
    """Delete the least recently used entries (oldest modification time first) until the
    entries in ``directory`` total at most ``limit`` bytes; ``keep`` (the entry just
    written) is never deleted. Temporary files left by crashed writers are removed too.
    Safe beside other processes: files that vanish meanwhile are skipped. Returns the
    number of entries deleted."""
    found: list[tuple[float, int, str]] = []
    total = 0
    now = time.time()
    try:
        subdirs = [e.path for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    for sub in subdirs:
        try:
            listing = list(os.scandir(sub))
        except OSError:
            continue
        for e in listing:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if e.name.endswith(".entry") and not e.name.startswith("."):
                found.append((st.st_mtime, st.st_size, e.path))
                total += st.st_size
            elif e.name.startswith(".tmp-") and now - st.st_mtime > _STALE_TEMPORARY_SECONDS:
                _unlink(e.path)
    if total <= limit:
        return 0
    found.sort()
    kept = None if keep is None else str(keep)
    deleted = 0
    for _, size, path in found:
        if total <= limit:
            break
        if path == kept:
            continue
        if _unlink(path):
            deleted += 1
        total -= size  # gone either way: deleted here, or by another process
    log.debug("aotgrad: cache %s over its size bound (%d bytes): %d entries evicted", directory, limit, deleted)
    return deleted


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


#: the file in a cache directory where :func:`_aotgrad_source_hash` remembers its value
_SOURCE_HASH_MEMO = "aotgrad-source-hash"
#: this process's :func:`_aotgrad_source_hash` (the sources are read once)
_SOURCE_HASH: str | None = None


def _aotgrad_source_hash(memo_directory: Path | None = None) -> str:
    """A hash of every aotgrad source file: any code change is a new version.

    Reading and hashing the sources (~750 KB) takes ~1.5 ms, once per process. With
    ``memo_directory`` (the cache's), the hash is remembered there beside a digest of every
    source file's path, size and modification time (ns), and read back by a process that
    finds the same stats (as Python's bytecode cache trusts them); a memo that cannot be
    read or written only means hashing the sources."""
    global _SOURCE_HASH
    if _SOURCE_HASH is not None:
        return _SOURCE_HASH
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sources = sorted((path[len(root) + 1:], st) for path, st in _source_files(root))
    stats = hashlib.sha256(repr([(name, st.st_size, st.st_mtime_ns) for name, st in sources]).encode()).hexdigest()
    memo = None if memo_directory is None else memo_directory / _SOURCE_HASH_MEMO
    try:
        remembered_stats, remembered = memo.read_text().split() if memo is not None else ("", "")
        if remembered_stats == stats:
            _SOURCE_HASH = remembered
            return remembered
    except (OSError, ValueError):
        pass
    h = hashlib.sha256()
    for name, _ in sources:
        h.update(name.encode())
        with open(os.path.join(root, name), "rb") as f:
            h.update(f.read())
    _SOURCE_HASH = h.hexdigest()
    if memo is not None:
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=memo.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                f.write(f"{stats} {_SOURCE_HASH}\n")
            os.replace(tmp, memo)  # whole or absent for a concurrent reader
        except OSError:
            pass
    return _SOURCE_HASH


def _source_files(directory: str) -> list[tuple[str, os.stat_result]]:
    """Every ``*.py`` file under ``directory`` with its stats."""
    found = []
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
            found.extend(_source_files(entry.path))
        elif entry.name.endswith(".py"):
            found.append((entry.path, entry.stat()))
    return found


def versions() -> tuple[str, ...]:
    """What a stored entry is valid for: the stored format, Python, torch, aotgrad."""
    return (str(FORMAT), sys.version, torch.__version__, _aotgrad_source_hash())


# --------------------------------------------------------------------------------------
# Fingerprints: a stable description of every value that decides the trace
# --------------------------------------------------------------------------------------

#: modules whose functions and classes are named, not hashed: their code is fixed by the
#: versions in the key (torch, aotgrad, the standard library of this Python)
_NAMED_MODULES = (
    "torch", "aotgrad", "math", "cmath", "operator", "_operator", "builtins", "functools", "itertools",
    "collections", "typing", "numbers", "enum", "abc", "dataclasses", "contextlib", "types", "_collections_abc",
)
#: builtins with effects (or values) a cached entry would not reproduce
_IMPURE_BUILTINS = frozenset({
    "print", "input", "open", "exec", "eval", "compile", "setattr", "delattr", "globals", "locals", "vars",
    "breakpoint", "__import__", "id", "hash", "exit", "quit", "help",
})
#: bytecode that changes state outside the function's own frame
_IMPURE_OPS = frozenset({
    "STORE_GLOBAL", "DELETE_GLOBAL", "STORE_ATTR", "DELETE_ATTR", "IMPORT_NAME", "IMPORT_STAR",
})
#: container methods that mutate (a captured or global container written at trace time)
_MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "popitem", "update", "remove", "discard", "setdefault", "clear",
    "register_buffer", "register_parameter", "register_module", "add_module", "__setattr__", "__setitem__",
    "__delitem__", "write", "writelines",
})
#: methods that set an object up rather than run while it is traced: their attribute stores
#: are no trace-time effect (still hashed: they decide what the object holds)
_SETUP_METHODS = frozenset({
    "__init__", "__new__", "__init_subclass__", "__post_init__", "__setstate__", "__getstate__", "__repr__",
    "__str__", "extra_repr", "reset_parameters", "_reset_parameters", "_load_from_state_dict",
    "_save_to_state_dict",
})
_PLAIN = (type(None), bool, int, float, complex, str, bytes)
_TORCH_PLAIN = (torch.dtype, torch.device, torch.layout, torch.memory_format)


def _named_module(name: str | None) -> bool:
    return bool(name) and name.split(".")[0] in _NAMED_MODULES


class Fingerprint:
    """Feeds a stable description of values into one SHA-256; raises :class:`Uncacheable`
    for a value it cannot describe completely. Objects seen before are referred to by
    their first position (cycles, shared submodules, tied parameters).

    ``state_modules``: modules whose registered parameters and buffers are swapped for
    graph inputs while tracing (``aot_module``): their values never reach the graph, so
    only their metadata is keyed. Every other tensor reachable from the function is a
    constant of the trace and is keyed by value."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        #: tokens not yet fed to the hash (fed in one piece: ~2000 tokens per key)
        self._tokens: list[str] = []
        self._seen: dict[int, int] = {}
        self._keep: list[Any] = []  # keeps ids stable while fingerprinting
        self._storages: dict[tuple[int, int], int] = {}
        self.state_modules: set[int] = set()

    def hexdigest(self) -> str:
        self._feed_tokens()
        return self._h.hexdigest()

    def token(self, *parts: Any) -> None:
        self._tokens.append(repr(parts))

    def _feed_tokens(self) -> None:
        """Feed the tokens so far to the hash, each followed by a NUL (which no ``repr`` holds)."""
        if self._tokens:
            self._tokens.append("")
            self._h.update("\x00".join(self._tokens).encode())
            self._tokens.clear()

    def add(self, obj: Any, where: str = "value") -> None:
        t = type(obj)
        if t in _PLAIN:
            self.token(t.__name__, obj)
            return
        if isinstance(obj, _TORCH_PLAIN) or t is torch.Size:
            self.token(t.__name__, str(obj))
            return
        if isinstance(obj, torch.SymInt | torch.SymFloat | torch.SymBool):
            raise Uncacheable(f"{where}: a symbolic value")
        k = id(obj)
        if k in self._seen:
            self.token("seen", self._seen[k])
            return
        self._seen[k] = len(self._seen)
        self._keep.append(obj)
        if isinstance(obj, enum.Enum):
            self.add(type(obj), where)
            self.token("enum", obj.name)
        elif t in (tuple, list, set, frozenset) or (isinstance(obj, tuple) and hasattr(obj, "_fields")):
            if t is not tuple:
                self.add(t, where)
            items = sorted(obj, key=repr) if isinstance(obj, set | frozenset) else obj
            self.token("seq", len(obj))
            for i, x in enumerate(items):
                self.add(x, f"{where}[{i}]")
        elif isinstance(obj, dict):
            self.add(t, where)
            self.token("dict", len(obj))
            for key, value in obj.items():
                self.add(key, where)
                self.add(value, f"{where}[{key!r}]")
        elif isinstance(obj, torch.Tensor):
            self._tensor(obj, where, by_value=True)
        elif isinstance(obj, torch.fx.GraphModule):
            self._graph_module(obj, where)
        elif isinstance(obj, torch.nn.Module):
            self._module(obj, where)
        elif isinstance(obj, types.ModuleType):
            if not _named_module(obj.__name__):
                raise Uncacheable(f"{where}: module {obj.__name__} (its contents are not keyed)")
            self.token("module", obj.__name__)
        elif isinstance(obj, type):
            self._class(obj, where)
        elif isinstance(obj, types.FunctionType):
            self._function(obj, where)
        elif isinstance(obj, types.MethodType):
            self.token("method")
            self.add(obj.__self__, where)
            self.add(obj.__func__, where)
        elif isinstance(obj, types.BuiltinFunctionType | types.BuiltinMethodType):
            owner = obj.__self__
            if owner is None or isinstance(owner, types.ModuleType):
                module = getattr(obj, "__module__", None) or getattr(owner, "__name__", None)
                if module == "builtins" and obj.__name__ in _IMPURE_BUILTINS:
                    raise Uncacheable(f"{where}: calls {obj.__name__}() (an effect a cached entry would skip)")
                if not _named_module(module):
                    raise Uncacheable(f"{where}: builtin {obj!r} of module {module}")
                self.token("builtin", module, obj.__qualname__)
            else:
                self.token("bound builtin", obj.__name__)
                self.add(owner, where)
        elif isinstance(obj, functools.partial):
            self.token("partial")
            self.add(obj.func, where)
            self.add(obj.args, where)
            self.add(obj.keywords, where)
        elif isinstance(obj, torch._ops.OpOverload | torch._ops.OpOverloadPacket | torch._ops.HigherOrderOperator):
            self.token("op", str(obj))
        elif isinstance(obj, staticmethod | classmethod):
            self.token(type(obj).__name__)
            self.add(obj.__func__, where)
        elif isinstance(obj, property):
            self.token("property")
            for f in (obj.fget, obj.fset, obj.fdel):
                self.add(f, where)
        elif _named_module(type(obj).__module__) and type(obj).__repr__ is not object.__repr__ and " at 0x" not in repr(obj):
            # a library value with a value-like repr (e.g. torch's decomposition wrappers are
            # functions; this takes torch.finfo, SymbolicLeaves, TreeSpec, ...)
            self.token("repr", type(obj).__module__, type(obj).__qualname__, repr(obj))
        else:
            raise Uncacheable(f"{where}: a {type(obj).__module__}.{type(obj).__qualname__} (no stable fingerprint)")

    # -- tensors --------------------------------------------------------------------

    def _tensor(self, t: torch.Tensor, where: str, by_value: bool) -> None:
        if type(t) not in (torch.Tensor, torch.nn.Parameter) or isinstance(t, FakeTensor):
            raise Uncacheable(f"{where}: a {type(t).__name__} (tensor subclasses are not cached)")
        if t.layout is not torch.strided or t.is_quantized or t.is_meta or t.device.type != "cpu":
            raise Uncacheable(f"{where}: a {t.layout} {t.device} tensor")
        if t.is_conj() or t.is_neg() or torch._C._functorch.is_functorch_wrapped_tensor(t):
            raise Uncacheable(f"{where}: a conjugate/negative/functorch tensor")
        if getattr(t, "_dynamo_dynamic_indices", None) or getattr(t, "_dynamo_weak_dynamic_indices", None):
            raise Uncacheable(f"{where}: a tensor with dims marked dynamic")
        storage = t.untyped_storage()
        sid = self._storages.setdefault((storage.data_ptr(), storage.nbytes()), len(self._storages))
        self.token(
            "tensor", type(t).__name__, tuple(t.shape), t.stride(), t.storage_offset(), str(t.dtype),
            t.requires_grad, t.is_leaf, t._is_view(), t.is_inference(), sid, storage.nbytes(),
        )
        if t._is_view():
            self._tensor(t._base, f"{where}._base", by_value)
        if by_value:
            data = t.detach()
            data = data.reshape(-1).contiguous().view(torch.uint8) if data.numel() else data.new_empty(0, dtype=torch.uint8)
            # the bytes themselves into the key's SHA-256 (with the CPUs' SHA extensions ~2x
            # blake2b's speed: a hit hashes every parameter a function closes over)
            self.token("data", data.numel())
            self._feed_tokens()
            self._h.update(data.numpy())

    def input_tensor(self, t: torch.Tensor, where: str) -> None:
        """A graph input: metadata only (its values are the call's, never the trace's)."""
        self._tensor(t, where, by_value=False)

    # -- code -------------------------------------------------------------------------

    def _function(self, fn: types.FunctionType, where: str, check_effects: bool = True) -> None:
        swaps = getattr(fn, "_aotgrad_swaps_state_of", None)
        if swaps is not None and fn.__module__ == "aotgrad.module":
            # aot_module's functional forward: its code is aotgrad's, what it closes over
            # (the state layout) is a function of the module tree, whose parameters and
            # buffers it swaps for graph inputs (metadata only in the key)
            self.token("state-swapping forward", fn.__qualname__)
            self.state_modules.update(id(m) for m in swaps.modules())
            self.add(swaps, where)
            return
        if _named_module(fn.__module__) and "<locals>" not in fn.__qualname__ and "<lambda>" not in fn.__qualname__:
            self.token("function", fn.__module__, fn.__qualname__)
            return
        where = f"{fn.__module__}.{fn.__qualname__}"
        self.token("code", fn.__name__, fn.__qualname__, fn.__module__)
        self._code(fn.__code__, fn.__globals__, where, check_effects)
        self.add(fn.__defaults__, where)
        self.add(fn.__kwdefaults__, where)
        if fn.__dict__:
            self.add({k: v for k, v in fn.__dict__.items() if k != "_aotgrad_swaps_state_of"}, where)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                raise Uncacheable(f"{where}: closure variable {name} is not set yet") from None
            self.token("cell", name)
            self.add(value, f"{where}: closure variable {name}")

    def _code(self, code: types.CodeType, globals_: dict, where: str, check_effects: bool = True) -> None:
        self.token(
            code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars, code.co_flags,
            code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_filename,
            code.co_firstlineno, code.co_qualname, code.co_linetable, code.co_exceptiontable,
        )
        for ins in dis.get_instructions(code) if check_effects else ():
            if ins.opname in _IMPURE_OPS:
                raise Uncacheable(f"{where}: {ins.opname} {ins.argval} (changes state outside the function)")
            if ins.opname in ("STORE_DEREF", "DELETE_DEREF") and ins.argval in code.co_freevars:
                raise Uncacheable(f"{where}: assigns nonlocal {ins.argval}")
            if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and ins.argval in _MUTATING_METHODS:
                raise Uncacheable(f"{where}: calls .{ins.argval}() (may change state outside the function)")
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self._code(const, globals_, where, check_effects)
            else:
                self.add(const, where)
        builtin_names = vars(builtins)
        for name in code.co_names:
            if name in globals_:
                self.token("global", name)
                self.add(globals_[name], f"{where}: global {name}")
            elif name in builtin_names:
                if name in _IMPURE_BUILTINS:
                    raise Uncacheable(f"{where}: calls {name}() (an effect a cached entry would skip)")
                self.token("builtin name", name)

    def _class(self, cls: type, where: str) -> None:
        if _named_module(cls.__module__) and "<locals>" not in cls.__qualname__:
            self.token("class", cls.__module__, cls.__qualname__)
            return
        if type(cls) is not type and not _named_module(type(cls).__module__):
            raise Uncacheable(f"{where}: class {cls.__qualname__} has a user metaclass")
        self.token("user class", cls.__module__, cls.__qualname__)
        self.add(cls.__bases__, where)
        for name, value in sorted(cls.__dict__.items()):
            if name in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                continue
            if isinstance(value, dict | list | set) and name not in ("__annotations__", "__constants__"):
                raise Uncacheable(f"{where}: class attribute {cls.__qualname__}.{name} is a mutable {type(value).__name__}")
            self.token("attr", name)
            if name in _SETUP_METHODS and isinstance(value, types.FunctionType) and id(value) not in self._seen:
                # hashed, but its stores are the object's own set-up, not trace-time effects
                self._seen[id(value)] = len(self._seen)
                self._keep.append(value)
                self._function(value, f"{cls.__qualname__}.{name}", check_effects=False)
                continue
            self.add(value, f"{cls.__qualname__}.{name}")

    # -- modules --------------------------------------------------------------------

    _MODULE_STATE = ("_parameters", "_buffers", "_modules")

    def _module(self, mod: torch.nn.Module, where: str) -> None:
        self.add(type(mod), where)
        by_value = id(mod) not in self.state_modules
        for name, value in sorted(vars(mod).items()):
            if name in self._MODULE_STATE:
                self.token("state", name, len(value))
                for key, item in value.items():
                    self.token(key)
                    if isinstance(item, torch.Tensor) and id(item) not in self._seen:
                        self._seen[id(item)] = len(self._seen)
                        self._keep.append(item)
                        self._tensor(item, f"{where}.{key}", by_value)
                    else:
                        self.add(item, f"{where}.{key}")
                continue
            if not value and name.startswith("_") and "hook" in name:
                continue  # nn.Module's empty hook tables (~11 a module): no hook, as without them
            self.token("attr", name)
            self.add(value, f"{where}.{name}")

    def _graph_module(self, gm: torch.fx.GraphModule, where: str) -> None:
        self.token("graph module", gm.code)
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                raise Uncacheable(f"{where}: get_attr {node.target} (constants and submodules are not keyed)")
            if node.op == "call_module":
                raise Uncacheable(f"{where}: call_module {node.target}")
            self.token(node.name, node.op)
            if node.op == "call_function":
                self.add(node.target, f"{where}: {node.name}")
            elif node.op == "call_method":
                self.token("method", node.target)  # a method name (the code names it too)
            for key, value in sorted(node.meta.items()):
                if key in ("val", "example_value", "tensor_meta", "grapharg", "unbacked_bindings"):
                    continue
                self.token("meta", key)
                if key == "nn_module_stack" and isinstance(value, dict):
                    # keyed by Dynamo with id()s of this process's modules: the module
                    # paths and types are what is stable
                    value = list(value.values())
                self.add(value, f"{where}: {node.name}.meta[{key!r}]")
        state = dict(gm.named_parameters(remove_duplicate=False)) | dict(gm.named_buffers(remove_duplicate=False))
        for name, t in state.items():
            self.token("lifted", name)
            self.input_tensor(t, f"{where}.{name}")
        for name, value in sorted(vars(gm).items()):
            if name in ("_parameters", "_buffers", "_modules", "_graph", "_code", "_lineno_map", "_prologue_start",
                        "_tracer_cls", "_tracer_extras", "_erase_node_hooks", "_create_node_hooks",
                        "_replace_hooks", "_deepcopy_hooks", "meta", "_in_spec", "_out_spec"):
                continue
            if name.startswith("_") and name.endswith("hooks") and not value:
                continue
            self.token("attr", name)
            self.add(value, f"{where}.{name}")


def _global_state() -> tuple:
    """The global modes tracing reads; a mode aotgrad cannot see through refuses caching."""
    if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
        raise Uncacheable("a TorchFunctionMode or TorchDispatchMode is active")
    if torch._C._functorch.peek_interpreter_stack() is not None:
        raise Uncacheable("called inside a functorch transform")
    nn_hooks = torch.nn.modules.module
    if any(getattr(nn_hooks, name) for name in dir(nn_hooks) if name.startswith("_global_") and name.endswith("hooks")):
        raise Uncacheable("global nn.Module hooks are registered")
    return (
        torch.is_grad_enabled(), torch.is_inference_mode_enabled(), str(torch.get_default_dtype()),
        torch.is_autocast_enabled("cpu"), str(torch.get_autocast_dtype("cpu")),
        torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
        torch._C._get_cudnn_enabled(), torch._C._get_mkldnn_enabled(),
    )


#: compilers known not to change the graph they are given (a stored graph is the one they
#: got); a user compiler may rewrite it in place, so its entries are not stored
def _graph_preserving(compiler: Any) -> bool:
    from .. import compilers

    while hasattr(compiler, "__wrapped__") and not isinstance(compiler, compilers.InductorCompiler):
        compiler = compiler.__wrapped__
    if isinstance(compiler, compilers.InductorCompiler):
        return True
    return compiler in (compilers.nop, compilers.print_graph) or (
        getattr(compiler, "__module__", None) == "torch._functorch.compilers"
        and getattr(compiler, "__name__", "") in ("nop", "print_compile")
    )


#: id(table) -> (its items when fingerprinted, digest): a library table (Inductor's has ~800
#: entries) is fingerprinted once per process, again only if its items changed
_TABLE_DIGESTS: dict[int, tuple[tuple, str]] = {}


def _library_function(fn: Any) -> Any:
    """A stable description of a function of torch or aotgrad (including the closures
    their code makes at import time), or of a ``functools.partial`` of one over plain
    values and ops; None for anything else."""
    if isinstance(fn, types.FunctionType | types.BuiltinFunctionType) and _named_module(getattr(fn, "__module__", None)):
        return fn.__module__, fn.__qualname__
    if isinstance(fn, functools.partial):
        parts = [_library_function(fn.func)]
        for value in (*fn.args, *sorted(fn.keywords.items())):
            if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
                value = value[1]
            if isinstance(value, _PLAIN + _TORCH_PLAIN):
                parts.append(repr(value))
            elif isinstance(value, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
                parts.append(str(value))
            else:
                parts.append(_library_function(value))
        if all(p is not None for p in parts):
            return ("partial", *parts, tuple(sorted(fn.keywords)))
    return None


def _decompositions_digest(table: dict) -> str:
    items = tuple(table.items())
    known = _TABLE_DIGESTS.get(id(table))
    if known is not None and known[0] == items:
        return known[1]
    fp = Fingerprint()
    named = [(str(op), _library_function(fn)) for op, fn in items]
    fp.token("table", sorted(named, key=lambda x: x[0]) if all(n for _, n in named) else None)
    if all(n for _, n in named):
        _TABLE_DIGESTS[id(table)] = (items, fp.hexdigest())
        return fp.hexdigest()
    for op, fn in sorted(items, key=lambda item: str(item[0])):  # a user's decompositions: hashed
        fp.token(str(op))
        fp.add(fn, f"decomposition of {op}")
    return fp.hexdigest()


def entry_key(fn: Callable, leaves: list[Any], spec: Any, config: Any) -> str:
    """The key of the entry ``fn`` compiles for this call (raises :class:`Uncacheable`)."""
    fp = Fingerprint()
    fp.token("versions", versions())
    fp.token("state", _global_state())
    for name in ("fw_compiler", "bw_compiler", "inference_compiler"):
        compiler = getattr(config, name)
        if not _graph_preserving(compiler):
            raise Uncacheable(f"{name} {compiler!r} may rewrite the graphs it is given")
        fp.add(compiler, name)
    fp.add(config.partition_fn, "partition_fn")
    decompositions = config.trace_decompositions
    if decompositions is None:
        fp.token("no decompositions")
    else:
        fp.token("decompositions", _decompositions_digest(decompositions))
    fp.token(config.keep_inference_input_mutations, config.dynamic, repr(config.symbolic_leaves), config.num_params_buffers)
    spec_text = str(spec)
    if " at 0x" in spec_text:
        raise Uncacheable("the call's pytree spec has no stable description")
    fp.token("spec", spec_text)
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            fp.input_tensor(leaf, f"argument leaf {i}")
        else:
            fp.add(leaf, f"argument leaf {i}")
    fp.add(fn, "the function")
    return fp.hexdigest()


# --------------------------------------------------------------------------------------
# The stored form: graphs with their node metadata and fake values
# --------------------------------------------------------------------------------------


@dataclass
class StoredEntry:
    """What a hit gives the pipeline: the analysis and the graphs tracing and partitioning
    made ("forward"/"backward", or "inference"), over ``fake_mode``. The joint graph,
    which no later stage runs, is decoded on first use (:meth:`joint`)."""

    analysis: Any
    graphs: dict[str, torch.fx.GraphModule]
    fake_mode: FakeTensorMode
    joint_payload: bytes | None = None
    #: per graph kind, what its compiler asked to keep (the ``cache_artifact`` of the
    #: compiled callable: plain values; pipeline._compile_graph hands it back)
    compiler_artifacts: dict[str, Any] = field(default_factory=dict)
    #: what the pipeline read off the graphs when it compiled them (the runtime is built
    #: from it, so that a hit decodes no node: :class:`_StoredGraphModule`)
    facts: Any = None
    #: per graph kind, its compiler's example inputs as stored (:meth:`example_inputs`)
    examples: dict[str, Any] = field(default_factory=dict)
    #: the fake tensors of the entry's payload (the examples' among them)
    fakes: _FakeTable | None = None

    def example_inputs(self, kind: str) -> list[Any] | None:
        """The example inputs the cold compile gave the compiler of the ``kind`` graph, None
        where not stored. Their fake tensors are made now (each one object with the same
        value in the graphs' metadata)."""
        value = self.examples.get(kind)
        if type(value) is _Deferred:
            assert self.fakes is not None
            return _made(value.template, self.fakes)
        return None if value is None else list(value)

    def fits(self, training: bool) -> bool:
        """Whether it holds the graphs an entry of this kind is built from."""
        needed = ("forward", "backward") if training else ("inference",)
        return (
            all(name in self.graphs for name in needed) and (self.joint_payload is not None) == training
            and self.facts is not None
        )

    def joint(self) -> torch.fx.GraphModule:
        """The joint graph (training entries), decoded now."""
        _, graphs, _, _ = _loads_graphs(self.joint_payload, self.fake_mode)
        return graphs["joint"]


@dataclass(frozen=True)
class _Ref:
    index: int


#: types pickle handles itself and that never need a persistent id
_PICKLED_AS_IS = frozenset({
    type(None), bool, int, float, complex, str, bytes, tuple, list, dict, set, frozenset, torch.dtype,
    torch.device, torch.Size, torch.memory_format, torch.layout, torch.fx.immutable_collections.immutable_list,
    torch.fx.immutable_collections.immutable_dict,
})


class _FakeNumbering:
    """The fake tensors met while storing one payload, numbered in order of first sight: one
    fake tensor met again (the graphs' metadata shares them) has its first number and loads
    as one object, as it was. Each is described once (:meth:`describe`, storage sharing
    kept) in :attr:`table`, which is stored beside the pickles and loaded first
    (:class:`_FakeTable`)."""

    def __init__(self) -> None:
        self.storages: dict[StorageWeakRef, int] = {}
        #: id of each fake tensor numbered so far → its number (the tensors are kept alive
        #: in ``self.fakes`` so that an id is never reused meanwhile)
        self.numbers: dict[int, int] = {}
        self.fakes: list[FakeTensor] = []
        #: the description of fake tensor number k
        self.table: list[tuple] = []

    def number(self, t: Any) -> int:
        """The number of fake tensor ``t`` (described at first sight)."""
        if type(t) is not FakeTensor:
            raise Uncacheable(f"a {type(t).__name__} in a graph's metadata")
        number = self.numbers.get(id(t))
        if number is None:
            number = self.numbers[id(t)] = len(self.fakes)
            self.fakes.append(t)
            self.table.append(self.describe(t))
        return number

    def describe(self, t: FakeTensor) -> tuple:
        if t._is_view() or t.grad_fn is not None or t.constant is not None or t.is_conj() or t.is_neg():
            raise Uncacheable("a fake value that is a view, has a grad_fn or a constant")
        if t.layout is not torch.strided:
            raise Uncacheable(f"a {t.layout} fake value")
        storage = t.untyped_storage()
        sid = self.storages.setdefault(StorageWeakRef(storage), len(self.storages))
        return (sid, storage.nbytes(), tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad)


class _Pickler(pickle.Pickler):
    """Pickles graphs: nodes by position in :attr:`nodes` (in node arguments only: a node
    in metadata is refused), fake tensors by their number in ``fakes`` (a
    :class:`_FakeNumbering` the pickles of one payload share), ops by name; refuses real
    tensors and symbolic values."""

    def __init__(self, file: io.BytesIO, fakes: _FakeNumbering) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.nodes: dict[torch.fx.Node, int] = {}
        self.fakes = fakes
        self.in_meta = False

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) in _PICKLED_AS_IS:  # most objects: one set lookup
            return None
        if isinstance(obj, torch.fx.Node):
            if self.in_meta:
                raise Uncacheable(f"node {obj.name} in a node's metadata")
            return ("N", self.nodes[obj])
        if isinstance(obj, torch.Tensor):
            return ("F", self.fakes.number(obj))
        if isinstance(obj, torch._ops.OpOverload):
            return ("O", obj.name())
        if isinstance(obj, types.ModuleType):  # a global of a graph's code (``torch``)
            return ("M", obj.__name__)
        if isinstance(obj, torch._ops.OpOverloadPacket):
            return ("P", obj._qualified_op_name)
        if isinstance(obj, _functionalization.ViewMeta):
            # a step of an aliased output's view chain: its type and arguments rebuild it
            return ("V", type(obj).__name__, obj.as_tuple())
        if isinstance(obj, _functionalization.InverseReturnMode):
            return ("E", obj.name)
        if isinstance(obj, torch.SymInt | torch.SymFloat | torch.SymBool | torch._ops.HigherOrderOperator):
            raise Uncacheable(f"a {type(obj).__name__} in a graph")
        return None


class _FakeTable:
    """The fake tensors of one stored payload, made from their descriptions
    (:attr:`_FakeNumbering.table`) when first asked for: number k is one object however often it is asked
    for, and fakes that shared a storage share one again."""

    def __init__(self, descriptions: list[tuple], fake_mode: FakeTensorMode) -> None:
        self.descriptions = descriptions
        self.fake_mode = fake_mode
        self.storages: dict[int, torch.UntypedStorage] = {}
        self.made: list[FakeTensor | None] = [None] * len(descriptions)

    def get(self, number: int) -> FakeTensor:
        fake = self.made[number]
        if fake is None:
            # made outside whatever the reader runs under (a dispatch or function mode, a
            # fake mode of a compiler's, inference mode, a functorch transform): the value
            # is the one the cold compile recorded, whoever reads it
            with (
                _disable_current_modes(), torch._C.DisableTorchFunction(), torch.inference_mode(False),
                torch._C._DisableFuncTorch(),
            ):
                fake = self.made[number] = self._fake(*self.descriptions[number])
        return fake

    def _fake(self, sid, nbytes, shape, stride, offset, dtype, device, requires_grad) -> FakeTensor:
        storage = self.storages.get(sid)
        if storage is None:
            meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
            if offset or meta.untyped_storage().nbytes() != nbytes:
                storage = torch.empty((nbytes,), dtype=torch.uint8, device="meta").untyped_storage()
                meta = torch.empty((0,), dtype=dtype, device="meta").set_(storage, offset, shape, stride)
            self.storages[sid] = meta.untyped_storage()
        else:
            meta = torch.empty((0,), dtype=dtype, device="meta").set_(storage, offset, shape, stride)
        fake = self.fake_mode.fake_tensor_converter.from_meta_and_device(self.fake_mode, meta, device)
        if requires_grad:
            fake.requires_grad_(True)
        return fake


class _FakeRef:
    """Fake tensor number ``number`` inside a :class:`_Deferred` metadata value."""

    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        self.number = number

    def __reduce__(self) -> tuple:
        return (_FakeRef, (self.number,))


class _Deferred:
    """A node-metadata value holding fake tensors, stored as ``template``: the value with
    each fake tensor replaced by a :class:`_FakeRef`. Made on first read (:class:`_LazyMeta`)."""

    __slots__ = ("template",)

    def __init__(self, template: Any) -> None:
        self.template = template

    def __reduce__(self) -> tuple:
        return (_Deferred, (self.template,))


#: the containers a deferred value is walked through (a fake tensor inside any other
#: object is pickled with the object and made when the metadata is loaded)
_IMMUTABLE_LIST = torch.fx.immutable_collections.immutable_list
_IMMUTABLE_DICT = torch.fx.immutable_collections.immutable_dict


def _deferring(value: Any, fakes: _FakeNumbering) -> Any:
    """``value`` with its fake tensors replaced by :class:`_FakeRef` objects, as a
    :class:`_Deferred`; ``value`` itself where it holds none (in the walked containers)."""
    found = False

    def walk(x: Any) -> Any:
        nonlocal found
        t = type(x)
        if t is FakeTensor:
            found = True
            return _FakeRef(fakes.number(x))
        if t is tuple or t is list or t is _IMMUTABLE_LIST:
            return t(walk(y) for y in x)
        if t is dict or t is _IMMUTABLE_DICT:
            return t({k: walk(v) for k, v in x.items()})
        return x

    template = walk(value)
    return _Deferred(template) if found else value


def _made(template: Any, table: _FakeTable) -> Any:
    """A :class:`_Deferred`'s template with its fake tensors made (:func:`_deferring` undone)."""
    t = type(template)
    if t is _FakeRef:
        return table.get(template.number)
    if t is tuple or t is list or t is _IMMUTABLE_LIST:
        return t(_made(y, table) for y in template)
    if t is dict or t is _IMMUTABLE_DICT:
        return t({k: _made(v, table) for k, v in template.items()})
    return template


class _LazyMeta(dict):
    """``node.meta`` of a graph loaded from the cache: a dict whose values holding fake
    tensors (``meta["val"]``, mostly) are made when first read. A hit reads few of them (the
    graphs' inputs and outputs); explain, a compiler that reads every node, a copy of the
    graph read the rest, and get the values the cold compile recorded.

    Invariant: every way of reading a value goes through :meth:`__getitem__` or first makes
    them all (:meth:`_make_all`); ``__iter__`` is overridden only so that CPython's
    ``dict(meta)``/``{**meta}``/``update(meta)`` take the path that reads through
    ``keys()`` and ``__getitem__`` instead of the dict's storage. Copies (``copy``,
    ``copy.copy``/``deepcopy``, pickling) are plain dicts."""

    __slots__ = ("_table",)

    def __init__(self, items: dict, table: _FakeTable) -> None:
        dict.__init__(self, items)
        self._table = table

    def _make(self, key: Any, value: Any) -> Any:
        if type(value) is _Deferred:
            value = _made(value.template, self._table)
            dict.__setitem__(self, key, value)
        return value

    def _make_all(self) -> None:
        for key, value in list(dict.items(self)):
            if type(value) is _Deferred:
                self._make(key, value)

    def __getitem__(self, key: Any) -> Any:
        return self._make(key, dict.__getitem__(self, key))

    def __iter__(self):
        return dict.__iter__(self)

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self:
            return self[key]
        dict.__setitem__(self, key, default)
        return default

    def pop(self, key: Any, *default: Any) -> Any:
        value = dict.pop(self, key, *default)
        return _made(value.template, self._table) if type(value) is _Deferred else value

    def popitem(self) -> tuple:
        self._make_all()
        return dict.popitem(self)

    def items(self):
        self._make_all()
        return dict.items(self)

    def values(self):
        self._make_all()
        return dict.values(self)

    def copy(self) -> dict:
        self._make_all()
        return dict(dict.items(self))

    __copy__ = copy

    def __deepcopy__(self, memo: dict) -> dict:
        return copy.deepcopy(self.copy(), memo)

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return (dict, (self.copy(),))

    def __eq__(self, other: Any) -> bool:
        self._make_all()
        return dict.__eq__(self, other)

    def __ne__(self, other: Any) -> bool:
        self._make_all()
        return dict.__ne__(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._make_all()
        return dict.__repr__(self)

    def __or__(self, other: Any) -> Any:
        return self.copy() | other

    def __ror__(self, other: Any) -> Any:
        return other | self.copy()


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, fakes: _FakeTable) -> None:
        super().__init__(file)
        self.fakes = fakes

    def persistent_load(self, pid: Any) -> Any:
        kind, *rest = pid
        value = rest[0] if len(rest) == 1 else tuple(rest)
        if kind == "N":
            return _Ref(value)
        if kind == "F":
            return self.fakes.get(value)
        if kind == "O":
            name, _, overload = value.partition(".")
            namespace, _, op = name.partition("::")
            return getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")
        if kind == "P":
            namespace, _, op = value.partition("::")
            return getattr(getattr(torch.ops, namespace), op)
        if kind == "V":
            name, args = value
            return getattr(_functionalization, name)(args)
        if kind == "E":
            return _functionalization.InverseReturnMode.__members__[value]
        if kind == "M":
            return sys.modules[value] if value in sys.modules else importlib.import_module(value)
        raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")


def _dumps_graphs(
    extra: Any, graphs: dict[str, torch.fx.GraphModule], with_code: bool = False,
    deferred: dict[str, Any] | None = None,
) -> bytes:
    """``extra`` and the graphs: per graph its class name, its own metadata, with
    ``with_code`` its code (:func:`_stored_code`), and its nodes pickled apart
    (:func:`_dumps_nodes`, decoded when the graph is read: :class:`_StoredGraphModule`);
    then ``deferred``'s values, their fake tensors made when read (:func:`_deferring`);
    stored as (the fake tensors' descriptions, which all of them share, that pickle)."""
    fakes = _FakeNumbering()
    stored = {}
    for name, gm in graphs.items():
        if type(gm.graph._codegen) is not torch.fx.graph.CodeGen:
            raise Uncacheable(f"a graph with a {type(gm.graph._codegen).__name__}")
        nodes = _dumps_nodes(gm.graph, fakes)
        stored[name] = (type(gm).__name__, gm.meta, _stored_code(gm.graph) if with_code else None, nodes)
    with io.BytesIO() as stream:
        pickler = _Pickler(stream, fakes)
        pickler.dump(extra)
        pickler.in_meta = True  # (the graphs' own metadata holds no node)
        pickler.dump(stored)
        pickler.dump({key: _deferring(value, fakes) for key, value in (deferred or {}).items()})
        return pickle.dumps((fakes.table, stream.getvalue()), protocol=pickle.HIGHEST_PROTOCOL)


def _dumps_nodes(graph: torch.fx.Graph, fakes: _FakeNumbering) -> bytes:
    """The graph's nodes (op, name, target, args, kwargs, type; a node argument as its
    position), then every node's metadata: a value holding fake tensors is stored
    :func:`_deferring` them (made when read, :class:`_LazyMeta`)."""
    with io.BytesIO() as stream:
        pickler = _Pickler(stream, fakes)
        records, metas = [], []
        for node in graph.nodes:
            if node.op in ("get_attr", "call_module"):
                raise Uncacheable(f"{node.op} {node.target} in a traced graph")
            pickler.nodes[node] = len(pickler.nodes)
            records.append((node.op, node.name, node.target, node.args, node.kwargs, node.type))
            metas.append({key: _deferring(value, fakes) for key, value in node.meta.items()})
        pickler.dump(records)
        pickler.in_meta = True
        pickler.dump(metas)
        return stream.getvalue()


def _resolve(x: Any, nodes: list[torch.fx.Node]) -> Any:
    """Node arguments with :class:`_Ref` replaced by the nodes built so far."""
    t = type(x)
    if t is _Ref:
        return nodes[x.index]
    if t is tuple:
        return tuple(_resolve(y, nodes) for y in x)
    if t is list or t is torch.fx.immutable_collections.immutable_list:
        return [_resolve(y, nodes) for y in x]
    if t is dict or t is torch.fx.immutable_collections.immutable_dict:
        return {k: _resolve(v, nodes) for k, v in x.items()}
    if t is slice:
        return slice(_resolve(x.start, nodes), _resolve(x.stop, nodes), _resolve(x.step, nodes))
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return t(*(_resolve(y, nodes) for y in x))
    return x


def _unpickled(payload: bytes, fakes: _FakeTable, count: int) -> list[Any]:
    """The first ``count`` objects pickled into ``payload`` (fake tensors from ``fakes``)."""
    with io.BytesIO(payload) as stream, warnings.catch_warnings():
        # torch's TreeSpec unpickling warns about its own deprecated LeafSpec
        warnings.simplefilter("ignore", FutureWarning)
        unpickler = _Unpickler(stream, fakes)
        return [unpickler.load() for _ in range(count)]


def _loads_nodes(payload: bytes, fakes: _FakeTable) -> torch.fx.Graph:
    """:func:`_dumps_nodes` undone: a graph of those nodes, their metadata's fake values
    made when read (:class:`_LazyMeta`)."""
    records, metas = _unpickled(payload, fakes, 2)
    graph = torch.fx.Graph()
    nodes: list[torch.fx.Node] = []
    for (op, node_name, target, args, kwargs, type_), meta in zip(records, metas, strict=True):
        node = graph.create_node(op, target, _resolve(args, nodes), _resolve(kwargs, nodes), node_name, type_)
        if node.name != node_name:
            raise pickle.UnpicklingError(f"node {node_name} came back as {node.name}")
        if any(type(value) is _Deferred for value in meta.values()):
            meta = _LazyMeta(meta, fakes)
        node.meta = meta
        nodes.append(node)
    return graph


def _loads_graphs(
    payload: bytes, fake_mode: FakeTensorMode
) -> tuple[Any, dict[str, torch.fx.GraphModule], Any, _FakeTable]:
    """:func:`_dumps_graphs` undone: (extra, the graphs, deferred, the fake tensors). The
    fake tensors ``extra`` and the graphs' own metadata hold are made now; a graph stored
    with its code is decoded when read (:class:`_StoredGraphModule`), node metadata's fake
    values when read (:class:`_LazyMeta`), and ``deferred``'s values are as
    :func:`_deferring` left them (a :class:`_Deferred` where one holds fake tensors)."""
    descriptions, pickled = pickle.loads(payload)
    fakes = _FakeTable(descriptions, fake_mode)
    extra, stored, deferred = _unpickled(pickled, fakes, 3)
    graphs = {}
    for name, (class_name, meta, code, nodes) in stored.items():
        load_graph = functools.partial(_loads_nodes, nodes, fakes)
        if code is None or _profiler_metadata_in_code():
            gm = torch.fx.GraphModule(torch.nn.Module(), load_graph(), class_name)
        else:
            gm = _StoredGraphModule(class_name, code, load_graph)
        gm.meta.update(meta)
        graphs[name] = gm
    return extra, graphs, deferred, fakes


def _stored_code(graph: torch.fx.Graph) -> tuple | None:
    """The graph's Python code as ``GraphModule.recompile`` generates and compiles it:
    (source, globals, line map, prologue start, the graph's code fields, the marshalled
    module code compiled from that source); None where the profiler's metadata option
    changes the code."""
    if _profiler_metadata_in_code():
        return None
    code = graph.python_code(root_module="self")
    module = compile(code.src, "<aotgrad stored graph>", "exec", dont_inherit=True)
    co_fields = dict(getattr(graph, "_co_fields", None) or {})
    return (code.src, code.globals, code._lineno_map, code._prologue_start, co_fields, marshal.dumps(module))


def _profiler_metadata_in_code() -> bool:
    return bool(getattr(torch.fx.experimental._config, "enrich_profiler_metadata", False))


def _code_named(code: types.CodeType, filename: str) -> types.CodeType:
    """``code`` and the code objects it holds with ``co_filename`` set to ``filename``."""
    consts = tuple(_code_named(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


@functools.cache
def _graph_module_state() -> dict[str, Any]:
    """The instance state ``GraphModule``'s constructor gives a module over an empty graph,
    but the graph itself (what :class:`_StoredGraphModule` starts from)."""
    state = dict(vars(torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())))
    del state["_graph"]
    return state


def _call_wrapped(self: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
    """A graph module's ``__call__``, as ``GraphModule``'s recompile installs it."""
    return self._wrapped_call(self, *args, **kwargs)


def _stored_forward(code: tuple) -> Callable:
    """The ``forward`` function of :func:`_stored_code`'s code, as ``GraphModule``'s
    recompile makes it from the source (its source registered for tracebacks and
    ``inspect`` under a fresh ``<eval_with_key>`` name, executed in a copy of the
    globals), from the stored code object instead of compiling the source again."""
    src, globals_, _, _, co_fields, module = code
    scope = dict(globals_)
    key = torch.fx.graph_module._loader.cache(src, scope, co_fields)
    exec(_code_named(marshal.loads(module), key), scope)
    return scope["forward"]


class _StoredGraphModule(torch.fx.GraphModule):
    """A graph module loaded from the cache. It runs the code stored with its nodes
    (:func:`_stored_code`: not generated nor compiled again) from the start, and decodes
    its nodes (``load_graph``) when its graph is first read: a hit's compile reads none
    (the pipeline stores what it needs of the graphs beside them), explain, a compiler
    that reads the graph or a user do.

    Built as ``GraphModule``'s constructor and its recompile build one (~0.2 ms a graph
    through them): the instance state they give a module over an empty graph
    (:func:`_graph_module_state`, made once per process), the stored code's, and the
    per-instance class's ``forward`` and call wrapper.

    Invariant: until the graph is decoded, ``_graph`` is not in the instance's
    ``__dict__``, so every read of it (``graph``, ``self._graph`` in ``GraphModule``'s
    methods and torch's graph pickler) goes through :meth:`__getattr__`, which decodes it;
    the methods that copy ``__dict__`` (deepcopy, pickling) read the graph first."""

    def __init__(self, class_name: str, code: tuple, load_graph: Callable[[], torch.fx.Graph]) -> None:
        torch.nn.Module.__init__(self)
        state = self.__dict__
        for name, value in _graph_module_state().items():
            if name not in state:
                state[name] = copy.copy(value)  # (fresh containers, as the constructor's)
        src, _, lineno_map, prologue_start, _, _ = code
        state.update(_code=src, _lineno_map=lineno_map, _prologue_start=prologue_start, _load_graph=load_graph)
        cls = type(self)  # this instance's own class (GraphModule.__new__)
        cls.__name__ = class_name
        cls.forward = _stored_forward(code)
        cls._wrapped_call = torch.fx.graph_module._WrappedCall(cls, None)
        cls.__call__ = _call_wrapped

    def __getattr__(self, name: str) -> Any:
        if name == "_graph" and "_load_graph" in self.__dict__:
            graph = self.__dict__["_load_graph"]()
            graph.owning_module = self
            self.__dict__["_graph"] = graph
            del self.__dict__["_load_graph"]
            return graph
        return super().__getattr__(name)

    @property
    def _boxed_call(self) -> bool:
        if "_graph" not in self.__dict__:
            return False  # a stored graph has the plain CodeGen (_dumps_graphs refuses others)
        return torch.fx.GraphModule._boxed_call.fget(self)

    def __deepcopy__(self, memo: dict) -> torch.fx.GraphModule:
        self._graph  # noqa: B018 - decoded before GraphModule copies __dict__
        return super().__deepcopy__(memo)

    def __reduce__(self) -> tuple:
        self._graph  # noqa: B018 - decoded before GraphModule copies __dict__
        return super().__reduce__()

    def __reduce_package__(self, exporter: Any) -> tuple:
        self._graph  # noqa: B018 - decoded before GraphModule copies __dict__
        return super().__reduce_package__(exporter)


def _dumps(
    analysis: Any, graphs: dict[str, torch.fx.GraphModule], artifacts: dict[str, Any], facts: Any,
    examples: dict[str, Any],
) -> bytes:
    joint = graphs.get("joint")
    main = {k: v for k, v in graphs.items() if k != "joint"}
    with warnings.catch_warnings():
        # pickling torch's TreeSpec warns about its own deprecated LeafSpec: a cold compile
        # must warn exactly as it would without the cache
        warnings.simplefilter("ignore", FutureWarning)
        joint_payload = None if joint is None else _dumps_graphs(None, {"joint": joint})
        # (the joint is decoded only where someone reads it: its code is not stored)
        return _dumps_graphs((analysis, joint_payload, artifacts, facts), main, with_code=True, deferred=examples)


def _loads(payload: bytes) -> StoredEntry:
    fake_mode = OffsetKeepingFakeTensorMode(allow_non_fake_inputs=True)
    (analysis, joint_payload, artifacts, facts), graphs, examples, fakes = _loads_graphs(payload, fake_mode)
    return StoredEntry(analysis, graphs, fake_mode, joint_payload, artifacts, facts, examples, fakes)


# --------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------


def _storable_analysis(analysis: Any) -> None:
    """Raise :class:`Uncacheable` where the analysis holds what does not round-trip."""
    for i, o in enumerate(analysis.metadata.output_info):
        if not isinstance(o.constant, _PLAIN + _TORCH_PLAIN):
            raise Uncacheable(f"output {i} is a constant {type(o.constant).__name__}")
    if any(s is not None for s in analysis.tangent_structures):
        raise Uncacheable("tensor-subclass tangents")


class EntryStore:
    """The cache file of one entry key: :meth:`load` it, or :meth:`save` a cold compile."""

    def __init__(self, directory: Path, key: str, name: str) -> None:
        self.path = directory / key[:2] / f"{key[2:]}.entry"
        self.key = key
        self.name = name

    def __repr__(self) -> str:
        return f"EntryStore({str(self.path)!r})"

    @classmethod
    def for_call(cls, fn: Callable, leaves: list[Any], spec: Any, config: Any) -> EntryStore | None:
        """The store for this call's entry; None when caching is off or the key cannot be
        computed (logged at DEBUG with the reason)."""
        directory = cache_location(getattr(config, "cache", None))
        if directory is None:
            return None
        name = getattr(fn, "__name__", repr(fn))
        _aotgrad_source_hash(directory)  # (remembered in the cache directory)
        try:
            key = entry_key(fn, leaves, spec, config)
        except Uncacheable as why:
            log.debug("aotgrad: not caching %s: %s", name, why)
            return None
        except Exception as exc:  # noqa: BLE001 - fingerprinting must never break a compile
            log.debug("aotgrad: not caching %s: fingerprint failed: %s: %s", name, type(exc).__name__, exc)
            return None
        return cls(directory, key, name)

    def load(self) -> StoredEntry | None:
        """The stored entry, or None (absent, corrupt, truncated: logged at DEBUG)."""
        try:
            blob = self.path.read_bytes()
        except OSError:
            return None
        try:
            head = len(_MAGIC) + 64 + 32
            if len(blob) < head or not blob.startswith(_MAGIC) or blob[len(_MAGIC):len(_MAGIC) + 64] != self.key.encode():
                raise ValueError("bad header")
            payload = blob[head:]
            if hashlib.sha256(payload).digest() != blob[len(_MAGIC) + 64:head]:
                raise ValueError("checksum mismatch (truncated or corrupt)")
            stored = _loads(payload)
        except Exception as exc:  # noqa: BLE001 - a bad entry is ignored and rewritten
            log.debug("aotgrad: ignoring cache entry %s: %s: %s", self.path, type(exc).__name__, exc)
            return None
        try:
            os.utime(self.path)  # recently used: the last entry eviction would pick
        except OSError:
            pass  # evicted meanwhile, or a read-only cache: the entry was still read whole
        log.debug("aotgrad: %s loaded from cache %s", self.name, self.path)
        return stored

    def save(
        self, analysis: Any, graphs: dict[str, torch.fx.GraphModule], artifacts: dict[str, Any],
        facts: Any = None, examples: dict[str, list[Any] | None] | None = None,
    ) -> None:
        """Write the entry (``artifacts``: :attr:`StoredEntry.compiler_artifacts`, None values
        left out; ``facts``: :attr:`StoredEntry.facts`; ``examples``: per graph kind, its
        compiler's example inputs, fake tensors and ints, or None: not stored)
        (atomically: a temporary file in the same directory, then ``os.replace``); an entry
        that cannot be stored is skipped, logged at DEBUG."""
        try:
            _storable_analysis(analysis)
            payload = _dumps(
                analysis, graphs, {k: v for k, v in artifacts.items() if v is not None}, facts,
                {k: v for k, v in (examples or {}).items() if v is not None},
            )
        except Exception as exc:  # noqa: BLE001 - Uncacheable, or a value pickle refuses
            log.debug("aotgrad: not caching %s: %s: %s", self.name, type(exc).__name__, exc)
            return
        blob = _MAGIC + self.key.encode() + hashlib.sha256(payload).digest() + payload
        limit = size_limit()
        if limit is not None and len(blob) > limit:
            log.debug("aotgrad: not caching %s: its entry (%d bytes) exceeds the cache's size bound", self.name, len(blob))
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-", suffix=".entry")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                os.replace(tmp, self.path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as exc:
            log.debug("aotgrad: could not write cache entry %s: %s", self.path, exc)
            return
        log.debug("aotgrad: %s stored in cache %s", self.name, self.path)
        # A scan of the directory per 1/16 of the bound written, on average, whichever
        # process writes: the directory stays within about 1/16 of its bound.
        if limit is not None and _SCAN_DRAW.random() < 16 * len(blob) / limit:
            evict(self.path.parent.parent, limit, keep=self.path)
