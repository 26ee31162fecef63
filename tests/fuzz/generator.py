"""Random small programs over views, in-place ops and metadata mutations.

Each program is emitted as Python source (``def f(a, b, k): ...``) plus a plain-data input
spec (see :mod:`tests.fuzz.harness`), so a failure is a readable reproducer.

The generator *runs* every statement eagerly on real (tiny) tensors as it emits it, so it
always knows exact shapes, strides, dtypes and what raises; a statement that raises is
dropped, except now and then it is kept (and ends the program) so that eager-raises cases are
exercised too.  All randomness goes through a :class:`Chooser`, so the same code is driven by
hypothesis (``cases()``, which shrinks) or by ``random.Random`` (``random_case(seed)``, fast,
for the long CLI run).  Options are listed simplest first, because shrinking moves every
choice toward index 0 and every ``flip`` toward False.
"""

from __future__ import annotations

import random
import warnings
from typing import Any, Callable, Sequence

import torch
from aotgrad.core.overlapping_writes import Overlap, overlap_of

from .harness import Case, build_inputs

# --------------------------------------------------------------------------- choosers


class Chooser:
    def int(self, lo: int, hi: int) -> int:  # inclusive
        raise NotImplementedError

    def flip(self, p: float) -> bool:
        """True with probability ``p``; shrinks toward False."""
        return self.int(0, 999) >= round((1 - p) * 1000)

    def choice(self, seq: Sequence):
        return seq[self.int(0, len(seq) - 1)]

    def weighted(self, pairs: Sequence[tuple[float, Any]]):
        pairs = [(w, v) for w, v in pairs if w > 0]
        total = sum(round(w * 10) for w, _ in pairs)
        r = self.int(0, total - 1)
        for w, v in pairs:
            r -= round(w * 10)
            if r < 0:
                return v
        return pairs[-1][1]


class RandomChooser(Chooser):
    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def int(self, lo, hi):
        return self.rng.randint(lo, hi)

    def flip(self, p):
        return self.rng.random() < p


class DrawChooser(Chooser):
    """Drives the generator from hypothesis's ``draw``."""

    def __init__(self, draw):
        from hypothesis import strategies as st

        self.draw = draw
        self.st = st

    def int(self, lo, hi):
        if lo == hi:
            return lo
        return self.draw(self.st.integers(lo, hi))


# --------------------------------------------------------------------------- helpers

_G = {"torch": torch}
TENSOR_PARAMS = "abcd"
CATS = ("input", "input_view", "inter", "inter_view")


