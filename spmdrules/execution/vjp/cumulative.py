"""Vector-Jacobian products of cumsum (a scan the other way) and cummax/cummin (the cotangent to
the running extreme's position); indices take no cotangent."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution.kernels.cumulative import cumsum_along, scan_axis, scatter_along
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("cumsum")
def cumsum_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
               cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    axis = scan_axis(ctx, x)
    flat = bool(ctx.attrs.get("flatten", False))
    g1 = g.reshape(-1) if flat else g.reshape(x.shape or (1,))
    dx = cumsum_along(g1, axis, bool(ctx.attrs.get("exclusive")),
                      not bool(ctx.attrs.get("reverse")))
    return (dx.reshape(x.shape),)


@register_vjp("cummax", "cummin")
def cumext_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
               cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    return (scatter_along(x, array(ctx, outs, 1, "indices"), g, scan_axis(ctx, x)),)
