"""Cases of the concat_split family: concat, stack, split, unbind and add_n."""

from __future__ import annotations

from typing import Any

from spmdrules.verify.cases.case import (
    SIZES,
    Draft,
    Rng,
    draw_rank,
    draw_shape,
    negative_axis,
    pick,
    register_cases,
)


# ---- concat / split ----------------------------------------------------------------------------
@register_cases
def concat_split(op: str, rng: Rng) -> Draft:
    if op in ("concat", "stack", "add_n"):
        k = draw_rank(rng, 1, 3)
        lo = 1 if op == "concat" else 0
        base = draw_shape(rng, draw_rank(rng, lo, 3))
        if op == "add_n":
            return Draft(op, ([base] * k,), (("real",) * k,), {})
        if op == "stack":
            axis = int(rng.integers(len(base) + 1))
            return Draft(op, ([base] * k,), (("real",) * k,),
                         {"axis": negative_axis(rng, axis, len(base) + 1)})
        axis = int(rng.integers(len(base)))
        shapes = [(*base[:axis], int(pick(rng, SIZES)), *base[axis + 1 :]) for _ in range(k)]
        return Draft(op, (shapes,), (("real",) * k,), {"axis": negative_axis(rng, axis, len(base))})
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    axis = int(rng.integers(len(x)))
    n = x[axis]
    attrs: dict[str, Any] = {"axis": negative_axis(rng, axis, len(x))}
    if op == "split":
        cuts = sorted({int(c) for c in rng.integers(1, n, size=int(rng.integers(0, 3)))}) if n > 1 \
            else []
        sections = [b - a for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
        if rng.random() < 0.3:
            sections[int(rng.integers(len(sections)))] = -1
        attrs["sections"] = sections
    elif op == "split_with_num":
        attrs["num"] = int(pick(rng, [d for d in range(1, n + 1) if n % d == 0]))
    return Draft(op, (x,), ("real",), attrs)
