"""Run the program once on fake functional tensors and record what it does: the analysis stage.

The result, :class:`Analysis`, holds the :class:`~aotgrad.core.metadata.ViewAndMutationMetadata`
(which inputs are mutated and how, what each output aliases) and the output pytree spec.
Nothing here touches a real tensor: inputs are fake tensors made from the caller's.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch._C._functionalization as functionalization
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    UnsupportedOperatorException,
)
from torch._subclasses.functional_tensor import FunctionalTensor
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, statically_known_true
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from ..errors import AotgradCompileError, compile_error_from, current_user_line, where
from .eager_rewrites import EagerRewrites
from .layout import takes_eager_layout
from .effects import effects_as_ordered_nodes
from .functional_storage import UncheckedMetadataOps
from .inplace_ops import METADATA_INPLACE, NO_DATA_INPLACE, SAME_ELEMENTS_INPLACE
from .metadata import InputInfo, LeafSlot, OutputInfo, OutputType, ViewAndMutationMetadata
from .op_args import tree_leaves
from .overlapping_writes import NoLossyReplays
from .saved_tensors import find_eager_saved, saving_through_view
from .signature import GraphSignature
from .subclasses import TensorStructure
from .symbolic import holds_sym
from .stale_views import _INPLACE_DUNDERS, StaleViewUses, version_of
from .unsafe_splits import UnsafeSplits
from .view_geometry import EagerViewGeometry, Geometry, functional_geometry

_TRACING_LIMITATIONS = (
    DataDependentOutputException,
    DynamicOutputShapeException,
    UnsupportedOperatorException,
    GuardOnDataDependentSymNode,
)

_CONSTANT_OUTPUT_TYPES = (int, float, bool, str, complex, type(None), torch.dtype, torch.device, torch.Size)
_SYMBOLIC_OUTPUT_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)

__all__ = ["Analysis", "analyze", "from_functional", "reject_inplace_on_leaves", "relative_view_metas", "to_functional"]

_LEAF_INPLACE = "a leaf Variable that requires grad is being used in an in-place operation."
_NOT_A_LEAF_FLAG = (
    "you can only change requires_grad flags of leaf variables. If you want to use a computed "
    "variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach()."
)
_REQUIRES_GRAD_DESCRIPTOR = torch._C.TensorBase.__dict__["requires_grad"]


def _sets_requires_grad(func: Any) -> bool:
    """``Tensor.requires_grad_`` or the ``requires_grad`` property's setter."""
    return func is torch._C.TensorBase.requires_grad_ or (
        getattr(func, "__self__", None) is _REQUIRES_GRAD_DESCRIPTOR and getattr(func, "__name__", "") == "__set__"
    )
#: eager's error for ``detach_()`` of a view (its first sentence; the rest is about DDP)
_DETACH_VIEW = (
    "Can't detach views in-place. Use detach() instead. If you are using DistributedDataParallel "
    "(DDP) for training, and gradient_as_bucket_view is set as True, gradients are views of DDP "
    "buckets, and hence detach_() cannot be called on these gradients. To fix this error, please "
    "refer to the Optimizer.zero_grad() function in torch/optim/optimizer.py as the solution."
)
_VIEW_OF_LEAF_INPLACE = "a view of a leaf Variable that requires grad is being used in an in-place operation."


@dataclass(frozen=True)
class Analysis:
    """What the analysis run found.

    ``intermediate_base_sources[k]``: the user-output index whose autograd ``_base`` is the
    k-th intermediate base (tracing finds the bases again through it).
    """

    metadata: ViewAndMutationMetadata
    out_spec: pytree.TreeSpec
    intermediate_base_sources: tuple[int, ...]
    #: (shape, dtype, device) of each output of the functional forward, in signature order
    forward_output_avals: tuple[tuple[tuple[int, ...], torch.dtype, torch.device], ...]
    #: where the functional forward's outputs sit (no saved values yet)
    signature: GraphSignature
    #: per output of the functional forward that is a tensor subclass, the structure its
    #: tangent is traced with (that subclass, as eager's gradient is); None for a plain one
    tangent_structures: tuple[TensorStructure | None, ...] = ()


def to_functional(t: Any) -> Any:
    """Wrap a tensor for functionalization (mirroring requires_grad and leafness)."""
    return FunctionalTensor.to_functional(t) if isinstance(t, torch.Tensor) else t


def from_functional(t: Any) -> Any:
    """The current (synced) value behind a functional tensor."""
    if isinstance(t, FunctionalTensor):
        torch._sync(t)
        return torch._from_functional_tensor(t.elem)
    return t


def relative_view_metas(view: FunctionalTensor, base: FunctionalTensor) -> list | None:
    """ViewMetas that rebuild ``view`` from ``base`` (both functional, same storage).

    Functionalization records each view's chain from its storage's root; the chain from
    ``base`` is what follows ``base``'s own chain. None when that is not a clean suffix or a
    step has symbolic inputs (the runtime then falls back to ``as_strided``).
    """
    seq = functionalization.get_view_meta_sequence(view.elem)
    prefix = functionalization.get_view_meta_sequence(base.elem)
    if len(prefix) > len(seq):
        return None
    if any(type(a) is not type(b) for a, b in zip(prefix, seq)):
        return None
    rest = list(seq[len(prefix):])
    if any(vm.has_symbolic_inputs for vm in rest):
        return None
    return rest


def _partial_no_grad_steps(view_source: list | None, prefix: int, base: FunctionalTensor, view: FunctionalTensor) -> int:
    """Of ``view_source`` (the chain from ``base`` to ``view``), how many leading steps eager
    made under no_grad, where some but not all were (all: ``no_grad_view``)."""
    if not view_source or not view.requires_grad:
        return 0
    k = prefix - len(functionalization.get_view_meta_sequence(base.elem))
    return k if 0 < k < len(view_source) else 0


def _rebuilt_no_grad_steps(
    view_source: list | None, geometry: EagerViewGeometry, base: FunctionalTensor, view: FunctionalTensor, j: int,
    off_root: bool = False,
) -> int:
    """``OutputInfo.no_grad_steps`` of output ``j``, ``view`` (rebuilt off ``base`` by
    ``view_source``, or by ``as_strided`` where that is None or ``off_root``). Raises where
    eager made some steps of its chain under no_grad (``geometry.no_grad_prefix``) and
    later ones with grad recording, and the rebuilt output cannot replay them so: the
    chain is not replayed, so it would be one ``as_strided`` with grad, whose gradient
    reaches ``base`` where eager's stops at the no_grad view (fuzz seed 23101698)."""
    prefix = geometry.no_grad_prefix(view)
    steps = _partial_no_grad_steps(None if off_root else view_source, prefix, base, view)
    if not steps and prefix and view.requires_grad and (off_root or not view_source) and _has_grad_fn(view):
        raise AotgradCompileError(
            f"aotgrad: output {j} is a view taken with grad recording of a view made under no_grad "
            f"at {geometry.no_grad_line(view)}, after an in-place op on the tensor they view: eager's "
            "gradient stops at the no_grad view, and the output, rebuilt off the input without "
            "replaying its chain, would send it past. Return a clone(), or take the no_grad view "
            "with grad recording."
        )
    return steps


def _has_grad_fn(t: torch.Tensor) -> bool:
    """``t.grad_fn is not None``; False where reading it raises (a view made under no_grad
    whose base was written since: ``OutputInfo.invalidated`` rebuilds it so)."""
    try:
        return t.grad_fn is not None
    except RuntimeError:
        return False


def _replayable_on(
    view_metas: list | None, base: torch.Tensor, base_geometry: Geometry, geometry: Geometry, fake_mode: FakeTensorMode
) -> list | None:
    """``view_metas`` where replaying them on ``base`` laid out as ``base_geometry`` (as the
    runtime has it: after the call) gives the view's eager ``geometry``; else None (the
    runtime then uses ``as_strided``, which is exact).

    A view taken before a metadata mutation of its base (``v = a[1]; a.t_()``) keeps the
    geometry it was made with in eager; replayed on the re-strided base it would not."""
    if not view_metas:
        return view_metas
    numel = base.untyped_storage().nbytes() // base.element_size()
    with fake_mode:
        if _replayed(view_metas, torch.empty(numel, dtype=base.dtype, device=base.device), base_geometry) == geometry:
            return view_metas
    # FakeTensor's view kernels (Python) may choose other strides in size-1 dims than ATen's
    # (``view`` of a [1, 1, 3] tensor with strides (1, 3, 1) as (1, 3): (1, 1) where ATen's
    # computeStride gives (3, 1)); the meta device runs ATen's own, as the runtime's replay will
    if not any(holds_sym(g) for g in (base_geometry, geometry, numel)):
        if _replayed(view_metas, torch.empty(numel, dtype=base.dtype, device="meta"), base_geometry) == geometry:
            return view_metas
    return None


def _replayed(view_metas: list, storage: torch.Tensor, base_geometry: Geometry) -> Geometry | None:
    """The geometry ``view_metas`` replayed on ``storage`` laid out as ``base_geometry`` give;
    None where the chain no longer applies."""
    try:
        out = functionalization.apply_view_meta_sequence(storage.as_strided(*base_geometry), view_metas)
    except Exception:  # noqa: BLE001 - a chain that no longer applies: use as_strided
        return None
    return (tuple(out.shape), tuple(out.stride()), out.storage_offset())


#: ops whose offset and strides address the storage, not the tensor they are called on
#: (``as_strided_`` too, but a synthetic base would make its input a view, on which
#: functionalization replays it wrongly: see ``_EagerChecks.storage_restrided``)
_ADDRESSES_INPUT_STORAGE = frozenset({"as_strided", "as_strided_copy", "as_strided_scatter"})


def _same_static_geometry(geometry: tuple, t: torch.Tensor) -> bool:
    """``t`` has the (size, stride, storage_offset) ``geometry``, all static (no guard)."""
    mine = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
    flat = (*geometry[0], *geometry[1], geometry[2], *mine[0], *mine[1], mine[2])
    return not any(isinstance(v, torch.SymInt) for v in flat) and tuple(map(tuple, geometry[:2])) + (geometry[2],) == mine


def _is_write(name: str) -> bool:
    """An in-place method name that writes data: ``add_``, ``__setitem__``, ``__iadd__``...
    (none of :data:`~aotgrad.core.inplace_ops.NO_DATA_INPLACE`: ``t_``, ``detach_``...)."""
    if name.endswith("__"):  # (not ``__invert__``, ``__index__``, ``__iter__``, ``__get__``)
        return name == "__setitem__" or name in _INPLACE_DUNDERS
    return name.endswith("_") and name not in NO_DATA_INPLACE


def _maybe_nonzero(n: Any) -> bool:
    """``n`` is not statically 0 (a SymInt is not read: that would add a guard)."""
    return not (type(n) is int and n == 0)


class EagerKernelAssert(RuntimeError):
    """An internal assert eager's kernel raises on the program's own call, raised by the
    analysis in its place: eager's error, re-raised unchanged, though its text reads as one of
    torch's asserts failing on functional tensors (:func:`_is_tracing_limitation`)."""


