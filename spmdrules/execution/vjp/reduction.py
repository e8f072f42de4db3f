"""Vector-Jacobian products of the reductions (:mod:`spmdrules.execution.kernels.reduction`).

A sum's cotangent is the output's, broadcast back over the reduced axes of the rank's block; a
block's mean spreads it evenly over the block's entries. Over a sharded dim the local result is
one piece of a pending sum (or avg), whose dual is replicated: every rank receives the whole
cotangent, and its block of the input cotangent is complete.

Each axis reduction is described once, as its partial derivative given x, the result ``y`` and
the cotangent ``g`` spread back over the reduced axes (:data:`GRADIENTS`).

p_norm's derivative is torch's (``norm_backward``), subgradients included: 0 for p=0, sign(x) for
p=1 (0 at 0), an inf-norm's cotangent shared evenly among the entries whose |x| ties the norm (or
is NaN), and no cotangent where the norm is 0 (where x is 0 for p < 1). Its pending sum (p=0, 1
over a sharded axis) needs only the rank's block; any other p keeps the reduced dims whole, so
the rank's result is the global norm.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from spmdrules.execution.kernels.reduction import AXIS_OPS, mean_count, p_norm_axes, reduced_axes
from spmdrules.execution.local import (
    Array,
    LocalContext,
    LocalValue,
    array,
    cotangent,
    register_vjp,
)

Axes = tuple[int, ...] | None


def _axes_keep(ctx: LocalContext, x: Array) -> tuple[tuple[int, ...] | None, bool]:
    axes = reduced_axes(ctx.op, x.ndim, tuple(ctx.attrs.get("axis", ())))
    return axes, bool(ctx.attrs.get("keep_dim", ctx.attrs.get("keepdims", False)))


def _spread(g: Array, x: Array, axes: tuple[int, ...] | None, keep: bool) -> Array:
    """``g`` (reduced over ``axes`` of x) broadcast back to x's block."""
    if axes is not None and not keep:
        g = np.expand_dims(g, axes)
    return np.asarray(np.broadcast_to(g, x.shape))


def _extremum(x: Array, y: Array, g: Array, axes: Axes) -> Array:
    """The cotangent goes to the entries equal to the extremum, shared evenly among ties (as
    JAX's reduction gradients share it)."""
    hit = (x == y).astype(x.dtype)
    return np.asarray(hit * g / np.maximum(np.sum(hit, axis=axes, keepdims=True), 1))


def _frobenius(x: Array, y: Array, g: Array, axes: Axes) -> Array:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.where(x == 0, 0.0, x * g / y))


#: what each reduction's input cotangent is, from x and the spread result and cotangent
GRADIENTS: Final[dict[str, Callable[[Array, Array, Array, Axes], Array]]] = {
    "sum": lambda x, y, g, axes: g,
    "squared_l2_norm": lambda x, y, g, axes: 2.0 * x * g,
    "max": _extremum,
    "min": _extremum,
    # d logsumexp / dx = softmax of x over the reduced axes
    "logsumexp": lambda x, y, g, axes: np.exp(x - y) * g,
    "frobenius_norm": _frobenius,
}


def _what(op: str) -> str:
    return "logsumexp" if op == "logsumexp" else AXIS_OPS[op]


@register_vjp(*(op for op, what in AXIS_OPS.items() if what in GRADIENTS), "logsumexp")
def reduction_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                  cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    y = array(ctx, outs, 0, "out")
    g = cotangent(cts, 0, y)
    axes, keep = _axes_keep(ctx, x)
    dx = GRADIENTS[_what(ctx.op)](x, _spread(y, x, axes, keep), _spread(g, x, axes, keep), axes)
    return (np.array(dx, dtype=x.dtype),)


def _p_norm_gradient(p: float, x: Array, y: Array, g: Array, axes: Axes) -> Array:
    """torch's ``norm_backward`` on x, the spread norm y and the spread cotangent g."""
    if p == 0:
        return np.zeros_like(x)
    if p == 1:
        return np.asarray(np.sign(x) * g)
    a = np.abs(x)
    if math.isinf(p):
        hit = ((a == y) | np.isnan(a)).astype(x.dtype)
        return np.asarray(np.sign(x) * hit * g / np.sum(hit, axis=axes, keepdims=True))
    if p < 1:
        scaled = np.where(x == 0, 0.0, np.sign(x) * a ** (p - 1))
        return np.asarray(scaled * g * y ** (1 - p))
    scaled = x * a ** (p - 2) if p >= 2 else np.sign(x) * a ** (p - 1)
    return np.asarray(np.where(y == 0, 0.0, scaled * g / y ** (p - 1)))


@register_vjp("p_norm")
def p_norm_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
               cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    y = array(ctx, outs, 0, "out")
    g = cotangent(cts, 0, y)
    p, axes, keep = p_norm_axes(ctx, x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        dx = _p_norm_gradient(p, x, _spread(y, x, axes, keep), _spread(g, x, axes, keep), axes)
    return (np.array(dx, dtype=x.dtype),)


@register_vjp("mean")
def mean_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
             cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    axes = reduced_axes(ctx.op, x.ndim, tuple(ctx.attrs.get("axis", ())))
    spread = _spread(g, x, axes, bool(ctx.attrs.get("keepdim", False)))
    return (spread / max(mean_count(ctx), 1),)


@register_vjp("mean_all")
def mean_all_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                 cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    return (np.full(x.shape, g.reshape(()) / max(x.size, 1), dtype=x.dtype),)
