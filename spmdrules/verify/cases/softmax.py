"""Cases of softmax and log_softmax."""

from __future__ import annotations

from spmdrules.verify.cases.case import (
    Draft,
    Rng,
    draw_rank,
    draw_shape,
    negative_axis,
    register_cases,
)


# ---- softmax, norms, embedding, cross entropy --------------------------------------------------
@register_cases
def softmax(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    return Draft(op, (x,), ("real",), {"axis": negative_axis(rng, int(rng.integers(len(x))), len(x))})