def _raise_eager_as_strided_scatter_error(args: tuple, kwargs: dict | None) -> None:
    """Raise eager's error for the program's own ``as_strided_scatter`` of a ``self`` that
    requires grad and is not contiguous: ATen's kernel asserts that, in grad mode or not.
    Below functionalization the call never meets it (an intermediate's value there does not
    require grad, and the fake mode runs the call on an input's value ``detach()``ed, for
    functionalization's own scatters: ``fake_mode.OffsetKeepingFakeTensorMode``).
    The layout read is the functional tensor's (eager's for an input and for a tensor no
    write re-laid out)."""
    self = args[0] if args else (kwargs or {}).get("self")
    if isinstance(self, torch.Tensor) and self.requires_grad and not self.is_contiguous():
        raise EagerKernelAssert(
            "!self.requires_grad() || self.is_contiguous() INTERNAL ASSERT FAILED at "
            '"aten/src/ATen/native/TensorShape.cpp", please report a bug to PyTorch. '
            "as_strided_scatter is currently only supported for contiguous inputs"
        )


class _SyncedFunctionalTensorMode(NoLossyReplays, UncheckedMetadataOps):
    """Functionalization (refusing lossy replays, :class:`NoLossyReplays`) that brings each
    functional argument of an op up to date
    (``torch._sync``: regenerated off its base's current value) before the op runs, as
    torch's ``FunctionalTensorMode`` does only while a proxy mode traces
    (``_sync_view_replay_annotations``, which it keeps there).

    A view op does not sync its input: the view's sizes and strides are taken off the input's
    current functional value. After an in-place op through a view ``v``, that value is the
    out-of-place op's result (``masked_fill`` makes it contiguous) until ``v`` is regenerated
    off its base's new value, which ``eager_rewrites._keeping_layout`` lays out as eager's;
    a view of ``v`` taken in between had strides that neither eager's tensor nor the trace's
    have, so the analysis decided ``reshape``/``flatten``/``contiguous`` of it otherwise than
    both (a ``reshape`` that copies in eager became an output rebuilt as a view of the
    input: fuzz seed 14003992)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.as_strided_scatter.default:
            _raise_eager_as_strided_scatter_error(args, kwargs)
        tracing = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.PROXY) is not None
        if not tracing and func not in FunctionalTensor.metadata_fns:
            for a in tree_leaves((args, kwargs)):
                if isinstance(a, FunctionalTensor):
                    torch._sync(a)
        return super().__torch_dispatch__(func, types, args, kwargs)


def reorders_elements(entry: tuple, now: tuple) -> bool:
    """Two (size, stride, storage_offset) geometries may order their elements otherwise:
    they differ in more than dims of size 1. Symbolic values count as equal only where they
    are the same expression (no guard is added); unsure is True."""

    def same(x: Any, y: Any) -> bool:
        if isinstance(x, torch.SymInt) and isinstance(y, torch.SymInt):
            return x.node.expr == y.node.expr
        return type(x) is int and type(y) is int and x == y

    def kept(geometry: tuple) -> list:
        return [(n, st) for n, st in zip(geometry[0], geometry[1]) if not (type(n) is int and n == 1)]

    a, b = kept(entry), kept(now)
    return not (
        same(entry[2], now[2]) and len(a) == len(b)
        and all(same(n, m) and same(s, t) for (n, s), (m, t) in zip(a, b))
    )


#: tensor methods that read the tensor's ``grad_fn`` (regenerating a stale view's)
_READING_GRAD_FN = frozenset({"__repr__", "__str__", "__format__", "retain_grad", "register_hook", "backward"})


class _EagerChecks(TorchFunctionMode):
    """Checks, at the user's call sites, what the functional run cannot see by itself.

    - A metadata-only in-place op (``t_``...) on a leaf that requires grad under grad mode:
      eager rejects it, but functionalization records it as a view. (Data mutations of such
      leaves are rejected after the run, by :func:`reject_inplace_on_leaves`.)
    - Tensors the program closes over that need autograd or are mutated: captured as
      constants, their gradients and mutations would be silently lost.
    """

    def __init__(self, leaf_inputs: frozenset[int], input_storages: dict[StorageWeakRef, int]) -> None:
        super().__init__()
        #: ids of the functional inputs that stand for leaves requiring grad (functional
        #: wrappers are never leaves themselves)
        self.leaf_inputs = leaf_inputs
        #: the functional inputs' storages, to the first input on each
        self.input_storages = input_storages
        #: inputs the program takes ``as_strided`` of (directly or through a view)
        self.storage_addressed: set[int] = set()
        #: inputs whose storage the program re-strides with ``as_strided_`` (on the input, a
        #: view or a detach()ed alias of it): its offset names a location of that storage
        self.storage_restrided: set[int] = set()
        #: id of a functional input → its graph-input index (set by :func:`analyze`)
        self.input_index: dict[int, int] = {}
        #: input index -> whether the caller's tensor is an autograd leaf
        self.input_is_leaf: dict[int, bool] = {}
        #: graph inputs the program makes require grad (``requires_grad_()``) → the user line
        self.inputs_set_requiring_grad: dict[int, str] = {}
        #: tensors without autograd history the program makes require grad: new autograd
        #: leaves, in program order, with the user line
        self.new_leaves: list[tuple[torch.Tensor, str]] = []
        #: ids of the functional inputs that stand for views of leaves requiring grad
        self.leaf_view_inputs: frozenset[int] = frozenset()
        #: graph input → (its entry geometry, the line) of an in-place metadata op on it under
        #: no_grad while it requires grad
        self.restrided_under_no_grad: dict[int, tuple[tuple, str]] = {}
        #: graph inputs the program applies as_strided_ to (eager's history then goes
        #: through AsStridedBackward, whatever geometry results)
        self.as_strided_inputs: set[int] = set()
        #: graph input → (that op's line, the line) of its first use with grad recording in a
        #: geometry other than its entry one, after that op (see :func:`analyze`)
        self.used_after_no_grad_restride: dict[int, tuple[str, str]] = {}
        #: of those, the inputs an op other than a permutation of the dims or a size-1 dim
        #: change (``as_strided_``, ``resize_``) gave a geometry that may name other elements,
        #: or that are re-laid out again after such a use
        self.readdressed_under_no_grad: set[int] = set()
        #: of those, the inputs (views in the caller) written under no_grad after that op and
        #: before such a use: eager's gradient through the regenerated view then reached other
        #: elements than the trace's (fuzz seed 17018111)
        self.written_after_no_grad_restride: set[int] = set()
        #: graph inputs whose caller's tensor is an autograd view (eager refuses ``detach_()``)
        self.view_inputs: frozenset[int] = frozenset()
        #: graph inputs requiring grad that the program detaches in place → the user line
        self.detached_inputs: dict[int, str] = {}
        #: id -> (the intermediate, its version then): intermediates (no inputs, no views) the
        #: program detached in place while they required grad
        self.detached_intermediates: dict[int, tuple[torch.Tensor, int]] = {}
        #: id -> (an autograd view, the version of its storage when eager last recorded its
        #: history): made, written through with grad recording, or its stale grad_fn
        #: regenerated by a read (a recorded use, ``grad_fn``, ``is_leaf``, repr); eager's
        #: ``attr_version``, which decides whether a read regenerates it
        self.view_history_versions: dict[int, tuple[torch.Tensor, int]] = {}
        #: id -> view of a ``detached_intermediates`` member whose history eager regenerates
        #: off it once it has none: stale at the ``detach_()``, or regenerated after it
        self.views_losing_history: dict[int, torch.Tensor] = {}
        #: per graph input, its functional tensor's grad_fn before the program runs
        self.initial_grad_fns: list[Any] = []
        #: graph input detached in place → autograd's next node sequence number then
        self.detached_at: dict[int, int] = {}
        #: graph input → the functional tensors of the other graph inputs on its storage in
        #: the caller: eager's tensors there share one version counter, the trace's are apart,
        #: so an in-place metadata op on an input, a view of one or a detach()ed alias of
        #: either moves its peers' counters too (a data write merges them into a synthetic
        #: base, whose views share its counter in the trace too)
        self.storage_peers: dict[int, tuple[Any, ...]] = {}
        #: leaf graph input requiring grad → (size, stride, storage offset) of each distinct
        #: layout it has at an op that records a use of it (keyed by its repr, in the order
        #: of first use), with the user line of the first such op: eager's gradient for the
        #: leaf is the sum of each use's gradient, indexed as the leaf was laid out at that
        #: use; and eager's AccumulateGrad for it is made at the first use, checking the
        #: gradients it gets against the shape then while it lives (an in-place metadata op
        #: under no_grad may change the input's shape after: ``first_use_shape``)
        self.leaf_use_geometries: dict[int, dict[str, tuple[tuple, str]]] = {}

    def _requires_grad(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """``t.requires_grad_(value)`` / ``t.requires_grad = value``: recorded (an input the
        program makes require grad; a new autograd leaf), or refused where a compiled graph
        cannot reproduce it."""
        t = args[0]
        value = bool(args[1]) if len(args) > 1 else bool(kwargs.get("requires_grad", True))
        if not isinstance(t, FunctionalTensor):
            if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor) and t.requires_grad != value:
                # a real tensor the program closes over: flipping it now would change the
                # caller's tensor at compile time, once, instead of on every call
                raise AotgradCompileError(
                    f"aotgrad: requires_grad_({value}) at {current_user_line()} on a tensor that is not "
                    f"an input of the compiled function (shape {tuple(t.shape)}, captured from the "
                    "enclosing scope); it would change once, at compile time. Pass it as an argument."
                )
            return func(*args, **kwargs)
        i = self.input_index.get(id(t))
        if i is not None:
            if value and not t.requires_grad:
                if i in self.detached_inputs:
                    raise AotgradCompileError(
                        f"aotgrad: input {i} is detached in place ({self.detached_inputs[i]}) and then "
                        f"made to require grad again (requires_grad_() at {current_user_line()}); this "
                        "is not supported. Use x.detach().requires_grad_() inside the function."
                    )
                self.inputs_set_requiring_grad.setdefault(i, current_user_line())
            elif not value and t.requires_grad:
                if id(t) not in self.leaf_inputs:
                    raise RuntimeError(_NOT_A_LEAF_FLAG)  # eager's error: the input is no leaf
                # on a leaf, eager's requires_grad_(False) is detach_() (the functional
                # tensor standing for it is no leaf: it would refuse requires_grad_(False))
                self._detaches(i, t)
                t.detach_()
                return t if func is torch._C.TensorBase.requires_grad_ else None
            return func(*args, **kwargs)
        new_leaf = value and not t.requires_grad and t.grad_fn is None
        out = func(*args, **kwargs)
        if new_leaf:
            self.new_leaves.append((t, current_user_line()))
        return out

    def _detaches(self, i: int, t: FunctionalTensor) -> None:
        """Input ``i`` (``t``), requiring grad, detached in place: eager's error where the
        caller's tensor is a view; else recorded (``InputInfo.detached_in_place``)."""
        if t.grad_fn is not self.initial_grad_fns[i] and id(t) in self.leaf_inputs | self.leaf_view_inputs:
            # autograd recorded a write into it before: eager's error at that write (its
            # record is gone after the detach, so the check after the run cannot see it)
            raise RuntimeError(_LEAF_INPLACE if id(t) in self.leaf_inputs else _VIEW_OF_LEAF_INPLACE)
        if i in self.view_inputs:
            raise RuntimeError(_DETACH_VIEW)
        if i in self.inputs_set_requiring_grad:
            raise AotgradCompileError(
                f"aotgrad: input {i} is made to require grad ({self.inputs_set_requiring_grad[i]}) and "
                f"then detached in place at {current_user_line()}; this is not supported. Use "
                "x.detach() inside the function."
            )
        self.detached_inputs.setdefault(i, current_user_line())
        self.detached_at.setdefault(i, torch._C._autograd._get_sequence_nr())

    def _views_a_leaf(self, t: Any) -> bool:
        """``t`` is, in eager, a view of a leaf that requires grad: an input that is one, or a
        view of such an input or of a leaf input (eager refuses in-place ops on it in grad mode)."""
        if not isinstance(t, FunctionalTensor) or not t.requires_grad:
            return False
        if id(t) in self.leaf_view_inputs:
            return True
        base = t._base
        return base is not None and (id(base) in self.leaf_inputs or id(base) in self.leaf_view_inputs)

    def _note_no_grad_restride(self, name: str, args: tuple, kwargs: dict) -> None:
        """Track an input's in-place metadata op under no_grad and its later uses with grad
        recording (``restrided_under_no_grad``, ``used_after_no_grad_restride``); a use may
        pass the input by keyword only (``torch.mul(input=a, other=2)``: no ``args``)."""
        t = args[0] if args else None
        i = self.input_index.get(id(t))
        if i is not None and name in METADATA_INPLACE and not torch.is_grad_enabled() and t.requires_grad:
            entry = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
            self.restrided_under_no_grad.setdefault(i, (entry, current_user_line()))
            if name not in SAME_ELEMENTS_INPLACE or i in self.used_after_no_grad_restride:
                # (another such op once a use was recorded: what autograd saved of the input
                # changes its geometry under it, which the trace's copy does not reproduce)
                self.readdressed_under_no_grad.add(i)
            return
        if not self.restrided_under_no_grad:
            return
        if not torch.is_grad_enabled():
            if _is_write(name) and isinstance(t, FunctionalTensor):
                i = self.input_index.get(id(t), self.input_index.get(id(t._base)))
                if i in self.restrided_under_no_grad and i not in self.used_after_no_grad_restride:
                    self.written_after_no_grad_restride.add(i)
            return
        for a in tree_leaves((args, kwargs)):  # (keyword operands too: torch.cat(tensors=[a]))
            i = self.input_index.get(id(a)) if isinstance(a, FunctionalTensor) else None
            if i is None or i not in self.restrided_under_no_grad or i in self.used_after_no_grad_restride:
                continue
            entry, line = self.restrided_under_no_grad[i]
            if (tuple(a.shape), tuple(a.stride()), a.storage_offset()) != entry:
                self.used_after_no_grad_restride[i] = (line, current_user_line())

    def note_returned_input(self, i: int, t: FunctionalTensor) -> None:
        """The program returns input ``i`` (functional tensor ``t``) itself, after an in-place
        metadata op on it under no_grad and a write autograd recorded: the caller's reads of
        the output's ``grad_fn`` rebuild its history off its base in the new geometry, as a
        use with grad recording does inside the program (fuzz seed 19013806: the trace's
        copy kept the write's history in the entry geometry; the gradient came back
        transposed). Where the input has no recorded write, its history is the caller's own
        view, which the runtime re-lays out as eager's is; where the new geometry only adds
        or drops size-1 dims, it orders the elements as the entry one, and the history in
        the entry geometry gives eager's gradient."""
        if i not in self.restrided_under_no_grad or i in self.used_after_no_grad_restride:
            return
        entry, line = self.restrided_under_no_grad[i]
        if reorders_elements(entry, (tuple(t.shape), tuple(t.stride()), t.storage_offset())):
            self.used_after_no_grad_restride[i] = (line, "its return as an output")

    def _is_leaf(self, func: Any, t: Any) -> bool:
        """``t.is_leaf`` read by the program: refused for an input where the traced program
        would see another value than eager's caller tensor has (the program could branch on
        it: silently another program)."""
        seen = func(t)
        i = self.input_index.get(id(t)) if isinstance(t, FunctionalTensor) else None
        if i is not None and i in self.input_is_leaf and self.input_is_leaf[i] != seen:
            raise AotgradCompileError(
                f"aotgrad: .is_leaf of input {i} read at {current_user_line()}: the traced program "
                f"sees {seen}, eager's tensor is {'a leaf' if self.input_is_leaf[i] else 'no leaf'}. "
                "Read it before the call and pass the result as an argument."
            )
        return seen

    def _refuse_history_after_detach(self, name: str, args: tuple, kwargs: dict) -> None:
        """An in-place write autograd records, with an operand requiring grad, into an input
        (or a view of one) the program detached in place before: eager's input gets a history
        again (requires grad, no leaf); the runtime detaches the caller's tensor after the
        call, so it would end a leaf that does not require grad (fuzz seeds 1007411, 2000502,
        2003658, 2005331)."""
        written = kwargs.get("out")
        if written is None and _is_write(name):
            written = args[0]
        if not isinstance(written, FunctionalTensor):
            return
        k = self.input_index.get(id(written))
        if k is None and written._base is not None:
            k = self.input_index.get(id(written._base))
        if k not in self.detached_inputs:
            return
        operands = tree_leaves((args[1:] if written is args[0] else args, kwargs))
        if any(isinstance(t, torch.Tensor) and t is not written and t.requires_grad for t in operands):
            raise AotgradCompileError(
                f"aotgrad: in-place {name} at {current_user_line()} writes an operand that requires grad "
                f"into input {k}, which the program detached in place before ({self.detached_inputs[k]}): "
                "eager's input gets an autograd history again; this is not supported. Use "
                "x.detach() (out of place) inside the function, or detach the input before calling it."
            )

    def _leaf_uses(self, operands: list) -> list[tuple[int, tuple]]:
        """(graph input, its (size, stride, storage offset)) of each leaf input requiring
        grad among the op's functional ``operands`` (positional or keyword, nested in lists
        and tuples: ``torch.cat(tensors=[a])``, ``torch.mul(input=a, ...)``): a use autograd
        records where the op's result gets a grad_fn (``leaf_use_geometries``)."""
        uses = []
        for t in operands:
            if id(t) in self.leaf_inputs and t.requires_grad:
                i = self.input_index.get(id(t))
                if i is not None:
                    uses.append((i, (tuple(t.shape), tuple(t.stride()), t.storage_offset())))
        return uses

    def __torch_function__(self, func, types, args=(), kwargs=None):
        functional = [a for a in tree_leaves((args, kwargs)) if isinstance(a, FunctionalTensor)]
        uses = self._leaf_uses(functional) if torch.is_grad_enabled() and self.leaf_inputs else ()
        operands = [(a, version_of(a)) for a in functional]
        try:
            out = self._checked_call(func, types, args, kwargs)
        except RuntimeError as e:
            self._refuse_regeneration_off_detached(func, operands, e)
            raise
        # ``t[i] = a`` returns None: autograd recorded it where ``t`` got a grad_fn (CopySlices)
        results = (args[0],) if out is None and getattr(func, "__name__", None) == "__setitem__" else out
        self._note_view_histories(func, args, operands, results)
        if uses and any(isinstance(o, torch.Tensor) and o.grad_fn is not None for o in tree_leaves(results)):
            # autograd recorded the op: its node has an edge to each input's AccumulateGrad
            for i, geometry in uses:
                self.leaf_use_geometries.setdefault(i, {}).setdefault(repr(geometry), (geometry, current_user_line()))
        return out

    def _note_view_histories(self, func: Any, args: tuple, operands: list, results: Any) -> None:
        """Move :attr:`view_history_versions` as eager's autograd moves each view's
        ``attr_version``: a new view records its storage's version; a write autograd records
        through a view rebases its history (the version after the write); an op autograd
        records with a view among its operands reads its ``grad_fn`` first, regenerating it
        where stale (the version before the op), and so do the ``grad_fn`` and ``is_leaf``
        getters, ``repr``, ``retain_grad``... (:data:`_READING_GRAD_FN`).
        ``operands``: the functional tensors among the arguments, with
        their versions before the call; ``results``: what the op returned (``t[i] = a``:
        ``t``, which it writes)."""
        name = getattr(func, "__name__", "")
        getter = getattr(getattr(func, "__self__", None), "__name__", None) if name == "__get__" else None
        before = {id(a): v for a, v in operands}
        returned = [r for r in tree_leaves(results) if isinstance(r, FunctionalTensor)]
        fresh = [r for r in returned if id(r) not in before]
        written = [r for r in returned if id(r) in before and before[id(r)] != version_of(r)]
        # (inference tensors have no version counter, nor autograd history)
        views = [(a, v) for a, v in operands if a._base is not None and v is not None]
        for r in fresh:
            if r._base is not None and id(r) not in self.view_history_versions and version_of(r) is not None:
                self.view_history_versions[id(r)] = (r, r._version)
        if name in ("__repr__", "__str__", "__format__") and args and not isinstance(args[0], FunctionalTensor):
            # FunctionalTensor's own repr prints its inner tensor: the view it wraps is read
            views = [(v, v._version) for v, _ in self.view_history_versions.values() if v.elem is args[0]]
        if not views:
            return
        if getter in ("grad_fn", "is_leaf") or name in _READING_GRAD_FN:
            read = [(a, v) for a, v in views if a is args[0] or a.elem is args[0]]
        elif torch.is_grad_enabled() and any(r.requires_grad for r in fresh + written):
            read = views  # recorded (an in-place op reads its destination's grad_fn too)
        else:
            read = []
        for a, version in read:
            self._note_history_read(a, version)
        source = args[0] if args else None
        if (
            torch.is_grad_enabled() and any(r is source for r in written) and source._base is not None
            and source.requires_grad
        ):
            self.view_history_versions[id(source)] = (source, source._version)  # rebased by the write

    def _note_history_read(self, view: FunctionalTensor, version: int) -> None:
        """Eager read ``view``'s ``grad_fn`` at storage version ``version``: a stale one is
        regenerated off its base as the base is then (without history where the base is a
        detached intermediate: :attr:`views_losing_history`)."""
        entry = self.view_history_versions.get(id(view))
        if entry is not None and entry[0] is view and entry[1] != version:
            base = self.detached_intermediates.get(id(view._base))
            if base is not None and base[0] is view._base:
                self.views_losing_history[id(view)] = view
        self.view_history_versions[id(view)] = (view, version)

    def _refuse_regeneration_off_detached(self, func: Any, operands: list, error: RuntimeError) -> None:
        """``func`` raised ``error`` reading the stale ``grad_fn`` of a view among its
        ``operands`` whose base is an intermediate the program ``detach_()``ed: eager
        regenerates it as ``AsStridedBackward0`` without a next edge, functionalization's
        replay of the view's chain off the base without history trips autograd's internal
        assert. Refused, naming the op and the line (not yet supported)."""
        if "new_fn INTERNAL ASSERT" not in str(error):
            return
        for view, _ in operands:
            entry = self.detached_intermediates.get(id(view._base)) if view._base is not None else None
            if entry is not None and entry[0] is view._base:
                name = getattr(func, "__name__", str(func))
                raise AotgradCompileError(
                    f"aotgrad: {name} at {current_user_line()} reads the autograd history of a view "
                    "whose base the program detach_()ed after an in-place op on their storage: "
                    "eager regenerates the view's history off the detached base, without one; "
                    "this is not supported. detach() the view for that use, or clone() it "
                    "before the detach_()."
                ) from error

    def _note_intermediate_detach(self, base: FunctionalTensor) -> None:
        """``base``, an intermediate requiring grad, is detached in place: its views stale
        now regenerate their history off it later, without one (fuzz seed 21002515)."""
        self.detached_intermediates.setdefault(id(base), (base, base._version))
        for view, version in list(self.view_history_versions.values()):
            if view._base is base and version != view._version:
                self.views_losing_history[id(view)] = view

    def first_use_shape(self, i: int) -> tuple | None:
        """Leaf graph input ``i``'s shape at the program's first recorded use of it; None
        where the program records none."""
        uses = self.leaf_use_geometries.get(i)
        return next(iter(uses.values()))[0][0] if uses else None

    def _checked_call(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _sets_requires_grad(func):
            return self._requires_grad(func, args, kwargs)
        name = getattr(func, "__name__", str(func))
        if name == "__get__" and args and getattr(getattr(func, "__self__", None), "__name__", None) == "is_leaf":
            return self._is_leaf(func, args[0])
        if (
            name in METADATA_INPLACE
            and args
            and id(args[0]) in self.leaf_inputs
            and args[0].requires_grad  # (not once detached in place)
            and torch.is_grad_enabled()
        ):
            raise RuntimeError(_LEAF_INPLACE)
        if name in METADATA_INPLACE and args and torch.is_grad_enabled() and self._views_a_leaf(args[0]):
            raise RuntimeError(_VIEW_OF_LEAF_INPLACE)
        if (
            name == "detach_" and args and isinstance(args[0], FunctionalTensor) and args[0].requires_grad
            and args[0]._base is None and id(args[0]) not in self.input_index
        ):
            self._note_intermediate_detach(args[0])
        if self.detached_inputs and args and torch.is_grad_enabled():
            self._refuse_history_after_detach(name, args, kwargs)
        if name == "detach_" and args and (i := self.input_index.get(id(args[0]))) is not None:
            if args[0].requires_grad:
                self._detaches(i, args[0])
            elif i in self.view_inputs:
                raise RuntimeError(_DETACH_VIEW)  # eager refuses it on any view
        if self.input_index and (args or kwargs):
            self._note_no_grad_restride(name, args, kwargs)
            if args and name in METADATA_INPLACE and isinstance(args[0], FunctionalTensor):
                k = self.input_index.get(id(args[0]), self.input_index.get(id(args[0]._base)))
                if k is None:
                    # a detach()ed alias (of a view) of an input: no autograd base, the
                    # input's storage and version counter all the same
                    k = self.input_storages.get(StorageWeakRef(args[0].untyped_storage()))
                if k is not None:
                    # eager's op moves the counter its peers share: what autograd saved of them
                    # before is refused (find_eager_saved), their views made in no_grad mode (or
                    # by a multi-output op) refuse their grad_fn since, as eager's do
                    for peer in self.storage_peers.get(k, ()):
                        torch._C._autograd._unsafe_set_version_counter((peer,), (peer._version + 1,))
        if name in _ADDRESSES_INPUT_STORAGE and args and isinstance(args[0], FunctionalTensor):
            storage = StorageWeakRef(args[0].untyped_storage())
            i = self.input_storages.get(storage)
            if i is not None:
                self.storage_addressed.add(i)
        if name == "as_strided_" and args and isinstance(args[0], FunctionalTensor):
            v = args[0]
            if (k := self.input_storages.get(StorageWeakRef(v.untyped_storage()))) is not None:
                self.storage_restrided.add(k)
            if (k := self.input_index.get(id(v))) is not None:
                self.as_strided_inputs.add(k)
            # (whether a write into its storage afterwards is exact: EagerViewGeometry decides)
        # (writes through memory that overlaps itself are rewritten or refused before they
        # get here: core/overlapping_writes.py, through EagerRewrites)
        for t in tree_leaves((args, kwargs)):
            if (
                isinstance(t, torch.Tensor)
                and not isinstance(t, (FakeTensor, FunctionalTensor))
                and not torch._is_functional_tensor(t)  # functionalization's inner wrappers
            ):
                if t.requires_grad and torch.is_grad_enabled():
                    raise AotgradCompileError(
                        f"aotgrad: {name} uses a tensor that is not an input of the compiled "
                        f"function and requires grad (shape {tuple(t.shape)}); its gradient "
                        "would be lost. Pass it as an argument (aot_module does this for "
                        "parameters)."
                    )
                if name.endswith("_") and not name.endswith("__") and t is (args[0] if args else None):
                    raise AotgradCompileError(
                        f"aotgrad: in-place {name} on a tensor that is not an input of the "
                        f"compiled function (shape {tuple(t.shape)}); the mutation would be "
                        "lost. Pass the tensor as an argument."
                    )
        if (
            torch.is_grad_enabled()
            and _is_write(name) and name != "__setitem__"
            and args and isinstance(args[0], FunctionalTensor) and args[0]._base is not None
        ):
            # a write through a view autograd records: its node is wrapped in CopySlices
            op = f"{name[3:-2]}_" if name.startswith("__i") else name
            return saving_through_view(lambda: func(*args, **kwargs), args[0], op)
        return func(*args, **kwargs)



def reject_inplace_on_leaves(call_inputs: list[torch.Tensor], metadata: ViewAndMutationMetadata) -> None:
    """Raise eager's error for an in-place op, seen by autograd, on a leaf that requires grad
    or on a view of one. ``metadata`` is the analysis over ``call_inputs`` (the real tensors):
    on fake inputs the analysis cannot always see that an input is a view of a leaf."""
    for i in metadata.data_mutated_input_indices:
        if not metadata.input_info[i].mutation_visible_to_autograd:
            continue
        t = call_inputs[i]
        if t.is_leaf and t.requires_grad:
            raise RuntimeError(_LEAF_INPLACE)
        if t._base is not None and t._base.is_leaf and t._base.requires_grad:
            raise RuntimeError(_VIEW_OF_LEAF_INPLACE)


def analyze(
    program: Callable[..., tuple[list[Any], pytree.TreeSpec]],
    fake_inputs: list[torch.Tensor],
    fake_mode: FakeTensorMode,
    *,
    grad_enabled: bool,
    final: bool = False,
    forward_modes: Callable[[StaleViewUses], list[contextlib.AbstractContextManager]] | None = None,
) -> Analysis:
    """Run ``program(*fake_inputs)`` under functionalization and collect its metadata.

    ``program`` takes the graph inputs and returns ``(output leaves, output spec)``.
    ``final``: the run over synthetic bases, after which no input is merged into one (so it
    decides what an earlier run left to it: view_geometry's ``restrided_partial_storages``).
    ``forward_modes(stale_uses)``: modes the run enters between ``EagerRewrites`` and the
    run's ``StaleViewUses`` (handed to it), where the joint's forward has them: the joint
    traced in this run (:func:`~aotgrad.core.tracing.analyze_tracing_joint`).
    Raises :class:`AotgradCompileError` (naming the user's line) when the program cannot be
    run on fake tensors, e.g. data-dependent control flow.
    """
    mode = _SyncedFunctionalTensorMode()
    with fake_mode, mode:
        f_inputs = [to_functional(t) for t in fake_inputs]
    grad_fns_before = [getattr(f, "grad_fn", None) for f in f_inputs]
    checks = _EagerChecks(
        frozenset(
            id(f) for f, t in zip(f_inputs, fake_inputs)
            if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad
        ),
        {
            StorageWeakRef(f.untyped_storage()): i
            for i, f in reversed(list(enumerate(f_inputs))) if isinstance(f, torch.Tensor)
        },
    )
    checks.input_index = {id(f): i for i, f in enumerate(f_inputs) if isinstance(f, torch.Tensor)}
    checks.initial_grad_fns = grad_fns_before
    checks.storage_peers = _storage_peers(f_inputs, fake_inputs)
    checks.input_is_leaf = {i: t.is_leaf for i, t in enumerate(fake_inputs) if isinstance(t, torch.Tensor)}
    checks.view_inputs = frozenset(
        i for i, t in enumerate(fake_inputs) if isinstance(t, torch.Tensor) and t._base is not None
    )
    checks.leaf_view_inputs = frozenset(
        id(f) for f, t in zip(f_inputs, fake_inputs)
        if isinstance(t, torch.Tensor) and t.requires_grad and t._base is not None and t._base.is_leaf
    )
    geometry = EagerViewGeometry(
        [(f, t) for f, t in zip(f_inputs, fake_inputs) if isinstance(t, torch.Tensor)], mergeable=not final
    )
    geometry.stale_uses = StaleViewUses(history_recorded=geometry.note_history_recorded)
    unsafe_splits = UnsafeSplits()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(fake_mode)
            stack.enter_context(effects_as_ordered_nodes())
            stack.enter_context(torch.set_grad_enabled(grad_enabled))
            stack.enter_context(mode)
            stack.enter_context(checks)
            stack.enter_context(geometry)
            stack.enter_context(EagerRewrites(
                reroot_is_exact=geometry.reroot_is_exact, addressed_as_eager=geometry.addressed_as_eager,
                copy_slices_layout=geometry.copy_slices_layout,
            ))
            for extra in forward_modes(geometry.stale_uses) if forward_modes is not None else ():
                stack.enter_context(extra)
            # (inside all but UnsafeSplits: the other modes see the calls it makes in place of the program's)
            stack.enter_context(geometry.stale_uses)
            # (innermost: it sees the program's own calls, and what each one wrote)
            stack.enter_context(unsafe_splits)
            out_leaves, out_spec = program(*f_inputs)
    except AotgradCompileError:
        raise
    except Exception as exc:
        if not _is_tracing_limitation(exc):
            _refuse_error_after_peer_detach(checks, exc)
            raise
        raise compile_error_from(exc, "trace the program on fake tensors") from exc

    input_info = []
    input_storages: dict[StorageWeakRef, int] = {}
    for i, (f, fake) in enumerate(zip(f_inputs, fake_inputs)):
        if not isinstance(fake, torch.Tensor):  # a SymInt input: nothing to mutate
            input_info.append(InputInfo(False, False, False, requires_grad=False, is_leaf=True))
            continue
        torch._sync(f)
        data = torch._functionalize_has_data_mutation(f.elem)
        meta = torch._functionalize_has_metadata_mutation(f.elem)
        under_no_grad = torch._functionalize_are_all_mutations_under_no_grad_or_inference_mode(
            f.elem
        )
        if fake.requires_grad and not f.requires_grad and i not in checks.detached_inputs:
            raise AotgradCompileError(
                f"aotgrad: input {i} is detached in place (detach_()/requires_grad_(False)); "
                "this is not supported. Detach it before the call, or use .detach()."
            )
        # Autograd saw a data mutation exactly when it gave the input a new grad_fn: one
        # under no_grad, or through a detach()ed alias, leaves it as it was. An input detached
        # in place ends without history whatever autograd saw before (see _detaches).
        visible = data and not under_no_grad and f.grad_fn is not grad_fns_before[i] and i not in checks.detached_inputs
        if visible and fake._base is not None and any(o is f for o in out_leaves):
            checks.note_returned_input(i, f)
        if visible and fake._base is None and i in checks.restrided_under_no_grad and reorders_elements(
            checks.restrided_under_no_grad[i][0], geometry.geometry(f)
        ):
            raise AotgradCompileError(
                f"aotgrad: input {i}, which requires grad and is written in place with grad recording, "
                f"has its dims reordered in place under no_grad at {checks.restrided_under_no_grad[i][1]}: "
                "eager's autograd then hands the gradient of its new layout to the history of the "
                "old one element by element (the input is no view, so nothing rebuilds it), which "
                "the compiled write back cannot reproduce. Reorder the dims with grad recording on, "
                "or outside the function."
            )
        # (A permutation of the dims or a size-1 dim change names the same elements: eager's
        # gradient to the base through the new geometry is the one through the entry geometry
        # of what the trace computes, InputInfo.relaid_out_under_no_grad.)
        if i in checks.used_after_no_grad_restride and fake._base is not None and (
            i in checks.readdressed_under_no_grad or i in checks.written_after_no_grad_restride
        ):
            restride, use = checks.used_after_no_grad_restride[i]
            written = " (and written in place under no_grad after it)" if i in checks.written_after_no_grad_restride else ""
            raise AotgradCompileError(
                f"aotgrad: input {i}, a view that requires grad, has its size or stride changed in "
                f"place under no_grad at {restride}{written} and is then used with grad recording at {use}: "
                "eager's autograd then rebuilds the view's history off its base in the new geometry, "
                "which a gradient for the input itself cannot express. Change the geometry with "
                "grad recording on, or outside the function."
            )
        if i in checks.inputs_set_requiring_grad and (data or meta):
            raise AotgradCompileError(
                f"aotgrad: input {i} is made to require grad (requires_grad_() at "
                f"{checks.inputs_set_requiring_grad[i]}) and is also changed in place; this is not "
                "supported. Call requires_grad_() before calling the function, or clone() the input."
            )
        input_info.append(
            InputInfo(
                mutates_data=data,
                mutates_metadata=meta,
                mutation_visible_to_autograd=visible,
                requires_grad=fake.requires_grad,
                is_leaf=fake.is_leaf,
                new_view=geometry.geometry(f) if meta else None,
                metadata_mutation_is_no_op=meta and i not in checks.as_strided_inputs
                and i not in checks.restrided_under_no_grad and _same_static_geometry(geometry.geometry(f), fake),
                metadata_mutation_under_no_grad=meta and i in checks.restrided_under_no_grad,
                metadata_mutation_under_no_grad_at=checks.restrided_under_no_grad[i][1] if (
                    meta and i in checks.restrided_under_no_grad
                ) else None,
                addresses_storage=i in checks.storage_addressed or (
                    # the joint runs the program on a clone of such an input starting at
                    # offset 0 (tracing._functional_forward: one requiring grad, or one a
                    # recorded write makes require grad), where as_strided_'s offset names
                    # other elements: a synthetic base keeps eager's storage (fuzz seed
                    # 22007787: a write of a value requiring grad landed elsewhere); so
                    # where the input has gaps (a diagonal), the clone none: its strides
                    # name other elements
                    i in checks.storage_restrided and data and (fake.requires_grad or visible)
                    and (_maybe_nonzero(fake.storage_offset()) or not is_non_overlapping_and_dense_or_false(fake))
                ) or StorageWeakRef(f.untyped_storage()) in geometry.restrided_partial_storages,
                readdressed_past_extent=StorageWeakRef(f.untyped_storage()) in geometry.readdressed_past_extent,
                sets_requires_grad=i in checks.inputs_set_requiring_grad,
                detached_in_place=i in checks.detached_inputs,
                relaid_out_under_no_grad=i in checks.used_after_no_grad_restride and fake._base is not None,
                grad_accumulator_made=meta and i in checks.leaf_use_geometries,
                grad_accumulator_shape=_grad_accumulator_shape(checks, i, fake) if meta else None,
                grad_layout_at_use=_grad_layout_at_use(checks, i, fake) if meta else None,
            )
        )
        input_storages.setdefault(StorageWeakRef(f.untyped_storage()), i)
    with fake_mode, mode:  # (the saved tensors it reads unpack under them, as find_eager_saved's)
        unsafe_splits.check_outputs(out_leaves, f_inputs, input_info)

    output_info: list[OutputInfo] = []
    seen_outputs: dict[int, int] = {}
    user_output_of: dict[int, int] = {}  # id(non-aliased user output) -> output index
    base_index_of: dict[int, int] = {}  # id(intermediate base) -> base index
    base_sources: list[int] = []
    base_requires_grad: list[bool] = []
    base_detached: list[bool] = []  # kept requiring grad through the program's detach_()
    f_input_ids = {id(f) for f in f_inputs if isinstance(f, torch.Tensor)}
    for j, o in enumerate(out_leaves):
        # Found before classifying, so a view may name a user output returned after it.
        if (
            isinstance(o, FunctionalTensor)
            and id(o) not in f_input_ids
            and o._base is None
            and StorageWeakRef(o.untyped_storage()) not in input_storages
        ):
            user_output_of.setdefault(id(o), j)
    for j, o in enumerate(out_leaves):
        if not isinstance(o, torch.Tensor):
            # A SymInt/SymFloat/SymBool is a size the program returns: the runtime evaluates
            # it on each call; any other constant is returned as traced.
            if not isinstance(o, _CONSTANT_OUTPUT_TYPES + _SYMBOLIC_OUTPUT_TYPES):
                raise AotgradCompileError(
                    f"aotgrad: output {j} has type {type(o).__name__}; outputs must be tensors "
                    "or int/float/bool/str/None inside tuples, lists and dicts (register other "
                    "containers with torch.utils._pytree)."
                )
            output_info.append(OutputInfo(OutputType.non_tensor, False, constant=o))
            continue
        if not isinstance(o, FunctionalTensor):
            raise AotgradCompileError(
                f"aotgrad: output {j} is a tensor that the program did not compute from its "
                "inputs (a tensor captured from the enclosing scope?). Return a computed "
                "tensor, or pass it as an argument."
            )
        common = {
            "requires_grad": o.requires_grad,
            # eager's view was made under no_grad: it reports requires_grad but has no grad_fn
            # (also when a later grad-mode view was taken of it: eager's gradient then stops at
            # the no_grad view, so it must not reach the input through a replayed chain)
            "no_grad_view": _made_under_no_grad(o),
            "dtype": o.dtype,
            "invalidated": _invalidated_view(o, (fake_mode, mode), geometry),
        }
        common["size"], common["stride"], common["storage_offset"] = geometry.geometry(o)
        if o._base is not None and torch._C._autograd._get_creation_meta(o) == torch._C._autograd.CreationMeta.MULTI_OUTPUT_NODE:
            common["multi_output_view"] = True
        if common["invalidated"] == "MULTI_OUTPUT_NODE":
            common["multi_output_step"] = _multi_output_step(o)
            common["invalidated_without_grad_fn"] = _without_grad_fn(o, (fake_mode, mode))
        if common["invalidated"] in _INVALIDATING_HISTORY:
            common["last_view_step"] = _last_view_step(o, (fake_mode, mode), geometry)
        if id(o) in seen_outputs:
            first = output_info[seen_outputs[id(o)]]
            output_info.append(
                OutputInfo(
                    first.output_type,
                    call_input_index=first.call_input_index,
                    base_index=first.base_index,
                    duplicate_of=seen_outputs[id(o)],
                    view_source=first.view_source,
                    **common,
                )
            )
            continue
        seen_outputs[id(o)] = j
        storage = StorageWeakRef(o.untyped_storage())
        input_idx = next((i for i, f in enumerate(f_inputs) if f is o and isinstance(f, torch.Tensor)), None)
        if input_idx is not None:
            output_info.append(OutputInfo(OutputType.is_input, call_input_index=input_idx, **common))
            continue
        root = o if o._base is None else o._base
        if (
            # (o.grad_fn is not read: a stale view's would be regenerated outside the modes;
            # requires_grad of a view of a root with history says as much)
            storage in input_storages and o.requires_grad and (
                common["invalidated"] in (None, "DEFAULT") and not common["no_grad_view"]
                # a multi-output or no_grad view the history invalidated (taken before it,
                # or after and written since): eager's still views the alias
                or common["invalidated"] in _INVALIDATING_HISTORY
            )
            and root.requires_grad and root.grad_fn is not None and all(root is not f for f in f_inputs)
            and o.dtype == f_inputs[input_storages[storage]].dtype
        ):
            # a detach()ed alias of an input (or a view of one) that an in-place op with an
            # operand requiring grad gave a history of its own: eager's output is no view of
            # the input and its gradient goes through that op, not into the input
            root_output = next((k for k in range(len(out_leaves)) if out_leaves[k] is root), None)
            if root is not o and root_output is not None:
                # the detached alias is returned too: eager's ``_base`` is that output
                output_info.append(OutputInfo(
                    OutputType.alias_of_intermediate_base_is_user_output, base_index=root_output,
                    view_source=_replayable_on(
                        relative_view_metas(o, root), root, geometry.geometry(root), geometry.geometry(o), fake_mode,
                    ),
                    **common,
                ))
                continue
            invalidated = common["invalidated"] in _INVALIDATING_HISTORY
            output_info.append(OutputInfo(
                OutputType.non_alias, storage_of_input=input_storages[storage], is_view=o._base is not None,
                graph_returns_root=invalidated,
                root_geometry=_alias_geometry(
                    j, geometry.geometry(root), geometry.geometry(f_inputs[input_storages[storage]])
                ) if invalidated else None,
                **common,
            ))
            continue
        if storage in input_storages and _through_custom_function(
            o, f_inputs[input_storages[storage]], (fake_mode, mode)
        ):
            # A custom autograd.Function returned (a view of) an input: eager's output is a
            # view whose grad_fn is the Function's backward, so it is a graph output (its
            # gradient goes through the compiled backward, which holds that backward); the
            # autograd.Function around the graph makes it a view of the input again.
            output_info.append(OutputInfo(OutputType.non_alias, custom_function_view=True, **common))
            continue
        if storage in input_storages:
            i = input_storages[storage]
            # Autograd's root of the view: an input, or a detach()ed alias of one (a root
            # that shares the input's storage); a detached alias that requires grad again
            # (an in-place op with a grad operand) is rebuilt as a view of the input.
            detached = not o.requires_grad and (o._base is None or all(o._base is not f for f in f_inputs))
            root_output = next((k for k in range(len(out_leaves)) if out_leaves[k] is o._base), None) if detached else None
            if root_output is not None and (
                output_info[root_output].detached if root_output < j
                else _detached_input_alias(out_leaves[root_output], f_inputs, input_storages)
            ):
                # a view of a detach()ed alias the program returns too: eager's ``_base`` is
                # that output, so it is rebuilt off it
                output_info.append(OutputInfo(
                    OutputType.alias_of_intermediate_base_is_user_output, base_index=root_output,
                    view_source=_replayable_on(
                        relative_view_metas(o, o._base), o._base, geometry.geometry(o._base),
                        geometry.geometry(o), fake_mode,
                    ),
                    **common,
                ))
                continue
            view_source = _replayable_on(
                relative_view_metas(o, f_inputs[i]), fake_inputs[i], geometry.geometry(f_inputs[i]),
                geometry.geometry(o), fake_mode,
            )
            # After an in-place op on the input, eager regenerates an as_strided view's
            # grad_fn off the autograd root (its gradient reaches past the input's elements);
            # a view made after the last one (not stale) keeps its own, off the input, unless
            # it was taken of a stale view (whose grad_fn eager regenerated so first)
            off_root = (
                (input_info[i].mutates_data and geometry.stale(o)) or geometry.of_stale(o)
            ) and any(type(vm).__name__ == "as_strided_ViewMeta" for vm in view_source or ())
            since_stale, line, replay_unsure = geometry.as_strided_since_stale(o)
            if off_root and since_stale:
                # an as_strided taken of (a view of) the stale view: eager's AsStridedBackward0
                # for it has the stale view's geometry as its input's, so its gradient stays
                # within the stale view's elements; as_strided off the root would reach all of
                # the output's (fuzz seed 3003553). Replaying the input's chain is eager's
                # gradient where the chain up to the stale view names its elements as eager's
                # regenerated grad_fn does (no as_strided step reaching outside its input);
                # else neither is
                if replay_unsure:
                    raise AotgradCompileError(
                        f"aotgrad: output {j} was taken by as_strided at {line} of a view whose "
                        "storage an in-place op changed after its chain's own as_strided: eager's "
                        "gradient goes through both as_strided steps off the base, which the "
                        "rebuilt output cannot replay. clone() the view before the as_strided, or "
                        "take it before the in-place op."
                    )
                off_root = False
            # (a chain with steps eager made under no_grad is replayed as made: refused)
            restrided_through = geometry.restride_chain(
                o, geometry.geometry(f_inputs[i]), f"output {j}",
                base_as_eager=o.dtype == f_inputs[i].dtype and not geometry.no_grad_prefix(o),
            ) if not detached and not common["no_grad_view"] else ()
            if restrided_through:
                off_root, view_source = False, None
            output_info.append(
                OutputInfo(
                    OutputType.alias_of_input,
                    call_input_index=i,
                    detached=detached,
                    is_view=o._base is not None,
                    off_root=off_root,
                    restrided_through=restrided_through,
                    view_source=None if off_root else view_source,
                    no_grad_steps=_rebuilt_no_grad_steps(view_source, geometry, f_inputs[i], o, j, off_root),
                    **common,
                )
            )
            continue
        base = o._base
        if base is None and _detached_after_views(o, out_leaves, checks):
            # its views keep their history, and have it as their ``_base`` (fuzz seed 3019885)
            output_info.append(OutputInfo(OutputType.non_alias, detached_after_views=True, **{**common, "requires_grad": True}))
            continue
        if base is None or not isinstance(base, FunctionalTensor):
            output_info.append(OutputInfo(OutputType.non_alias, **common))
            continue
        if id(base) in user_output_of:
            kind, index = OutputType.alias_of_intermediate_base_is_user_output, user_output_of[id(base)]
        elif id(base) in base_index_of:
            kind, index = OutputType.alias_of_intermediate, base_index_of[id(base)]
        else:
            kind, index = OutputType.alias_of_intermediate_save_as_output, len(base_sources)
            base_index_of[id(base)] = index
            base_sources.append(j)
            # a base detach_()ed after this view was taken: the view keeps its history, and
            # the graph's base (the traced tensor before its detach_, tracing.IntermediateDetaches)
            # carries it to the view's gradient (fuzz seed 1008110)
            base_detached.append(not base.requires_grad and _keeps_history_through_detach(base, out_leaves, checks))
            base_requires_grad.append(base.requires_grad or base_detached[-1])
        kept = base_detached[index] if kind is not OutputType.alias_of_intermediate_base_is_user_output else (
            _detached_after_views(base, out_leaves, checks)
        )
        common["history_read_before_detach"] = kept and _history_read_before_detach(o, common["invalidated"], checks, j)
        view_geometry, base_geometry = _rebuilt_geometry(
            o, base, geometry, kind is OutputType.alias_of_intermediate_base_is_user_output
        )
        common["size"], common["stride"], common["storage_offset"] = view_geometry
        view_source = _replayable_on(relative_view_metas(o, base), base, base_geometry, view_geometry, fake_mode)
        restrided_through = () if common["no_grad_view"] else geometry.restride_chain(
            o, base_geometry, f"output {j}",
            base_as_eager=not geometry.relaid_root(base) and o.dtype == base.dtype and not geometry.no_grad_prefix(o),
        )
        if restrided_through:
            view_source = None
        output_info.append(OutputInfo(
            kind, base_index=index, view_source=view_source, restrided_through=restrided_through,
            no_grad_steps=_rebuilt_no_grad_steps(view_source, geometry, base, o, j),
            **common,
        ))

    new_leaves = {id(t): line for t, line in checks.new_leaves if t.is_leaf and t.requires_grad}
    output_info, base_new_leaf = _mark_new_leaves(
        output_info, out_leaves, [out_leaves[j]._base for j in base_sources], new_leaves, input_info
    )
    base_requires_grad = [rg and not leaf for rg, leaf in zip(base_requires_grad, base_new_leaf)]
    leaf_slots: tuple[LeafSlot, ...] = ()
    if new_leaves:
        flips = {id(t): k for k, (t, _) in enumerate(checks.new_leaves)}
        leaf_slots = _leaf_slots(
            out_leaves, [out_leaves[j]._base for j in base_sources], new_leaves, flips, output_info, input_info,
            [f for f, x in zip(f_inputs, input_info) if x.mutation_visible_to_autograd], (fake_mode, mode),
        )
    if not any(x.requires_grad or x.sets_requires_grad for x in input_info) and not new_leaves and any(
        o.requires_grad for o in output_info
    ) and grad_enabled:
        raise AotgradCompileError(
            "aotgrad: an output requires grad although no input does: the program creates "
            "or captures a tensor that requires grad. Pass such tensors as arguments."
        )
    metadata = ViewAndMutationMetadata.build(
        tuple(input_info), tuple(output_info), tuple(base_requires_grad), tuple(base_new_leaf), leaf_slots,
        tuple(base_detached),
    )
    # A mutated input's forward output is its data in the original geometry (tracing.py).
    forward_outputs = GraphSignature.of_metadata(metadata)
    # (the joint differentiates a returned stale view through as_strided of its base, as
    # eager regenerates its grad_fn: StaleViewUses.read_by_backward)
    geometry.check_stale_outputs(metadata.graph_values(out_leaves, forward_outputs.user_outputs))
    fw_values = forward_outputs.pack_forward(
        [fake_inputs[i] for i in forward_outputs.mutated_inputs],
        metadata.graph_values(out_leaves, forward_outputs.user_outputs),
        [out_leaves[j]._base for j in base_sources],
    )
    if any(getattr(o, "requires_grad", False) for o in out_leaves) or any(x.mutation_visible_to_autograd for x in input_info):
        fw_functional = forward_outputs.pack_forward(
            [f_inputs[i] for i in forward_outputs.mutated_inputs],
            metadata.graph_values(out_leaves, forward_outputs.user_outputs),
            [out_leaves[j]._base for j in base_sources],
        )
        with fake_mode, mode:
            eager_saved = find_eager_saved(
                [(p, t) for p, t in enumerate(fw_functional) if getattr(t, "requires_grad", False)],
                f_inputs, fw_functional, grad_fns_before, _detached_non_leaves(checks, fake_inputs),
            )
        if eager_saved is not None:
            metadata = dataclasses.replace(metadata, eager_saved=eager_saved)
    avals = tuple((tuple(v.shape), v.dtype, v.device) for v in fw_values)
    signature = forward_outputs.with_tangents(metadata, [v.dtype for v in fw_values])
    subclasses = tuple(_subclass_structure(v) for v in fw_values)
    return Analysis(metadata, out_spec, tuple(base_sources), avals, signature, subclasses)


def _refuse_error_after_peer_detach(checks: _EagerChecks, exc: BaseException) -> None:
    """Raise the refusal of a ``detach_()`` of an input sharing its storage with another input
    in place of ``exc``, an error the program raised after such a detach (fuzz seed 34002345).

    The run takes those inputs as separate tensors: the detach does not reach the other
    input's autograd family as eager's does (a view of it made in no_grad mode stops requiring
    grad with its base, so eager's "A view was created in no_grad mode" check passes), so an
    autograd error raised after it may not be eager's. Where the run gets through, a synthetic
    base follows only if an input is mutated, and the pipeline refuses that the same way."""
    peers = [i for i in checks.detached_inputs if checks.storage_peers.get(i)]
    if not peers:
        return
    i = peers[0]
    raise AotgradCompileError(
        f"aotgrad: the program detaches input {i} in place ({checks.detached_inputs[i]}) while "
        f"another input shares its storage, and then raises at {where(exc.__traceback__)}: "
        f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} Whether eager raises "
        "there depends on what the detach does to the other input's autograd family, which aotgrad "
        "does not model; this is not supported. Detach it before calling the function, or use "
        "x.detach()."
    ) from exc


