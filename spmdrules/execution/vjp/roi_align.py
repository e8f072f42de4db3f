"""Vector-Jacobian product of roi_align (:mod:`spmdrules.execution.kernels.roi_align`).

x takes each box's bins spread back through its pooling matrix. The boxes take none: as in
Paddle (whose roi_align_grad returns only x's gradient), the boxes are constants of the op, and
so are the integer boxes_num. Differentiating through box coordinates is not supported.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution.kernels.roi_align import x_gradient
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("roi_align")
def roi_align_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                  cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, boxes, num = (array(ctx, ins, i, n) for i, n in enumerate(("x", "boxes", "boxes_num")))
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    return (x_gradient(ctx, x, boxes, num, g), None, None)
