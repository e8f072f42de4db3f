"""Local kernel of lrn: the rank holds whole channels (the rule keeps them whole), any block of
the batch and spatial dims, and normalises each channel by its window of neighbours."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.engine.windows import channel_axis
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


def window_sum(v: Array, axis: int, before: int, after: int) -> Array:
    """``out[c] = sum(v[c - before : c + after + 1])`` along ``axis``, zeros past the ends."""
    moved = np.moveaxis(v, axis, 0)
    pad = np.zeros((before + after + 1, *moved.shape[1:]), dtype=v.dtype)
    csum = np.cumsum(np.concatenate([pad[: before + 1], moved, pad[: after]]), axis=0)
    n = moved.shape[0]
    w = before + after + 1
    out = csum[w : w + n] - csum[:n]
    return np.moveaxis(out, 0, axis)


def lrn_parts(ctx: LocalContext, x: Array) -> tuple[int, int, int, Array]:
    """The channel axis, the window's sides and ``k + alpha * window_sum(x^2)``."""
    local.require_whole(ctx, 0, "x")
    axis = channel_axis(str(ctx.attrs.get("data_format", "NCHW")), x.ndim)
    local.require_full_dims(ctx, 0, "x", [axis], "each channel reads its neighbours' squares")
    n = int(ctx.attrs.get("n", 5))
    before, after = (n - 1) // 2, n - 1 - (n - 1) // 2
    mid = float(ctx.attrs.get("k", 2.0)) + float(ctx.attrs.get("alpha", 1e-4)) * window_sum(
        x * x, axis, before, after)
    return axis, before, after, mid


@register_kernel("lrn")
def lrn(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    _, _, _, mid = lrn_parts(ctx, x)
    return (np.asarray(x * mid ** -float(ctx.attrs.get("beta", 0.75)), dtype=x.dtype),)


__all__ = ["lrn", "lrn_parts", "window_sum"]
