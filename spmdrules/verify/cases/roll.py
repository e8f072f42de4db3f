"""Cases of roll: shifts of any sign and size over some axes (negative too), or the flat roll."""

from __future__ import annotations

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
def roll(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    attrs: dict[str, Any]
    if rng.random() < 0.2:
        attrs = {"shifts": [int(rng.integers(-9, 10))], "axis": []}
    else:
        k = draw_rank(rng, 1, len(x))
        axes = [negative_axis(rng, int(d), len(x)) for d in rng.permutation(len(x))[:k]]
        attrs = {"shifts": [int(rng.integers(-9, 10)) for _ in axes], "axis": axes}
    return Draft(op, (x,), ("real",), attrs)