def _storage_peers(f_inputs: list[Any], fake_inputs: list[Any]) -> dict[int, tuple[Any, ...]]:
    """``_EagerChecks.storage_peers``: per graph input, the functional tensors of the other
    graph inputs whose caller's tensors share its storage."""
    by_storage: dict[StorageWeakRef, list[int]] = {}
    for i, t in enumerate(fake_inputs):
        if isinstance(t, torch.Tensor):
            by_storage.setdefault(StorageWeakRef(t.untyped_storage()), []).append(i)
    return {
        i: tuple(f_inputs[j] for j in group if j != i)
        for group in by_storage.values() if len(group) > 1 for i in group
    }


def _grad_accumulator_shape(checks: _EagerChecks, i: int, fake: torch.Tensor) -> tuple[int, ...] | None:
    """``InputInfo.grad_accumulator_shape`` of graph input ``i`` (``fake``), whose metadata
    the program changes: its shape at the program's first recorded use of it, where it is a
    leaf requiring grad that the program uses and that shape is not its entry shape."""
    shape = checks.first_use_shape(i)
    if shape is None or list(map(str, shape)) == list(map(str, fake.shape)):  # (no guard on a symbol)
        return None
    if any(not isinstance(n, int) for n in shape):
        raise AotgradCompileError(
            f"aotgrad: input {i}, a leaf that requires grad, is used with grad recording in a shape "
            "other than its entry shape after an in-place metadata op, with symbolic sizes; this is "
            "not supported. Use dynamic=False."
        )
    return shape


