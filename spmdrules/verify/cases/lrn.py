"""Cases of lrn: rank 3-5, channels first or last, odd and even windows."""

from __future__ import annotations

from typing import Any

from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, register_cases


@register_cases
def lrn(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 3, 5))
    last = bool(rng.integers(2))
    fmt = {3: ("NCL", "NLC"), 4: ("NCHW", "NHWC"), 5: ("NCDHW", "NDHWC")}[len(x)][int(last)]
    attrs: dict[str, Any] = {"n": int(rng.integers(1, 6)), "k": 1.0, "alpha": 1e-3,
                             "beta": 0.75, "data_format": fmt}
    return Draft(op, (x,), ("real",), attrs)
