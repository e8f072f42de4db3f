"""Cases of the scans: any axis (negative too), flattened, exclusive and reversed."""

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
def cumulative(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    axis = negative_axis(rng, int(rng.integers(len(x))), len(x))
    attrs: dict[str, Any] = {"axis": axis}
    if op == "cumsum":
        attrs |= {"flatten": rng.random() < 0.2, "exclusive": bool(rng.integers(2)),
                  "reverse": bool(rng.integers(2))}
    else:
        attrs["dtype"] = "int64" if rng.random() < 0.7 else "int32"
    return Draft(op, (x,), ("real",), attrs)
