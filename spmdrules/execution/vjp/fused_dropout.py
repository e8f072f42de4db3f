"""The vector-Jacobian product of fused_dropout_add
(:mod:`spmdrules.execution.kernels.fused_dropout`): the same mask on the cotangent for x."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution.kernels.fused_dropout import keep_scale
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("fused_dropout_add")
def fused_dropout_add_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                          cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    return (np.asarray(g * keep_scale(ctx, x.shape), dtype=x.dtype), g)
