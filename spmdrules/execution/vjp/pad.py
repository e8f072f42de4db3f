"""Vector-Jacobian product of pad: the cotangent cropped to x."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution import local
from spmdrules.execution.kernels.pad import crop
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("pad")
def pad_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
            cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    out_shape, out_attr = local.output(ctx)
    return (crop(ctx, g, out_shape, out_attr),)
