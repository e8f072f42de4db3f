"""Cases of the scatter family: positions in range (repeated ones too) along any axis (negative
too), every reduction of put_along_axis, and index_put values that broadcast to the rows."""

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

REDUCES = ("assign", "add", "mul", "mean", "amin", "amax")


@register_cases
def scatter_family(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    if op == "scatter":
        k = int(pick(rng, SIZES))
        return Draft(op, (x, (k,), (k, *x[1:])), ("real", f"index:{x[0]}", "real"),
                     {"overwrite": bool(rng.random() < 0.5)})
    if op == "scatter_nd_add":
        k = draw_rank(rng, 1, len(x))
        batch = draw_shape(rng, draw_rank(rng, 0, 2))
        return Draft(op, (x, (*batch, k), (*batch, *x[k:])),
                     ("real", f"index:{min(x[:k])}", "real"), {})
    if op == "put_along_axis":
        ax = int(rng.integers(len(x)))
        index = tuple(int(pick(rng, SIZES)) if d == ax else
                      (n if rng.random() < 0.7 else int(rng.integers(1, n + 1)))
                      for d, n in enumerate(x))
        attrs: dict[str, Any] = {"axis": negative_axis(rng, ax, len(x)),
                                 "reduce": str(pick(rng, REDUCES)),
                                 "include_self": bool(rng.random() < 0.7)}
        return Draft(op, (x, index, index), ("real", f"index:{x[ax]}", "real"), attrs)
    k = draw_rank(rng, 1, len(x))
    n = int(pick(rng, SIZES))
    rows = (n, *x[k:])
    keep = draw_rank(rng, 0, len(rows))
    value = tuple(1 if rng.random() < 0.25 else m for m in rows[len(rows) - keep:])
    return Draft(op, (x, [(n,)] * k, value),
                 ("real", tuple(f"index:{x[j]}" for j in range(k)), "real"),
                 {"accumulate": bool(rng.random() < 0.5)})