def _grad_layout_at_use(checks: _EagerChecks, i: int, fake: torch.Tensor) -> tuple[Geometry, Geometry] | None:
    """``InputInfo.grad_layout_at_use`` of graph input ``i`` (``fake``), whose metadata the
    program changes: (entry geometry, use geometry) where the program uses the leaf with
    grad recording in one layout only and that is not its entry layout (``a.t_()`` under
    no_grad, then ``a * w``). The use layout then addresses the entry's elements, each once
    (``SAME_ELEMENTS_INPLACE`` ops; ``tracing.RecordedRelayouts`` records them in the joint).
    Raises where eager's gradient is not a relayout of the gradient for the entry layout:
    uses in two layouts of one shape (eager adds their gradients index by index), a layout
    made by ``as_strided_``. Uses in layouts of different shapes are left to eager's
    accumulator check (``grad_accumulator_shape``)."""
    uses = list(checks.leaf_use_geometries.get(i, {}).values())
    entry = (tuple(fake.shape), tuple(fake.stride()), fake.storage_offset())
    if not uses or all(repr(g) == repr(entry) for g, _ in uses):
        return None
    if holds_sym(entry) or any(holds_sym(g) for g, _ in uses):
        raise AotgradCompileError(
            f"aotgrad: input {i}, a leaf that requires grad, is used with grad recording at {uses[0][1]} "
            "in a layout other than its entry layout after an in-place metadata op, with symbolic "
            "sizes; this is not supported. Use dynamic=False."
        )
    if len(uses) > 1:
        if len({g[0] for g, _ in uses}) > 1:
            return None
        raise AotgradCompileError(
            f"aotgrad: input {i}, a leaf that requires grad, is used with grad recording in "
            f"{len(uses)} layouts of one shape ({uses[0][1]} and {uses[1][1]}; an in-place metadata "
            "op under no_grad between them): eager adds the uses' gradients index by index, which a "
            "gradient for the input itself cannot express. Change the layout outside the function."
        )
    use, line = uses[0]
    if i in checks.as_strided_inputs:
        raise AotgradCompileError(
            f"aotgrad: input {i}, a leaf that requires grad, is re-strided by as_strided_ under "
            f"no_grad and then used with grad recording at {line} in its new layout; this is not "
            "supported. Re-stride it outside the function, or use as_strided (not in place)."
        )
    return entry, use


