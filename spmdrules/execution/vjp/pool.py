"""Vector-Jacobian products of pool2d and pool3d (:mod:`spmdrules.execution.kernels.pool`):
max routes each cotangent to its window's first maximum, average spreads it over the window."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution import local
from spmdrules.execution.kernels.conv import to_first, to_last
from spmdrules.execution.kernels.pool import POOL_OPS, backward, plan
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp(*POOL_OPS)
def pool_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
             cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    local.require_whole(ctx, 0, "x")
    p = plan(ctx)
    x = to_first(array(ctx, ins, 0, "x"), p.last)
    y = array(ctx, outs, 0, "out")
    g = to_first(cotangent(cts, 0, y), p.last)
    return (to_last(backward(p, x, g), p.last).astype(x.dtype, copy=False),)
