"""Long differential fuzz run: ``python tools/fuzz.py --n 20000 --seed 0``.

Runs N random programs (``tests/fuzz/generator.py``'s ``random_case``, no hypothesis, so it
is fast), compares eager with the implementation (``--impl aotgrad`` default, or ``torch``),
prints throughput and a summary of failures grouped by signature, and writes each failing
case to ``--out`` as a ready-to-paste pytest regression test (greedily minimized with
``--minimize``, which keeps the failure's signature).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(1, os.path.join(ROOT, "src"))

from tests.fuzz.generator import random_case  # noqa: E402
from tests.fuzz.harness import IMPLS, minimize, run  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1000, help="number of programs")
    p.add_argument("--seed", type=int, default=0, help="first program seed (programs use seed..seed+n-1)")
    p.add_argument("--impl", choices=sorted(IMPLS), default=os.environ.get("AOTGRAD_FUZZ_IMPL", "aotgrad"))
    p.add_argument("--out", default="fuzz-failures", help="folder for failing programs")
    p.add_argument("--minimize", action="store_true", help="minimize each failure before writing it")
    p.add_argument("--max-per-signature", type=int, default=5, help="write at most this many per signature")
    p.add_argument("--strict-stage", action="store_true", help="errors must be raised at the same stage")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--new-only", action="store_true",
                   help="write (and minimize) only failures whose signature is not in tests/fuzz/test_fuzz.py's KNOWN")
    p.add_argument("--sync-known", action="store_true",
                   help="(no fuzzing) drop from KNOWN the tests that are no longer strict-xfail (run "
                        "tools/drop_xpassed.py first), then list the xfail tests whose signature moved")
    p.add_argument("--dynamic", action="store_true",
                   help="aotgrad with dynamic=True (--impl aotgrad-dynamic): each case is called once "
                        "more on inputs grown by 1 in every size of at least 2")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)

    import torch

    torch.set_num_threads(a.threads)
    if a.sync_known:
        return sync_known()
    if a.dynamic:
        a.impl = "aotgrad-dynamic"
    impl = IMPLS[a.impl]
    resized_runs = reused = 0
    known = _known_fn(a.impl)
    os.makedirs(a.out, exist_ok=True)
    by_sig: dict[str, list[int]] = collections.defaultdict(list)
    eager_raised = 0
    crashed = 0
    t0 = time.perf_counter()
    last = t0
    for i in range(a.n):
        seed = a.seed + i
        try:
            case = random_case(seed)
            res = run(case, impl, strict_stage=a.strict_stage)
        except Exception:
            crashed += 1
            by_sig["harness crashed"].append(seed)
            with open(os.path.join(a.out, f"crash_{seed}.txt"), "w") as fh:
                fh.write(traceback.format_exc())
            continue
        if res.eager_errors:
            eager_raised += 1
        elif a.dynamic and res.ok and res.calls > len(case.modes):
            resized_runs += 1
            reused += res.entries <= len(set(case.modes))
        if not res.ok:
            sig = res.signature
            by_sig[sig].append(seed)
            if len(by_sig[sig]) <= a.max_per_signature and not (a.new_only and known(sig)):
                if a.minimize:
                    case = minimize(case, impl)
                    res = run(case, impl, strict_stage=a.strict_stage)
                with open(os.path.join(a.out, f"seed_{seed}.py"), "w") as fh:
                    fh.write(f"# impl={a.impl} seed={seed}\n# signature: {sig}\n")
                    fh.write("".join(f"# {line}\n" for line in res.report().splitlines()))
                    fh.write("\n" + case.as_test(f"test_seed_{seed}", reason=sig[:120]))
        now = time.perf_counter()
        if not a.quiet and now - last > 10:
            last = now
            nf = sum(len(v) for v in by_sig.values())
            print(f"  {i + 1}/{a.n}  {(i + 1) / (now - t0):.1f} programs/s  failing {nf}", flush=True)
    dt = time.perf_counter() - t0
    nf = sum(len(v) for v in by_sig.values())
    print(f"impl={a.impl}: {a.n} programs in {dt:.1f}s = {a.n / dt:.2f} programs/s "
          f"(incl. minimization)" if a.minimize else
          f"impl={a.impl}: {a.n} programs in {dt:.1f}s = {a.n / dt:.2f} programs/s")
    print(f"eager raised somewhere in {eager_raised}; failing {nf} ({len(by_sig)} signatures); "
          f"harness crashes {crashed}")
    if a.dynamic:
        print(f"dynamic: {resized_runs} passing cases ran again on grown inputs (eager raising nowhere); "
              f"{reused} of them reused an entry ({100 * reused / max(resized_runs, 1):.1f}%)")
    n_new = sum(len(v) for k, v in by_sig.items() if not known(k))
    print(f"not covered by KNOWN (tests/fuzz/test_fuzz.py): {n_new} failures, "
          f"{sum(1 for k in by_sig if not known(k))} signatures")
    for sig, seeds in sorted(by_sig.items(), key=lambda kv: (bool(known(kv[0])), -len(kv[1]))):
        tag = "known" if known(sig) else "NEW  "
        print(f"  {len(seeds):5d}  {tag}  {sig}   e.g. seeds {seeds[:5]}")
    print(f"failing programs written to {a.out}/")
    return 1 if nf else 0


def sync_known() -> int:
    """Rewrite test_fuzz.py's KNOWN without tests that lost their strict-xfail marker (and keys
    left empty); report xfail tests listed under a key their current failure does not match."""
    import ast

    from tests.fuzz import harness
    from tests.fuzz import test_fuzz_regressions as R
    from tests.fuzz.test_fuzz import KNOWN

    xfail = {n for n, f in vars(R).items()
             if n.startswith("test_") and any(m.name == "xfail" for m in getattr(f, "pytestmark", []))}
    path = os.path.join(ROOT, "tests", "fuzz", "test_fuzz.py")
    lines = open(path).read().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("KNOWN: dict"))
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    out = lines[: start + 1]
    for line in lines[start + 1 : end]:
        m = line.strip().rstrip(",")
        if not m.startswith(("'", '"')):
            out.append(line)  # a comment
            continue
        key_src, _, tests_src = m.partition(": [")
        tests = ast.literal_eval("[" + tests_src)
        keep = [t for t in tests if t in xfail]
        for t in tests:
            if t not in xfail:
                print(f"dropped {t} (no strict-xfail marker) from {key_src}")
        if keep:
            out.append(f"    {key_src}: [" + ", ".join(f'"{t}"' for t in keep) + "],")
    out += lines[end:]
    open(path, "w").write("\n".join(out))

    listed = {t: k for k, ts in KNOWN.items() for t in ts}
    known = _known_fn("aotgrad")
    captured = {}

    def capture(source, inputs, post=(), modes=("grad",), seed=0, impl=None):
        captured["res"] = harness.run_case(source, inputs, impl or harness.aotgrad_impl, post=post, modes=modes, seed=seed)

    R.check_case = capture
    bad = 0
    for t in sorted(xfail):
        getattr(R, t)()
        res = captured.pop("res")
        got = None if res.ok else known(res.signature)
        if t not in listed:
            print(f"NOT LISTED  {t}: fails with {res.signature!r}")
        elif res.ok:
            print(f"PASSES NOW  {t} (run tools/drop_xpassed.py)")
        elif got != listed[t]:
            print(f"MOVED       {t}: listed under {listed[t]!r}, fails with {res.signature!r}")
        else:
            continue
        bad += 1
    print(f"{len(xfail)} strict-xfail tests, {bad} need attention")
    return 1 if bad else 0


def _known_fn(impl_name: str):
    """signature -> the KNOWN key that covers it (None if new); KNOWN describes aotgrad only
    (static and dynamic)."""
    if impl_name not in ("aotgrad", "aotgrad-dynamic"):
        return lambda sig: None
    from tests.fuzz.test_fuzz import KNOWN

    def known(sig: str):
        for key in KNOWN:
            if sig == key or (": " in key and sig.startswith(key)):
                return key
        return None

    return known


if __name__ == "__main__":
    raise SystemExit(main())