def _detached_non_leaves(checks: _EagerChecks, fake_inputs: list[Any]) -> dict[int, int]:
    """Graph inputs that are no leaves in the caller and that the program detaches in place
    → autograd's next sequence number at the detach (``find_eager_saved``'s
    ``detached_non_leaves``). (A leaf saved before its detach is checked as eager checks it:
    by its version.)"""
    return {i: at for i, at in checks.detached_at.items() if not fake_inputs[i].is_leaf}


def _detached_input_alias(t: Any, f_inputs: list[Any], input_storages: dict[StorageWeakRef, int]) -> bool:
    """``t`` (an output not classified yet) will be a ``detached`` alias of an input: a
    ``detach()`` of one (no view, sharing its storage, not requiring grad, not the input)."""
    return (
        isinstance(t, FunctionalTensor) and t._base is None and not t.requires_grad
        and StorageWeakRef(t.untyped_storage()) in input_storages and all(t is not f for f in f_inputs)
    )


def _rebuilt_geometry(
    view: FunctionalTensor, base: FunctionalTensor, geometry: EagerViewGeometry, base_is_user_output: bool
) -> tuple[Geometry, Geometry]:
    """(view's geometry, base's geometry) the runtime rebuilds ``view``, an output aliasing
    the intermediate ``base``, with off the graph's value of ``base``.

    Eager's where that value is laid out as eager's tensor: its functional layout is eager's,
    or ``base`` is a user output the runtime gives eager's layout (``layout.py``). Else
    (an in-place op re-laid out the functional value: ``masked_fill_``, a write through a
    view) functionalization's, which address the elements where the graph's value holds
    them: the values are eager's, the strides follow the graph's base."""
    eager_base = geometry.geometry(base)
    if not geometry.relaid_root(base):
        return geometry.geometry(view), eager_base
    traced_base, traced_view = functional_geometry(base), functional_geometry(view)
    if base_is_user_output and takes_eager_layout(*eager_base, traced_base[1]):
        return geometry.geometry(view), eager_base
    return traced_view, traced_base


