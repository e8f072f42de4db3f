"""Vector-Jacobian products of layer_norm and fused_rms_norm (:mod:`spmdrules.execution.kernels.norm`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("layer_norm")
def layer_norm_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                   cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
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
def rms_norm_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                 cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
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
