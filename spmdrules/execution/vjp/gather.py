"""Vector-Jacobian products of gather, index_select, gather_nd and take_along_axis: the cotangent
added back at the positions read; the index takes none."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution.kernels.gather import along_grad, gather_grad, gather_nd_positions, nd_key
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, put, register_vjp


def _parts(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue], cts: Sequence[LocalValue]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, idx = array(ctx, ins, 0, "x"), array(ctx, ins, 1, "index")
    return x, idx, cotangent(cts, 0, array(ctx, outs, 0, "out"))


@register_vjp("gather", "index_select")
def gather_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
               cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, idx, g = _parts(ctx, ins, outs, cts)
    return (gather_grad(ctx, x, idx, g, None), None)


@register_vjp("take_along_axis")
def take_along_axis_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                        cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, idx, g = _parts(ctx, ins, outs, cts)
    return (along_grad(ctx, x, idx, g, None), None)


@register_vjp("gather_nd")
def gather_nd_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                  cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, idx, g = _parts(ctx, ins, outs, cts)
    k, pos = gather_nd_positions(ctx)
    r = put(np.zeros(tuple(len(np.atleast_1d(p)) for p in pos)), g, pos)
    dx = np.zeros_like(x, dtype=np.result_type(x, g))
    np.add.at(dx, nd_key(ctx, x, idx, k), r)
    return (dx, None)