def _mark_new_leaves(
    output_info: list[OutputInfo],
    out_leaves: list[Any],
    bases: list[torch.Tensor],
    new_leaves: dict[int, str],
    input_info: list[InputInfo],
) -> tuple[list[OutputInfo], list[bool]]:
    """Outputs (``OutputInfo.new_leaf``) and intermediate bases that eager made require grad
    with ``requires_grad_()`` inside the program, where the runtime must make them so: the
    autograd.Function around the graph does not (a new leaf is no graph output it
    differentiates), and a view rebuilt off a base that does not require grad would not;
    also a view eager made under no_grad of such a base that requires grad, without history."""
    base_new_leaf = [id(b) in new_leaves for b in bases]
    marked = []
    for j, info in enumerate(output_info):
        o = out_leaves[j]
        kind = 0
        if info.output_type is not OutputType.non_tensor and info.requires_grad:
            if id(o) in new_leaves:
                kind = 1
            elif info.is_alias and info.no_grad_view and info.invalidated is None:
                # a view eager made under no_grad of a base requiring grad requires grad
                # without a grad_fn; the rebuilt one may not, where its chain passes a
                # detach()ed input alias that an in-place op gave a history
                kind = 3
            elif new_leaves and info.is_alias and not _rebuilt_requiring_grad(info, output_info, bases, base_new_leaf, input_info):
                kind = 2
        marked.append(dataclasses.replace(info, new_leaf=kind) if kind else info)
    return marked, base_new_leaf


