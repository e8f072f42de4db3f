"""Cases of topk and argsort: any axis, k from 0 to the whole row; real values (no ties)."""

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
def sort_family(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    ax = int(rng.integers(len(x)))
    attrs: dict[str, Any] = {"axis": negative_axis(rng, ax, len(x))}
    if op == "topk":
        attrs |= {"k": int(rng.integers(0, x[ax] + 1)), "largest": bool(rng.integers(2)),
                  "sorted": True}
    else:
        attrs |= {"descending": bool(rng.integers(2)), "stable": True}
    return Draft(op, (x,), ("real",), attrs)
