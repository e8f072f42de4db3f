"""Vector-Jacobian products of the reductions (:mod:`spmdrules.kernels_reduction`).

A sum's cotangent is the output's, broadcast back over the reduced axes of the rank's block; a
block's mean spreads it evenly over the block's entries. Over a sharded dim the local result is
one piece of a pending sum (or avg), whose dual is replicated: every rank receives the whole
cotangent, and its block of the input cotangent is complete.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.kernels import Array, Block, LocalContext, cotangent, register_vjp
from spmdrules.kernels_elementwise import tensor_block
from spmdrules.kernels_reduction import AXIS_OPS, reduced_axes


def _spread(g: Array, x: Array, axes: tuple[int, ...] | None, keep: bool) -> Array:
    """``g`` (reduced over ``axes`` of x) broadcast back to x's block."""
    if axes is not None and not keep:
        g = np.expand_dims(g, axes)
    return np.asarray(np.broadcast_to(g, x.shape))


@register_vjp("sum", "reduce_sum", "squared_l2_norm")
def sum_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
            cts: Sequence[Block]) -> tuple[Block, ...]:
    x = tensor_block(ctx, ins, 0, "x")
    g = cotangent(cts, 0, tensor_block(ctx, outs, 0, "out"))
    axes = reduced_axes(ctx.op, x.ndim, tuple(ctx.attrs.get("axis", ())))
    keep = bool(ctx.attrs.get("keep_dim", ctx.attrs.get("keepdims", False)))
    dx = _spread(g, x, axes, keep)
    if AXIS_OPS[ctx.op] == "squared_l2_norm":
        dx = 2.0 * x * dx
    return (np.array(dx, dtype=x.dtype),)


@register_vjp("mean_all")
def mean_all_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
                 cts: Sequence[Block]) -> tuple[Block, ...]:
    x = tensor_block(ctx, ins, 0, "x")
    g = cotangent(cts, 0, tensor_block(ctx, outs, 0, "out"))
    return (np.full(x.shape, g.reshape(()) / max(x.size, 1), dtype=x.dtype),)
