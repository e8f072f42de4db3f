"""Cases of pad: borders of 0 to 2 on each side of each dim, any fill value."""

from __future__ import annotations

from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, register_cases


@register_cases
def pad(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    paddings = [int(rng.integers(0, 3)) if rng.random() < 0.5 else 0 for _ in range(2 * len(x))]
    return Draft(op, (x,), ("real",), {"paddings": paddings,
                                       "pad_value": float(rng.choice([0.0, 1.0, -2.5]))})
