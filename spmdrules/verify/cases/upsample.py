"""Cases of nearest_interp and bilinear_interp: random layouts (NCW/NCHW/NCDHW and channels
last), upsampling and downsampling by an output size or a scale, align_corners and align_mode;
half the cases split a spatial dim, whose halos the lowering exchanges."""

from __future__ import annotations

from typing import Any

from spmdrules.engine.resampling import SIZE_ATTRS
from spmdrules.verify.cases.case import Draft, Rng, Split, pick, register_cases

_FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


@register_cases
def upsample(op: str, rng: Rng) -> Draft:
    nsp = 2 if op == "bilinear_interp" else int(pick(rng, (1, 2, 2, 3)))
    last = rng.random() < 0.3
    sp = [int(pick(rng, (1, 2, 3, 4, 5, 7, 9))) for _ in range(nsp)]
    n, c = int(pick(rng, (1, 2, 3))), int(pick(rng, (1, 2, 3)))
    attrs: dict[str, Any] = {
        "data_format": _FORMATS[nsp][1 if last else 0],
        "align_corners": bool(rng.random() < 0.4), "align_mode": int(pick(rng, (0, 1))),
    }
    if rng.random() < 0.5:
        scales = [float(pick(rng, (0.5, 1.0, 1.5, 2.0, 2.0, 3.0))) for _ in sp]
        # one factor for every dim; a factor that leaves a dim no output is doubled
        attrs["scale"] = [float(pick(rng, (1.0, 2.0, 3.0)))] if rng.random() < 0.3 else \
            [s if int(n_ * s) >= 1 else 2.0 for n_, s in zip(sp, scales, strict=True)]
    else:
        for a, s in zip(SIZE_ATTRS[nsp], sp, strict=True):
            attrs[a] = int(rng.integers(max(1, s // 2), 3 * s + 2))
    x = (n, *sp, c) if last else (n, c, *sp)
    split: tuple[Split, ...] = ()
    if rng.random() < 0.5:
        split = (Split(0, int(rng.integers(nsp)) + (1 if last else 2)),)
    return Draft(op, (x,), ("real",), attrs, split)
