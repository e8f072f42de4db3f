"""Cases of transpose: a random permutation, with negative axes sometimes."""

from __future__ import annotations

from spmdrules.verify.cases.case import (
    Draft,
    Rng,
    draw_rank,
    draw_shape,
    negative_axis,
    register_cases,
)


@register_cases
def transpose(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    nd = len(x)
    attrs = {"perm": [negative_axis(rng, int(p), nd) for p in rng.permutation(nd)]}
    return Draft(op, (x,), ("real",), attrs)
