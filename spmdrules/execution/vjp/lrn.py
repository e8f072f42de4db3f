"""Vector-Jacobian product of lrn: ``out = x * m^-beta`` with ``m = k + alpha * W(x^2)``, so
``dx = g * m^-beta - 2 * alpha * beta * x * W'(g * x * m^(-beta-1))``, where ``W'`` (the window
sum's adjoint) sums over the channels whose windows hold ``c``: the window mirrored."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution.kernels.lrn import lrn_parts, window_sum
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("lrn")
def lrn_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
            cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    axis, before, after, mid = lrn_parts(ctx, x)
    beta, alpha = float(ctx.attrs.get("beta", 0.75)), float(ctx.attrs.get("alpha", 1e-4))
    back = window_sum(g * x * mid ** (-beta - 1.0), axis, after, before)
    return (np.asarray(g * mid ** -beta - 2.0 * alpha * beta * x * back, dtype=x.dtype),)
