"""Vector-Jacobian product of triu and tril_triu: the cotangent through the same mask."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution import local
from spmdrules.execution.kernels.triangular import keep_mask
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("triu", "tril_triu")
def triangular_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                   cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    shape, attr = local.input_spec(ctx, 0, "x")
    return (np.where(keep_mask(ctx, shape, attr), g, 0.0),)
