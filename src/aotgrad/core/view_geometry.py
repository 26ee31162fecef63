"""Eager's geometry of the views a program makes, tracked beside the functional run.

Functionalization gives a view the size, stride and storage offset it derives from its base's
*current* value. That is not eager's where a data mutation replaced the base's value (the
functional value of ``x[1:].mul_(2)`` starts at offset 0, eager's at the slice's offset; a
non-contiguous input's new value may be laid out otherwise) or where the base's metadata
changed after the view was taken (eager's view keeps the geometry it was made with). The
runtime rebuilds aliased outputs and re-strides mutated inputs from these numbers, so they
must be eager's.

:class:`EagerViewGeometry` keeps, for each input and each view derived from one, a *shadow*:
a meta tensor laid out as eager lays the tensor out. Every view op (view properties such as
``.mT`` included) and in-place metadata op the program applies to a shadowed tensor is
applied to its shadow too (outside the tracing
modes: meta tensors hold no data), so a shadow's geometry is eager's at every step.
"""

from __future__ import annotations

import collections
import contextlib
import math
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch._C._functionalization as functionalization
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes

from ..errors import AotgradCompileError, current_user_frame, current_user_line, describe_frame
from .inplace_ops import RELAYING_INPLACE
from .functional_storage import storage_for_layout
from .kernel_checks import raise_eager_overlap_error
from .op_args import tree_leaves, view_property
from .overlapping_writes import _location_set
from .stale_views import StaleViewUses, changed_in_place, same_addressing, version_of, writes_through_source

__all__ = ["EagerViewGeometry", "Geometry", "LastViewStep", "RestrideStep", "as_strided_geometry", "functional_geometry", "rebased_root", "restride_drops_gradient", "restrides_within"]

Geometry = tuple[tuple[int, ...], tuple[int, ...], int]  # size, stride, storage_offset

#: functionalization's records of as_strided and as_strided_
def _write_replays(view: FunctionalTensor) -> bool:
    """The backward of a write through ``view`` addresses it as eager's does: autograd's
    ``CopySlices`` replays the view's recorded chain (``_view_func``) on a fresh tensor laid
    out as the base *at storage offset 0*, where eager's takes ``as_strided`` of that tensor
    at the view's offset less the base's. The replay must name the view's elements at that
    relative offset: it does not after an in-place metadata op on the view (as for
    :func:`_autograd_replays`), nor through an ``as_strided`` step of a base whose storage
    offset is not 0 (``as_strided`` offsets are absolute: the gradient would reach the
    elements that many places before eager's; fuzz seed 10015469)."""
    if torch._C._autograd._get_creation_meta(view) != torch._C._autograd.CreationMeta.DEFAULT:
        return True  # (as _autograd_replays: eager raises on a write through such a view)
    size, stride, offset = functional_geometry(view._base)
    chain = functionalization.get_view_meta_sequence(view.elem)
    if (type(offset) is int and offset == 0) or not any(type(vm).__name__ in _AS_STRIDED_VIEW_METAS for vm in chain):
        # (other view steps address relative to their input: so does the replay)
        return _autograd_replays(view)
    view_size, view_stride, view_offset = functional_geometry(view)
    try:
        with _outside_tracing():
            storage = torch.empty(
                view._base.untyped_storage().nbytes() // view._base.element_size(), dtype=view.dtype, device="meta"
            )
            replayed = _geometry(view._view_func_unsafe(storage.as_strided(size, stride, 0)))
    except Exception:  # noqa: BLE001 - the chain does not apply there (out of bounds): no replay
        return False
    return same_addressing(replayed, (view_size, view_stride, view_offset - offset))


_AS_STRIDED_VIEW_METAS = frozenset({"as_strided_ViewMeta", "as_strided__ViewMeta"})
#: ops whose offsets and strides address the storage as laid out
_STORAGE_ADDRESSING = frozenset({"as_strided", "as_strided_"})
#: view ops shaped like a second tensor argument
_SHAPED_LIKE = frozenset({"view_as", "expand_as", "reshape_as"})
#: in-place ops after which a shadow cannot follow (storage swapped or resized)
_UNSHADOWABLE = frozenset({"resize_", "resize_as_", "set_"})
#: ops that view or copy as the input's strides allow (``EagerViewGeometry._check_layout_decision``)
_LAYOUT_DECIDED = frozenset({"reshape", "reshape_as", "flatten", "contiguous"})
#: view ops that raise unless the new shape fits the input's strides
_VIEWS_BY_STRIDES = frozenset({"view", "view_as"})


def _geometry(t: torch.Tensor) -> Geometry:
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset())


def as_strided_geometry(t: torch.Tensor, args: tuple, kwargs: dict) -> Geometry | None:
    """The (size, stride, storage_offset) ``t.as_strided(*args, **kwargs)`` (or
    ``as_strided_``) names: the arguments after the tensor, the offset ``t``'s own where it is
    not given; None where size or stride is missing."""
    try:
        size = args[0] if args else kwargs["size"]
        stride = args[1] if len(args) > 1 else kwargs["stride"]
        offset = args[2] if len(args) > 2 else kwargs.get("storage_offset")
    except (KeyError, IndexError):
        return None
    if offset is None:
        with torch._C.DisableTorchFunction():
            offset = t.storage_offset()
    return tuple(size), tuple(stride), offset


def restrides_within(v: torch.Tensor, args: tuple, kwargs: dict) -> bool:
    """Whether ``v.as_strided_(*args, **kwargs)`` addresses only ``v``'s own elements, and
    ``v`` is contiguous from its base's start (or is an input): then its data, copied on its
    own, holds every element the new layout reads."""
    named = as_strided_geometry(v, args, kwargs)
    if named is None:
        return False
    size, stride, start = named
    with torch._C.DisableTorchFunction():
        if not v.is_contiguous() or (v._base is not None and v.storage_offset() != v._base.storage_offset()):
            return False
    if any(sz == 0 for sz in size):
        return True
    if any(st < 0 for st in stride):
        return False
    last = start + sum((sz - 1) * st for sz, st in zip(size, stride))
    return v.storage_offset() <= start and last < v.storage_offset() + v.numel()


def rebased_root(v: Any, args: tuple, kwargs: dict) -> FunctionalTensor | None:
    """The tensor whose ``as_strided`` functionalization's record of ``v`` becomes once
    ``v.as_strided_(...)`` re-strides it (:func:`~aotgrad.core.eager_rewrites.rebase_restrided_view`):
    ``v``'s autograd base, where ``v`` is a view (a slice, a transpose, ...) of it of the same
    dtype and the base starts its own view chain in functionalization; None elsewhere.

    ``as_strided_`` names storage locations, so ``v`` is then the same view as
    ``base.as_strided(...)``: functionalization's chain for ``v`` (the view's ops, then the
    ``as_strided_``) replays to the same locations of the same storage, but its inverse
    (a write through ``v``) scatters onto a copy of the *view*, laid out at offset 0, where
    the ``as_strided_`` offsets name other elements. The single ``as_strided`` of the base
    scatters onto a copy of the base, exact where the base is laid out as eager's
    (:meth:`EagerViewGeometry._check_restrided` checks that).

    ``args``, ``kwargs``: the ``as_strided_`` arguments after ``v``, before the call. Not
    where the new layout stays within ``v``'s own elements (:func:`restrides_within`):
    functionalization's record is exact there."""
    if type(v) is not FunctionalTensor or restrides_within(v, args, kwargs):
        return None
    with torch._C.DisableTorchFunction():
        base = v._base
        if type(base) is not FunctionalTensor or base.dtype != v.dtype:
            return None
        if functionalization.get_view_meta_sequence(base.elem) or not functionalization.get_view_meta_sequence(v.elem):
            return None
    return base


def restride_drops_gradient(v: FunctionalTensor, args: tuple, kwargs: dict) -> bool:
    """Whether eager's ``v.as_strided_(*args, **kwargs)`` records a gradient that differs
    from ``v._base.as_strided(...)``'s: ``v`` requires grad and its ``AsStridedBackward1``
    reads the gradient at ``v``'s old locations, so the new layout's locations outside them
    (or a layout not known to stay inside them: symbolic, too many elements, ``v``'s own
    elements sharing locations) get none, until a write into the storage makes eager
    regenerate ``v``'s history as ``AsStridedBackward0`` off the base. Until then a view
    rebuilt (an output) off ``base.as_strided`` would send the gradient there (fuzz seeds
    3008597, 4008525): :class:`~aotgrad.core.eager_rewrites.EagerRewrites` rebases such a
    view at that write rather than at the ``as_strided_``."""
    with torch._C.DisableTorchFunction():
        if not v.requires_grad:
            return False
        old = (tuple(v.shape), tuple(v.stride()), v.storage_offset())
    named = as_strided_geometry(v, args, kwargs)
    values = (*old[0], *old[1], old[2])
    if named is None or any(type(n) is not int for n in (*values, *named[0], *named[1], named[2])):
        return True
    inside, new = _location_set(old), _location_set(named)
    if inside is None or new is None or len(inside) != math.prod(old[0]):
        return True
    return not new <= inside


class _PendingRootShadow(NamedTuple):
    """A root shadow not made yet: what :meth:`EagerViewGeometry._note_roots` read off the
    fresh tensor when the op made it. The shadow is a function of these alone (a meta
    tensor, :meth:`make`), so making it when it is first read gives the tensor it would have
    made at once; most intermediates' shadows are never read (no view of them, no in-place
    metadata op, no layout question), and making one costs a meta ``empty`` and
    ``as_strided`` with every mode set aside."""

    numel: int
    dtype: torch.dtype
    geometry: Geometry
    #: whether inference mode was on at the op (the only global state ``make`` depends on:
    #: under it the meta tensor would be an inference tensor)
    inference_mode: bool

    def make(self) -> torch.Tensor:
        with _outside_tracing(), torch.inference_mode(self.inference_mode):
            storage = torch.empty(self.numel, dtype=self.dtype, device="meta")
            return storage.as_strided(*self.geometry)


class Restrided(NamedTuple):
    """A tensor re-strided by ``as_strided_`` where a later write into its storage may not be
    exact (:meth:`EagerViewGeometry._restride`). With neither ``root`` nor
    ``is_input``: never exact (refused)."""

    #: the user's line of the ``as_strided_``
    line: str
    #: a view functionalization records as ``as_strided`` of ``root`` (:func:`rebased_root`):
    #: exact while ``root`` addresses its storage as eager's
    root: FunctionalTensor | None = None
    #: an input re-strided itself, laid out as eager's whole storage: exact
    is_input: bool = False
    #: the new layout addresses only elements of the input whose storage it is, as eager lays
    #: that input out (a write the run over a synthetic base for it decides, see
    #: ``EagerViewGeometry.restrided_partial_storages``; other elements of the caller's
    #: storage would not get their gradient through it)
    within_input: bool = False
    #: ``within_input`` though the new layout reaches outside the input's elements: the
    #: storage has no autograd history (``EagerViewGeometry.unrecorded_partial_storages``);
    #: a write autograd records into it is refused (the gradient of the locations outside
    #: the input is not expressed through the synthetic base's write back)
    outside_input: bool = False


class RestrideStep(NamedTuple):
    """A step of a view's recorded autograd history since eager last regenerated it whose
    ``AsStridedBackward`` keeps the gradient to its input's elements: an ``as_strided_`` of
    the view itself (``AsStridedBackward1``) or an ``as_strided`` taken of a view
    (``AsStridedBackward0``), recorded with grad."""

    #: eager's geometry of the step's input (the view before the ``as_strided_``, the view
    #: the ``as_strided`` was taken of)
    geometry: Geometry
    #: the user's line of the step
    line: str
    #: an ``as_strided_`` of the view itself
    in_place: bool