def _rebuilt_requiring_grad(
    info: OutputInfo, output_info: list[OutputInfo], bases: list[torch.Tensor], base_new_leaf: list[bool],
    input_info: list[InputInfo],
) -> bool:
    """Whether the base the runtime rebuilds an aliased output off requires grad there."""
    t = info.output_type
    if t is OutputType.is_input or t is OutputType.alias_of_input:
        x = input_info[info.call_input_index] if info.call_input_index < len(input_info) else None
        return x is not None and not info.detached and (x.requires_grad or x.sets_requires_grad)
    if t is OutputType.alias_of_intermediate_base_is_user_output:
        return output_info[info.base_index].requires_grad
    if info.base_index is not None and info.base_index < len(bases):
        return bases[info.base_index].requires_grad or base_new_leaf[info.base_index]
    return True


def _leaf_slots(
    out_leaves: list[Any],
    bases: list[torch.Tensor],
    new_leaves: dict[int, str],
    flips: dict[int, int],
    output_info: list[OutputInfo],
    input_info: list[InputInfo],
    visibly_mutated_inputs: list[torch.Tensor],
    modes: tuple[Any, ...],
) -> tuple[LeafSlot, ...]:
    """The new autograd leaves the caller can reach (an output, or the ``_base`` of one)
    that also feed another output or an input's in-place change: eager accumulates those
    gradients into the returned leaf's ``.grad``, so the runtime passes the leaf to the
    autograd.Function (:class:`~aotgrad.core.metadata.LeafSlot`). Refused where the leaf is
    rebuilt off another tensor after the forward (a view of an intermediate), or where the
    output computed from it is rebuilt outside the Function (a view of an input)."""
    returned = {id(o) for o in [*out_leaves, *bases] if isinstance(o, torch.Tensor) and id(o) in new_leaves}
    if not returned:
        return ()
    users = [
        (f"output {j}", o, output_info[j]) for j, o in enumerate(out_leaves)
        if isinstance(o, torch.Tensor) and o.requires_grad and id(o) not in returned
        and (o._base is None or id(o._base) not in returned)
    ]
    users.extend((f"the in-place change of input {k}", f, None) for k, f in enumerate(visibly_mutated_inputs))
    fed: set[int] = set()
    for what, t, info in users:
        leaf = _reaches_leaf(t, returned, modes)
        if leaf is None:
            continue
        if info is not None and info.output_type in (OutputType.is_input, OutputType.alias_of_input):
            _refuse_leaf(new_leaves[leaf], what, "is rebuilt as a view of an input, outside the compiled graph")
        fed.add(leaf)
    slots = []
    for leaf in sorted(fed, key=lambda i: flips[i]):
        j = next((j for j, o in enumerate(out_leaves) if o is not None and id(o) == leaf), None)
        k = next((k for k, b in enumerate(bases) if id(b) == leaf), None)
        value = out_leaves[j] if j is not None else bases[k]
        if is_traceable_wrapper_subclass(from_functional(value)):
            _refuse_leaf(
                new_leaves[leaf], f"the leaf ({type(from_functional(value)).__name__})",
                "is a tensor subclass, which aotgrad cannot make before the forward",
            )
        common = {"flip": flips[leaf], "shape": tuple(value.shape), "dtype": value.dtype, "device": value.device}
        if j is not None and output_info[j].output_type is OutputType.non_alias:
            slots.append(LeafSlot(output=j, base=None, alias=False, **common))
        elif j is None:
            slots.append(LeafSlot(output=None, base=k, alias=False, **common))
        elif (
            output_info[j].output_type is OutputType.alias_of_input
            and not input_info[output_info[j].call_input_index].mutates_metadata
            and k is None
        ):
            slots.append(LeafSlot(output=j, base=None, alias=True, **common))
        else:
            _refuse_leaf(new_leaves[leaf], f"output {j}", "is a view of an intermediate, rebuilt after the compiled graph")
    return tuple(slots)


def _refuse_leaf(line: str, what: str, why: str) -> None:
    raise AotgradCompileError(
        f"aotgrad: requires_grad_() at {line} makes a new autograd leaf that the program returns, "
        f"and other outputs are computed from it; {what} {why}, so eager's accumulation of "
        "their gradients into the returned leaf's .grad cannot be reproduced. Return the leaf "
        "and compute with it outside the compiled function, or pass it in as an input."
    )


def _reaches_leaf(t: torch.Tensor, leaves: set[int], modes: tuple[Any, ...]) -> int | None:
    """The id of the tensor in ``leaves`` whose gradient accumulator ``t``'s autograd graph
    reaches, if any."""
    try:
        with contextlib.ExitStack() as stack:
            for m in modes:
                stack.enter_context(m)
            root = t.grad_fn
    except RuntimeError:
        return None
    stack_nodes = [root]
    seen: set[int] = set()
    while stack_nodes:
        node = stack_nodes.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if variable is not None and id(variable) in leaves:
            return id(variable)
        stack_nodes.extend(n for n, _ in node.next_functions)
    return None


def _subclass_structure(value: torch.Tensor) -> TensorStructure | None:
    """The structure of a forward output's tangent where it is a subclass: the output's own,
    after torch's ``__coerce_tangent_metadata__`` protocol (a ``Partial`` DTensor's gradient
    is ``Replicate``, as eager autograd passes it)."""
    value = from_functional(value)
    if not is_traceable_wrapper_subclass(value):
        return None
    coerce = getattr(value, "__coerce_tangent_metadata__", None)
    return TensorStructure.of(value if coerce is None else coerce())


def _keeps_history_through_detach(base: torch.Tensor, out_leaves: list, checks: _EagerChecks) -> bool:
    """``base``, an intermediate the outputs view, was ``detach_()``ed after they were taken
    and not written since, and every output viewing it requires grad (no new leaf, no view
    taken after the detach), and it is no output itself: the graph returns it as it was
    before the detach (``tracing.IntermediateDetaches``), requiring grad, so the views
    rebuilt off it keep their history, as eager's did (fuzz seed 1008110)."""
    entry = checks.detached_intermediates.get(id(base))
    if entry is None or entry[0] is not base or base._version != entry[1]:
        return False
    views = [t for t in out_leaves if isinstance(t, torch.Tensor) and t._base is base]
    return (
        not any(t is base for t in out_leaves)
        and all(t.requires_grad for t in views)
        and not any(t is leaf for t in views for leaf, _ in checks.new_leaves)
    )


