"""Vector-Jacobian products of softmax and log_softmax (:mod:`spmdrules.execution.kernels.softmax`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("softmax", "log_softmax")
def softmax_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    y = array(ctx, outs, 0, "out")
    g = cotangent(cts, 0, y)
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), max(x.ndim, 1))
    y1, g1 = (y.reshape(1), g.reshape(1)) if x.ndim == 0 else (y, g)
    if ctx.op == "log_softmax":
        dx = g1 - np.exp(y1) * np.sum(g1, axis=axis, keepdims=True)
    else:
        dx = y1 * (g1 - np.sum(g1 * y1, axis=axis, keepdims=True))
    return (np.asarray(dx).reshape(x.shape).astype(x.dtype),)
