"""The vector-Jacobian product of transpose: the inverse permutation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("transpose", "transpose2")
def transpose_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                  cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    perm = [normalise_axis(ctx.op, "x", int(p), x.ndim) for p in ctx.attrs["perm"]]
    return (np.transpose(g, np.argsort(perm)).copy(),)