def _history_read_before_detach(o: torch.Tensor, invalidated: str | None, checks: _EagerChecks, j: int) -> bool:
    """Output ``j``, a view ``o`` of an intermediate the program ``detach_()``ed after taking
    it, rebuilt off that base as it was before the detach (which the runtime then detaches):
    whether eager regenerated its stale ``grad_fn`` before the detach (a recorded use; it
    keeps that history). A view stale at the detach regenerates its ``grad_fn`` after it,
    without history (:attr:`_EagerChecks.views_losing_history`): rebuilt stale
    (``invalidated``), it does so too. Refused where eager's view lost its history although
    it is not stale at the end (regenerated after the detach): rebuilt fresh, it would keep
    its history."""
    lost = checks.views_losing_history.get(id(o)) is o
    if lost and invalidated is None:
        raise AotgradCompileError(
            f"aotgrad: output {j} is a view whose autograd history eager regenerated off its "
            "base after the program's detach_() of that base, and not stale since; the rebuilt "
            "view cannot lose its history so. clone() the view before returning it."
        )
    if lost or invalidated != "DEFAULT":
        return False
    entry = checks.view_history_versions.get(id(o))
    if entry is None or entry[0] is not o or entry[1] != o._version:
        # (stale by the analysis's record of writes, yet no regeneration seen)
        raise AotgradCompileError(
            f"aotgrad: output {j} is a stale view of a tensor the program detach_()ed after "
            "taking it; whether eager regenerates its history before or after that detach_() "
            "is not known here. clone() the view before returning it."
        )
    return True


def _detached_after_views(o: torch.Tensor, out_leaves: list, checks: _EagerChecks) -> bool:
    """``o``, an output without history, is an intermediate the program ``detach_()``ed after
    taking views of it that it returns, and not written since; every output viewing it
    requires grad and is no new leaf (``OutputInfo.detached_after_views``)."""
    entry = checks.detached_intermediates.get(id(o))
    if entry is None or entry[0] is not o or o._version != entry[1] or o.requires_grad:
        return False
    views = [t for t in out_leaves if isinstance(t, torch.Tensor) and t._base is o]
    return (
        bool(views) and all(t.requires_grad for t in views)
        and not any(t is leaf for t in views for leaf, _ in checks.new_leaves)
    )


def _through_custom_function(o: torch.Tensor, root: torch.Tensor, modes: tuple[Any, ...]) -> bool:
    """Whether autograd's path from ``o`` back to ``root`` (the input it aliases) passes a
    custom ``autograd.Function``'s backward: the Function returned (a view of) the input,
    and ``o`` is that output or a view of it. Rebuilding ``o`` as a view of the input would
    skip that backward.

    ``modes`` are the fake and functional modes the program ran under: reading the
    ``grad_fn`` of a view whose base was written regenerates it, which dispatches ops on the
    functional tensors. Where autograd refuses to regenerate it (eager raises lazily on that
    read), the output has no custom Function to keep and this returns False."""
    try:
        with contextlib.ExitStack() as stack:
            for m in modes:
                stack.enter_context(m)
            node, stop = o.grad_fn, root.grad_fn
    except (RuntimeError, ValueError, IndexError):
        # (or the replay of its recorded chain no longer applies to the input's new shape,
        # the view op's own ValueError/IndexError; eager regenerates it by as_strided, and
        # a custom Function's output is no such view: fuzz seed 1019720)
        return False
    # Only the first edge is followed: a view node's (and an in-place node's) first input is
    # the tensor it views or writes, so this walks o's own chain, not other operands'.
    for _ in range(64):
        if node is None or node is stop:
            return False
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            return True
        if not node.next_functions:
            return False
        node = node.next_functions[0][0]
    return False


def _invalidated_view(o: torch.Tensor, modes: tuple[Any, ...], geometry: EagerViewGeometry) -> str | None:
    """The name of the creation meta of eager's view ``o`` where reading its ``grad_fn`` raises (None
    where it does not): a view made in no_grad mode, or by a multi-output op, whose base
    requires grad (or did when the view was made: the view has a grad_fn) and whose storage
    an in-place op changed after the view was made. Eager
    keeps raising on every later use of its autograd history (``grad_fn``, ``is_leaf``,
    backward), so the rebuilt output must be such a view too. An ordinary (``DEFAULT``) view
    that is stale the same way (:meth:`EagerViewGeometry.stale`) is reported too: eager
    regenerates its grad_fn on the next read, off its base, and a rebuilt stale view gets
    the same regenerated grad_fn (its gradient's layout is the base's).

    ``modes``: as for :func:`_through_custom_function` (a read that does not raise
    regenerates the view's grad_fn, dispatching ops on the functional tensors)."""
    if o._base is None:
        return None
    meta = torch._C._autograd._get_creation_meta(o)
    if meta == torch._C._autograd.CreationMeta.DEFAULT:
        # stale too, but eager regenerates its grad_fn (AsStridedBackward0 off its base) on
        # the next read; so does autograd for a rebuilt view that is stale the same way. Also
        # where the base requires no grad now (detach_()ed since the view was made, fuzz
        # seed 9010335) but the view has a grad_fn: the regenerated one then has no next edge
        return meta.name if geometry.stale(o) and (o._base.requires_grad or o.requires_grad) else None
    try:
        with contextlib.ExitStack() as stack:
            for m in modes:
                stack.enter_context(m)
            o.grad_fn
    except RuntimeError:
        return meta.name
    return None


def _alias_geometry(j: int, alias: tuple, input_geometry: tuple) -> tuple | None:
    """Eager's (size, stride, storage_offset) ``alias`` of the detached input alias that
    user output ``j`` views (``OutputInfo.root_geometry``): None where it is the input's
    after the call (``input_geometry``: the runtime's ``input.detach()`` has it), else static;
    refused where it is symbolic."""
    mine, theirs = (*alias[0], *alias[1], alias[2]), (*input_geometry[0], *input_geometry[1], input_geometry[2])
    if len(alias[0]) == len(input_geometry[0]) and all(statically_known_true(a == b) for a, b in zip(mine, theirs)):
        return None
    if any(isinstance(v, torch.SymInt) for v in mine):
        raise AotgradCompileError(
            f"aotgrad: output {j} is a view of a detach()ed input alias that the program re-laid "
            "out and gave a history, with symbolic sizes; this is not supported. Pass "
            "dynamic=False, or clone() the alias."
        )
    return tuple(alias[0]), tuple(alias[1]), alias[2]


#: creation metas of views whose ``grad_fn`` read raises once a later in-place op wrote
#: their storage with grad recording (:func:`_invalidated_view`)
_INVALIDATING_HISTORY = ("MULTI_OUTPUT_NODE", "NO_GRAD_MODE")

#: functionalization's records of the multi-output view ops (``chunk`` is ``split``)
_MULTI_OUTPUT_VIEW_METAS = {"unbind_int_ViewMeta": "unbind", "split_Tensor_ViewMeta": "split", "split_with_sizes_ViewMeta": "split_with_sizes"}


def _grad_fn_error(o: FunctionalTensor, modes: tuple[Any, ...]) -> str | None:
    """The message of the error reading ``o.grad_fn`` raises under ``modes`` (the analysis
    run's autograd raises eager's words); None where it raises none."""
    try:
        with contextlib.ExitStack() as stack:
            for m in modes:
                stack.enter_context(m)
            o.grad_fn  # noqa: B018
    except RuntimeError as exc:
        return str(exc)
    return None


def _without_grad_fn(o: FunctionalTensor, modes: tuple[Any, ...]) -> bool:
    """Eager's invalidated view ``o`` was made without a grad_fn (its base required no grad
    then): autograd's error on it says "A view was created in no_grad mode"."""
    error = _grad_fn_error(o, modes)
    return error is not None and error.startswith("A view was created in")


def _last_view_step(o: FunctionalTensor, modes: tuple[Any, ...], geometry: EagerViewGeometry) -> tuple | None:
    """The view op that made eager's invalidated view ``o`` (a view of a multi-output or
    no_grad view) where eager's ``o`` has a ``grad_fn``, whose name autograd's error gives
    (``Output 0 of T is a view and its base ... modified inplace``): the runtime makes the
    view by that op (``runtime._last_step_view``). None where ``o`` has no ``grad_fn``
    (the error names none) or no such op is recorded."""
    step = geometry.last_step(o)
    if step is None:
        return None
    error = _grad_fn_error(o, modes)
    return tuple(step) if error is not None and error.startswith("Output ") else None


def _multi_output_step(o: FunctionalTensor) -> tuple | None:
    """``(op, output index, op args)`` of the multi-output op that made the view ``o`` (its
    chain's last step), from functionalization's record; None for another last step or
    symbolic arguments. The runtime makes eager's invalidated view with that op, so
    autograd's error names it as eager's does (``Output 1 of Split``); for one re-strided in
    place since, with arguments that give its new geometry (``runtime._multi_output_view``)."""
    seq = list(functionalization.get_view_meta_sequence(o.elem))
    # in-place metadata ops after it (``t__ViewMeta``, ``squeeze__dim_ViewMeta``; under
    # no_grad, where eager allows them) change the geometry, not the view's grad_fn
    while seq and "__" in type(seq[-1]).__name__[1:]:
        seq.pop()
    if not seq or seq[-1].has_symbolic_inputs or (op := _MULTI_OUTPUT_VIEW_METAS.get(type(seq[-1]).__name__)) is None:
        return None
    # (has symbolic inputs, output index, is multi-output, inverse mode, *the op's arguments)
    fields = seq[-1].as_tuple()
    args = tuple(tuple(a) if isinstance(a, list) else a for a in fields[4:])
    return op, fields[1], args


def _made_under_no_grad(t: torch.Tensor) -> bool:
    """A view whose chain autograd recorded as begun in no_grad mode (eager's view then
    reports requires_grad but has no grad_fn, or its gradient stops at the no_grad view)."""
    return (
        t._base is not None
        and t.requires_grad
        and torch._C._autograd._get_creation_meta(t) == torch._C._autograd.CreationMeta.NO_GRAD_MODE
    )


def _is_tracing_limitation(exc: BaseException) -> bool:
    """True for errors that come from tracing on fake tensors, not from the program itself.

    Everything else is an error eager PyTorch raises too, and is re-raised unchanged.
    """
    if isinstance(exc, _TRACING_LIMITATIONS):
        return True
    if isinstance(exc, EagerKernelAssert):
        return False
    text = str(exc)
    return (
        "FakeTensor" in text
        or "fake tensor" in text.lower()
        or "data-dependent" in text
        or "data is not allocated" in text  # reading values of a fake tensor (.tolist())
        # a write through as_strided of a view that autograd records: torch's
        # functionalization cannot replay it onto the base
        or "as_strided() is non-compositional" in text
        # torch's own asserts failing on functional tensors (autograd regenerating the grad_fn
        # of a view whose base was detach_()ed: "new_fn INTERNAL ASSERT FAILED", fuzz seed
        # 28005918); eager's run of a valid program asserts nothing
        or "INTERNAL ASSERT FAILED" in text
        # autograd recording a 0-dim value requiring grad assigned into a slice of an integer
        # tensor (``t[1:] = x @ x``), which eager's skips as not differentiable (fuzz seed
        # 28007605)
        or text.startswith("Autograd not support dtype")
    )
