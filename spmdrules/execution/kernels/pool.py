"""Local kernels of pool2d and pool3d: the runtime's window code on the rank's blocks.

Windowed pooling reads the rank's (halo-extended) slab at its global position (``LocalWindows``)
and computes the output block's windows. Adaptive and global pooling compute every bin of the
output block from the part of it the slab holds: the max of that part (``-inf`` where it holds
none) or its sum over the whole bin's size, the rank's piece of the pending max / sum its rule
declares over a sharded spatial dim.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spmdrules.core.shards import ShardMismatch
from spmdrules.engine.windows import channels_last, geometry
from spmdrules.execution import local
from spmdrules.execution.halo import slab_spans
from spmdrules.execution.kernels.conv import to_first, to_last
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel
from spmdrules.graph.shapes.pool import kernel_of, pool_out_spatial
from spmdrules.runtime.windows import (
    LocalWindows,
    avg_pool,
    avg_pool_adjoint,
    max_pool,
    max_pool_adjoint,
)

POOL_OPS = ("pool2d", "pool3d")


@dataclass(frozen=True, slots=True)
class PoolPlan:
    last: bool
    kind: str
    bins: bool  # adaptive or global
    #: per spatial dim: global input range of the slab, output block range, global lengths
    in_spans: tuple[range, ...]
    out_spans: tuple[range, ...]
    in_lengths: tuple[int, ...]
    out_lengths: tuple[int, ...]
    geo: LocalWindows | None
    #: per spatial dim: the non-exclusive divisor's correction (asymmetric after-padding)
    pads_after: tuple[int, ...]
    exclusive: bool


def plan(ctx: LocalContext) -> PoolPlan:
    xs, x_attr = local.input_spec(ctx, 0, "x")
    attrs = ctx.attrs
    last = channels_last(attrs)
    nsp = len(xs) - 2
    sp_dims = list(range(1, nsp + 1)) if last else list(range(2, nsp + 2))
    lengths = tuple(xs[d] for d in sp_dims)
    out_lengths = pool_out_spatial(ctx.op, lengths, attrs)
    out_shape, out_attr = local.output(ctx)
    x_ranges = [local.block_range(ctx, xs, x_attr, d) for d in sp_dims]
    o_ranges = tuple(local.block_range(ctx, out_shape, out_attr, d) for d in sp_dims)
    in_spans = slab_spans(ctx) or tuple(x_ranges)
    kind = str(attrs.get("pooling_type", "max"))
    bins = bool(attrs.get("global_pooling", False)) or bool(attrs.get("adaptive", False))
    if bins:
        return PoolPlan(last, kind, True, in_spans, o_ranges, lengths, out_lengths, None,
                        (0,) * nsp, True)
    g = geometry(ctx.op, lengths, kernel_of(ctx.op, attrs, nsp), attrs,
                 ceil_mode=bool(attrs.get("ceil_mode", False)))
    for w, o, i, n in zip(g.windows, o_ranges, in_spans, lengths, strict=True):
        lo, hi = w.input_span((o.start, o.stop), n) if len(o) else (0, 0)
        if hi > lo and (lo < i.start or hi > i.stop):
            raise ShardMismatch(
                f"{ctx.op}: the output block's windows read input {lo}..{hi - 1} but the rank "
                f"holds {i.start}..{i.stop - 1}; the lowering exchanges that halo"
            )
    geo = LocalWindows(g.windows, tuple((r.start, r.stop) for r in in_spans),
                       tuple((r.start, r.stop) for r in o_ranges), lengths)
    return PoolPlan(last, kind, False, in_spans, o_ranges, lengths, out_lengths, geo,
                    g.pads_after, bool(attrs.get("exclusive", True)))


def _bin(j: int, n: int, k: int) -> tuple[int, int]:
    return (j * n) // k, -(-((j + 1) * n) // k)


def _bin_slices(p: PoolPlan) -> list[tuple[tuple[int, ...], tuple[slice, ...], int]]:
    """(output index in the block, slab slices, whole bin size) per output bin of the block."""
    out = []
    for idx in itertools.product(*(range(len(o)) for o in p.out_spans)):
        sl, size = [], 1
        for i, (o, span, n, k) in enumerate(zip(p.out_spans, p.in_spans, p.in_lengths,
                                                p.out_lengths, strict=True)):
            lo, hi = _bin(o.start + idx[i], n, k)
            size *= hi - lo
            a, b = max(lo, span.start), min(hi, span.stop)
            sl.append(slice(a - span.start, max(a, b) - span.start))
        out.append((idx, tuple(sl), size))
    return out


def _correction(p: PoolPlan) -> Array:
    """Non-exclusive average: the runtime divides by the window's count over symmetric padding
    (``Window.padding`` both sides); Paddle's after side may differ. Ratio per output."""
    assert p.geo is not None
    ratio: Array = np.ones((), dtype=np.float64)
    for w, o, n, pa in zip(p.geo.windows, p.geo.out_spans, p.in_lengths, p.pads_after,
                           strict=True):
        sym = w.divisor_counts(o, n, True)
        j = np.arange(*o)
        pos = (j * w.stride - w.padding)[:, None] + w.dilation * np.arange(w.kernel)[None, :]
        mine = np.maximum(np.count_nonzero((pos >= -w.padding) & (pos < n + pa), axis=1), 1)
        ratio = np.multiply.outer(ratio, sym / mine)
    return ratio


