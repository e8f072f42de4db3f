"""Local kernels of the convolutions: the runtime's window code on the rank's blocks.

A block holds some images (``n``), some output channels (the filter's rows) and, with groups = 1,
a block of input channels that the filter's block matches (its output is then a pending sum).
With groups > 1 the input channels are whole and each local output channel reads its own group.
The spatial dims are whole, or (spatial sharding) the input block is the rank's slab extended by
the halo the lowering exchanged: ``LocalWindows`` places the slab at its global position and
computes the output block's windows from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spmdrules.core.shards import ShardMismatch
from spmdrules.engine.windows import Geometry, channels_last, needed_span
from spmdrules.execution import local
from spmdrules.execution.halo import slab_spans
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel
from spmdrules.graph.shapes.conv import conv_shapes
from spmdrules.runtime.windows import LocalWindows, conv, conv_adjoint

CONV_OPS = ("conv2d", "conv3d", "depthwise_conv2d", "conv2d_transpose")



@dataclass(frozen=True, slots=True)
class ConvPlan:
    """What a rank computes: the layout, groups and the window geometry of its blocks."""

    op: str
    last: bool
    groups: int
    transpose: bool
    geo: LocalWindows
    #: this rank's output channels (global range) and input channels
    out_channels: range
    in_channels: range
    total_out: int
    total_in: int


def _spans(r: Sequence[range]) -> tuple[tuple[int, int], ...]:
    return tuple((x.start, x.stop) for x in r)


def plan(ctx: LocalContext) -> ConvPlan:
    op = ctx.op.removesuffix("_grad")
    (xs, x_attr), (fs, f_attr) = local.input_spec(ctx, 0, "input"), local.input_spec(ctx, 1, "filter")
    attrs = ctx.attrs
    last = channels_last(attrs)
    out_shape, geometry = conv_shapes(op, xs, fs, attrs)
    out_attr = ctx.output_attrs[0] if not ctx.op.endswith("_grad") else None
    # (for a transpose: the geometry of the convolution whose input is our output)
    in_sp, out_sp = geometry.in_lengths, geometry.out_lengths
    nsp = len(in_sp)
    sp_dims = list(range(1, nsp + 1)) if last else list(range(2, nsp + 2))
    c_dim = nsp + 1 if last else 1
    x_ranges = [local.block_range(ctx, xs, x_attr, d) for d in sp_dims]
    halo = slab_spans(ctx)
    transposed = op == "conv2d_transpose"
    # the op's own output block (a gradient op computes the whole output)
    if out_attr is not None:
        o_ranges = tuple(local.block_range(ctx, out_shape, out_attr, d) for d in sp_dims)
    else:
        o_ranges = tuple(range(n) for n in (in_sp if transposed else out_sp))
    held = halo if halo else tuple(x_ranges)
    # the windows run over the convolution's input: a transpose's output, a conv's input
    conv_in, conv_out = (o_ranges, held) if transposed else (held, o_ranges)
    for w, o, i, n in zip(geometry.windows, o_ranges, held,
                          out_sp if transposed else in_sp, strict=True):
        lo, hi = needed_span(w, n, o, transposed=transposed)
        if hi > lo and (lo < i.start or hi > i.stop):
            raise ShardMismatch(
                f"{ctx.op}: the output block's windows read input {lo}..{hi - 1} but the "
                f"rank holds {i.start}..{i.stop - 1}; exchange a halo (spatial_sharding) or "
                "replicate the spatial dims"
            )
    geo = LocalWindows(geometry.windows, _spans(conv_in), _spans(conv_out), geometry.in_lengths)
    if op == "conv2d_transpose":
        out_ch = local.block_range(ctx, fs, f_attr, 1)
        in_ch = local.block_range(ctx, fs, f_attr, 0)
        total_out, total_in = fs[1] * int(attrs.get("groups", 1)), fs[0]
    else:
        out_ch = local.block_range(ctx, fs, f_attr, 0)
        in_ch = local.block_range(ctx, xs, x_attr, c_dim)
        total_out, total_in = fs[0], xs[c_dim]
    return ConvPlan(op, last, int(attrs.get("groups", 1)), op == "conv2d_transpose", geo,
                    out_ch, in_ch, total_out, total_in)


def to_first(a: Array, last: bool) -> Array:
    return np.moveaxis(a, -1, 1) if last else a


def to_last(a: Array, last: bool) -> Array:
    return np.moveaxis(a, 1, -1) if last else a


def group_slices(p: ConvPlan, nrows: int) -> list[tuple[slice, slice]]:
    """(rows of the local filter, channels of the local input) per group the block touches.

    groups = 1: everything local (the input's channel block matches the filter's). groups > 1:
    the input's channels are whole; local filter row ``r`` is output channel ``o0 + r``."""
    if p.groups == 1:
        return [(slice(0, nrows), slice(None))]
    rows_per = p.total_out // p.groups
    cin = p.total_in // p.groups
    o0 = p.out_channels.start
    out = []
    for g in range(o0 // rows_per, (o0 + nrows - 1) // rows_per + 1 if nrows else 0):
        lo, hi = max(o0, g * rows_per), min(o0 + nrows, (g + 1) * rows_per)
        out.append((slice(lo - o0, hi - o0), slice(g * cin, (g + 1) * cin)))
    return out


def forward(p: ConvPlan, x: Array, f: Array) -> Array:
    """The output block (channels first) of a convolution or its transpose."""
    if p.transpose:
        return _transpose_forward(p, x, f)
    dtype = np.result_type(x.dtype, f.dtype)
    out = np.zeros((x.shape[0], f.shape[0], *p.geo.counts), dtype=dtype)
    for rows, chans in group_slices(p, f.shape[0]):
        out[:, rows] = conv(x[:, chans], f[rows], None, p.geo)
    return out


def _transpose_groups(p: ConvPlan, x: Array, f: Array) -> list[tuple[slice, slice]]:
    """(input channels = filter rows, output channels) per group, for a transpose."""
    if p.groups == 1:
        return [(slice(None), slice(None))]
    cin, mg = p.total_in // p.groups, f.shape[1]
    return [(slice(g * cin, (g + 1) * cin), slice(g * mg, (g + 1) * mg)) for g in range(p.groups)]


def _transpose_forward(p: ConvPlan, x: Array, f: Array) -> Array:
    dtype = np.result_type(x.dtype, f.dtype)
    sp = tuple(b - a for a, b in p.geo.in_spans)
    mg = f.shape[1]
    out = np.zeros((x.shape[0], mg * (p.groups if p.groups > 1 else 1), *sp), dtype=dtype)
    for chans, outs in _transpose_groups(p, x, f):
        zero = np.zeros((x.shape[0], mg, *sp), dtype=dtype)
        out[:, outs] = conv_adjoint(x[:, chans], zero, f[chans], p.geo)[0]
    return out


def backward(p: ConvPlan, x: Array, f: Array, g: Array) -> tuple[Array, Array]:
    """(d input, d filter) of :func:`forward`'s block at cotangent ``g`` (channels first)."""
    dtype = np.result_type(x.dtype, f.dtype, g.dtype)
    dx = np.zeros(x.shape, dtype=dtype)
    df = np.zeros(f.shape, dtype=dtype)
    if p.transpose:
        for chans, outs in _transpose_groups(p, x, f):
            # out = A^T x with A = conv(., f): dx = A g, df from the adjoint's filter gradient
            dx[:, chans] = conv(g[:, outs], f[chans], None, p.geo)
            df[chans] = conv_adjoint(x[:, chans], g[:, outs], f[chans], p.geo)[1]
        return dx, df
    for rows, chans in group_slices(p, f.shape[0]):
        d_in, d_f, _ = conv_adjoint(g[:, rows], x[:, chans], f[rows], p.geo)
        dx[:, chans] += d_in
        df[rows] = d_f
    return dx, df


def blocks_of(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[ConvPlan, Array, Array]:
    x = array(ctx, blocks, 0, "input")
    f = array(ctx, blocks, 1, "filter")
    for i, name in ((0, "input"), (1, "filter")):
        local.require_whole(ctx, i, name)
    p = plan(ctx)
    return p, to_first(x, p.last), f


@register_kernel(*CONV_OPS)
def conv_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    p, x, f = blocks_of(ctx, blocks)
    return (to_last(forward(p, x, f), p.last),)


@register_kernel("conv3d_grad", "depthwise_conv2d_grad", "conv2d_transpose_grad")
def conv_grad_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    p, x, f = blocks_of(ctx, blocks)
    local.require_whole(ctx, 2, "output_grad")
    g = to_first(array(ctx, blocks, 2, "output_grad"), p.last)
    dx, df = backward(p, x, f, g)
    return to_last(dx, p.last), df


__all__ = ["CONV_OPS", "ConvPlan", "Geometry", "backward", "blocks_of", "conv_grad_kernel",
           "conv_kernel", "forward", "plan", "to_first", "to_last"]

