"""Cases of cast: float, integer and bool inputs to every kind of dtype."""

from __future__ import annotations

from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, pick, register_cases


@register_cases
def cast(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 0, 3))
    domain = str(pick(rng, ("real", "int", "bool")))
    return Draft(op, (x,), (domain,), {"dtype": str(pick(rng, ("float64", "float32", "int64",
                                                                "int32", "bool")))})
