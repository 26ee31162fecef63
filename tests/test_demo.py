"""The demo (demo.py at the repository root) runs, exits 0 and reports losses matching eager."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo.py"

# "step  eager  aotgrad  inspect  max|loss diff|  max|grad diff|" rows of the training table
ROW = re.compile(r"^\s*(\d+)\s+(-?\d+\.\d+)\s+(-?\d+\.\d+)\s+(-?\d+\.\d+)\s+(\S+)\s+(\S+)\s*$")


def test_demo_runs_and_losses_match_eager():
    proc = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"demo exited {proc.returncode}:\n{out[-6000:]}"
    assert "LOSSES MATCH" in proc.stdout, out[-6000:]
    assert "ALIASING MATCHES" in proc.stdout, out[-6000:]

    rows = [m.groups() for line in proc.stdout.splitlines() if (m := ROW.match(line))]
    assert len(rows) >= 3, f"no training table in the demo's output:\n{proc.stdout[-4000:]}"
    for step, eager, named, inspect, loss_diff, grad_diff in rows:
        assert float(eager) == float(named) == float(inspect), (step, eager, named, inspect)
        assert float(loss_diff) <= 1e-5 and float(grad_diff) <= 1e-5, (step, loss_diff, grad_diff)

    # What the demo promises to show: both graphs and the metadata tables.
    assert "--- forward graph" in proc.stdout and "--- backward graph" in proc.stdout
    assert proc.stdout.count("ViewAndMutationMetadata(") >= 2
    assert "alias_of_input" in proc.stdout
