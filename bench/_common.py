"""Shared helpers for the benchmarks in this folder (timing, tables, JSON, locating aotgrad).

Every benchmark runs our side and torch's side in the same process and reports the ratio
ours/torch; absolute times on a shared 2-core machine drift, ratios measured side by side
much less.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable, Optional

_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if os.path.isdir(_SRC) and _SRC not in sys.path:
    sys.path.insert(0, _SRC)  # run from a checkout without `pip install -e .`

import torch  # noqa: E402

# aotgrad's persistent compile cache would turn a benchmark's repeated compiles into cache
# hits (and fill the user's cache): off unless a benchmark turns it on for what it measures.
os.environ.setdefault("AOTGRAD_CACHE", "0")

NA = None  # a missing measurement; printed as "n/a"


def parse_args(description: str, extra: Optional[Callable[[argparse.ArgumentParser], None]] = None):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", metavar="PATH", help="also write the results to PATH as JSON")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    if extra is not None:
        extra(p)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    return args


def environment() -> dict:
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }


def ours_aot_function() -> tuple[Optional[Callable], str]:
    """(aotgrad.aot_function, "") or (None, why it is unavailable)."""
    try:
        import aotgrad

        return aotgrad.aot_function, ""
    except Exception as e:  # the core may not exist yet
        return None, f"{type(e).__name__}: {e}"


def ours_aot_module() -> tuple[Optional[Callable], str]:
    try:
        import aotgrad

        fn = getattr(aotgrad, "aot_module", None)
        if fn is None:
            from aotgrad.module import aot_module as fn
        return fn, ""
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


def time_per_call(fn: Callable[[], Any], *, number: int, repeat: int, warmup: int = 3) -> float:
    """Median over ``repeat`` runs of the mean time of ``number`` calls, in seconds."""
    for _ in range(warmup):
        fn()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - t0) / number)
    return statistics.median(runs)


def time_interleaved(fns: dict[str, Optional[Callable[[], Any]]], *, number: int, repeat: int,
                     warmup: int = 3, runs_out: Optional[dict] = None) -> dict[str, Optional[float]]:
    """Like :func:`time_per_call` for several callables, their repeats interleaved so that
    machine noise hits all of them alike. ``None`` entries come back as ``None``.
    ``runs_out``, when given, receives every repeat's per-call time."""
    live = {k: f for k, f in fns.items() if f is not None}
    for f in live.values():
        for _ in range(warmup):
            f()
    runs: dict[str, list[float]] = {k: [] for k in live}
    for _ in range(repeat):
        for k, f in live.items():
            t0 = time.perf_counter()
            for _ in range(number):
                f()
            runs[k].append((time.perf_counter() - t0) / number)
    if runs_out is not None:
        runs_out.update(runs)
    return {k: (statistics.median(runs[k]) if k in live else None) for k in fns}


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt(x: Optional[float], spec: str = ".1f") -> str:
    return "n/a" if x is None else format(x, spec)


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths)))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))


def write_json(path: Optional[str], payload: dict) -> None:
    if not path:
        return
    payload = {"environment": environment(), **payload}
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, default=str)
    print(f"wrote {path}")
