"""Local kernels of pad and its gradient: each rank writes its block of the padded result, reading
the part of x inside it from its own x block (which must hold it), and the gradient crops it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel, take


def inner(ctx: LocalContext, x_i: int, out_shape: Sequence[int], out_attr: Any
          ) -> tuple[list[Array], list[Array]]:
    """Per dim, the result block's positions that lie inside x, and those positions in x's
    block."""
    shape, attr = local.input_spec(ctx, x_i, "x")
    pads = ctx.attrs["paddings"]
    where, pos = [], []
    for d, n in enumerate(shape):
        src = np.asarray(local.block_range(ctx, out_shape, out_attr, d)) - pads[2 * d]
        keep = (src >= 0) & (src < n)
        where.append(np.nonzero(keep)[0])
        pos.append(local.held(ctx, local.block_range(ctx, shape, attr, d), src[keep], "x", d))
    return where, pos


@register_kernel("pad")
def pad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    local.require_whole(ctx, 0, "x")
    out_shape, out_attr = local.output(ctx)
    where, pos = inner(ctx, 0, out_shape, out_attr)
    out = np.full(local.out_block(ctx), ctx.attrs.get("pad_value", 0.0), dtype=x.dtype)
    out[np.ix_(*where)] = take(x, pos)
    return (out,)


def crop(ctx: LocalContext, g: Array, g_shape: Sequence[int], g_attr: Any) -> Array:
    """The cotangent's values at x's positions: x_grad's block (laid out as output 0)."""
    shape, attr = local.output(ctx) if ctx.op == "pad_grad" else local.input_spec(ctx, 0, "x")
    pads = ctx.attrs["paddings"]
    pos = [local.held(ctx, local.block_range(ctx, g_shape, g_attr, d),
                      np.asarray(local.block_range(ctx, shape, attr, d)) + pads[2 * d],
                      "out_grad", d) for d in range(len(shape))]
    return take(g, pos)


@register_kernel("pad_grad")
def pad_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    g = array(ctx, blocks, 1, "out_grad")
    g_shape, g_attr = local.input_spec(ctx, 1, "out_grad")
    return (crop(ctx, g, g_shape, g_attr),)
