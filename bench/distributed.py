"""Step time of DDP and FSDP2 training on 2 gloo processes: eager vs torch's aot_eager vs
aotgrad (``--inductor``: also inductor vs aotgrad_inductor), side by side.

    python bench/distributed.py [--model transformer] [--steps 20] [--inductor] [--json out.json]

Each backend trains the same model (tests/distributed_workers.py) for ``--steps`` AdamW steps
in the same two processes, one after the other; the table gives the median step time (the
first 3 steps, which compile, left out), the slower rank's, and ratios to eager and to
torch's ``aot_eager`` (its AOT Autograd with no-op compilers: the comparison side).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import _common as C
import distributed_workers as W
import torch

WARMUP = 3


def main() -> None:
    def extra(p):
        p.add_argument("--model", default="transformer", choices=sorted(W.MODELS))
        p.add_argument("--steps", type=int, default=20)
        p.add_argument("--inductor", action="store_true", help="also inductor and aotgrad_inductor")
        p.add_argument("--timeout", type=float, default=600.0)

    args = C.parse_args(__doc__.splitlines()[0], extra)
    backends = ["eager", "aot_eager", "aotgrad"] + (["inductor", "aotgrad_inductor"] if args.inductor else [])
    hows = {"DDP (torch.compile(DDP(m)))": "compile_ddp", "FSDP2 (blocks compiled)": "fsdp2"}
    jobs = [(args.model, how, b, args.steps) for how in hows.values() for b in backends]
    with tempfile.TemporaryDirectory() as out:
        codes = W.launch(W.bench_worker, 2, jobs, out, args.timeout)
        if codes != [0, 0]:
            raise SystemExit(f"rank exit codes {codes} (None: killed after {args.timeout}s)")
        ranks = [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(2)]
    rows, payload = [], {"environment": C.environment(), "model": args.model, "results": {}}
    for label, how in hows.items():
        ms = {}
        for b in backends:
            per_rank = [statistics.median(r[(args.model, how, b)][WARMUP:]) * 1e3 for r in ranks]
            ms[b] = max(per_rank)
            payload["results"][f"{how}/{b}"] = [r[(args.model, how, b)] for r in ranks]
        for b in backends:
            rows.append([label, b, C.fmt(ms[b], ".2f"), C.fmt(C.ratio(ms[b], ms["eager"]), ".2f"),
                         C.fmt(C.ratio(ms[b], ms["aot_eager"]), ".2f")])
    print(f"model {args.model}, 2 gloo ranks, {args.steps} steps, threads {args.threads}")
    C.print_table(["wrapper", "backend", "step ms", "/eager", "/aot_eager"], rows)
    C.write_json(args.json, payload)


if __name__ == "__main__":
    main()
