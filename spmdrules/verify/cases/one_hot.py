"""Cases of one_hot: ids in range of the classes."""

from __future__ import annotations

from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, register_cases


@register_cases
def one_hot(op: str, rng: Rng) -> Draft:
    n = int(rng.integers(1, 9))
    return Draft(op, (draw_shape(rng, draw_rank(rng, 0, 3)),), (f"index:{n}",),
                 {"num_classes": n})
