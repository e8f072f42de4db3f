"""Vector-Jacobian product of roll: the cotangent rolled back."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution import local
from spmdrules.execution.kernels.roll import _rules
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp, take


@register_vjp("roll")
def roll_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
             cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    shape, attr = local.input_spec(ctx, 0, "x")
    out_shape, out_attr = local.output(ctx)
    shifts, axis = ctx.attrs["shifts"], ctx.attrs.get("axis", ())
    if not axis:
        return (np.roll(g, -shifts[0]),)
    by = dict(zip(_rules.rolled_axes(shape, shifts, axis), shifts, strict=True))
    pos = [local.held(ctx, local.block_range(ctx, out_shape, out_attr, d),
                      (np.asarray(local.block_range(ctx, shape, attr, d)) + by.get(d, 0)) % max(n, 1),
                      "out", d) for d, n in enumerate(shape)]
    return (take(g, pos),)
