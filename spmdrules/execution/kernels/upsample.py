"""Local kernels of nearest_interp and bilinear_interp: each output position of the rank's block
read at its source positions (:mod:`spmdrules.engine.resampling`) in the rank's (halo-extended)
slab, one spatial dim at a time (the last first, as torch and Paddle sum the taps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spmdrules.core.shards import ShardMismatch
from spmdrules.engine.resampling import METHODS, resampling, spatial_of
from spmdrules.execution import local
from spmdrules.execution.halo import slab_spans
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel

UPSAMPLE_OPS = tuple(METHODS)


@dataclass(frozen=True, slots=True)
class Taps:
    """One spatial dim of the rank's block: its axis, the two slab positions each output reads
    and the second's weight, and the slab's length."""

    axis: int
    i0: Array
    i1: Array
    lam: Array
    linear: bool
    slab: int


def plan(ctx: LocalContext) -> list[Taps]:
    """The taps of every spatial dim, in the order the kernel applies them (the last dim first)."""
    xs, x_attr = local.input_spec(ctx, 0, "x")
    sp = spatial_of(ctx.op, len(xs), str(ctx.attrs.get("data_format", "NCHW")))
    out_shape, out_attr = local.output(ctx)
    spans = slab_spans(ctx) or tuple(local.block_range(ctx, xs, x_attr, d) for d in sp)
    out = []
    for d, r, span in zip(sp, resampling(ctx.op, [xs[d] for d in sp], ctx.attrs), spans,
                          strict=True):
        o = local.block_range(ctx, out_shape, out_attr, d)
        i0, i1, lam = r.taps(o)
        if len(o) and (min(i0) < span.start or max(i1) >= span.stop):
            raise ShardMismatch(
                f"{ctx.op}: the output block {o.start}..{o.stop - 1} of dim {d} reads input "
                f"{min(i0)}..{max(i1)} but the rank holds {span.start}..{span.stop - 1}; the "
                "lowering exchanges that halo")
        out.append(Taps(d, i0 - span.start, i1 - span.start, lam, r.linear, len(span)))
    return out[::-1]


def _weights(t: Taps, ndim: int, dtype: Any) -> tuple[Array, Array]:
    shape = [1] * ndim
    shape[t.axis] = len(t.lam)
    lam = t.lam.astype(dtype).reshape(shape)
    return 1 - lam, lam


def _work_dtype(x: Array) -> Any:
    return x.dtype if np.issubdtype(x.dtype, np.inexact) else np.float64


def forward(taps: Sequence[Taps], x: Array) -> Array:
    y = x
    for t in taps:
        if not t.linear:
            y = np.take(y, t.i0, axis=t.axis)
            continue
        w0, w1 = _weights(t, y.ndim, _work_dtype(x))
        y = w0 * np.take(y, t.i0, axis=t.axis) + w1 * np.take(y, t.i1, axis=t.axis)
    return y.astype(x.dtype, copy=False)


def _scatter(g: Array, index: Array, axis: int, n: int) -> Array:
    """The adjoint of ``np.take(., index, axis)`` onto a dim of length ``n``."""
    gm = np.moveaxis(g, axis, 0)
    out = np.zeros((n, *gm.shape[1:]), dtype=g.dtype)
    np.add.at(out, index, gm)
    return np.moveaxis(out, 0, axis)


def backward(taps: Sequence[Taps], g: Array) -> Array:
    for t in reversed(taps):
        if not t.linear:
            g = _scatter(g, t.i0, t.axis, t.slab)
            continue
        w0, w1 = _weights(t, g.ndim, _work_dtype(g))
        g = _scatter(w0 * g, t.i0, t.axis, t.slab) + _scatter(w1 * g, t.i1, t.axis, t.slab)
    return g


@register_kernel(*UPSAMPLE_OPS)
def upsample_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    local.require_whole(ctx, 0, "x")
    return (forward(plan(ctx), array(ctx, blocks, 0, "x")),)


__all__ = ["UPSAMPLE_OPS", "Taps", "backward", "forward", "plan", "upsample_kernel"]
