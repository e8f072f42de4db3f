"""Cases of the reduction family: reductions over random axes, with every reduce type. A probe
gives one reduced dim size 1, split."""

from __future__ import annotations

import math
from typing import Any, Final

from spmdrules.verify.cases.case import (
    Draft,
    Rng,
    Shape,
    Split,
    draw_rank,
    draw_shape,
    negative_axis,
    pick,
    register_cases,
    size_one_probe,
)

# ---- reductions --------------------------------------------------------------------------------
_REDUCE_BASE: Final = ("sum", "max", "min", "product", "avg", "any", "all")


def _axes(rng: Rng, ndim: int) -> list[int]:
    """A random set of reduced axes; empty (every dim) sometimes."""
    if ndim == 0 or rng.random() < 0.2:
        return []
    k = draw_rank(rng, 1, ndim)
    return [negative_axis(rng, int(a), ndim) for a in rng.permutation(ndim)[:k]]


@register_cases
def reduction(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 0, 3))
    nd = len(x)
    domain = {"all": "bool", "any": "bool", "prod": "near1"}.get(op, "real")
    attrs: dict[str, Any]
    if op == "mean_all":
        attrs = {}
    elif op == "mean":
        attrs = {"axis": _axes(rng, nd), "keepdim": bool(rng.integers(2))}
    elif op in ("argmax", "argmin"):
        x = draw_shape(rng, draw_rank(rng, 1, 3))
        attrs = {"axis": negative_axis(rng, int(rng.integers(len(x))), len(x)),
                 "keepdims": bool(rng.integers(2)), "flatten": rng.random() < 0.25}
    elif op == "logsumexp":
        attrs = {"axis": _axes(rng, nd), "keepdims": bool(rng.integers(2)),
                 "reduce_all": rng.random() < 0.2}
    elif op == "p_norm":
        x = draw_shape(rng, draw_rank(rng, 1, 3))
        attrs = {"porder": float(pick(rng, [0.0, 1.0, 2.0, 3.0, math.inf, -math.inf])),
                 "axis": negative_axis(rng, int(rng.integers(len(x))), len(x)), "epsilon": 1e-12,
                 "keepdims": bool(rng.integers(2)), "asvector": rng.random() < 0.25}
    else:
        attrs = {"axis": _axes(rng, nd), "keep_dim": bool(rng.integers(2))}
        if op == "reduce_base":
            rt = int(rng.integers(len(_REDUCE_BASE)))
            attrs["reduce_type"] = rt
            domain = {"any": "bool", "all": "bool", "product": "near1"}.get(_REDUCE_BASE[rt], "real")
    if not x or not size_one_probe(rng):
        return Draft(op, (x,), (domain,), attrs)
    axis = attrs.get("axis", [])
    reduced = [int(a) % len(x) for a in (axis if isinstance(axis, list) else [axis])]
    dim = int(pick(rng, reduced or range(len(x))))
    shape: Shape = (*x[:dim], 1, *x[dim + 1:])
    return Draft(op, (shape,), (domain,), attrs, (Split(0, dim),))
