"""Vector-Jacobian products of tile, expand and expand_as: each copy's cotangent summed back."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution import local
from spmdrules.execution.kernels.tile import source_positions, summed_back
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("tile", "expand", "expand_as", "expand_as_v2")
def tile_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
             cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    shape, attr = local.input_spec(ctx, 0, "x")
    out_shape, out_attr = local.output(ctx)
    dx = summed_back(ctx, x, g, source_positions(ctx, out_shape, out_attr, shape, attr))
    if len(ins) == 1:
        return (dx,)
    y = ins[1]  # expand_as's y gives only its shape: a zero cotangent (none when absent)
    return (dx, np.zeros_like(y) if isinstance(y, np.ndarray) else None)
