"""Vector-Jacobian products of nearest_interp and bilinear_interp
(:mod:`spmdrules.execution.kernels.upsample`): each output's cotangent added back into the slab
positions it read, weighted as it read them."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution import local
from spmdrules.execution.kernels.upsample import UPSAMPLE_OPS, backward, plan
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp(*UPSAMPLE_OPS)
def upsample_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                 cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    local.require_whole(ctx, 0, "x")
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    return (backward(plan(ctx), g).astype(x.dtype, copy=False),)
