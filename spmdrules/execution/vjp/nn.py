"""Vector-Jacobian products of the nn ops (:mod:`spmdrules.execution.kernels.nn`): softmax, log_softmax,
layer_norm, embedding and cross entropy with softmax.

Softmax and the norms hold whole rows on every rank (their rules say so), so their cotangents are
the serial formulas on the rank's rows; the parameters' cotangents sum over the rank's rows only,
pieces of the pending sum the dual of their (replicated) layout names. A vocab-sharded embedding
adds the cotangent rows of the ids inside its rows into its block of the table. Cross entropy with
a sharded class axis runs as the vocab-parallel kernel, whose reverse mode
:mod:`spmdrules.execution.adjoint` lowers with its collectives; the kernel here sees whole rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from spmdrules.core.blocks import shard_index
from spmdrules.core.errors import UnsupportedError
from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution.kernels.nn import log_softmax_rows, padding_row
from spmdrules.execution.kernels.shape import block_range, input_spec
from spmdrules.execution.local import Array, Block, LocalContext, array, cotangent, register_vjp


@register_vjp("softmax", "log_softmax")
def softmax_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
                cts: Sequence[Block]) -> tuple[Block, ...]:
    x = array(ctx, ins, 0, "x")
    y = array(ctx, outs, 0, "out")
    g = cotangent(cts, 0, y)
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), max(x.ndim, 1))
    y1, g1 = (y.reshape(1), g.reshape(1)) if x.ndim == 0 else (y, g)
    if ctx.op == "log_softmax":
        dx = g1 - np.exp(y1) * np.sum(g1, axis=axis, keepdims=True)
    else:
        dx = y1 * (g1 - np.sum(g1 * y1, axis=axis, keepdims=True))
    return (np.asarray(dx).reshape(x.shape).astype(x.dtype),)


@register_vjp("layer_norm")
def layer_norm_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
                   cts: Sequence[Block]) -> tuple[Block, ...]:
    x = array(ctx, ins, 0, "x")
    scale = ins[1] if len(ins) > 1 else None
    bias = ins[2] if len(ins) > 2 else None
    out, mean, var = (array(ctx, outs, i, n) for i, n in enumerate(("out", "mean", "variance")))
    bna, eps = int(ctx.attrs["begin_norm_axis"]), float(ctx.attrs["epsilon"])
    size = math.prod(x.shape[bna:])
    rows = x.reshape(*x.shape[:bna], size)
    g = cotangent(cts, 0, out).reshape(rows.shape)
    inv = 1.0 / np.sqrt(var[..., None] + eps)
    centred = rows - mean[..., None]
    xhat = centred * inv
    gs = g * scale if isinstance(scale, np.ndarray) else g
    dx = inv * (gs - gs.mean(axis=-1, keepdims=True)
                - xhat * (gs * xhat).mean(axis=-1, keepdims=True))
    # mean and variance are outputs too: their cotangents (usually none) flow back as well
    dx = dx + cotangent(cts, 1, mean)[..., None] / size
    dx = dx + cotangent(cts, 2, var)[..., None] * 2.0 * centred / size
    flat_g, flat_xhat = g.reshape(-1, size), xhat.reshape(-1, size)
    d_scale = (flat_g * flat_xhat).sum(axis=0) if isinstance(scale, np.ndarray) else None
    d_bias = flat_g.sum(axis=0) if isinstance(bias, np.ndarray) else None
    return (dx.reshape(x.shape).astype(x.dtype),
            None if d_scale is None else d_scale.astype(x.dtype),
            None if d_bias is None else d_bias.astype(x.dtype))


@register_vjp("fused_rms_norm")
def rms_norm_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
                 cts: Sequence[Block]) -> tuple[Block, ...]:
    """out = x * r * scale with r = 1 / sqrt(mean(x^2) + eps) per row (and r is an output)."""
    x = array(ctx, ins, 0, "x")
    scale = ins[1] if len(ins) > 1 else None
    out, inv = array(ctx, outs, 0, "out"), array(ctx, outs, 1, "invvar")
    size = x.shape[-1] if x.ndim else 1
    rows = x.reshape(-1, size)
    r = inv.reshape(-1, 1)
    g = cotangent(cts, 0, out).reshape(rows.shape)
    gs = g * scale if isinstance(scale, np.ndarray) else g
    # d r / d x = -r^3 x / size; the row's own cotangent of r adds to it
    g_r = np.sum(gs * rows, axis=-1, keepdims=True) + cotangent(cts, 1, inv).reshape(-1, 1)
    dx = gs * r - g_r * r**3 * rows / size
    d_scale = np.sum(g * rows * r, axis=0) if isinstance(scale, np.ndarray) else None
    return (dx.reshape(x.shape).astype(x.dtype),
            None if d_scale is None else d_scale.astype(x.dtype))


@register_vjp("embedding", "lookup_table_v2")
def embedding_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
                  cts: Sequence[Block]) -> tuple[Block, ...]:
    ids = array(ctx, ins, 0, "x")
    weight = array(ctx, ins, 1, "weight")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    (vocab, _), w_attr = input_spec(ctx, 1, "weight")
    rows = block_range(ctx, (vocab, weight.shape[1]), w_attr, 0)
    mine = (ids >= rows.start) & (ids < rows.stop)
    pad = padding_row(int(ctx.attrs["padding_idx"]), vocab)
    if pad is not None:
        mine &= ids != pad
    d_weight = np.zeros_like(weight)
    np.add.at(d_weight, ids[mine] - rows.start, g[mine])
    return (None, d_weight)


@register_vjp("cross_entropy_with_softmax", "softmax_with_cross_entropy")
def cross_entropy_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
                      cts: Sequence[Block]) -> tuple[Block, ...]:
    x = array(ctx, ins, 0, "x")
    label = array(ctx, ins, 1, "label")
    prob, loss = array(ctx, outs, 0, "softmax"), array(ctx, outs, 1, "loss")
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), x.ndim)
    _, x_attr = input_spec(ctx, 0, "x")
    if shard_index(x_attr, axis, ctx.coord)[1] > 1:
        raise UnsupportedError(
            f"{ctx.op}: 'x' dim {axis} (the classes) is sharded; its reverse mode needs the "
            "vocab-parallel lowering of spmdrules.execution.adjoint, not the local VJP"
        )
    soft, use_softmax = bool(ctx.attrs["soft_label"]), bool(ctx.attrs["use_softmax"])
    ignore = int(ctx.attrs["ignore_index"])
    g_prob, g_loss = cotangent(cts, 0, prob), cotangent(cts, 1, loss)
    # a hard label's loss is 0 on the rows it ignores: no cotangent flows from them
    g_kept = g_loss if soft else np.where(label == ignore, 0.0, g_loss)
    d_label: Array | None = None
    if use_softmax:
        dx = prob * (g_prob - np.sum(g_prob * prob, axis=axis, keepdims=True))
        if soft:
            dx = dx + (prob * np.sum(label, axis=axis, keepdims=True) - label) * g_loss
            d_label = -log_softmax_rows(x, axis) * g_loss
        else:
            dx = dx + (prob - one_hot(label, axis, x.shape, ignore)) * g_kept
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            if soft:
                dx = g_prob - label * g_loss / x
                d_label = -np.log(x) * g_loss
            else:
                hot = one_hot(label, axis, x.shape, ignore)
                dx = g_prob - hot * g_kept / np.where(hot > 0, x, 1.0)
    return (np.asarray(dx).astype(x.dtype),
            None if d_label is None else np.asarray(d_label).astype(label.dtype))


def one_hot(label: Array, axis: int, shape: tuple[int, ...], ignore_index: int,
            classes: range | None = None) -> Array:
    """1.0 at each row's label along ``axis``, 0.0 elsewhere and on rows whose label is
    ``ignore_index``. ``classes`` is the range of classes a block holds (its rows' labels are
    offset to it; labels outside it get no 1.0); None: all of ``shape[axis]``."""
    lab = np.asarray(label).astype(np.int64)
    lo, hi = (0, shape[axis]) if classes is None else (classes.start, classes.stop)
    mine = (lab != ignore_index) & (lab >= lo) & (lab < hi)
    hot = np.zeros(shape)
    np.put_along_axis(hot, np.where(mine, lab - lo, 0), np.where(mine, 1.0, 0.0), axis=axis)
    return hot
