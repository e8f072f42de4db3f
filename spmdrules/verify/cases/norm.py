"""Cases of the norm family: layer_norm and fused_rms_norm."""

from __future__ import annotations

import math

from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, register_cases


@register_cases
def norm(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    if op == "fused_rms_norm":
        return Draft(op, (x, x[-1:]), ("real", "positive"), {"epsilon": 1e-5})
    bna = int(rng.integers(len(x)))
    p = (math.prod(x[bna:]),)
    scale = p if rng.random() < 0.7 else None
    bias = p if rng.random() < 0.7 else None
    return Draft(op, (x, scale, bias),
                 ("real", None if scale is None else "positive", None if bias is None else "real"),
                 {"epsilon": 1e-5, "begin_norm_axis": bna})
