"""Vector-Jacobian product of moe_combine (:mod:`spmdrules.execution.kernels.moe`): x takes
``grad_x[r, j] = sum over (i, k) with scatter_index[i, k] = r of g[i, j] w[i, k]``, the weights
``grad_w[i, k] = sum_j g[i, j] x[scatter_index[i, k], j]`` (the rows this rank holds), the
integer index none."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution.kernels.moe import grads
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("moe_combine")
def moe_combine_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                    cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, w, idx = (array(ctx, ins, i, n) for i, n in
                 enumerate(("x", "combine_weights", "scatter_index")))
    g = cotangent(cts, 0, array(ctx, outs, 0, "y"))
    gx, gw, _ = grads(ctx, x, w, idx, g)
    return (gx, gw, None)
