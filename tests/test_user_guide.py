"""Run every ```python block of docs/user-guide.md (issue 4, "done means").

Each block runs on its own in a fresh namespace, compiled with the guide's path as its
filename and padded so that line numbers in a traceback are the guide's own lines. A block
that starts a process group runs in a child process with a time limit: a collective that
never completes fails the test instead of hanging the run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch._dynamo

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "user-guide.md"
_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[str, int, str]]:
    text = GUIDE.read_text()
    found = []
    for match in _FENCE.finditer(text):
        first_line = text.count("\n", 0, match.start(1)) + 1
        heading = [h for h in re.findall(r"^#+ (.+)$", text[: match.start()], re.M)][-1:]
        name = re.sub(r"\W+", "_", heading[0] if heading else "intro").strip("_").lower()
        found.append((f"{name}_line{first_line}", first_line, match.group(1)))
    return found


BLOCKS = _blocks()


def test_guide_has_examples_for_the_three_entry_points():
    code = "\n".join(src for _, _, src in BLOCKS)
    assert "aotgrad.aot_function(" in code
    assert "aotgrad.aot_module(" in code
    assert 'backend="aotgrad"' in code and "aotgrad.backend(" in code


@pytest.mark.parametrize("first_line,source", [b[1:] for b in BLOCKS], ids=[b[0] for b in BLOCKS])
def test_guide_example_runs(first_line: int, source: str):
    if "torch.distributed" in source:
        _run_in_child(first_line, source)
        return
    torch._dynamo.reset()
    code = compile("\n" * (first_line - 1) + source, str(GUIDE), "exec")
    exec(code, {"__name__": "__user_guide__"})
    torch._dynamo.reset()


#: seconds a guide block that uses torch.distributed may take in its child process
CHILD_TIMEOUT = 240


def _run_in_child(first_line: int, source: str) -> None:
    code = "\n" * (first_line - 1) + source
    runner = f"exec(compile({code!r}, {str(GUIDE)!r}, 'exec'), {{'__name__': '__user_guide__'}})"
    try:
        done = subprocess.run([sys.executable, "-c", runner], capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"guide block at line {first_line} did not finish within {CHILD_TIMEOUT} s:\n{e.stdout}\n{e.stderr}")
    assert done.returncode == 0, f"guide block at line {first_line} failed:\n{done.stdout}\n{done.stderr}"