def forward(p: PoolPlan, x: Array) -> tuple[Array, Array | None]:
    """The output block (channels first) and, for windowed max pooling, the argmax offsets."""
    lead = x.shape[:2]
    if p.bins:
        out = np.empty((*lead, *(len(o) for o in p.out_spans)), dtype=x.dtype)
        for idx, sl, size in _bin_slices(p):
            at: tuple[Any, ...] = (slice(None), slice(None), *idx)
            part = x[(slice(None), slice(None), *sl)]
            if p.kind == "max":
                out[at] = part.max(axis=tuple(range(2, x.ndim))) if part.size else -np.inf
            else:
                out[at] = part.sum(axis=tuple(range(2, x.ndim))) / size
        return out, None
    assert p.geo is not None
    if p.kind == "max":
        best, arg = max_pool(x, p.geo)
        return best, arg
    y = avg_pool(x, p.geo, not p.exclusive)
    if not p.exclusive:
        y = y * _correction(p)
    return y.astype(x.dtype, copy=False), None


def backward(p: PoolPlan, x: Array, g: Array) -> Array:
    if p.bins:
        dx = np.zeros(x.shape, dtype=np.result_type(x.dtype, g.dtype))
        for idx, sl, size in _bin_slices(p):
            at: tuple[Any, ...] = (slice(None), slice(None), *idx)
            gi = g[at]
            part = x[(slice(None), slice(None), *sl)]
            if not part.size:
                continue
            nd = tuple(range(2, x.ndim))
            if p.kind == "max":
                flat = part.reshape(*part.shape[:2], -1)
                first = flat.argmax(axis=-1)
                mask = np.zeros(flat.shape, dtype=bool)
                np.put_along_axis(mask, first[..., None], True, axis=-1)
                dx[(slice(None), slice(None), *sl)] += (
                    mask.reshape(part.shape) * np.expand_dims(gi, nd))
            else:
                dx[(slice(None), slice(None), *sl)] += np.expand_dims(gi, nd) / size
        return dx
    assert p.geo is not None
    if p.kind == "max":
        _, arg = max_pool(x, p.geo)
        return max_pool_adjoint(g, arg, p.geo, x.shape)
    if not p.exclusive:
        g = g * _correction(p)
    return avg_pool_adjoint(g, p.geo, not p.exclusive, x.shape)


@register_kernel(*POOL_OPS)
def pool_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    local.require_whole(ctx, 0, "x")
    p = plan(ctx)
    x = to_first(array(ctx, blocks, 0, "x"), p.last)
    return (to_last(forward(p, x)[0], p.last),)


__all__ = ["POOL_OPS", "PoolPlan", "backward", "forward", "plan", "pool_kernel"]
