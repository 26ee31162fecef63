"""Ready-made forward/backward compilers.

A compiler is any callable ``compiler(gm: torch.fx.GraphModule, example_inputs: list)
-> callable``; the returned callable takes the graph's inputs as positional arguments and
returns what the graph returns. ``example_inputs`` are fake tensors (and ints) describing the
inputs the compiled callable will receive.
"""

from __future__ import annotations

from typing import Any, Callable

import torch.fx

__all__ = ["nop", "print_graph"]


def nop(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    """Return the graph module itself: the traced graph runs op by op in Python."""
    return gm


def print_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    """Print the graph's Python code, then run it as :func:`nop` does."""
    print(gm.code)
    return gm
