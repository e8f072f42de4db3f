"""Vector-Jacobian products of the matrix products (:mod:`spmdrules.execution.kernels.matmul`).

``dx = g @ y^T`` and ``dy = x^T @ g`` on the rank's blocks, with numpy's reading of 1-D operands
and of broadcast batch dims (summed back with :func:`spmdrules.execution.vjp.elementwise.unbroadcast`), and
Paddle's ``trans_x`` / ``trans_y``. A rank holding a block of the contracted dim gets the block of
``dx`` for that part of it; a weight replicated over the batch's mesh dim gets the sum over the
rank's rows only, one piece of the pending sum that the dual of its layout names.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.engine.contraction import swap_last2
from spmdrules.execution.local import (
    Array,
    LocalContext,
    LocalValue,
    array,
    cotangent,
    register_vjp,
)
from spmdrules.execution.vjp.elementwise import unbroadcast


def _t(a: Array) -> Array:
    return swap_last2(a, True)


def matmul_grads(x: Array, y: Array, g: Array, trans_x: bool, trans_y: bool
                 ) -> tuple[Array, Array]:
    """(dx, dy) of ``matmul(x, y, trans_x, trans_y)`` for the output cotangent ``g``."""
    xs, ys = swap_last2(x, trans_x), swap_last2(y, trans_y)
    x2 = xs[None, :] if xs.ndim == 1 else xs
    y2 = ys[:, None] if ys.ndim == 1 else ys
    g2 = g[..., None] if ys.ndim == 1 else g
    g2 = np.expand_dims(g2, -2) if xs.ndim == 1 else g2
    dx = unbroadcast(np.asarray(np.matmul(g2, _t(y2))), x2.shape).reshape(xs.shape)
    dy = unbroadcast(np.asarray(np.matmul(_t(x2), g2)), y2.shape).reshape(ys.shape)
    dx, dy = swap_last2(dx, trans_x), swap_last2(dy, trans_y)
    return dx, dy


@register_vjp("matmul", "matmul_v2")
def matmul_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
               cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    y = array(ctx, ins, 1, "y")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    dx, dy = matmul_grads(x, y, g, bool(ctx.attrs.get("trans_x", False)),
                          bool(ctx.attrs.get("trans_y", False)))
    return dx.astype(x.dtype), dy.astype(y.dtype)


@register_vjp("bmm")
def bmm_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
            cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    y = array(ctx, ins, 1, "y")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    dx, dy = matmul_grads(x, y, g, False, False)
    return dx.astype(x.dtype), dy.astype(y.dtype)
