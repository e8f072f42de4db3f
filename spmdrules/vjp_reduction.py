"""Vector-Jacobian products of the reductions (:mod:`spmdrules.kernels_reduction`).

A sum's cotangent is the output's, broadcast back over the reduced axes of the rank's block; a
block's mean spreads it evenly over the block's entries. Over a sharded dim the local result is
one piece of a pending sum (or avg), whose dual is replicated: every rank receives the whole
cotangent, and its block of the input cotangent is complete.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.kernels import Array, Block, LocalContext, array, cotangent, register_vjp
from spmdrules.kernels_reduction import AXIS_OPS, reduced_axes

_EXTREMA = tuple(op for op, what in AXIS_OPS.items() if what in ("max", "min"))


def _axes_keep(ctx: LocalContext, x: Array) -> tuple[tuple[int, ...] | None, bool]:
    axes = reduced_axes(ctx.op, x.ndim, tuple(ctx.attrs.get("axis", ())))
    return axes, bool(ctx.attrs.get("keep_dim", ctx.attrs.get("keepdims", False)))


def _spread(g: Array, x: Array, axes: tuple[int, ...] | None, keep: bool) -> Array:
    """``g`` (reduced over ``axes`` of x) broadcast back to x's block."""
    if axes is not None and not keep:
        g = np.expand_dims(g, axes)
    return np.asarray(np.broadcast_to(g, x.shape))


@register_vjp("sum", "reduce_sum", "squared_l2_norm")
def sum_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
            cts: Sequence[Block]) -> tuple[Block, ...]:
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    axes, keep = _axes_keep(ctx, x)
    dx = _spread(g, x, axes, keep)
    if AXIS_OPS[ctx.op] == "squared_l2_norm":
        dx = 2.0 * x * dx
    return (np.array(dx, dtype=x.dtype),)


@register_vjp("mean_all")
def mean_all_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
                 cts: Sequence[Block]) -> tuple[Block, ...]:
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    return (np.full(x.shape, g.reshape(()) / max(x.size, 1), dtype=x.dtype),)


@register_vjp(*_EXTREMA)
def extremum_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
                 cts: Sequence[Block]) -> tuple[Block, ...]:
    """The cotangent goes to the entries equal to the extremum, shared evenly among ties (as
    JAX's reduction gradients share it)."""
    x = array(ctx, ins, 0, "x")
    y = array(ctx, outs, 0, "out")
    g = cotangent(cts, 0, y)
    axes, keep = _axes_keep(ctx, x)
    hit = (x == _spread(y, x, axes, keep)).astype(x.dtype)
    count = np.sum(hit, axis=axes, keepdims=True)
    return (np.asarray(hit * _spread(g, x, axes, keep) / np.maximum(count, 1)).astype(x.dtype),)


@register_vjp("logsumexp")
def logsumexp_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
                  cts: Sequence[Block]) -> tuple[Block, ...]:
    """d logsumexp / dx = softmax of x over the reduced axes."""
    x = array(ctx, ins, 0, "x")
    y = array(ctx, outs, 0, "out")
    g = cotangent(cts, 0, y)
    axes, keep = _axes_keep(ctx, x)
    return (np.asarray(np.exp(x - _spread(y, x, axes, keep)) * _spread(g, x, axes, keep))
            .astype(x.dtype),)


@register_vjp("frobenius_norm")
def frobenius_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
                  cts: Sequence[Block]) -> tuple[Block, ...]:
    x = array(ctx, ins, 0, "x")
    y = array(ctx, outs, 0, "out")
    g = cotangent(cts, 0, y)
    axes, keep = _axes_keep(ctx, x)
    with np.errstate(divide="ignore", invalid="ignore"):
        dx = np.where(x == 0, 0.0, x * _spread(g / y, x, axes, keep))
    return (np.asarray(dx).astype(x.dtype),)
