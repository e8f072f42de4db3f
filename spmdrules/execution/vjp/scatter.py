"""Vector-Jacobian products of scatter, scatter_nd_add, put_along_axis and index_put: the exact
derivatives of the write (``kernels.scatter.write_vjp``); the positions take none."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution import local
from spmdrules.execution.kernels.scatter import gradients, layout
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("scatter", "scatter_nd_add", "put_along_axis", "index_put")
def scatter_family_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                       cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    name = "updates" if ctx.op.startswith("scatter") else "value"
    dx, dv = gradients(ctx, ins, layout(ctx), g, local.output(ctx), local.input_spec(ctx, 0, "x"),
                       local.input_spec(ctx, 2, name))
    return (dx, None, dv)