class LastViewStep(NamedTuple):
    """The view op the program called last to make a view: the op eager's
    autograd names in the view's ``grad_fn`` (``TBackward0``, ``ReshapeAliasBackward0``: a
    ``reshape`` of a strided input). Rebuilt off ``source``, it makes a view whose
    ``grad_fn`` has eager's name (``runtime._last_step_view``)."""

    #: the ``torch.Tensor`` method (``"transpose"``, ``"__getitem__"``) or, with
    #: ``attribute``, property (``"mT"``)
    name: str
    attribute: bool
    #: the arguments after the tensor (no tensor, no symbolic value), and the keyword ones
    args: tuple
    kwargs: tuple[tuple[str, Any], ...]
    #: eager's (size, stride, storage_offset) of the tensor the op was applied to (static)
    source: Geometry
    #: which output of a multi-output op (``split``) the view is; None for a single output
    output: int | None = None
    #: an in-place metadata op (under no_grad: eager's autograd refuses one on such a view
    #: otherwise) re-laid out the view since: its grad_fn is still the op's
    relaid: bool = False


class EagerViewGeometry(TorchFunctionMode):
    """Shadows the inputs' (and their views') eager layout during the analysis run.

    ``inputs``: (functional input, the fake tensor it wraps, laid out as the caller's).
    ``mergeable``: an input not laid out as its whole storage can still be merged into a
    synthetic base (not in the run over synthetic bases).
    """

    def __init__(self, inputs: list[tuple[FunctionalTensor, torch.Tensor]], *, mergeable: bool = True) -> None:
        super().__init__()
        #: id(functional tensor) -> (the tensor, kept so its id stays its own; its shadow)
        self.shadows: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        #: id(view) -> (the view, how many leading steps of its view chain were made under
        #: no_grad of a base that requires grad: eager's gradient stops there; the user line
        #: of the last such step)
        self.no_grad_steps: dict[int, tuple[torch.Tensor, int, str]] = {}
        #: id(intermediate) -> (the tensor; its root shadow): a tensor an op made (no view),
        #: laid out as eager made it. Eager keeps that layout through in-place data ops,
        #: where functionalization's value takes the layout of the out-of-place op that
        #: replaced it; in-place metadata ops are applied to the shadow. Views of it get
        #: shadows in ``shadows`` (taken off the root shadow), as views of inputs do: their
        #: functional geometry derives from the replaced value's layout, eager's from the
        #: root's, and a view keeps its geometry through a later metadata op on its base.
        self.roots: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        #: id(view of an intermediate) -> (the view, the intermediate: its root)
        self.root_of: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        #: id(view) -> (the view, the version its autograd history was recorded at: its
        #: creation, or an in-place op on it that autograd recorded), as eager's attr_version
        self.view_versions: dict[int, tuple[torch.Tensor, int]] = {}
        #: id(view) -> the view, for the views an in-place op that autograd recorded wrote
        #: through: eager's autograd regenerated its ``grad_fn`` then, as one
        #: ``AsStridedBackward0`` off its root (the ``CopySlices`` there), as for a stale view
        #: (:meth:`regenerated`; fuzz seed 18000437)
        self.rebased: dict[int, torch.Tensor] = {}
        #: id(view) -> (the view, the :class:`LastViewStep` that made it), for views a
        #: single-output view op of a ``torch.Tensor`` method or property made
        self.last_steps: dict[int, tuple[torch.Tensor, LastViewStep]] = {}
        #: id(view) -> (the view, the user's frame that took it)
        self.view_frames: dict[int, tuple[torch.Tensor, traceback.FrameSummary | None]] = {}
        #: id(view) -> (the view, its as_strided steps taken since the stale view, the user's
        #: line of the first of them, whether replaying the stale view's own chain may not
        #: give eager's gradient), for views taken with grad recording of a stale view (or of
        #: one of these): eager regenerated the source's grad_fn first, as one
        #: ``AsStridedBackward0`` off its base, so their gradient reaches the base also
        #: outside the elements the source's own chain had. An ``as_strided`` step taken after
        #: that records the stale view's geometry as its input's: its gradient stays within
        #: the stale view's elements (fuzz seed 3003553)
        self.views_of_stale: dict[int, tuple[torch.Tensor, int, str, bool]] = {}
        #: id(view) -> (the view, its :class:`RestrideStep` s in order): the ``as_strided``
        #: steps of its autograd history since eager last regenerated its ``grad_fn`` (or
        #: since it was made); a regeneration (a recorded op reading it while stale, a
        #: recorded write through it) starts it afresh (:meth:`restride_chain`)
        self.restride_steps: dict[int, tuple[torch.Tensor, tuple[RestrideStep, ...]]] = {}
        #: id(view) -> (the view, the user's line of the op): views an in-place metadata op
        #: with grad recording changed once their storage had changed, where autograd on the
        #: traced program regenerated the view's history by a replay of its chain that names
        #: other elements than eager's ``as_strided`` off the base (a ``select`` of a base
        #: ``as_strided_`` flattened): a later recorded use of the view in the traced program
        #: is refused (:meth:`_refuse_unreplayable_view`; fuzz seed 16006573's class)
        self.misreplayed: dict[int, tuple[torch.Tensor, str]] = {}
        #: id(view) -> (the view, its base's geometry when the view was made)
        self.base_geometry_at_view: dict[int, tuple[torch.Tensor, Geometry]] = {}
        #: ids of the inputs whose caller's tensor is its whole storage (no view, contiguous,
        #: offset 0): no synthetic base is made for them
        self.covering_inputs: set[int] = set()
        #: id(input) -> the input, for the inputs the caller passed as views: eager's autograd
        #: records a write through a view of one at the caller's root (:meth:`copy_slices_layout`)
        self.caller_views: dict[int, torch.Tensor] = {}
        #: the mode that addresses stale views by ``as_strided`` of their base (entered
        #: inside this one: this one sees the calls it makes), whose rewrites are checked
        self.stale_uses: StaleViewUses | None = None
        #: id(root) -> (the root; whether it addressed its storage as eager's when an in-place
        #: metadata op first changed it; functionalization's count of data writes into its
        #: storage then): an input or intermediate that functionalization then records as a
        #: view of its own storage, whose geometry after an ``as_strided_`` no longer tells how
        #: the storage is laid out (:meth:`_restrided_root_addresses_storage_as_eager`)
        self.restrided_roots: dict[int, tuple[torch.Tensor, bool, int]] = {}
        #: storage -> each view on it that ``as_strided_`` re-strided where a later write into
        #: the storage may not be exact (:meth:`_restride`)
        self.restrided: dict[StorageWeakRef, list[Restrided]] = {}
        #: storages of the inputs that are not their caller's whole storage, where such an
        #: input can still be merged into a synthetic base, to the input's shadow
        self.partial_input_storages: dict[StorageWeakRef, torch.Tensor] = {}
        #: of those, the ones written after a tensor on them was re-strided by ``as_strided_``
        #: where the write was not exact in this run: the input is merged into a synthetic
        #: base (``InputInfo.addresses_storage``), whose run decides (this run's values are
        #: not used then; the run over the base, a graph input that is its whole storage,
        #: refuses what is not exact there)
        self.restrided_partial_storages: set[StorageWeakRef] = set()
        #: of those, the storages on which a view or ``detach()``ed alias of the input was
        #: re-strided past the input's extent (``InputInfo.readdressed_past_extent``: merged
        #: though neither the input's data nor its own geometry changes)
        self.readdressed_past_extent: set[StorageWeakRef] = set()
        #: of the partial input storages, those without autograd history (neither the input
        #: nor its caller's root requires grad): the synthetic base over the caller's root
        #: holds every location ``as_strided_`` can name, and no gradient is owed to the
        #: locations outside the input, so the run over it decides any re-stride of a tensor
        #: on them (within the input's elements or not, past its extent too)
        self.unrecorded_partial_storages: set[StorageWeakRef] = set()
        #: each input's functional storage -> its caller's storage (inputs aliasing one
        #: another have one caller storage, and a functional storage each)
        self.caller_storage: dict[StorageWeakRef, StorageWeakRef] = {}
        #: caller storages a write autograd records went into, through any input on them
        self.recorded_caller_storages: set[StorageWeakRef] = set()
        #: caller storages on which a tensor was re-strided outside its input's elements
        #: because the storage had no autograd history (``Restrided.outside_input``)
        self.outside_caller_storages: set[StorageWeakRef] = set()
        callers = [StorageWeakRef(fake.untyped_storage()) for _, fake in inputs]
        #: caller storages several inputs share: an ``as_strided_`` of one of them counts as
        #: in ``outside_caller_storages`` wherever it lays the tensor out (a write autograd
        #: records through an alias gave the re-strided input another gradient than eager's,
        #: also for an input laid out as its whole storage)
        self.aliased_caller_storages = {c for c, n in collections.Counter(callers).items() if n > 1}
        with _disable_current_modes():
            for f, fake in inputs:
                storage = torch.empty(
                    fake.untyped_storage().nbytes() // fake.element_size(), dtype=fake.dtype, device="meta"
                )
                self.shadows[id(f)] = (f, storage.as_strided(*_geometry(fake)))
                if fake._base is not None:
                    self.caller_views[id(f)] = f
                self.caller_storage[StorageWeakRef(f.untyped_storage())] = StorageWeakRef(fake.untyped_storage())
                if _covers_storage(fake):
                    self.covering_inputs.add(id(f))
                elif mergeable:
                    self.partial_input_storages.setdefault(StorageWeakRef(f.untyped_storage()), self.shadows[id(f)][1])
                    if not _has_history(fake):
                        self.unrecorded_partial_storages.add(StorageWeakRef(f.untyped_storage()))

    def _as_strided_of_merged_input(self, name: str, args: tuple, kwargs: dict) -> tuple | None:
        """The arguments to run ``as_strided`` (out of place) of a re-laid-out input with in
        this run, where that input is sure to get a synthetic base; None where it is not.

        Such an input is data-mutated and addressed by storage (``InputInfo.addresses_storage``)
        and does not cover its storage (it would not be re-laid out), so the program is analysed
        and traced again over a synthetic base: the whole storage, laid out as eager's, where
        eager's offsets name eager's elements. This run's values are not used then (only its
        mutation and aliasing flags and eager's geometry, from the shadows), so its as_strided
        only has to stay within the functional storage: eager's arguments where they do, else a
        contiguous layout at offset 0; None where neither fits (the caller refuses)."""
        t = args[0]
        if name == "as_strided_":
            return self._restride_left_to_base_run(args, kwargs)
        if name != "as_strided" or id(t) in self.covering_inputs:
            return None
        named = as_strided_geometry(t, args[1:], kwargs)
        if named is None:
            return None
        size, stride, offset = named
        with torch._C.DisableTorchFunction():
            capacity = t.untyped_storage().nbytes() // t.element_size()
        values = (*size, *stride, offset, capacity)
        if any(type(v) is not int for v in values) or "storage_offset" in kwargs or "size" in kwargs:
            return None
        if any(n == 0 for n in size):
            return args
        if min(stride, default=0) >= 0 and offset + sum((n - 1) * st for n, st in zip(size, stride)) < capacity:
            return args
        if math.prod(size) > capacity:
            return None
        contiguous = tuple(math.prod(size[k + 1:]) for k in range(len(size)))
        return (t, size, contiguous, 0)

    def _restride_left_to_base_run(self, args: tuple, kwargs: dict) -> tuple | None:
        """The arguments to run ``args[0].as_strided_(*args[1:], **kwargs)`` with in this run,
        where the tensor is an input not laid out as its caller's storage (or a view or
        ``detach()``ed alias of one), without autograd history (``unrecorded_partial_storages``)
        that functionalization cannot re-stride as eager does (the input re-laid out by an
        in-place op, or the new layout past its extent); None elsewhere (the caller refuses).
        Where the new layout has more elements than the functional storage holds, it is
        eager's own, run with a storage lent to the tensor's wrapper for the one op
        (``functional_storage.storage_for_layout``): a layout past the wrapper's storage is
        checked only by in-place metadata ops.

        The storage is left to the run over a synthetic base for the input
        (``restrided_partial_storages``: merged where the input's data or geometry changes,
        ``aliasing._groups``): that base is the caller's root, whose functional value holds
        every location eager's offsets name, and the input's member view of it is rebased
        there (``rebased_root``). This run's values are not used then, so the layout only
        has to fit the functional storage, as for :meth:`_as_strided_of_merged_input`."""
        t = args[0]
        storage = StorageWeakRef(t.untyped_storage())
        if not (self._without_history(t) or self._unrecorded_alias(t)):
            return None
        in_bounds = self._as_strided_of_merged_input("as_strided", args, kwargs)
        if in_bounds is None and _static_layout(args, kwargs):
            in_bounds = args
        if in_bounds is not None:
            self.restrided_partial_storages.add(storage)
            self.outside_caller_storages.add(self.caller_storage[storage])
            # (the input itself: its own geometry change merges it even where no data is
            # written; a view's or a detach()ed alias's does not: noted for the merge)
            if t._base is not None or functionalization.get_view_meta_sequence(t.elem):
                self.readdressed_past_extent.add(storage)
        return in_bounds

    def _unrecorded_alias(self, t: FunctionalTensor) -> bool:
        """``t`` is a ``detach()``ed alias of an input not laid out as its caller's storage
        (or a view of such an alias), outside autograd: nothing it reads or computes gets a
        gradient, whether or not the input's storage has autograd history. (A write into
        that storage after ``t`` is re-strided outside the input's elements is refused:
        ``_restride`` notes it, ``_check_restrided`` refuses.)"""
        return (
            StorageWeakRef(t.untyped_storage()) in self.partial_input_storages and not t.requires_grad
            and bool(functionalization.get_view_meta_sequence(t.elem))
            and (t._base is None or not t._base.requires_grad)
        )

    def _view_of_relaid_input_left_to_base_run(self, args: tuple, kwargs: dict) -> tuple | None:
        """The arguments to run ``as_strided``/``as_strided_`` of ``args[0]`` with in this run,
        where it is a view of an input without autograd history (``unrecorded_partial_storages``)
        that functionalization lays out otherwise than eager (:func:`_relaid_out`: an
        in-place op replaced the value of a sliced input by a dense one at offset 0, so the
        view's offsets, replayed on it, name other elements: fuzz seed 17004553); None
        elsewhere (the op runs as it is).

        As for the input itself (:meth:`_restride_left_to_base_run`), the storage is left to
        the run over a synthetic base for the input (``restrided_partial_storages``; its data
        changed, so it is merged), whose value is the caller's root laid out as eager's; this
        run's values are not used, so the layout only has to fit the functional storage."""
        t = args[0]
        base = t._base if isinstance(t, FunctionalTensor) else None
        base_shadow = self._shadow(base)
        if base_shadow is None or not self._without_history(base) or not _value_laid_out_otherwise(base, base_shadow):
            return None
        in_bounds = self._as_strided_of_merged_input("as_strided", args, kwargs)
        if in_bounds is None:
            raise AotgradCompileError(
                f"aotgrad: as_strided at {current_user_line()} of a view of an input that an in-place "
                "op laid out otherwise than eager (a sliced or non-contiguous input): its offsets and "
                "strides would name other elements. Take as_strided before the in-place op, or of a clone()."
            )
        storage = StorageWeakRef(t.untyped_storage())
        self.restrided_partial_storages.add(storage)
        self.outside_caller_storages.add(self.caller_storage[storage])
        return in_bounds

    def _shadow(self, t: Any) -> torch.Tensor | None:
        entry = self.shadows.get(id(t)) if isinstance(t, FunctionalTensor) else None
        return entry[1] if entry is not None and entry[0] is t else None

    def geometry(self, t: torch.Tensor) -> Geometry:
        """``t``'s (size, stride, storage_offset) as eager has it now; the functional one
        where ``t`` is not an input or a view derived from one."""
        shadow = self._shadow(t)
        if shadow is not None:
            return _geometry(shadow)
        root_geometry = self._root_geometry(t)
        return root_geometry if root_geometry is not None else _geometry(t)

    def known_geometry(self, t: torch.Tensor) -> Geometry | None:
        """``t``'s eager (size, stride, storage_offset) where this run knows it: a shadowed
        tensor's (an input or a view of one), else the functional one, unless ``t`` or its
        base is an intermediate laid out otherwise than eager's (:meth:`relaid_root`)."""
        if not isinstance(t, FunctionalTensor):
            return None
        if self._shadow(t) is None and (self.relaid_root(t) or (t._base is not None and self.relaid_root(t._base))):
            return None
        return self.geometry(t)

    def copy_slices_layout(self, view: FunctionalTensor, itself: bool = False) -> Geometry | None:
        """Eager's layout of the tensor eager's autograd puts a write through ``view`` on (its
        ``CopySlices``): ``view``'s autograd base's eager geometry (``itself``: ``view``'s own,
        the tensor ``view[i] = v`` indexes); None where ``view`` is no view, or its base is an
        input the caller passed as a view (eager's ``CopySlices`` is at the caller's root,
        which the program does not see)."""
        base = view if itself else view._base
        if base is None or self.caller_views.get(id(base)) is base:
            return None
        return self.geometry(base)

    def relaid_root(self, t: torch.Tensor) -> bool:
        """``t`` is an intermediate (no view) whose functional value is laid out otherwise than
        eager's tensor (an in-place data op replaced it by an out-of-place op's result, laid
        out as that op chose): the graph's value addresses its elements otherwise."""
        root_geometry = self._root_geometry(t)
        return root_geometry is not None and not same_addressing(root_geometry, functional_geometry(t))

    def stale(self, t: torch.Tensor) -> bool:
        """An in-place op changed ``t``'s storage (through another alias, or under no_grad)
        since autograd last recorded ``t``'s history: eager regenerates its ``grad_fn`` on
        the next read (``AsStridedBackward0`` off its base)."""
        entry = self.view_versions.get(id(t))
        return entry is not None and entry[0] is t and entry[1] != t._version

    def regenerated(self, t: torch.Tensor) -> bool:
        """Eager's ``grad_fn`` of the view ``t`` is one ``AsStridedBackward0`` off its root:
        ``t`` is stale (:meth:`stale`), or an in-place op that autograd recorded wrote
        through it (``rebased``), whose ``CopySlices`` is at the root."""
        return self.stale(t) or self.rebased.get(id(t)) is t

    def of_stale(self, t: torch.Tensor) -> bool:
        """``t`` was stale or written through (:meth:`regenerated`), or was taken from such a
        view (``views_of_stale``): eager's gradient of ``t`` goes through an
        ``AsStridedBackward0`` off its base."""
        entry = self.views_of_stale.get(id(t))
        return self.regenerated(t) or (entry is not None and entry[0] is t)

    def as_strided_since_stale(self, t: torch.Tensor) -> tuple[int, str, bool]:
        """How many ``as_strided`` steps ``t``'s chain took since the stale view it was taken
        of (0 where ``t`` is stale itself, or no view of a stale one), the user's line of the
        first, and whether replaying the stale view's own chain from its base may differ from
        eager's regenerated ``AsStridedBackward0`` off the autograd root: eager's gradient
        through those steps is an ``AsStridedBackward0`` whose input is the stale view's
        geometry, not an ``as_strided`` of ``t``'s off the root."""
        entry = self.views_of_stale.get(id(t))
        if self.regenerated(t) or entry is None or entry[0] is not t:
            return 0, "", False
        return entry[1], entry[2], entry[3]

    def _steps_now(self, t: torch.Tensor) -> tuple[RestrideStep, ...]:
        """``t``'s :class:`RestrideStep` s as its ``grad_fn`` would be read now: none where
        ``t`` is stale (eager regenerates it off its base on that read)."""
        entry = self.restride_steps.get(id(t))
        return entry[1] if entry is not None and entry[0] is t and not self.stale(t) else ()

    def _history_before(
        self, name: str, args: tuple, version: int | None
    ) -> tuple[FunctionalTensor, tuple[RestrideStep, ...], Geometry | None, int | None] | None:
        """Before the op ``name``: its first argument, that op's autograd reads (grad mode,
        the tensor requires grad), with its restride steps then and, for ``as_strided`` and
        ``as_strided_`` (the ops that add a step), its eager geometry, and its version
        (``version``, read before the op); None else."""
        source = args[0] if args else None
        if not isinstance(source, FunctionalTensor) or not torch.is_grad_enabled() or not source.requires_grad:
            return None
        restrides = name == "as_strided" or name == "as_strided_"
        return source, self._steps_now(source), self.geometry(source) if restrides else None, version

    def _note_restride_steps(self, name: str, before: tuple | None, out: Any) -> None:
        """After the op ``name`` (``before``: :meth:`_history_before`'s), record the restride
        steps of the tensors whose history it made: an in-place op on a view continues the
        view's (``as_strided_`` adds one; another metadata op keeps them; a data write
        through it is recorded as ``CopySlices`` at the root, and the view's ``grad_fn``
        regenerated off it: none); a view taken of the source continues the source's
        (an ``as_strided`` of a view adds one). An op that returns the source itself unchanged
        (``flatten()`` of it with no dims to merge, ``float()``...) records nothing
        (:func:`~aotgrad.core.stale_views.changed_in_place`)."""
        if before is None:
            return
        source, steps, geometry, version = before
        if changed_in_place(name, source, out, version) or (out is not source and writes_through_source(name)):
            if source._base is None:
                return
            if name == "as_strided_":
                steps = (*steps, RestrideStep(geometry, current_user_line(), True))
            elif name not in RELAYING_INPLACE:
                steps = ()
            self.restride_steps[id(source)] = (source, steps)
            return
        for r in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(r, FunctionalTensor) and r is not source and r._base is not None and id(r) not in self.restride_steps:
                step = (RestrideStep(geometry, current_user_line(), False),) if (
                    name == "as_strided" and source._base is not None
                ) else ()
                if steps or step:  # (none recorded reads as none: _steps_now)
                    self.restride_steps[id(r)] = (r, (*steps, *step))

    def restride_chain(
        self, t: FunctionalTensor, base_geometry: Geometry, what: str, *, base_as_eager: bool = True
    ) -> tuple[Geometry, ...]:
        """The geometries to take ``as_strided`` through, in order, off the base the runtime
        rebuilds the returned view ``t`` with (laid out as ``base_geometry``, eager's), before
        ``t``'s own: eager's history of ``t`` has an ``as_strided_`` whose
        ``AsStridedBackward1`` drops the gradient of elements ``t`` names now (outside those
        it had before that op: fuzz seed 16006573), which one ``as_strided`` off the base (or
        a replay of its recorded chain, once the base's geometry changed) would not. The
        chain is eager's ``AsStridedBackward`` steps since its last regeneration, the first
        off the base: exact where every geometry is static, each step's input names distinct
        elements (``as_strided``'s backward shares a location's gradient out among the
        elements naming it) and the first step's elements are the base's. () where no such
        step drops a gradient (the rebuild is left as it is); refused (``what``: the output,
        for the message) where the chain is not exact, or not ``base_as_eager`` (the graph's
        base is laid out otherwise than eager's, or has another dtype)."""
        steps = self._steps_now(t)
        if not any(s.in_place for s in steps):
            return ()
        final = self.geometry(t)
        geometries = [final, base_geometry, *(s.geometry for s in steps)]
        static = all(type(v) is int for g in geometries for v in (*g[0], *g[1], g[2]))
        final_locations = _location_set(final) if static else None
        drops = not static or final_locations is None or any(
            s.in_place and ((locations := _location_set(s.geometry)) is None or not final_locations <= locations)
            for s in steps
        )
        if not drops:
            return ()
        line = next(s.line for s in steps if s.in_place)
        if static and base_as_eager and self._chain_is_exact(steps, base_geometry):
            return tuple(s.geometry for s in steps)
        raise AotgradCompileError(
            f"aotgrad: {what} is a view that as_strided_ at {line} re-strided, recording a "
            "gradient, onto elements outside those it had: eager's gradient of those elements is "
            "dropped (AsStridedBackward1), which the rebuilt output cannot reproduce here (symbolic "
            "sizes, elements sharing memory locations or outside its base's, a base laid out "
            "otherwise than eager's). clone() it before returning it, or re-stride it under no_grad."
        )

    @staticmethod
    def _chain_is_exact(steps: tuple[RestrideStep, ...], base_geometry: Geometry) -> bool:
        """``as_strided`` through ``steps``' geometries off a base laid out as
        ``base_geometry`` has eager's gradient: each step's input names distinct locations and
        the first's are among the base's."""
        sets = [_location_set(s.geometry) for s in steps]
        base = _location_set(base_geometry)
        return (
            base is not None and all(
                locations is not None and len(locations) == math.prod(s.geometry[0]) for locations, s in zip(sets, steps)
            )
            and sets[0] <= base
        )

    def _replay_unsure(self, stale: FunctionalTensor) -> bool:
        """Replaying ``stale``'s chain from its base may not give the gradient of one
        ``as_strided`` off the autograd root in its geometry: a later ``as_strided`` step
        reaches outside its input (:func:`_replay_drops_gradient`), or the first step is an
        ``as_strided`` of a base that is not its caller's whole storage (it may name elements
        outside the base)."""
        if _replay_drops_gradient(stale):
            return True
        seq = functionalization.get_view_meta_sequence(stale.elem)
        rest = seq[len(functionalization.get_view_meta_sequence(stale._base.elem)):]
        return bool(rest) and type(rest[0]).__name__ in _AS_STRIDED_VIEW_METAS and id(stale._base) not in self.covering_inputs

    def note_history_recorded(self, source: FunctionalTensor) -> None:
        """An in-place op that autograd records (grad mode, ``source`` requiring grad) wrote
        through the view ``source``: eager rebases its history, so it is no longer stale."""
        entry = self.view_versions.get(id(source))
        if entry is not None and entry[0] is source and torch.is_grad_enabled() and source.requires_grad:
            if entry[1] != source._version and self.no_grad_steps.get(id(source), (None,))[0] is source:
                # a stale view (an in-place metadata op under no_grad made its whole chain
                # a no_grad prefix): eager regenerates its grad_fn off its base in grad
                # mode before recording this op, so its gradient reaches the base again
                del self.no_grad_steps[id(source)]
            self.view_versions[id(source)] = (source, source._version)
            self.rebased[id(source)] = source

    def _note_versions(self, name: str, args: tuple, out: Any, version: int | None) -> None:
        """Record new views' versions; an in-place op autograd records on a view rebases it
        (``version``: ``args[0]``'s before the op; an op returning its input unchanged is
        none: :func:`~aotgrad.core.stale_views.changed_in_place`)."""
        source = args[0] if args else None
        if out is source:
            if changed_in_place(name, source, out, version):
                self.note_history_recorded(source)
            return
        for r in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(r, FunctionalTensor) and r is not source and r._base is not None and id(r) not in self.view_versions:
                self.view_versions[id(r)] = (r, r._version)
                self.base_geometry_at_view[id(r)] = (r, _geometry(r._base))
                self.view_frames[id(r)] = (r, current_user_frame())
                if (
                    isinstance(source, FunctionalTensor) and torch.is_grad_enabled() and source.requires_grad
                    and self.of_stale(source)
                ):
                    # the steps since the stale view: none where the source is that view
                    steps, line, unsure = (
                        (0, "", self._replay_unsure(source)) if self.regenerated(source)
                        else self.as_strided_since_stale(source)
                    )
                    chain = functionalization.get_view_meta_sequence(r.elem)
                    if chain and type(chain[-1]).__name__ in _AS_STRIDED_VIEW_METAS:
                        steps, line = steps + 1, line or current_user_line()
                    self.views_of_stale[id(r)] = (r, steps, line, unsure)

    def _check_stale_view_rewrites(self) -> None:
        """Check the views that :class:`~aotgrad.core.stale_views.StaleViewUses` (entered inside
        this mode) is replacing by ``as_strided`` of their base in the call it is making (this
        mode sees the calls it makes instead of the program's); refuse where that is not eager's
        gradient: the geometry it used is not eager's (the view's shadow), or the base's
        functional value addresses its storage otherwise than eager's base (or is not the whole
        storage, where ``as_strided`` offsets would name elements it does not hold)."""
        if self.stale_uses is None or not self.stale_uses.rewritten:
            return
        rewritten, self.stale_uses.rewritten = self.stale_uses.rewritten, {}
        name = self.stale_uses.rewritten_in
        for view, used in rewritten.values():
            # (a write replayed through the view's ops off its base laid back out: not where
            # the base is an input, which the joint re-lays out through its own alias of it,
            # whose views it does not rewrite, so the traced program would not be this one)
            if id(view) in self.stale_uses.replayed and self._shadow(view._base) is not None:
                raise AotgradCompileError(
                    f"aotgrad: in-place {name} at {current_user_line()} writes through a view taken "
                    "before an in-place metadata op (t_, transpose_, unsqueeze_, as_strided_, ...) "
                    "changed its base's geometry, an input; autograd on the traced program would "
                    "route this write's gradient to other elements. Take the view after the "
                    "metadata op, or write through a view of a clone()."
                )
            if id(view) in self.stale_uses.written and not _starts_its_storage(view._base):
                if id(view) in self.stale_uses.relocated and self._relocation_is_exact(view, used):
                    continue
                raise AotgradCompileError(
                    f"aotgrad: in-place {name} at {current_user_line()} writes, recording a gradient, "
                    "through a view that has an as_strided step (or that an in-place metadata op "
                    "changed) of a tensor whose storage offset is not 0 (a detach()ed alias of a "
                    "slice, say): autograd on the traced program addresses the write's gradient by "
                    "the view's offset in the storage, eager's by its offset from that tensor's "
                    "start, so the gradient would reach other elements. Take the view of a clone() "
                    "of that tensor."
                )
            if not self._rewrite_is_exact(view, used):
                raise AotgradCompileError(
                    f"aotgrad: {name} at {current_user_line()} uses (or writes through) a view that an "
                    "in-place metadata op (t_, transpose_, unsqueeze_, squeeze_, as_strided_, ...) "
                    "changed after it was made, or whose base it changed (or an as_strided of a view "
                    "reaching outside that view's elements), once an in-place op changed its storage; "
                    "eager's autograd addresses "
                    "such a view by as_strided of its base, and that base is laid out otherwise in the "
                    "traced program (a sliced or non-contiguous input, an as_strided_ or in-place op "
                    "that re-laid it out), so the gradient would reach other elements. Use the "
                    "out-of-place view op (t(), transpose(), unsqueeze(), ...) instead, or take the "
                    "view of a clone()."
                )

    def check_stale_outputs(self, outs: list[Any]) -> None:
        """Check the outputs the joint differentiates through ``base.as_strided`` of their
        geometry (:meth:`~aotgrad.core.stale_views.StaleViewUses.read_by_backward`) as the
        rewritten uses :meth:`_check_stale_view_rewrites` checks; refuse where that is not
        eager's gradient, naming the line that took the view."""
        if self.stale_uses is None:
            return
        for view, used in self.stale_uses.stale_outputs(outs).values():
            if not self._rewrite_is_exact(view, used):
                entry = self.view_frames.get(id(view))
                line = describe_frame(entry[1] if entry is not None and entry[0] is view else None)
                raise AotgradCompileError(
                    f"aotgrad: an output is a view (taken at {line}) "
                    "that an in-place metadata op (t_, transpose_, unsqueeze_, as_strided_, ...) changed, "
                    "or whose base it changed, and whose storage an in-place op changed since: eager's "
                    "autograd addresses it by as_strided of its base, which the traced program lays out "
                    "otherwise (a sliced or non-contiguous input, an in-place op that re-laid it out), so "
                    "its gradient would reach other elements. clone() it before returning it."
                )

    def _relocation_is_exact(self, view: FunctionalTensor, used: Geometry) -> bool:
        """A write through ``view`` relocated to a copy of its base's storage
        (:meth:`~aotgrad.core.stale_views.StaleViewUses._relocated_write`) names eager's
        elements: the geometries it used for the view (``used``) and its base are eager's."""
        view_geometry, base_geometry = self.known_geometry(view), self.known_geometry(view._base)
        return (
            view_geometry is not None and base_geometry is not None
            and same_addressing(view_geometry, used) and same_addressing(base_geometry, _geometry(view._base))
        )

    def _rewrite_is_exact(self, view: FunctionalTensor, used: Geometry) -> bool:
        """``view._base.as_strided(*used)`` names in the traced program the elements eager's
        ``as_strided`` of the base in the view's current geometry names."""
        shadow = self._shadow(view)
        if shadow is None:
            return False
        values = (*used[0], *used[1], used[2])
        if any(type(v) is not int for v in values) or _geometry(shadow) != used:
            return False
        return self._addresses_storage_as_eager(view._base) or self._restrided_root_addresses_storage_as_eager(view._base)

    def _note_restrided_root(self, name: str, args: tuple) -> None:
        """Before an in-place metadata op first changes a root (an input or intermediate
        functionalization holds as its storage's base, no view of it), record whether it
        addresses its storage as eager's (:meth:`_addresses_storage_as_eager`) then, and the
        storage's count of data writes."""
        if name not in RELAYING_INPLACE or name in _UNSHADOWABLE or not args or not isinstance(args[0], FunctionalTensor):
            return
        root = args[0]
        if id(root) in self.restrided_roots or functionalization.get_view_meta_sequence(root.elem):
            return
        self.restrided_roots[id(root)] = (
            root, self._addresses_storage_as_eager(root), torch._functionalize_mutation_counter(root.elem)
        )

    def _restrided_root_addresses_storage_as_eager(self, root: FunctionalTensor) -> bool:
        """``root``, an intermediate re-strided by ``as_strided_`` (its functional chain's last
        step), was its storage's base addressing the storage as eager's when an in-place
        metadata op first changed it (``restrided_roots``), and functionalization's base value
        of the storage is still laid out as then: its chain is ``as_strided`` steps only (a
        write scatters back by ``as_strided_scatter``, laid out as the base), or nothing wrote
        into the storage since (the inverse of another metadata op may lay the base out
        otherwise). ``as_strided`` of ``root`` then names eager's elements where its current
        functional geometry is eager's, and autograd's ``AsStridedBackward0`` takes ``root``'s
        current geometry as its input's, as eager's regenerated one does."""
        entry = self.restrided_roots.get(id(root))
        if entry is None or entry[0] is not root or not entry[1]:
            return False
        chain = functionalization.get_view_meta_sequence(root.elem)
        if not chain or type(chain[-1]).__name__ not in _AS_STRIDED_VIEW_METAS:
            return False
        if any(type(vm).__name__ not in _AS_STRIDED_VIEW_METAS for vm in chain) and (
            torch._functionalize_mutation_counter(root.elem) != entry[2]
        ):
            return False
        # an intermediate: the joint re-strides an input through its own alias of it, whose
        # views StaleViewUses does not rewrite there (the traced autograd would replay them)
        eager_shadow = self._root_shadow(root)
        if eager_shadow is None:
            return False
        eager_geometry = _geometry(eager_shadow)
        if any(type(v) is not int for v in (*eager_geometry[0], *eager_geometry[1], eager_geometry[2])):
            return False
        torch._sync(root)
        value = torch._from_functional_tensor(root.elem)
        return (
            value.untyped_storage().nbytes() == eager_shadow.untyped_storage().nbytes()
            and same_addressing(eager_geometry, _geometry(value))
        )

    def addressed_as_eager(self, *tensors: FunctionalTensor) -> bool:
        """Each tensor (an input, an intermediate or a view of either, shadowed) reports
        eager's size, stride and storage offset: location arithmetic on them names eager's
        storage locations (``EagerRewrites._unrecorded_write_past_as_strided``)."""
        for t in tensors:
            shadow = self._shadow(t)
            if shadow is None:
                shadow = self._root_shadow(t)
            if shadow is None or _geometry(shadow) != _geometry(t):
                return False
        return True

    def reroot_is_exact(self, root: FunctionalTensor, views: list[FunctionalTensor]) -> bool:
        """Whether a write scattered into (a copy of) ``root`` through ``views`` recorded as
        ``root.as_strided`` of their geometry (``EagerRewrites._reroot_before_write``) writes
        eager's elements: ``root`` addresses its storage as eager's
        (:meth:`_addresses_storage_as_eager`); or ``root`` is an input not laid out as its
        caller's whole storage and every view addresses only the input's own elements, as
        eager lays them out: the input then gets a synthetic base, whose run decides
        (``restrided_partial_storages``; this run's values are not used)."""
        if self._addresses_storage_as_eager(root):
            return True
        storage = StorageWeakRef(root.untyped_storage())
        owner = self._shadow(root)
        own = _addressed(*_geometry(owner)) if owner is not None else None
        if own is None or storage not in self.partial_input_storages:
            return False
        for v in views:
            shadow = self._shadow(v)
            named = _addressed(*_geometry(shadow)) if shadow is not None else None
            if named is None or not named <= own:
                return False
        self.restrided_partial_storages.add(storage)
        return True

    def _addresses_storage_as_eager(self, root: FunctionalTensor) -> bool:
        """``root`` (an input or an intermediate, shadowed) is in eager its whole storage
        (offset 0, dense), and functionalization's value of it addresses a storage of that
        size as eager's does: an ``as_strided`` of it (or a scatter into a copy of it) names
        the same elements in the traced program as in eager."""
        root_shadow = self._shadow(root)
        if root_shadow is None:
            root_shadow = self._root_shadow(root)
        if root_shadow is None:
            return False
        eager_root = _geometry(root_shadow)
        if any(type(v) is not int for v in (*eager_root[0], *eager_root[1], eager_root[2])):
            return False
        nbytes = root_shadow.untyped_storage().nbytes()
        if (
            eager_root[2] != 0 or not is_non_overlapping_and_dense_or_false(root_shadow)
            or math.prod(eager_root[0]) * root_shadow.element_size() != nbytes
        ):
            return False
        torch._sync(root)
        value = torch._from_functional_tensor(root.elem)
        return value.untyped_storage().nbytes() == nbytes and same_addressing(eager_root, _geometry(value))

    def _refuse_write_through_outdated_view(self, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        """Refuse an in-place data op that autograd records on a view whose base an in-place
        metadata op (``t_``, ``transpose_``, ...) re-laid out after the view was made. Eager's
        autograd addresses the written elements by the view's strides on the base's storage;
        on the traced (functional) tensors it replays the view's ops on the base as it is
        now, so the gradient would reach other elements (silently wrong)."""
        source = args[0] if args else None
        if not isinstance(source, FunctionalTensor) or name in RELAYING_INPLACE:
            return
        if not (name == "__setitem__" or (out is source and name.endswith("_") and not name.endswith("__"))):
            return
        entry = self.base_geometry_at_view.get(id(source))
        if entry is None or entry[0] is not source or source._base is None:
            return
        if not torch.is_grad_enabled() or not any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in tree_leaves((args, kwargs))
        ):
            return
        # (where autograd's replay of the view's chain on the base's new geometry still names
        # the view's elements, as after unsqueeze_ of the base, its CopySlices is eager's)
        if _geometry(source._base) != entry[1] and not _autograd_replays(source):
            raise AotgradCompileError(
                f"aotgrad: in-place {name} at {current_user_line()} writes through a view taken "
                "before an in-place metadata op (t_, transpose_, unsqueeze_, as_strided_, ...) "
                "changed its base's geometry; autograd on the traced program would route this "
                "write's gradient to other elements. Take the view after the metadata op, or "
                "write through a view of a clone()."
            )

    def _refuse_unreplayable_view(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """Refuse an op where autograd on the traced program would replay the chain of a view
        that an in-place metadata op (``t_``, ``unsqueeze_``, ...) changed after it was made
        (:func:`_autograd_replays`): a write through the view it records (the write's
        backward addresses the view by the replayed chain), or any recorded use of the view
        once its storage changed (autograd regenerates its ``grad_fn`` by the replay; eager by
        ``as_strided``). The gradient would reach other elements, or have another shape."""
        name = _name_of(func)
        if not torch.is_grad_enabled() or (name == "__get__" and view_property(func) is None):
            return  # (an attribute read other than a view property, ``x.mT``, records nothing)
        if name != "__setitem__" and not any(isinstance(r, torch.Tensor) for r in tree_leaves(out)):
            return  # reads metadata (size(), stride()): autograd records nothing
        source = args[0] if args else None
        writes = isinstance(source, FunctionalTensor) and name not in RELAYING_INPLACE and (
            name == "__setitem__" or (out is source and name.endswith("_") and not name.endswith("__"))
        )
        if writes and not any(isinstance(t, torch.Tensor) and t.requires_grad for t in tree_leaves((args, kwargs))):
            writes = False
        for t in tree_leaves((args, kwargs)):
            if not isinstance(t, FunctionalTensor) or t._base is None or not t.requires_grad:
                continue
            self._refuse_misreplayed_use(name, t, source)
            written = writes and t is source
            if not (written or self.stale(t)) or (
                _autograd_replays(t) and (written or not _replay_drops_gradient(t))
            ):
                continue
            what = "writes through" if written else "uses"
            raise AotgradCompileError(
                f"aotgrad: {name} at {current_user_line()} {what} a view that an in-place metadata op "
                "(t_, transpose_, unsqueeze_, squeeze_, as_strided_, ...) changed after it was made "
                "(or a view of one, or an as_strided of a view reaching outside that view), after an "
                "in-place op changed its storage; autograd on the traced program replays the view's "
                "ops (without that change), so the gradient would reach other elements. Use the "
                "out-of-place view op (t(), transpose(), unsqueeze(), ...) instead, or take the view "
                "of a clone()."
                if not written else
                f"aotgrad: in-place {name} at {current_user_line()} writes through a view that an "
                "in-place metadata op (t_, transpose_, unsqueeze_, squeeze_, as_strided_, ...) "
                "changed after it was made (or a view of one); autograd on the traced program "
                "replays the view's ops without that change, so this write's gradient would "
                "reach other elements. Use the out-of-place view op (t(), transpose(), ...) "
                "instead, or write through a view of a clone()."
            )

    def _refuse_misreplayed_use(self, name: str, t: FunctionalTensor, source: Any) -> None:
        """Refuse the op ``name``'s recorded use of ``t`` where ``t`` is :attr:`misreplayed`
        (another in-place metadata op on it carries the record along: no use yet)."""
        entry = self.misreplayed.get(id(t))
        if entry is None or entry[0] is not t or (t is source and name in RELAYING_INPLACE):
            return
        raise AotgradCompileError(
            f"aotgrad: {name} at {current_user_line()} uses a view that the in-place metadata op at "
            f"{entry[1]} changed after an in-place op had changed its storage (or its base's "
            "geometry): eager regenerated the view's history there by as_strided of its base, "
            "autograd on the traced program by replaying the view's ops, which name other "
            "elements of the base now, so the gradient would reach other elements. Take the view "
            "after the base's in-place op, or of a clone()."
        )

    def _refuse_raising_replay(self, name: str, args: tuple, kwargs: dict) -> None:
        """Before the op ``name`` runs: refuse where autograd on the traced program would
        replay a view's chain that no longer applies to its base (:func:`_autograd_replay`
        raises, e.g. a permute of the dims the base had before ``unsqueeze_``), which
        :class:`~aotgrad.core.stale_views.StaleViewUses` did not rewrite: a write through
        the view, or an in-place metadata op on it once its storage changed (eager
        regenerates its ``grad_fn`` by ``as_strided``, the traced autograd by the replay,
        which raises inside the op). Other uses of such a view are rewritten; the checks
        after the op refuse the replays that run but name other elements; an in-place
        metadata op whose replay runs but names other elements than the view's (a select of a
        base ``as_strided_`` flattened) leaves the view ``misreplayed``."""
        if not torch.is_grad_enabled() or not args:
            return
        source = args[0]
        if not isinstance(source, FunctionalTensor) or source._base is None or not source.requires_grad:
            return
        if name in RELAYING_INPLACE:
            if not self.stale(source) or name == "detach_":
                return
        elif not writes_through_source(name):
            return
        if torch._C._autograd._get_creation_meta(source) != torch._C._autograd.CreationMeta.DEFAULT:
            return  # autograd never replays it: eager raises as the trace does
        replay = _autograd_replay(source)
        if replay is not None and name in RELAYING_INPLACE and not same_addressing(
            replay, functional_geometry(source)
        ) and _sums_to(tuple(source.shape), replay[0]) and self._shadow(source._base) is None:
            # the replay runs but names other elements, in a shape autograd sums the view's
            # gradient to (a 0-d select of a base as_strided_ flattened): the traced history of
            # the view is not eager's from here on, silently, which matters only where the
            # trace uses it (a returned view is rebuilt off its base): refused at such a use
            # (_refuse_unreplayable_view). (A replay of another shape raises in the trace; the
            # joint gives the program its own alias of an input whose geometry changes, which
            # the view's chain is not replayed on.)
            self.misreplayed[id(source)] = (source, current_user_line())
            return
        if replay is not None:
            return
        raise AotgradCompileError(
            f"aotgrad: in-place {name} at {current_user_line()} on a view taken before an in-place "
            "metadata op (t_, transpose_, unsqueeze_, squeeze_, as_strided_, ...) changed its base's "
            "shape: eager addresses the view by as_strided of its base, autograd on the traced "
            "program replays the view's ops, which no longer apply to the base. Take the view "
            "after the metadata op, or of a clone()."
        )

    def _note_last_step(self, func, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        """Record the :class:`LastViewStep` of each view of ``args[0]`` that ``func`` returned
        (one output, or each of a tuple's: ``split``), where ``func`` is called as a
        ``torch.Tensor`` method, property or ``torch`` function, with static arguments (a
        tensor only as ``view_as``'s shape) and eager's geometry of ``args[0]`` known. An
        in-place metadata op on a view marks its step ``relaid``."""
        if not args or not isinstance(args[0], FunctionalTensor):
            return
        if name in RELAYING_INPLACE and out is args[0]:
            entry = self.last_steps.get(id(out))
            if entry is not None and entry[0] is out:
                if torch.is_grad_enabled():  # (autograd rebases the view's history)
                    del self.last_steps[id(out)]
                else:
                    self.last_steps[id(out)] = (out, entry[1]._replace(relaid=True))
            return
        results = out if isinstance(out, (tuple, list)) else (out,)
        views = [
            (k, r) for k, r in enumerate(results)
            if isinstance(r, FunctionalTensor) and r is not args[0] and r._base is not None and _is_alias(r, args[0])
        ]
        if not views or (len(views) > 1 and len(views) != len(results)):
            return
        step = self._view_step(func, name, args, kwargs)
        if step is None:
            return
        for k, r in views:
            self.last_steps[id(r)] = (r, step._replace(output=k if isinstance(out, (tuple, list)) else None))

    def _view_step(self, func, name: str, args: tuple, kwargs: dict) -> LastViewStep | None:
        """``func(*args, **kwargs)`` as a :class:`LastViewStep` (None: it cannot be one)."""
        attribute = name == "__get__"
        if attribute:
            name = getattr(getattr(func, "__self__", None), "__name__", "")
            if name in ("_base", "data", "grad") or not isinstance(getattr(torch.Tensor, name, None), type(torch.Tensor.mT)):
                return None
        elif not hasattr(torch.Tensor, name) or not any(
            func is getattr(owner, name, None) for owner in (torch.Tensor, torch._C.TensorBase, torch)
        ):
            return None
        rest = tuple(args[1:])
        if name in _SHAPED_LIKE:
            # (``view_as(other)`` is ``view(other.shape)``: autograd records the latter)
            if len(rest) != 1 or kwargs or not isinstance(rest[0], torch.Tensor):
                return None
            name, rest = name[: -len("_as")], (tuple(rest[0].shape),)
        leaves = tree_leaves((rest, kwargs))
        leaves += [x for a in leaves if isinstance(a, slice) for x in (a.start, a.stop, a.step)]
        if any(isinstance(a, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)) for a in leaves):
            return None
        source = self.known_geometry(args[0])
        if source is None or any(not isinstance(v, int) for v in (*source[0], *source[1], source[2])):
            return None
        return LastViewStep(name, attribute, rest, tuple(kwargs.items()), source)

    def last_step(self, t: torch.Tensor) -> LastViewStep | None:
        """The :class:`LastViewStep` that made the view ``t`` (None: none recorded)."""
        entry = self.last_steps.get(id(t))
        return entry[1] if entry is not None and entry[0] is t else None

    def no_grad_prefix(self, t: torch.Tensor) -> int:
        """How many leading steps of ``t``'s view chain (from its storage's root) were made
        under no_grad of a base that requires grad (0: none)."""
        entry = self.no_grad_steps.get(id(t))
        return entry[1] if entry is not None and entry[0] is t else 0

    def no_grad_line(self, t: torch.Tensor) -> str:
        """The user line of the last step of ``t``'s no_grad prefix (:meth:`no_grad_prefix`);
        "" where it has none."""
        entry = self.no_grad_steps.get(id(t))
        return entry[2] if entry is not None and entry[0] is t else ""

    def _written_restrided(self, name: str, args: tuple, kwargs: dict) -> tuple[FunctionalTensor | None, list[Restrided]]:
        """The tensor the op ``name`` writes into, and the re-strided views on its storage
        (:meth:`_restride`); ``(None, [])`` for other ops."""
        written = kwargs.get("out")
        if written is None and args and writes_through_source(name):
            written = args[0]
        if not self.restrided or not isinstance(written, FunctionalTensor):
            return None, []
        return written, self.restrided.get(StorageWeakRef(written.untyped_storage()), [])

    def _restride(self, args: tuple, kwargs: dict) -> Restrided | None:
        """What a later write into the storage of ``args[0]`` needs to be exact, once
        ``args[0].as_strided_(*args[1:], **kwargs)`` (not run yet) re-strides it; None where
        it needs nothing: the new layout stays within the tensor's own data
        (:func:`restrides_within`), or the tensor is an intermediate (its own storage)."""
        v = args[0]
        if type(v) is FunctionalTensor:
            caller = self.caller_storage.get(StorageWeakRef(v.untyped_storage()))
            if caller in self.aliased_caller_storages:
                self.outside_caller_storages.add(caller)
        if type(v) is not FunctionalTensor or (
            restrides_within(v, args[1:], kwargs) and not self._view_of_offset_input(v)
        ):
            return None
        line = current_user_line()
        owner = self.partial_input_storages.get(StorageWeakRef(v.untyped_storage()))
        named = as_strided_geometry(v, args[1:], kwargs)
        new_elements = _addressed(*named) if named is not None else None
        own_elements = _addressed(*_geometry(owner)) if owner is not None else None
        within = new_elements is not None and own_elements is not None and new_elements <= own_elements
        outside = not within and self._without_history(v)
        if outside:
            self.outside_caller_storages.add(self.caller_storage[StorageWeakRef(v.untyped_storage())])
        within = within or outside
        root = rebased_root(v, args[1:], kwargs)
        if root is not None:
            return Restrided(line, root=root, within_input=within, outside_input=outside)
        if v._base is None and not functionalization.get_view_meta_sequence(v.elem):
            if self._shadow(v) is None:
                return None  # an intermediate: its own storage, no view on it to replay
            if self._addresses_storage_as_eager(v):
                # an input starting its chain, laid out as eager's whole storage: the chain
                # is that one as_strided_, replayed and scattered on (a copy of) the input's
                # value, which keeps its layout through scatters
                return Restrided(line, is_input=True)
        return Restrided(line, within_input=within, outside_input=outside)

    def _view_of_offset_input(self, v: FunctionalTensor) -> bool:
        """``v`` is a view of an input that starts past its storage's start (``x[1:][:]``):
        functionalization replays an ``as_strided_`` of it at its absolute offset on the
        base's value, which an in-place op replaces by one laid out from offset 0, where
        that offset names other elements (``x[1:]`` written afterwards: the view read other
        elements, silently). A write into the storage is left to the run over a synthetic
        base for the input (:meth:`_check_restrided`)."""
        base = v._base
        return base is not None and self._shadow(base) is not None and base.storage_offset() != 0

    def _without_history(self, t: FunctionalTensor) -> bool:
        """``t`` is on a partial input storage without autograd history
        (``unrecorded_partial_storages``) and has none itself yet, nor got any through an
        input aliasing it (``recorded_caller_storages``)."""
        storage = StorageWeakRef(t.untyped_storage())
        return (
            storage in self.unrecorded_partial_storages and not t.requires_grad
            and self.caller_storage[storage] not in self.recorded_caller_storages
        )

    def _note_recorded_write(self, name: str, args: tuple, kwargs: dict) -> None:
        """After a write (``name``) into an input's storage that autograd recorded (the written
        tensor requires grad afterwards, on a storage that had no history: see
        ``unrecorded_partial_storages``), note its caller's storage; refuse where a tensor on
        that storage was re-strided outside its input's elements (``outside_caller_storages``):
        through an input aliasing the re-strided one, too, the synthetic base's gradient for
        the re-strided input differs from eager's (checked in tests/test_restrided_views.py)."""
        written = kwargs.get("out")
        if written is None and args and writes_through_source(name):
            written = args[0]
        if not isinstance(written, FunctionalTensor) or not written.requires_grad:
            return
        caller = self.caller_storage.get(StorageWeakRef(written.untyped_storage()))
        if caller is None:
            return
        self.recorded_caller_storages.add(caller)
        if caller in self.outside_caller_storages:
            raise AotgradCompileError(
                f"aotgrad: in-place {name} at {current_user_line()} writes, with an operand that "
                "requires grad, into an input's storage on which a tensor was re-strided by "
                "as_strided_ outside its input's own elements: the gradient through the re-strided "
                "tensor would not be eager's. clone() the input first, or re-stride it outside the "
                "function."
            )

    def _check_restrided(self, name: str, written: FunctionalTensor | None, restrided: list[Restrided]) -> None:
        """Refuse a write (``name``, into ``written``) into a storage with a view re-strided by
        ``as_strided_`` (:meth:`_restride`) where functionalization replays it otherwise than
        eager's layout: as a view of its old layout; as ``as_strided`` of a root
        (:func:`rebased_root`) that no longer addresses its storage as eager's
        (:meth:`_addresses_storage_as_eager`). (A write through an ``as_strided`` into an
        input requiring grad laid out densely but not contiguously is exact: its scatter runs
        on a ``detach()``ed value, ``tracing._scatter_into_detached_inputs``.)"""
        if not restrided:
            return
        storage = StorageWeakRef(written.untyped_storage())
        for entry in restrided:
            root = entry.root
            if root is not None:
                if not functionalization.get_view_meta_sequence(root.elem) and self._addresses_storage_as_eager(root):
                    continue
            elif entry.is_input:
                continue
            if entry.within_input and storage in self.partial_input_storages and not (
                entry.outside_input and written.requires_grad
            ):
                self.restrided_partial_storages.add(storage)
                continue
            raise AotgradCompileError(
                f"aotgrad: in-place {name} at {current_user_line()} writes into a storage with a "
                f"view (a slice, a transpose) re-strided by as_strided_ ({entry.line}): "
                "functionalization replays such a write onto a copy of the view's old layout, or "
                "of a tensor the traced program lays out otherwise than eager (a sliced, expanded "
                "or non-contiguous input, or one an in-place op re-laid out), and would change "
                "other elements than eager. Use as_strided (out of place) of the base, or clone() first."
            )

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name_of(func)
        with torch._C.DisableTorchFunction():  # the attribute reads are no program ops
            raise_eager_overlap_error(func, args, kwargs, self.known_geometry)
            restride = self._restride(args, kwargs) if name == "as_strided_" and args else None
            written, restrided = self._written_restrided(name, args, kwargs)
            self._check_restrided(name, written, restrided)
            version = version_of(args[0]) if args else None
            before = self._history_before(name, args, version)
        out = self._run(func, args, kwargs, version)
        with torch._C.DisableTorchFunction():
            self._note_last_step(func, name, args, kwargs, out)
            self._note_restride_steps(name, before, out)
            if restride is not None:
                self.restrided.setdefault(StorageWeakRef(args[0].untyped_storage()), []).append(restride)
            self._check_restrided(name, written, restrided)
            self._note_recorded_write(name, args, kwargs)
        return out

    def _run(self, func, args: tuple, kwargs: dict, version: int | None) -> Any:
        """Run ``func``, shadowing what it does (and refusing what would not match eager);
        ``version``: ``args[0]``'s before the op (:func:`~aotgrad.core.stale_views.version_of`)."""
        shadow = self._shadow(args[0]) if args else None
        with torch._C.DisableTorchFunction():  # the attribute reads are no program ops
            self._check_stale_view_rewrites()
            self._note_restrided_root(_name_of(func), args)
            self._refuse_as_strided_of_relaid_root(_name_of(func), args)
            self._refuse_raising_replay(_name_of(func), args, kwargs)
        if shadow is None:
            out = func(*args, **kwargs)
            with torch._C.DisableTorchFunction():
                if args and isinstance(args[0], FunctionalTensor):
                    self._note_no_grad_views(args[0], out, getattr(func, "__name__", ""))
                    self._shadow_views_of_root(func, getattr(func, "__name__", ""), args, kwargs, out)
                    self._follow_root(func, getattr(func, "__name__", ""), args, kwargs)
                self._note_roots(func, out)
                self._note_versions(_name_of(func), args, out, version)
                self._refuse_write_through_outdated_view(getattr(func, "__name__", ""), args, kwargs, out)
                self._refuse_unreplayable_view(func, args, kwargs, out)
            return out
        name = getattr(func, "__name__", "")
        if name in _VIEWS_BY_STRIDES:
            _raise_eager_view_error(name, args, kwargs, shadow)
        call_args = args
        if name in _STORAGE_ADDRESSING and (_relaid_out(args[0], shadow)):
            call_args = self._as_strided_of_merged_input(name, args, kwargs)
            if call_args is None:
                raise AotgradCompileError(
                    f"aotgrad: {name} at {current_user_line()} on a tensor that functionalization "
                    "lays out otherwise than eager (a sliced or non-contiguous input after an in-place "
                    "op on it): its offsets and strides would name other elements. Take as_strided "
                    "before the in-place op, or of a clone()."
                )
        elif name in _STORAGE_ADDRESSING and (deferred := self._view_of_relaid_input_left_to_base_run(args, kwargs)):
            call_args = deferred
        lent: contextlib.AbstractContextManager = contextlib.nullcontext()
        if name == "as_strided_" and _past_functional_storage(args, kwargs, shadow):
            call_args = self._restride_left_to_base_run(args, kwargs)
            if call_args is None:
                raise AotgradCompileError(
                    f"aotgrad: as_strided_ at {current_user_line()} re-strides an input (or a view or "
                    "detach()ed alias of one) onto elements of the caller's storage past the input's "
                    "own extent; functionalization holds only the input's own elements. Use "
                    "as_strided (out of place), or pass the tensor that owns the storage."
                )
            # (eager's layout where no other fits the wrapper's storage: see the method)
            named = as_strided_geometry(call_args[0], call_args[1:], kwargs)
            lent = storage_for_layout(call_args[0], *named) if named is not None else lent
        with lent:
            out = func(*call_args, **kwargs)
        with torch._C.DisableTorchFunction():  # the attribute reads below are no program ops
            self._follow(func, name, args, kwargs, shadow, out)
            self._check_layout_decision(name, args, kwargs, shadow, out)
            self._note_roots(func, out)
            self._note_versions(name, args, out, version)
            self._refuse_write_through_outdated_view(name, args, kwargs, out)
            self._refuse_unreplayable_view(func, args, kwargs, out)
        return out

    def _check_layout_decision(self, name: str, args: tuple, kwargs: dict, shadow: torch.Tensor, out: Any) -> None:
        """``reshape``/``flatten``/``contiguous`` (``name``) of ``args[0]`` choose
        between a view and a copy, and the view's strides, by ``args[0]``'s strides, which
        are functionalization's: not eager's where an in-place op laid an input sliced with a
        step (or a view of one) out densely (``eager_rewrites._keeping_layout``). Where the
        result (``out``) is a view and eager's (the op on ``shadow``) a copy, or the other way
        round, or both views of other strides, the input's storage is left to the run over a
        synthetic base for it (``restrided_partial_storages``: the whole storage, laid out as
        eager's), where this run's values are not used; where no such run follows, refused."""
        if name not in _LAYOUT_DECIDED or not isinstance(out, FunctionalTensor):
            return
        rest = _shadow_args(name, args, kwargs)
        if rest is None:
            return
        try:
            with _outside_tracing():
                eager_out = getattr(torch.Tensor, name)(shadow, *rest, **kwargs)
        except RuntimeError:
            return  # (the op raises itself)
        eager_view = eager_out.untyped_storage()._cdata == shadow.untyped_storage()._cdata
        functional_view = out is args[0] or _is_alias(out, args[0])
        if eager_view == functional_view and not (
            eager_view and not _same_static_layout(_geometry(out), _geometry(eager_out))
        ):
            return
        storage = StorageWeakRef(args[0].untyped_storage())
        if storage in self.partial_input_storages:
            self.restrided_partial_storages.add(storage)
            return
        raise AotgradCompileError(
            f"aotgrad: {name} at {current_user_line()} of a tensor that functionalization lays "
            "out otherwise than eager (an input sliced with a step, or a view of one, after an "
            "in-place op on it): it would " + ("view" if functional_view else "copy") + " where eager "
            + ("views" if eager_view else "copies") + ". Call clone() on the input before the in-place op."
        )

    def _note_roots(self, func, out: Any) -> None:
        """Shadow the fresh tensors (no views, no inputs) ``func`` returned: at creation
        functionalization's layout is eager's."""
        if getattr(func, "__name__", "") == "__get__":
            return  # an attribute (``._base``, ``.data``) makes no new tensor
        for r in out if isinstance(out, (tuple, list)) else (out,):
            if (
                not isinstance(r, FunctionalTensor) or r._base is not None
                or id(r) in self.roots or self._shadow(r) is not None
            ):
                continue
            geometry = _geometry(r)
            if any(isinstance(x, torch.SymInt) for x in (*geometry[0], *geometry[1], geometry[2])):
                continue
            try:
                nbytes = r.untyped_storage().nbytes()
            except Exception:  # noqa: BLE001 - no storage to lay a shadow over
                continue
            if isinstance(nbytes, torch.SymInt):
                continue
            # (made when first read: _root_entry)
            self.roots[id(r)] = (r, _PendingRootShadow(
                nbytes // r.element_size(), r.dtype, geometry, torch.is_inference_mode_enabled()
            ))

    def _root_entry(self, t: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``roots``' entry of ``t`` (the tensor, its root shadow, made now if it was not
        yet); None where ``t`` has none. Every read of a root shadow itself goes through
        here (``_root_geometry`` reads a pending one's geometry without making it)."""
        entry = self.roots.get(id(t)) if isinstance(t, FunctionalTensor) else None
        if entry is None or entry[0] is not t:
            return None
        if type(entry[1]) is _PendingRootShadow:
            entry = self.roots[id(t)] = (t, entry[1].make())
        return entry

    def _root_shadow(self, t: Any) -> torch.Tensor | None:
        entry = self._root_entry(t)
        return entry[1] if entry is not None else None

    def _has_root_shadow(self, t: Any) -> bool:
        """``t`` has a root shadow (made or not: none is made here)."""
        entry = self.roots.get(id(t)) if isinstance(t, FunctionalTensor) else None
        return entry is not None and entry[0] is t

    def _root_geometry(self, t: Any) -> Geometry | None:
        """The geometry of ``t``'s root shadow (None: it has none), without making a pending
        one: the pending geometry is the one its shadow gets (``as_strided`` of it, in
        bounds of the storage it was read with: a fresh tensor lies within its storage)."""
        entry = self.roots.get(id(t)) if isinstance(t, FunctionalTensor) else None
        if entry is None or entry[0] is not t:
            return None
        return entry[1].geometry if type(entry[1]) is _PendingRootShadow else _geometry(entry[1])

    def _root(self, t: Any) -> torch.Tensor | None:
        """The intermediate ``t`` is (or is a view of) where it has a root shadow."""
        if self._has_root_shadow(t):
            return t
        entry = self.root_of.get(id(t)) if isinstance(t, FunctionalTensor) else None
        return entry[1] if entry is not None and entry[0] is t else None

    def _refuse_as_strided_of_relaid_root(self, name: str, args: tuple) -> None:
        """``as_strided`` addresses the storage as laid out: on an intermediate (or a view of
        one) whose functional value is laid out otherwise than eager's (:meth:`relaid_root`)
        it names other elements in the graph than in eager."""
        if name not in _STORAGE_ADDRESSING or not args:
            return
        root = self._root(args[0])
        if root is not None and self.relaid_root(root):
            raise AotgradCompileError(
                f"aotgrad: {name} at {current_user_line()} on a tensor the program computed and "
                "then changed in place (through a view or by an op whose functional form lays "
                "its result out otherwise than eager's tensor): its offsets and strides would "
                "name other elements. Take as_strided before the in-place op, or of a clone()."
            )

    def _shadow_views_of_root(self, func, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        """Shadow the views of an intermediate (``args[0]``, with a root shadow) that ``func``
        returned, taken off the root shadow (its no_grad prefix is recorded by
        :meth:`_note_no_grad_views`)."""
        if not self._has_root_shadow(args[0]) or name in RELAYING_INPLACE or name in _UNSHADOWABLE:
            return
        # (the root shadow is made only where func returned views of args[0] to shadow)
        self._shadow_views(func, name, args, kwargs, lambda: self._root_shadow(args[0]), out, note_no_grad=False)

    def _follow_root(self, func, name: str, args: tuple, kwargs: dict) -> None:
        """Apply an in-place metadata op on an intermediate to its root shadow (data ops keep
        eager's layout); forget the shadow where it cannot follow."""
        if id(args[0]) not in self.roots or self.roots[id(args[0])][0] is not args[0]:
            return
        if name in _UNSHADOWABLE:
            del self.roots[id(args[0])]
            return
        if name not in RELAYING_INPLACE:
            return
        entry = self._root_entry(args[0])
        assert entry is not None
        try:
            with _outside_tracing():
                func(entry[1], *args[1:], **kwargs)
        except Exception:  # noqa: BLE001 - the functional layout is used instead
            del self.roots[id(args[0])]

    def _follow(self, func, name: str, args: tuple, kwargs: dict, shadow: torch.Tensor, out: Any) -> None:
        """Apply to ``shadow`` what ``func`` did to ``args[0]`` (an in-place metadata op), or
        shadow the views of ``args[0]`` that ``func`` returned."""
        if _shadow_args(name, args, kwargs, func) is None:
            return
        if name in _UNSHADOWABLE:
            del self.shadows[id(args[0])]
            return
        if name in RELAYING_INPLACE:
            with _outside_tracing():
                func(shadow, *args[1:], **kwargs)
            self._note_no_grad_views(args[0], out, name)
            return
        self._shadow_views(func, name, args, kwargs, shadow, out, note_no_grad=True)

    def _shadow_views(
        self, func, name: str, args: tuple, kwargs: dict, shadow: torch.Tensor | Callable[[], torch.Tensor], out: Any,
        *, note_no_grad: bool,
    ) -> None:
        """Shadow the views of ``args[0]`` (shadowed by ``shadow``, or by what ``shadow()``
        returns, asked only where there are views) that ``func`` returned: ``func`` applied
        to the shadow. ``note_no_grad``: also record their no_grad prefix."""
        rest = _shadow_args(name, args, kwargs, func)
        if rest is None:
            return
        results = out if isinstance(out, (tuple, list)) else (out,)
        views = [
            r for r in results
            if isinstance(r, FunctionalTensor) and r is not args[0] and (name == "detach" or _is_alias(r, args[0]))
        ]
        if not views:
            return
        if not isinstance(shadow, torch.Tensor):
            shadow = shadow()
        try:
            with _outside_tracing():
                if name == "detach":
                    shadow_out: Any = shadow.as_strided(*_geometry(shadow))
                else:
                    shadow_out = func(shadow, *rest, **kwargs)
        except Exception:  # noqa: BLE001 - no shadow: the functional geometry is used
            return
        shadow_results = shadow_out if isinstance(shadow_out, (tuple, list)) else (shadow_out,)
        if len(shadow_results) != len(results):
            return
        for r, s in zip(results, shadow_results):
            if isinstance(s, torch.Tensor) and any(r is v for v in views):
                self.shadows[id(r)] = (r, s)
                root = self._root(args[0])
                if root is not None:
                    self.root_of[id(r)] = (r, root)
                if not note_no_grad:
                    continue
                if not torch.is_grad_enabled() and args[0].requires_grad:
                    self.no_grad_steps[id(r)] = (r, len(functionalization.get_view_meta_sequence(r.elem)), current_user_line())
                elif self.no_grad_prefix(args[0]):
                    self.no_grad_steps[id(r)] = (r, self.no_grad_prefix(args[0]), self.no_grad_line(args[0]))


    def _note_no_grad_views(self, source: FunctionalTensor, out: Any, name: str) -> None:
        """Record the no_grad prefix (:meth:`no_grad_prefix`) of the views of ``source`` (a
        tensor without a shadow: an intermediate) that ``out`` holds, as :meth:`_follow`
        does for shadowed ones; a view already recorded keeps its entry (``._base`` returns
        an existing tensor). An in-place metadata op (``t_``) under no_grad on a view with a
        no_grad prefix extends its chain by a no_grad step: the whole chain is its prefix
        then. (On a view made with grad recording it adds none: eager regenerates the view's
        grad_fn off its base, ``AsStridedBackward0`` in the new geometry, so its gradient and
        that of the views taken of it afterwards reach the base: fuzz seed 4005060.)"""
        if torch.is_grad_enabled():
            steps = self.no_grad_prefix(source)
        else:
            steps = -1 if source.requires_grad else 0
        if not steps:
            return
        if out is source:
            # only a metadata op adds a step to the chain (a data op under no_grad adds none)
            if steps < 0 and source._base is not None and name in RELAYING_INPLACE and self.no_grad_prefix(source):
                self.no_grad_steps[id(source)] = (
                    source, len(functionalization.get_view_meta_sequence(source.elem)), current_user_line()
                )
            return
        for r in out if isinstance(out, (tuple, list)) else (out,):
            if (
                isinstance(r, FunctionalTensor) and r is not source and r._base is not None
                and id(r) not in self.no_grad_steps and _is_alias(r, source)
            ):
                if steps < 0:
                    self.no_grad_steps[id(r)] = (r, len(functionalization.get_view_meta_sequence(r.elem)), current_user_line())
                else:
                    self.no_grad_steps[id(r)] = (r, steps, self.no_grad_line(source))


def _name_of(func: Any) -> str:
    return getattr(func, "__name__", "")


def _autograd_replays(view: FunctionalTensor) -> bool:
    """Autograd's replay of ``view``'s chain on its base (``_view_func``: how it addresses a
    write through a view of a traced tensor, in the write's backward) gives ``view``'s
    geometry. It does not after an in-place metadata op on the view (or on a view it was
    taken from): the recorded chain misses that op."""
    if torch._C._autograd._get_creation_meta(view) != torch._C._autograd.CreationMeta.DEFAULT:
        # autograd never replays such a view (multi-output, no_grad, inference mode): a write
        # through it or a recorded use once stale raises, in eager as in the analysis run.
        # (Replaying unbind's chain on a base an in-place metadata op re-shaped crashes.)
        return True
    replayed = _autograd_replay(view)
    # (strides of size-1 dims are never stepped along: the replay names the same elements)
    return replayed is not None and same_addressing(replayed, functional_geometry(view))


def _sums_to(shape: tuple, target: tuple) -> bool:
    """A gradient of ``shape`` is one autograd sums to ``target`` (``target`` expands to
    ``shape``), as it does to an input's shape where they differ; static sizes only."""
    if any(type(n) is not int for n in (*shape, *target)) or len(target) > len(shape):
        return False
    return all(t in (1, n) for t, n in zip(target[::-1], shape[::-1]))


def _autograd_replay(view: FunctionalTensor) -> Geometry | None:
    """The geometry autograd's replay of ``view``'s recorded chain (``_view_func``; the view's
    own geometry where none is recorded) gives on its base's current functional geometry; None
    where the replay raises: the chain does not apply to the base's new geometry (a permute of
    as many dims as the base had before ``unsqueeze_``, a select of a dim ``t_`` shortened),
    so autograd raises where eager regenerates the view by ``as_strided`` (fuzz seed 1018480)."""
    base = view._base
    # compared on functionalization's values (an in-place op may have re-laid out both)
    base_geometry = functional_geometry(base)
    try:
        with _outside_tracing():
            storage = torch.empty(base.untyped_storage().nbytes() // base.element_size(), dtype=base.dtype, device="meta")
            return _geometry(view._view_func_unsafe(storage.as_strided(*base_geometry)))
    except Exception:  # noqa: BLE001 - the chain's own error (size, dim, index): no replay
        return None


_AS_STRIDED_VIEW_METAS = frozenset({"as_strided_ViewMeta", "as_strided__ViewMeta"})


def _replay_drops_gradient(view: FunctionalTensor) -> bool:
    """Autograd's replay of ``view``'s chain from its base differentiates otherwise than one
    ``as_strided`` off the base in the view's geometry (eager's regenerated
    ``AsStridedBackward0`` of a stale view): an ``as_strided`` step after the first names
    memory outside its input's elements (its backward drops their gradient: ``b = x[0];
    b.as_strided((2,), (3,))``) or takes an input whose elements overlap (its backward divides
    by their count). Other view steps select within their input. Unsure (symbolic or large
    geometries, a chain that does not apply): True, so the view is rewritten (and the
    rewrite checked) or refused. (A write through such a chain is refused by
    functionalization itself: an ``as_strided`` that is not the chain's first view.)"""
    seq = functionalization.get_view_meta_sequence(view.elem)
    rest = list(seq[len(functionalization.get_view_meta_sequence(view._base.elem)):])
    if not any(type(vm).__name__ in _AS_STRIDED_VIEW_METAS for vm in rest[1:]):
        return False
    if any(vm.has_symbolic_inputs for vm in rest):
        return True
    base = view._base
    try:
        with _outside_tracing():
            storage = torch.empty(base.untyped_storage().nbytes() // base.element_size(), dtype=base.dtype, device="meta")
            step = storage.as_strided(*functional_geometry(base))
            for k, vm in enumerate(rest):
                following = functionalization.apply_view_meta_sequence(step, [vm])
                if k > 0 and type(vm).__name__ in _AS_STRIDED_VIEW_METAS:
                    before, after = _geometry(step), _geometry(following)
                    if any(type(v) is not int for g in (before, after) for v in (*g[0], *g[1], g[2])):
                        return True
                    inside, outside = _location_set(before), _location_set(after)
                    if inside is None or outside is None or not outside <= inside:
                        return True
                    if len(inside) < math.prod(before[0]):
                        return True
                step = following
    except Exception:  # noqa: BLE001 - a chain that no longer applies
        return True
    return False


def _past_functional_storage(args: tuple, kwargs: dict, shadow: torch.Tensor) -> bool:
    """``args[0].as_strided_(*args[1:], **kwargs)`` (``args[0]`` shadowed by ``shadow``) lays
    the tensor out past the end of its functional storage but within eager's: functionalization
    sizes an input's storage by the input's own extent (``x[0]`` of a ``(3,)`` tensor holds one
    element), eager's is the caller's whole storage. Where eager's is exceeded too, eager
    raises, and so does the functional op."""
    t = args[0]
    named = as_strided_geometry(t, args[1:], kwargs)
    if named is None:
        return False
    size, stride, offset = named
    with torch._C.DisableTorchFunction():
        values = (*size, *stride, offset, t.untyped_storage().nbytes())
        if any(not isinstance(v, int) for v in values) or any(n == 0 for n in size) or any(st < 0 for st in stride):
            return False
        end = (offset + sum((n - 1) * st for n, st in zip(size, stride)) + 1) * t.element_size()
        return t.untyped_storage().nbytes() < end <= shadow.untyped_storage().nbytes()


def _static_layout(args: tuple, kwargs: dict) -> bool:
    """``args[0].as_strided_(*args[1:], **kwargs)`` names a layout with no symbolic value."""
    named = as_strided_geometry(args[0], args[1:], kwargs)
    return named is not None and all(type(v) is int for v in (*named[0], *named[1], named[2]))


def _addressed(size: tuple, stride: tuple, offset: Any) -> frozenset[int] | None:
    """The storage offsets a static layout addresses; None where a value is symbolic or the
    layout is too large to enumerate."""
    if any(type(n) is not int for n in (*size, *stride, offset)):
        return None
    found = _location_set((size, stride, offset))
    return None if found is None else frozenset(found)


def _same_static_layout(a: Geometry, b: Geometry) -> bool:
    """Two geometries have the same sizes, and the same strides in dims of size > 1 (those of
    size 1 name no other element); symbolic ones count as the same (the shape environment is
    not asked: no guard is added)."""
    values = (*a[0], *a[1], *b[0], *b[1])
    if any(type(v) is not int for v in values):
        return True
    if tuple(a[0]) != tuple(b[0]):
        return False
    return all(x == y for n, x, y in zip(a[0], a[1], b[1]) if n > 1)


def _raise_eager_view_error(name: str, args: tuple, kwargs: dict, shadow: torch.Tensor) -> None:
    """Raise eager's error for ``view``/``view_as`` (``name``) of ``args[0]``, shadowed by
    ``shadow``, where eager's strides do not allow the view: functionalization's value of
    ``args[0]`` may be laid out otherwise (an input sliced with a step, or a view of one,
    whose in-place write ``eager_rewrites._keeping_layout`` lays out densely), and would take
    the view."""
    rest = _shadow_args(name, args, kwargs)
    if rest is None:
        return
    try:
        with _outside_tracing():
            func = torch.Tensor.view if name == "view" else torch.Tensor.view_as
            func(shadow, *rest, **kwargs)
    except RuntimeError as exc:
        if "view size is not compatible" in str(exc):
            raise RuntimeError(str(exc)) from None


def _shadow_args(name: str, args: tuple, kwargs: dict, func: Any = None) -> tuple | None:
    """The arguments after ``args[0]`` to apply ``name`` (``func``) to a shadow with; None
    where the op makes no view a shadow can follow (an attribute read other than a view
    property, :data:`~aotgrad.core.op_args.VIEW_PROPERTIES`; tensor arguments, which index by
    data and copy)."""
    if name == "__get__":
        # an attribute (``._base``) is no new view; a view property's getter (``func``)
        # applies to the shadow as it is
        return () if view_property(func) is not None else None
    rest = args[1:]
    if name in _SHAPED_LIKE and len(rest) == 1 and isinstance(rest[0], torch.Tensor) and not kwargs:
        with _outside_tracing():  # only the other tensor's shape matters
            return (torch.empty(tuple(rest[0].shape), dtype=rest[0].dtype, device="meta"),)
    if any(isinstance(a, torch.Tensor) for a in tree_leaves((rest, kwargs))):
        return None
    return rest


def functional_geometry(t: FunctionalTensor) -> Geometry:
    """The geometry of functionalization's current value of ``t`` (the graph's value), which
    the wrapper's own size and strides do not follow after an in-place op replaced it."""
    with torch._C.DisableTorchFunction():
        torch._sync(t)
        return _geometry(torch._from_functional_tensor(t.elem))


def _starts_its_storage(t: FunctionalTensor) -> bool:
    """``t``'s functional value starts at storage offset 0, as the fresh tensor a write's
    backward replays a view's chain on (:func:`_write_replays`)."""
    offset = functional_geometry(t)[2]
    return type(offset) is int and offset == 0


def _covers_storage(t: torch.Tensor) -> bool:
    """``t`` is its storage (as ``aliasing._covers_storage``, which makes no synthetic base
    for such an input)."""
    return (
        t._base is None
        and t.storage_offset() == 0
        and t.is_contiguous()
        and t.numel() * t.element_size() == t.untyped_storage().nbytes()
    )


def _has_history(t: torch.Tensor) -> bool:
    """``t`` (a caller's tensor, faked) or its root (``._base``) requires grad: eager's
    gradient reaches the root's storage locations, also those outside ``t``."""
    return t.requires_grad or (t._base is not None and t._base.requires_grad)


def _relaid_out(t: FunctionalTensor, shadow: torch.Tensor) -> bool:
    """``t`` starts its view chain and functionalization's value for it is laid out unlike
    eager's tensor: an in-place op replaced the value (a fresh tensor at offset 0) of a
    sliced or non-contiguous input. ``as_strided`` of it would address other elements."""
    with torch._C.DisableTorchFunction():
        if functionalization.get_view_meta_sequence(t.elem):
            return False
    return _value_laid_out_otherwise(t, shadow)


def _value_laid_out_otherwise(t: FunctionalTensor, shadow: torch.Tensor) -> bool:
    """Functionalization's value for ``t`` (an autograd root: an input, re-laid out by its
    own in-place metadata ops or not) is laid out unlike eager's tensor (``shadow``)."""
    with torch._C.DisableTorchFunction():
        torch._sync(t)
        return not same_addressing(_geometry(torch._from_functional_tensor(t.elem)), _geometry(shadow))


@contextlib.contextmanager
def _outside_tracing():
    """No dispatch mode (fake, functional) and no torch-function mode (the analysis checks)
    sees the ops run on shadows."""
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        yield


def _is_alias(result: FunctionalTensor, source: torch.Tensor) -> bool:
    """``result`` is a view (or detach()ed alias) of ``source``'s storage."""
    return result._base is not None or result.untyped_storage()._cdata == source.untyped_storage()._cdata
