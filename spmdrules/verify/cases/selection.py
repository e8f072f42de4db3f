"""Cases of nonzero and unique: small integer values (zeros and repeats are common), a declared
size that fits (the count's upper bound, numel, or more)."""

from __future__ import annotations

import math
from typing import Any

from spmdrules.verify.cases.case import (
    Draft,
    Rng,
    draw_rank,
    draw_shape,
    negative_axis,
    register_cases,
)


@register_cases
def selection(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    size = math.prod(x) + int(rng.integers(0, 3))
    if op == "nonzero":
        return Draft(op, (x,), (str(rng.choice(["int", "bool"])),), {"size": size})
    axis = [negative_axis(rng, int(rng.integers(len(x))), len(x))] if rng.random() < 0.3 else []
    if axis:
        size = x[axis[0]] + int(rng.integers(0, 2))
    attrs: dict[str, Any] = {"return_index": bool(rng.integers(2)),
                             "return_inverse": bool(rng.integers(2)),
                             "return_counts": bool(rng.integers(2)), "axis": axis,
                             "dtype": "int64", "size": size}
    return Draft(op, (x,), ("int",), attrs)
