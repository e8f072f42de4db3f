"""Local kernels of topk, argsort and their gradients: each row along the axis, held whole.

Ties are broken by position (a stable sort), so the result is deterministic; ``sorted=False`` still
returns topk's values in order (Paddle leaves that order unspecified). topk counts NaN as the
largest value, as Paddle's CPU kernel (and torch's) do: first with ``largest``, last without.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution import local
from spmdrules.execution.kernels.cumulative import scatter_along
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


def sort_axis(ctx: LocalContext, x: Array, i: int, name: str) -> int:
    local.require_whole(ctx, i, name)
    axis = normalise_axis(ctx.op, name, int(ctx.attrs.get("axis", -1)), max(x.ndim, 1))
    if x.ndim:
        local.require_full_dims(ctx, i, name, [axis], "a row's order needs the whole row")
    return axis


def order(x: Array, axis: int, descending: bool) -> Array:
    """Indices that sort x along ``axis``, ties in position order."""
    key = x.astype(np.int64) if x.dtype.kind in "bu" else x
    return np.asarray(np.argsort(-key if descending else key, axis=axis, kind="stable"),
                      dtype=np.int64)


def top_order(x: Array, axis: int, largest: bool) -> Array:
    """``order`` with NaN the largest value: a descending sort puts it first (NaN negated is NaN,
    which an ascending sort puts last)."""
    if largest and x.dtype.kind == "f":
        return np.asarray(np.lexsort((-x, ~np.isnan(x)), axis=axis), dtype=np.int64)
    return order(x, axis, largest)


@register_kernel("argsort")
def argsort(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    x1 = x.reshape(x.shape or (1,))
    axis = sort_axis(ctx, x, 0, "x")
    idx = order(x1, axis, bool(ctx.attrs.get("descending", False)))
    return (np.take_along_axis(x1, idx, axis).reshape(x.shape), idx.reshape(x.shape))


@register_kernel("topk")
def topk(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    x1 = x.reshape(x.shape or (1,))
    axis = sort_axis(ctx, x, 0, "x")
    k = int(ctx.attrs.get("k", 1))
    idx = np.take(top_order(x1, axis, bool(ctx.attrs.get("largest", True))), range(k), axis=axis)
    shape = local.out_block(ctx)
    return (np.take_along_axis(x1, idx, axis).reshape(shape), idx.reshape(shape))


@register_kernel("topk_grad")
def topk_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    idx, g = array(ctx, blocks, 1, "indices"), array(ctx, blocks, 2, "out_grad")
    return (scatter_along(x, idx, g, sort_axis(ctx, x, 0, "x")),)


@register_kernel("argsort_grad")
def argsort_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    idx, x = array(ctx, blocks, 0, "indices"), array(ctx, blocks, 1, "x")
    g = array(ctx, blocks, 2, "out_grad")
    return (scatter_along(x, idx, g, sort_axis(ctx, x, 1, "x")),)
