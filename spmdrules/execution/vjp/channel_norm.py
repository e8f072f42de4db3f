"""Vector-Jacobian products of batch_norm, group_norm and instance_norm
(:mod:`spmdrules.execution.kernels.channel_norm`).

Every statistic the kernels return is an output too, so its cotangent flows back into x. Per-channel
vectors given replicated (scale, bias) get cotangents shaped like their block: this rank's
channels filled, zero elsewhere, pieces of a pending sum.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution.kernels.channel_norm import (
    bcast,
    channel_axis,
    channel_rows,
    embed,
    global_stats,
    group_rows,
    groups_of,
    held_range,
    per_channel,
    rows_grad,
    sample_rows,
    ungroup,
)
from spmdrules.execution.local import (
    Array,
    LocalContext,
    LocalValue,
    array,
    cotangent,
    register_vjp,
)


def _sum_but(a: Array, axis: int) -> Array:
    return np.asarray(a.sum(axis=tuple(d for d in range(a.ndim) if d != axis)))


@register_vjp("batch_norm")
def batch_norm_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                   cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    ch = channel_axis(ctx, x.ndim)
    cs = held_range(ctx, 0, "x", ch)
    mean, var, scale = (per_channel(ctx, ins, i, n, cs) for i, n in
                        enumerate(("mean", "variance", "scale"), 1))
    assert mean is not None and var is not None and scale is not None
    eps, mom = float(ctx.attrs["epsilon"]), float(ctx.attrs["momentum"])
    y, mean_out, var_out, saved_mean, saved_inv = (array(ctx, outs, k, f"output {k}")
                                                   for k in range(5))
    g = cotangent(cts, 0, y)
    g_mean_out, g_var_out = cotangent(cts, 1, mean_out), cotangent(cts, 2, var_out)
    rows = channel_rows(x, ch)
    g_rows = np.moveaxis(g, ch, 0).reshape(rows.shape)
    if global_stats(ctx.attrs):
        inv = 1.0 / np.sqrt(var + eps)
        centred = rows - mean[:, None]
        xhat = centred * inv[:, None]
        gs = g_rows * (scale * inv)[:, None]
        dx_rows = gs
        d_mean = -gs.sum(axis=1) + g_mean_out
        d_var = (g_rows * scale[:, None] * centred).sum(axis=1) * (-0.5) * inv**3 + g_var_out
    else:
        mu, inv = saved_mean, saved_inv
        xhat = (rows - mu[:, None]) * inv[:, None]
        g_mu = (1.0 - mom) * g_mean_out + cotangent(cts, 3, saved_mean)
        g_var = (1.0 - mom) * g_var_out + cotangent(cts, 4, saved_inv) * (-0.5) * inv**3
        dx_rows = rows_grad(rows, mu, inv, g_rows * scale[:, None], g_mu, g_var)
        d_mean, d_var = mom * g_mean_out, mom * g_var_out
    dx = np.moveaxis(dx_rows.reshape(np.moveaxis(x, ch, 0).shape), 0, ch)
    d_scale = (g_rows * xhat).sum(axis=1)
    d_bias = g_rows.sum(axis=1)
    vec = [embed(ctx, i, n, array(ctx, ins, i, n), part, cs) for i, n, part in
           ((1, "mean", d_mean), (2, "variance", d_var), (3, "scale", d_scale),
            (4, "bias", d_bias))]
    return (dx.astype(x.dtype), *vec)


@register_vjp("group_norm")
def group_norm_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                   cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    ch = channel_axis(ctx, x.ndim)
    c = x.shape[ch]
    full = range(c)
    scale = per_channel(ctx, ins, 1, "scale", full)
    y, mu, var = (array(ctx, outs, k, f"output {k}") for k in range(3))
    inv = 1.0 / np.sqrt(var + float(ctx.attrs["epsilon"]))
    g = cotangent(cts, 0, y)
    rows = group_rows(x, ch, groups_of(ctx, c))
    xhat = ungroup((rows - mu[..., None]) * inv[..., None], x, ch)
    g_hat = g if scale is None else g * bcast(scale, x.ndim, ch)
    dx = rows_grad(rows, mu, inv, group_rows(g_hat, ch, rows.shape[1]),
                   cotangent(cts, 1, mu), cotangent(cts, 2, var))
    d_scale = None if ins[1] is None else _sum_but(g * xhat, ch)
    d_bias = None if ins[2] is None else _sum_but(g, ch)
    return (ungroup(dx, x, ch).astype(x.dtype), d_scale, d_bias)


@register_vjp("instance_norm")
def instance_norm_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                      cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    cs = held_range(ctx, 0, "x", 1)
    scale = per_channel(ctx, ins, 1, "scale", cs)
    y, mu, inv = (array(ctx, outs, k, f"output {k}") for k in range(3))
    g = cotangent(cts, 0, y)
    rows = sample_rows(x)
    g_rows = g.reshape(rows.shape)
    g_hat = g_rows if scale is None else g_rows * scale[None, :, None]
    g_var = cotangent(cts, 2, inv) * (-0.5) * inv**3
    dx = rows_grad(rows, mu, inv, g_hat, cotangent(cts, 1, mu), g_var)
    xhat = (rows - mu[..., None]) * inv[..., None]
    vec: list[LocalValue] = []
    for i, n, part in ((1, "scale", (g_rows * xhat).sum(axis=(0, 2))),
                       (2, "bias", g_rows.sum(axis=(0, 2)))):
        vec.append(None if ins[i] is None else embed(ctx, i, n, array(ctx, ins, i, n), part, cs))
    return (dx.reshape(x.shape).astype(x.dtype), *vec)
