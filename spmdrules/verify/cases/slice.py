"""Cases of the slice family: random boxes, with negative and clamped bounds, steps both ways."""

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


def _bound(rng: Rng, n: int) -> int:
    """A start or end: inside, negative (from the end) or past either end (clamped)."""
    u = rng.random()
    if u < 0.15:
        return int(rng.integers(n + 1, n + 4)) if rng.random() < 0.5 else -n - int(rng.integers(1, 3))
    v = int(rng.integers(0, n + 1))
    return v - n if u < 0.4 else v


@register_cases
def slice_family(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    k = draw_rank(rng, 1, len(x))
    dims = [int(d) for d in rng.permutation(len(x))[:k]]
    axes, starts, ends, strides, decrease = [], [], [], [], []
    for d in dims:
        n = x[d]
        step = 1 if op == "slice" else int(rng.choice([1, 1, 2, 3, -1, -2]))
        while True:
            s, e = _bound(rng, n), _bound(rng, n)
            lo, hi, st = slice(s, e, step).indices(n)
            if (hi - lo) * st >= 0:
                break
        axes.append(negative_axis(rng, d, len(x)))
        starts.append(s)
        ends.append(e)
        strides.append(step)
        if op == "slice" and len(range(lo, hi, st)) == 1 and rng.random() < 0.5:
            decrease.append(d)
    attrs: dict[str, Any] = {"axes": axes, "starts": starts, "ends": ends}
    if op == "slice":
        attrs |= {"infer_flags": [1] * k, "decrease_axis": decrease}
    else:
        attrs["strides"] = strides
    return Draft(op, (x,), ("real",), attrs)
