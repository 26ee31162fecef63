"""Large parametrized products: the default test run takes half of each, the full product
runs with ``AOTGRAD_FULL_MATRIX=1`` (README: the default run stays under 20 minutes)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable

FULL = os.environ.get("AOTGRAD_FULL_MATRIX") == "1"


def half_product(*axes: Iterable) -> list[tuple]:
    """The product of ``axes`` (a dict gives its sorted keys, another iterable its values in
    order): all of it with ``AOTGRAD_FULL_MATRIX=1``, else the half whose value indices sum
    to an even number, in which every value of every axis still appears."""
    values = [sorted(a) if isinstance(a, dict) else list(a) for a in axes]
    return [
        tuple(v for _, v in case) for case in itertools.product(*(list(enumerate(a)) for a in values))
        if FULL or sum(k for k, _ in case) % 2 == 0
    ]
