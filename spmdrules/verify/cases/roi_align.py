"""Cases of roi_align: boxes inside (and partly outside) the scaled image, boxes per image that
sum to the number of boxes, both sampling modes, aligned or not."""

from __future__ import annotations

from spmdrules.verify.cases.case import Draft, Rng, pick, register_cases


@register_cases
def roi_align(op: str, rng: Rng) -> Draft:
    n, c = int(pick(rng, (1, 2, 3))), int(pick(rng, (1, 2, 3, 4, 5)))
    h, w = int(pick(rng, (2, 3, 5))), int(pick(rng, (2, 4, 5)))
    rois = int(pick(rng, (1, 2, 3, 4)))
    return Draft(op, ((n, c, h, w), (rois, 4), (n,)),
                 ("real", f"boxes:{h}:{w}", f"counts:{n}:{rois}"), {
                     "pooled_height": int(pick(rng, (1, 2, 3))),
                     "pooled_width": int(pick(rng, (1, 2))),
                     "spatial_scale": float(pick(rng, (1.0, 0.5))),
                     "sampling_ratio": int(pick(rng, (-1, 1, 2))),
                     "aligned": bool(rng.random() < 0.5)})