def _fmt_shape(shape) -> str:
    shape = tuple(shape)
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _storage_numel(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes() // t.element_size()


def _reshape_targets(shape) -> list[tuple]:
    shape = tuple(shape)
    n = 1
    for s in shape:
        n *= s
    outs = [(-1,), (n,), (1, n)]
    for i in range(len(shape) - 1):  # merge two adjacent dims
        outs.append(shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2 :])
    for i, s in enumerate(shape):  # split one dim
        for f in (2, 3):
            if s % f == 0 and s > f:
                outs.append(shape[:i] + (f, s // f) + shape[i + 1 :])
    outs.append(shape + (1,))
    if n % 2 == 0 and n > 2:
        outs.append((2, -1))
    return outs


def _index_text(dim: int, idx: str) -> str:
    return "[" + ":, " * dim + idx + "]"


# --------------------------------------------------------------------------- generator


class _Gen:
    def __init__(self, ch: Chooser, seed: int):
        self.ch = ch
        self.seed = seed
        self.lines: list[tuple[int, str]] = []
        self.env: dict[str, Any] = {}
        self.tags: dict[str, str] = {}
        self.order: list[str] = []  # tensor var names, creation order
        self.nonten: dict[str, Any] = {}
        self.count = 0
        self.indent = 1
        self.nograd = False
        self.grad_region = False
        self.dead = False
        self.input_storages: set[int] = set()
        self.inter_storages: set[int] = set()

    # ----------------------------------------------------------------- inputs

    def gen_inputs(self) -> tuple[dict, list[str]]:
        ch = self.ch
        bases = []
        for _ in range(ch.weighted([(5, 1), (3, 2), (1, 3)])):
            rank = ch.weighted([(4, 2), (3, 1), (2, 3), (1, 0)])
            shape = [ch.int(1, 4) for _ in range(rank)]
            dtype = ch.weighted([(4, "float32"), (1, "float64")])
            bases.append({"shape": shape, "dtype": dtype, "rg": not ch.flip(0.35)})
        base_ts, _ = build_inputs({"bases": bases, "args": []}, self.seed)

        tensor_args: list[dict] = []
        n_t = ch.weighted([(4, 1), (4, 2), (2, 3), (1, 4)])
        for i in range(n_t):
            if tensor_args and ch.flip(0.12):
                tensor_args.append({"kind": "same", "arg": ch.int(0, len(tensor_args) - 1)})
                continue
            bi = i if i < len(bases) else ch.int(0, len(bases) - 1)
            expr = self.input_expr(base_ts[bi])
            tensor_args.append({"kind": "tensor", "base": bi, "expr": expr})

        params = list(TENSOR_PARAMS[:n_t])
        args = list(tensor_args)
        extras = []
        if ch.flip(0.3):
            extras.append(("k", ch.int(0, 3)))
        if ch.flip(0.2):
            extras.append(("s", ch.choice([0.5, 2.0, -1.5])))
        if ch.flip(0.2):
            extras.append(("flag", ch.flip(0.5)))
        if ch.flip(0.15):
            extras.append(("opt", None if not ch.flip(0.3) else 1.5))
        if ch.flip(0.15):
            extras.append(("mode", ch.choice(["sum", "mean"])))
        for name, value in extras:
            pos = len(params) if not ch.flip(0.3) else ch.int(0, len(params))
            params.insert(pos, name)
            args.insert(pos, {"kind": "value", "value": value})
            self.nonten[name] = value
        # Arg specs refer to earlier args by position: fix "same" indices after insertion.
        tpos = [i for i, a in enumerate(args) if a["kind"] != "value"]
        for a in args:
            if a["kind"] == "same":
                a["arg"] = tpos[a["arg"]]
        return {"bases": bases, "args": args}, params

    def input_expr(self, x: torch.Tensor) -> str:
        ch = self.ch
        r = x.dim()
        opts: list[tuple[float, Callable[[], str | None]]] = [
            (8, lambda: "x"),
            (1, lambda: "x.detach()"),
            (1, lambda: "x.clone()"),
            (0.7, lambda: "x.unsqueeze(0)"),
            (0.6, lambda: f"x.expand(2, *{tuple(x.shape)!r})" if r <= 2 else None),
            (1, lambda: self.as_strided_args("x", x, for_input=True)),
        ]
        if r >= 1:
            opts += [
                (1, lambda: "x[1:]" if x.shape[0] > 1 else "x[:1]"),
                (1, lambda: "x[::2]"),
                (0.5, lambda: "x[0]"),
                (0.5, lambda: "x.view(-1)"),
            ]
        if r >= 2:
            opts += [
                (3, lambda: "x.t()" if r == 2 else "x.transpose(0, 1)"),
                (1, lambda: "x[:, 1:]" if x.shape[1] > 1 else "x[:, :1]"),
                (1, lambda: "x.diagonal()"),
                (1, lambda: "x.clone().t()" if r == 2 else "x.clone().transpose(-1, -2)"),
                (0.5, lambda: "x.detach().transpose(0, 1)"),
            ]
        if r >= 3:
            opts.append((1, lambda: "x.permute(2, 0, 1)"))
        for _ in range(5):
            e = ch.weighted(opts)()
            if e is not None:
                return e
        return "x"

    def as_strided_args(self, name: str, x: torch.Tensor, for_input=False) -> str | None:
        ch = self.ch
        total = _storage_numel(x)
        if total == 0:
            return None
        rank = ch.weighted([(3, 2), (2, 1)])
        size = [ch.int(1, 3) for _ in range(rank)]
        stride = [ch.weighted([(3, 1), (2, 2), (1, 3), (0.5, 0)]) for _ in range(rank)]
        if rank == 2 and ch.flip(0.5):
            stride[0] = stride[0] * size[1] or 1  # row-major-ish
        extent = sum((s - 1) * st for s, st in zip(size, stride))
        lo = x.storage_offset()
        if lo + extent >= total:
            lo = 0
        if lo + extent >= total:
            return None
        off = ch.int(lo, total - 1 - extent) if ch.flip(0.4) else lo
        return f"{name}.as_strided({_fmt_shape(size)}, {_fmt_shape(stride)}, {off})"

    # ----------------------------------------------------------------- vars

    def tensors(self, pred=None) -> list[str]:
        out = []
        for n in self.order:
            v = self.env.get(n)
            if isinstance(v, torch.Tensor) and (pred is None or pred(v)):
                out.append(n)
        return out

    def pick(self, pred=None, by_category=False) -> str | None:
        names = self.tensors(pred)
        if not names:
            return None
        if by_category:
            cats = [c for c in CATS if any(self.tags.get(n) == c for n in names)]
            cat = self.ch.choice(cats)
            names = [n for n in names if self.tags.get(n) == cat]
        # Bias toward recent values: they make longer dependency chains.
        if len(names) > 1 and self.ch.flip(0.5):
            return names[-1]
        return self.ch.choice(names)

    def fresh(self) -> str:
        n = f"t{self.count}"
        self.count += 1
        return n

    def _tag(self, name: str, v: torch.Tensor) -> str:
        try:
            key = v.untyped_storage().data_ptr()
        except Exception:
            key = None
        if any(self.env.get(p) is v for p in self.order if self.tags.get(p) == "input"):
            return "input"
        if key is not None and key in self.input_storages:
            return "input_view"
        if v._is_view() or (key is not None and key in self.inter_storages):
            if key is not None:
                self.inter_storages.add(key)
            return "inter_view"
        if key is not None:
            self.inter_storages.add(key)
        return "inter"

    # ----------------------------------------------------------------- emitting

    def emit(self, text: str, new: Sequence[str] = (), keep_error_p: float = 0.03) -> bool:
        """Run ``text`` on the live state; keep it if it runs (or, rarely, if it raises)."""
        ctx = torch.no_grad() if self.nograd else torch.enable_grad()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with ctx:
                    exec(text, _G, self.env)
        except Exception:
            for n in new:
                self.env.pop(n, None)
            if self.ch.flip(keep_error_p):
                self.lines.append((self.indent, text))
                self.dead = True
                return True
            return False
        self.lines.append((self.indent, text))
        for n in new:
            v = self.env.get(n)
            if isinstance(v, torch.Tensor):
                self.order.append(n)
                self.tags[n] = self._tag(n, v)
        return True

    # ----------------------------------------------------------------- statements

    def stmt(self, allow_block=True) -> None:
        ch = self.ch
        kinds = [
            (4, self.s_pointwise),
            (5, self.s_view),
            (5, self.s_inplace),
            (1.5, self.s_meta),
            (1.5, self.s_reduce),
            (1.5, self.s_matmul),
            (1, self.s_detach),
            (1, self.s_multi_view),
            (0.5, self.s_factory),
            (1 if allow_block else 0, self.s_no_grad),
            (0.6 if (allow_block or self.nograd) and not self.grad_region else 0, self.s_grad_region),
            (1.5 if (self.nonten and allow_block) else 0, self.s_nontensor),
        ]
        for _ in range(4):
            if ch.weighted(kinds)():
                return

    def s_pointwise(self) -> bool:
        ch = self.ch
        x = self.pick()
        if x is None:
            return False
        xv = self.env[x]
        unary = [
            f"{x}.sin()",
            f"{x} * 2",
            f"{x} + 1",
            f"{x}.cos()",
            f"torch.tanh({x})",
            f"{x}.sigmoid()",
            f"{x}.relu()",
            f"-{x}",
            f"{x}.clone()",
            f"{x}.abs()",
            f"{x}.pow(2)",
            f"{x}.contiguous()",
        ]
        if ch.flip(0.45):
            ys = self.tensors(lambda v: _broadcasts(v.shape, xv.shape))
            if ys:
                y = ch.choice(ys)
                op = ch.choice(
                    [
                        f"{x} + {y}",
                        f"{x} * {y}",
                        f"{x} - {y}",
                        f"torch.maximum({x}, {y})",
                        f"torch.where({x} > 0, {x}, {y})",
                        f"{x}.add({y}, alpha=2)",
                    ]
                )
                n = self.fresh()
                return self.emit(f"{n} = {op}", [n])
        n = self.fresh()
        return self.emit(f"{n} = {ch.choice(unary)}", [n])

    def s_view(self) -> bool:
        ch = self.ch
        x = self.pick()
        if x is None:
            return False
        xv = self.env[x]
        r = xv.dim()
        shape = tuple(xv.shape)

        def reshape():
            tgt = ch.choice(_reshape_targets(shape))
            meth = ch.choice(["view", "reshape"])
            return f"{x}.{meth}{_fmt_shape(tgt)}" if len(tgt) != 1 else f"{x}.{meth}({tgt[0]})"

        def transpose():
            if r < 2:
                return f"{x}.t()"
            i = ch.int(0, r - 1)
            j = ch.int(0, r - 1)
            return f"{x}.transpose({i}, {j})" if i != j else (f"{x}.t()" if r == 2 else None)

        def permute():
            if r < 2:
                return None
            perm = list(range(r))
            for i in range(r - 1, 0, -1):
                j = ch.int(0, i)
                perm[i], perm[j] = perm[j], perm[i]
            return f"{x}.permute{_fmt_shape(perm)}"

        def slice_():
            if r == 0:
                return None
            d = ch.int(0, r - 1)
            size = shape[d]
            start = ch.int(0, max(size - 1, 0))
            stop = ch.int(start + 1, size) if size > start else size
            step = ch.weighted([(3, 1), (1, 2)])
            text = f"{start}:{stop}" + (f":{step}" if step != 1 else "")
            if ch.flip(0.4):
                return f"{x}.narrow({d}, {start}, {stop - start})"
            return f"{x}{_index_text(d, text)}"

        def select():
            if r == 0:
                return None
            d = ch.int(0, r - 1)
            i = ch.int(-shape[d], max(shape[d] - 1, 0)) if shape[d] else 0
            return f"{x}[{i}]" if d == 0 and ch.flip(0.5) else f"{x}.select({d}, {i})"

        def unsqueeze():
            return f"{x}.unsqueeze({ch.int(-(r + 1), r)})"

        def squeeze():
            if r == 0 or ch.flip(0.3):
                return f"{x}.squeeze()"
            return f"{x}.squeeze({ch.int(0, r - 1)})"

        def expand():
            new = [s if s != 1 else ch.int(1, 3) for s in shape]
            if ch.flip(0.5) or new == list(shape):
                new = [ch.int(1, 3)] + new
            return f"{x}.expand{_fmt_shape(new)}" if len(new) != 1 else f"{x}.expand({new[0]})"

        def diagonal():
            if r < 2:
                return None
            if ch.flip(0.5):
                return f"{x}.diagonal()"
            d1, d2 = ch.int(0, r - 1), ch.int(0, r - 1)
            if d1 == d2:
                return None
            return f"{x}.diagonal({ch.int(-1, 1)}, {d1}, {d2})"

        opts = [
            (2, transpose),
            (2, slice_),
            (2, reshape),
            (1.5, select),
            (1, unsqueeze),
            (1, squeeze),
            (1, expand),
            (1, permute),
            (1, diagonal),
            (1, lambda: self.as_strided_args(x, xv)),
            (0.5, lambda: f"{x}.flatten()"),
            (0.3, lambda: f"{x}.view(torch.int32)" if xv.dtype == torch.float32 else None),
            (0.3, lambda: f"{x}.view_as({x})"),
        ]
        for _ in range(3):
            e = ch.weighted(opts)()
            if e is not None:
                n = self.fresh()
                return self.emit(f"{n} = {e}", [n])
        return False

    def s_multi_view(self) -> bool:
        ch = self.ch
        x = self.pick(lambda v: v.dim() >= 1)
        if x is None:
            return False
        xv = self.env[x]
        d = ch.int(0, xv.dim() - 1)
        size = xv.shape[d]
        if ch.flip(0.5) and size <= 3 and size >= 1:
            names = [self.fresh() for _ in range(size)]
            lhs = ", ".join(names) + ("," if size == 1 else "")
            return self.emit(f"{lhs} = {x}.unbind({d})", names)
        n = self.fresh()
        if ch.flip(0.5):
            return self.emit(f"{n} = {x}.unbind({d})[{ch.int(0, max(size - 1, 0))}]", [n])
        sz = ch.int(1, max(size, 1))
        chunks = -(-size // sz) if size else 1
        if chunks <= 3 and ch.flip(0.5):
            names = [self.fresh() for _ in range(chunks)]
            lhs = ", ".join(names) + ("," if chunks == 1 else "")
            return self.emit(f"{lhs} = {x}.split({sz}, {d})", names)
        return self.emit(f"{n} = {x}.split({sz}, {d})[{ch.int(0, max(chunks - 1, 0))}]", [n])

    def s_reduce(self) -> bool:
        ch = self.ch
        x = self.pick()
        if x is None:
            return False
        xv = self.env[x]
        r = xv.dim()
        d = ch.int(-r, r - 1) if r else 0
        op = ch.choice(
            [
                f"{x}.sum()",
                f"{x}.sum({d})",
                f"{x}.sum({d}, keepdim=True)",
                f"{x}.mean({d})",
                f"{x}.amax({d})",
                f"{x}.cumsum({d})",
                f"{x}.softmax({d})",
                f"{x}.logsumexp({d})",
                f"{x}.prod()",
            ]
        )
        n = self.fresh()
        return self.emit(f"{n} = {op}", [n])

    def s_matmul(self) -> bool:
        ch = self.ch
        x = self.pick(lambda v: v.dim() >= 1 and v.is_floating_point())
        if x is None:
            return False
        xv = self.env[x]
        cands = []
        for y in self.tensors(lambda v: v.dim() >= 1 and v.dtype == xv.dtype):
            yv = self.env[y]
            if xv.shape[-1] == (yv.shape[-2] if yv.dim() >= 2 else yv.shape[0]):
                cands.append(f"{x} @ {y}")
                if xv.dim() == 2 and yv.dim() == 2:
                    cands.append(f"torch.mm({x}, {y})")
        if xv.dim() >= 2:
            cands += [f"{x} @ {x}.mT", f"{x}.mT @ {x}"]
        if xv.dim() == 1:
            cands.append(f"{x} @ {x}")
        if not cands:
            return False
        n = self.fresh()
        return self.emit(f"{n} = {ch.choice(cands)}", [n])

    def s_factory(self) -> bool:
        ch = self.ch
        x = self.pick()
        if x is None:
            return False
        xv = self.env[x]
        op = ch.choice(
            [
                f"torch.ones_like({x})",
                f"torch.zeros({_fmt_shape(xv.shape)})",
                f"torch.full_like({x}, 0.5)",
                f"torch.arange({max(xv.numel(), 1)}, dtype={x}.dtype).view({x}.shape)"
                if xv.numel()
                else f"torch.ones_like({x})",
            ]
        )
        n = self.fresh()
        return self.emit(f"{n} = {op}", [n])

    def s_detach(self) -> bool:
        x = self.pick()
        if x is None:
            return False
        n = self.fresh()
        return self.emit(f"{n} = {x}.detach()", [n])

    def s_inplace(self) -> bool:
        ch = self.ch
        x = self.pick(by_category=True)
        if x is None:
            return False
        xv = self.env[x]
        if _order_dependent(xv):
            # only writes whose value is the same for every element sharing a location
            if ch.flip(0.15) and xv.dim() >= 1 and xv.shape[0] >= 1:
                return self.emit(f"{x}[{ch.choice(['0', '1:', '::2'])}] = 1.0")
            ops = [f"{x}.zero_()", f"{x}.fill_(0.5)"]
            if not xv.requires_grad:  # (eager's gradient of masked_fill_ there is its loop order's)
                ops.append(f"{x}.masked_fill_({x} > 0, 0.0)")
            return self.emit(ch.choice(ops))
        if ch.flip(0.4):
            ys = [
                y
                for y in self.tensors(lambda v: _broadcasts_to(v.shape, xv.shape) and _no_partial_overlap(v, xv))
                if y != x
            ]
            if ys:
                y = ch.choice(ys)
                op = ch.choice(
                    [
                        f"{x}.add_({y})",
                        f"{x}.copy_({y})",
                        f"{x}.mul_({y})",
                        f"{x}.sub_({y}, alpha=2)",
                        f"{x}.addcmul_({y}, {y})",
                        f"torch.mul({y}, 2, out={x})" if tuple(self.env[y].shape) == tuple(xv.shape) else f"{x}.copy_({y})",
                    ]
                )
                return self.emit(op)
        if ch.flip(0.15) and xv.dim() >= 1 and xv.shape[0] >= 1:
            idx = ch.choice(["0", "1:", "::2", ":, 0" if xv.dim() >= 2 else "-1"])
            val = "1.0"
            ys = self.tensors(lambda v: not _shares_storage(v, xv))
            if ys and ch.flip(0.5):
                val = ch.choice(ys)
            return self.emit(f"{x}[{idx}] = {val}")
        op = ch.choice(
            [
                f"{x}.add_(1)",
                f"{x}.mul_(2)",
                f"{x}.sin_()",
                f"{x}.zero_()",
                f"{x}.fill_(0.5)",
                f"{x}.clamp_(-0.5, 0.5)",
                f"{x}.relu_()",
                f"{x}.sigmoid_()",
                f"{x}.neg_()",
                f"{x}.pow_(2)",
                f"{x}.masked_fill_({x} > 0, 0.0)",
            ]
        )
        return self.emit(op)

    def s_meta(self) -> bool:
        ch = self.ch
        x = self.pick(by_category=True)
        if x is None:
            return False
        xv = self.env[x]
        r = xv.dim()
        opts = [
            (3, lambda: f"{x}.t_()" if r <= 2 else f"{x}.transpose_(0, {r - 1})"),
            (2, lambda: f"{x}.unsqueeze_({ch.int(-(r + 1), r)})"),
            (1.5, lambda: f"{x}.transpose_({ch.int(0, r - 1)}, {ch.int(0, r - 1)})" if r else None),
            (1.5, lambda: f"{x}.squeeze_({ch.int(0, r - 1)})" if r else f"{x}.squeeze_()"),
            (1.5, lambda: self._as_strided_(x, xv)),
            (0.4, lambda: f"{x}.detach_()"),
        ]
        for _ in range(3):
            e = ch.weighted(opts)()
            if e is not None:
                return self.emit(e)
        return False

    def _as_strided_(self, x, xv):
        e = self.as_strided_args(x, xv)
        return None if e is None else e.replace(".as_strided(", ".as_strided_(", 1)

    def s_no_grad(self) -> bool:
        if self.nograd:
            return False
        self.lines.append((self.indent, "with torch.no_grad():"))
        start = len(self.lines)
        self.indent += 1
        self.nograd = True
        for _ in range(self.ch.int(1, 3)):
            if self.dead:
                break
            self.stmt(allow_block=False)
        self.nograd = False
        self.indent -= 1
        if len(self.lines) == start:
            self.lines.append((self.indent + 1, "pass"))
        return True

    def s_grad_region(self) -> bool:
        """Grad mode switched on inside the program: ``enable_grad()`` within a no_grad
        block, or ``set_grad_enabled(True)`` at the top (which records autograd only when
        the caller runs under no_grad; the cases' ``modes`` include such calls)."""
        header = "with torch.enable_grad():" if self.nograd else "with torch.set_grad_enabled(True):"
        self.lines.append((self.indent, header))
        start = len(self.lines)
        outer = self.nograd
        self.indent += 1
        self.nograd = False
        self.grad_region = True
        for _ in range(self.ch.int(1, 3)):
            if self.dead:
                break
            self.stmt(allow_block=False)
        self.grad_region = False
        self.nograd = outer
        self.indent -= 1
        if len(self.lines) == start:
            self.lines.append((self.indent + 1, "pass"))
        return True

    def s_nontensor(self) -> bool:
        ch = self.ch
        x = self.pick()
        if x is None:
            return False
        name = ch.choice(sorted(self.nonten))
        value = self.nonten[name]
        unary = [".sin()", ".cos()", " * 2", " + 1", ".relu()", ".sigmoid()", ".clone()"]
        if name in ("flag", "opt", "mode"):
            cond = {"flag": "flag", "opt": "opt is None", "mode": 'mode == "sum"'}[name]
            taken = {"flag": bool(value), "opt": value is None, "mode": value == "sum"}[name]
            n = self.fresh()
            if name == "mode":
                then_e, else_e = f"{x}.sum()", f"{x}.mean()"
            else:
                then_e, else_e = f"{x}{ch.choice(unary)}", f"{x}{ch.choice(unary)}"
            if name == "opt" and value is not None and ch.flip(0.5):
                else_e = f"{x} * opt"
            if ch.flip(0.3) and not _order_dependent(self.env[x]):  # a conditional in-place op, no else
                text = f"{x}.mul_(2)"
                lines = [(0, f"if {cond}:"), (1, text)]
                run = text if taken else "pass"
                new = []
            else:
                lines = [(0, f"if {cond}:"), (1, f"{n} = {then_e}"), (0, "else:"), (1, f"{n} = {else_e}")]
                run = f"{n} = {then_e if taken else else_e}"
                new = [n]
            mark = len(self.lines)
            if not self.emit(run, new):
                return False
            del self.lines[mark:]
            self.lines += [(self.indent + d, t) for d, t in lines]
            return True
        n = self.fresh()
        if name == "k":
            e = ch.choice(
                [
                    f"{x} * k",
                    f"{x}.narrow(0, 0, min(k, {x}.shape[0]))",
                    f"{x}.unsqueeze(k % 2)",
                    f"{x}.sum(k % {x}.dim())" if self.env[x].dim() else f"{x} + k",
                    f"{x}.pow(k)",
                ]
            )
            if ch.flip(0.2) and not _order_dependent(self.env[x]):
                return self.emit(f"{x}.add_(k)")
        else:
            e = ch.choice([f"{x} * s", f"{x}.clamp(min=s)", f"{x} + s"])
            if ch.flip(0.2) and not _order_dependent(self.env[x]):
                return self.emit(f"{x}.mul_(s)")
        return self.emit(f"{n} = {e}", [n])

    # ----------------------------------------------------------------- outputs

    def gen_outputs(self) -> tuple[str, list[str]]:
        ch = self.ch
        names = self.tensors()
        k = ch.weighted([(3, 1), (4, 2), (3, 3), (1, 4)])
        outs: list[str] = []
        for _ in range(k):
            if outs and ch.flip(0.1):
                outs.append(ch.choice(outs))
                continue
            cats = [c for c in CATS if any(self.tags.get(n) == c for n in names)]
            cat = ch.choice(cats)
            pool = [n for n in names if self.tags.get(n) == cat]
            if len(pool) > 1 and ch.flip(0.4):
                outs.append(pool[-1])
            else:
                outs.append(ch.choice(pool))
        if self.nonten and ch.flip(0.05):
            outs.append(ch.choice(sorted(self.nonten)))
        form = ch.weighted([(8, "tuple"), (2, "single"), (1, "list")])
        if form == "single" and len(outs) == 1:
            return f"return {outs[0]}", outs
        if form == "list":
            return f"return [{', '.join(outs)}]", outs
        return f"return {', '.join(outs)}" + ("," if len(outs) == 1 else ""), outs

    def gen_post(self, outs: list[str]) -> list:
        ch = self.ch
        post = []
        values = [self.env.get(o) for o in outs]
        for _ in range(2):
            if not ch.flip(0.3 if not post else 0.2):
                break
            ti = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
            if not ti:
                break
            i = ch.choice(ti)
            op = ch.choice(
                ["mul_(2)", "add_(1)", "t_()", "unsqueeze_(0)", "zero_()", "sin_()",
                 "copy_(torch.ones_like(o))", "detach_()"]
            )
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    exec("o." + op, {"torch": torch, "o": values[i]})
            except Exception:
                if not ch.flip(0.2):
                    continue
                post.append((i, op))
                break
            post.append((i, op))
        return post

    # ----------------------------------------------------------------- whole case

    def generate(self) -> Case:
        spec, params = self.gen_inputs()
        _, args = build_inputs(spec, self.seed)
        for p, a in zip(params, args):
            self.env[p] = a
            if isinstance(a, torch.Tensor):
                self.order.append(p)
                self.tags[p] = "input"
                try:
                    self.input_storages.add(a.untyped_storage().data_ptr())
                except Exception:
                    pass
        for i in range(12):
            if self.dead or (i > 0 and not self.ch.flip(0.85)):
                break
            self.stmt()
        ret, outs = self.gen_outputs()
        post = [] if self.dead else self.gen_post(outs)
        body = [("    " * ind) + text for ind, text in self.lines]
        source = f"def f({', '.join(params)}):\n" + "\n".join(body + ["    " + ret]) + "\n"
        modes = self.ch.weighted(
            [(10, ["grad"]), (2, ["grad", "grad"]), (1, ["no_grad"]), (1, ["grad", "no_grad"]),
             (1, ["no_grad", "grad"])]
        )
        return Case(source, spec, post, list(modes), self.seed)


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except Exception:
        return True


def _order_dependent(x: torch.Tensor) -> bool:
    """An in-place op on ``x`` may have a loop-order-dependent result: elements of ``x``
    share memory (an overlapping ``as_strided``) and eager's TensorIterator lets it write
    (it refuses only a stride-0 dim of size > 1). Only writes of one value per location
    (``fill_``, ``zero_``, ``masked_fill_``, assigning a scalar) have a defined result there;
    aotgrad refuses the others (docs/user-guide.md), so the generator does not write them."""
    return overlap_of(tuple(x.shape), tuple(x.stride())) is Overlap.OTHER


def _no_partial_overlap(y: torch.Tensor, x: torch.Tensor) -> bool:
    """``x.op_(y)`` has an order-independent result: y is x's exact layout or elsewhere.

    Eager does not always reject an in-place op whose operand partially overlaps the written
    tensor; its result then depends on the kernel's traversal order, so no functional
    implementation can be asked to match it.
    """
    if not _shares_storage(x, y):
        return True
    return (x.shape, x.stride(), x.storage_offset()) == (y.shape, y.stride(), y.storage_offset())


def _broadcasts(s1, s2) -> bool:
    try:
        torch.broadcast_shapes(tuple(s1), tuple(s2))
        return True
    except RuntimeError:
        return False


def _broadcasts_to(src, dst) -> bool:
    try:
        return tuple(torch.broadcast_shapes(tuple(src), tuple(dst))) == tuple(dst)
    except RuntimeError:
        return False


def generate(ch: Chooser, seed: int = 0) -> Case:
    return _Gen(ch, seed).generate()


def random_case(seed: int) -> Case:
    """A case drawn from ``random.Random(seed)`` (no shrinking; fast)."""
    return generate(RandomChooser(seed), seed % 100000)


def cases():
    """Hypothesis strategy of :class:`Case` (shrinks toward short, simple programs)."""
    from hypothesis import strategies as st

    @st.composite
    def _cases(draw):
        seed = draw(st.integers(0, 1000))
        return generate(DrawChooser(draw), seed)

    return _cases()
