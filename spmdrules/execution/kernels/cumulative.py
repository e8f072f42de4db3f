"""Local kernels of cumsum, cummax, cummin and the latter two's gradients.

The rules keep the scanned axis whole, so a rank scans the rows it holds; a block that cuts the
axis is refused (``ShardMismatch``), and so is a partial input. ``exclusive`` shifts the scan by
one, ``reverse`` scans from the end; cummax/cummin give the index of the running extreme (the last
one on ties, as torch and Paddle do).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


def scan_axis(ctx: LocalContext, x: Array, name: str = "x") -> int:
    """The scanned axis, which this rank must hold whole."""
    local.require_whole(ctx, 0, name)
    if ctx.attrs.get("flatten", False):
        local.require_full_dims(ctx, 0, name, range(x.ndim), "the scan runs over every element")
        return 0
    axis = normalise_axis(ctx.op, name, int(ctx.attrs.get("axis", -1)), max(x.ndim, 1))
    if x.ndim:
        local.require_full_dims(ctx, 0, name, [axis], "each position needs every one before it")
    return axis


def cumsum_along(x: Array, axis: int, exclusive: bool, reverse: bool) -> Array:
    y = np.flip(x, axis) if reverse else x
    out = np.cumsum(y, axis=axis, dtype=x.dtype)
    if exclusive:
        out = out - y
    return np.asarray(np.flip(out, axis) if reverse else out)


@register_kernel("cumsum")
def cumsum(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    axis = scan_axis(ctx, x)
    src = x.reshape(-1) if ctx.attrs.get("flatten", False) else x.reshape(x.shape or (1,))
    out = cumsum_along(src, axis, bool(ctx.attrs.get("exclusive")), bool(ctx.attrs.get("reverse")))
    return (out if ctx.attrs.get("flatten", False) else out.reshape(x.shape),)


def running_extreme(x: Array, axis: int, largest: bool) -> tuple[Array, Array]:
    """The running max (or min) along ``axis`` and the index where it was last reached."""
    moved: Array = np.moveaxis(x.reshape(x.shape or (1,)), axis, -1)
    best = np.empty_like(moved)
    where = np.zeros(moved.shape, dtype=np.int64)
    if moved.shape[-1]:
        best[..., 0], cur = moved[..., 0], np.zeros(moved.shape[:-1], dtype=np.int64)
        for i in range(1, moved.shape[-1]):
            v = moved[..., i]
            better = v >= best[..., i - 1] if largest else v <= best[..., i - 1]
            best[..., i] = np.where(better, v, best[..., i - 1])
            cur = np.where(better, i, cur)
            where[..., i] = cur
    return (np.moveaxis(best, -1, axis).reshape(x.shape),
            np.moveaxis(where, -1, axis).reshape(x.shape))


@register_kernel("cummax", "cummin")
def cumext(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    out, idx = running_extreme(x, scan_axis(ctx, x), ctx.op == "cummax")
    return (out, idx.astype(local.numpy_dtype(str(ctx.attrs.get("dtype", "int64")))))


def scatter_along(like: Array, indices: Array, g: Array, axis: int) -> Array:
    """Zeros like ``like`` with ``g`` added at ``indices`` along ``axis`` (repeats accumulate)."""
    out = np.zeros(like.shape or (1,), dtype=np.result_type(like, g))
    idx = indices.reshape(indices.shape or (1,)).astype(np.int64)
    grid: list[Any] = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    np.add.at(out, tuple(grid), g.reshape(idx.shape))
    return out.reshape(like.shape)


@register_kernel("cummax_grad", "cummin_grad")
def cumext_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    idx = array(ctx, blocks, 1, "indices")
    g = array(ctx, blocks, 2, "out_grad")
    return (scatter_along(x, idx, g, scan_axis(ctx, x)),)


__all__ = ["cumext", "cumext_grad", "cumsum", "cumsum_along", "running_extreme", "scan_axis",
           "scatter_along"]
