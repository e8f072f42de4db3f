"""Vector-Jacobian products of topk and argsort: the cotangent back to the selected positions."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution.kernels.cumulative import scatter_along
from spmdrules.execution.kernels.sort import sort_axis
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("topk", "argsort")
def sort_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
             cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    return (scatter_along(x, array(ctx, outs, 1, "indices"), g, sort_axis(ctx, x, 0, "x")),)
