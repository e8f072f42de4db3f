"""Local kernels of batch_norm, group_norm and instance_norm (and instance_norm's gradient op).

Each norm sees x as rows of entries normalised together: batch_norm's rows are channels (over the
batch and spatial dims), group_norm's are (sample, group), instance_norm's (sample, channel). The
rules keep every reduced dim whole, so a rank's block holds whole rows; a block that cuts one is
refused (``ShardMismatch``), as is a partial input (a norm is not linear). Per-channel vectors
(scale, bias, batch_norm's statistics) may be given replicated or cut like x's channels: the
kernel reads the channels its x block holds.

Paddle's conventions: batch_norm's ``saved_variance`` and instance_norm's hold the inverse
standard deviation ``1/sqrt(var + eps)``; variances are biased (population) ones; in training
batch_norm's running statistics become ``momentum * running + (1 - momentum) * batch``; with global
statistics (``use_global_stats``, or ``is_test`` without ``trainable_statistics``) it normalises by
the given mean and variance, passes them through and leaves the saved statistics zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.shards import ShardMismatch
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel

CHANNEL_LAST = ("NHWC", "NLC", "NDHWC", "NWC")


def channel_axis(ctx: LocalContext, ndim: int) -> int:
    return ndim - 1 if str(ctx.attrs.get("data_format", "NCHW")) in CHANNEL_LAST else 1


def checked_x(ctx: LocalContext, blocks: Sequence[LocalValue], keep: Sequence[int], i: int = 0,
              name: str = "x") -> Array:
    """x's block, whole (not partial) on every dim but ``keep``."""
    x = array(ctx, blocks, i, name)
    if not 2 <= x.ndim <= 5:
        raise RuleArgumentError(f"{ctx.op}: {name!r} has rank {x.ndim}; give rank 2..5")
    local.require_whole(ctx, i, name)
    local.require_full_dims(ctx, i, name, [d for d in range(x.ndim) if d not in keep],
                            "the norm needs every entry it reduces over")
    return x


def held_range(ctx: LocalContext, i: int, name: str, dim: int) -> range:
    shape, a = local.input_spec(ctx, i, name)
    return local.block_range(ctx, shape, a, dim)


def per_channel(ctx: LocalContext, blocks: Sequence[LocalValue], i: int, name: str,
                want: range) -> Array | None:
    """Vector input ``i`` at the channels ``want`` (those of x's block), or None when absent."""
    b = blocks[i] if i < len(blocks) else None
    if b is None:
        return None
    v = array(ctx, blocks, i, name)
    local.require_whole(ctx, i, name)
    return v[local.held(ctx, held_range(ctx, i, name, 0), np.arange(want.start, want.stop),
                        name, 0)]


def embed(ctx: LocalContext, i: int, name: str, like: Array, part: Array, at: range) -> Array:
    """A cotangent shaped like vector input ``i``'s block: ``part`` at the channels ``at``, zero
    elsewhere (a replicated vector's derivative is a piece of a pending sum)."""
    out = np.zeros_like(like, dtype=np.result_type(like, part))
    have = held_range(ctx, i, name, 0)
    out[at.start - have.start: at.stop - have.start] = part
    return out


def out_channels(ctx: LocalContext, k: int, want: range) -> None:
    """Output ``k`` (a per-channel vector) must be cut as x's channels."""
    shape, a = local.output(ctx, k)
    have = local.block_range(ctx, shape, a, 0)
    if have != want:
        raise ShardMismatch(
            f"{ctx.op}: output {k} holds channels {have.start}..{have.stop - 1} but x's block "
            f"holds {want.start}..{want.stop - 1}; give it x's channel sharding")


def channel_rows(x: Array, ch: int) -> Array:
    """x as one row per channel (batch_norm's rows)."""
    xt = np.moveaxis(x, ch, 0)
    return xt.reshape(x.shape[ch], math.prod(xt.shape[1:]))


def sample_rows(x: Array) -> Array:
    """x as rows (sample, channel) of spatial entries (instance_norm's rows)."""
    return x.reshape(x.shape[0], x.shape[1], math.prod(x.shape[2:]))


def moments(rows: Array, eps: float) -> tuple[Array, Array, Array]:
    """(mean, biased variance, 1/sqrt(var + eps)) of each row (the last axis)."""
    mu = rows.mean(axis=-1)
    var = rows.var(axis=-1)
    return mu, var, 1.0 / np.sqrt(var + eps)


def bcast(v: Array, ndim: int, axis: int) -> Array:
    """A per-channel vector shaped to broadcast along ``axis`` of an ``ndim``-D tensor."""
    shape = [1] * ndim
    shape[axis] = -1
    return v.reshape(shape)


def global_stats(attrs: dict[str, Any]) -> bool:
    test = bool(attrs.get("is_test", False)) and not bool(attrs.get("trainable_statistics", False))
    return test or bool(attrs.get("use_global_stats", False))


# ---- batch_norm ------------------------------------------------------------------------------------
@register_kernel("batch_norm")
def batch_norm(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x0 = array(ctx, blocks, 0, "x")
    ch = channel_axis(ctx, x0.ndim)
    x = checked_x(ctx, blocks, (ch,))
    cs = held_range(ctx, 0, "x", ch)
    mean, var, scale, bias = (per_channel(ctx, blocks, i, n, cs) for i, n in
                              enumerate(("mean", "variance", "scale", "bias"), 1))
    assert mean is not None and var is not None and scale is not None and bias is not None
    eps, mom = float(ctx.attrs["epsilon"]), float(ctx.attrs["momentum"])
    rows = channel_rows(x, ch)
    if global_stats(ctx.attrs):
        mu, v = mean, var
        inv = 1.0 / np.sqrt(v + eps)
        mean_out, var_out = mean.copy(), var.copy()
        saved_mean, saved_inv = np.zeros_like(mu), np.zeros_like(inv)
    else:
        mu, v, inv = moments(rows, eps)
        mean_out = mom * mean + (1.0 - mom) * mu
        var_out = mom * var + (1.0 - mom) * v
        saved_mean, saved_inv = mu, inv
    for k in range(1, 5):
        out_channels(ctx, k, cs)
    y = (x - bcast(mu, x.ndim, ch)) * bcast(inv * scale, x.ndim, ch) + bcast(bias, x.ndim, ch)
    reserve = np.zeros(local.out_block(ctx, 5), dtype=x.dtype)
    return (y, mean_out, var_out, saved_mean, saved_inv, reserve)


# ---- group_norm ------------------------------------------------------------------------------------
def group_rows(x: Array, ch: int, groups: int) -> Array:
    """x as rows (sample, group) of its group's channels and spatial entries."""
    xt = np.moveaxis(x, ch, 1)
    return xt.reshape(x.shape[0], groups, math.prod(xt.shape[1:]) // groups)


def ungroup(rows: Array, x: Array, ch: int) -> Array:
    xt_shape = np.moveaxis(x, ch, 1).shape
    return np.moveaxis(rows.reshape(xt_shape), 1, ch)


def groups_of(ctx: LocalContext, c: int) -> int:
    g = int(ctx.attrs["groups"])
    if g < 1 or c % g:
        raise RuleArgumentError(f"{ctx.op}: groups={g} does not divide the {c} channels; set "
                                "groups to a divisor of the channel count")
    return g


@register_kernel("group_norm")
def group_norm(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = checked_x(ctx, blocks, (0,))
    ch = channel_axis(ctx, x.ndim)
    c = x.shape[ch]
    g = groups_of(ctx, c)
    full = range(c)
    scale, bias = per_channel(ctx, blocks, 1, "scale", full), per_channel(ctx, blocks, 2, "bias",
                                                                          full)
    rows = group_rows(x, ch, g)
    mu, var, inv = moments(rows, float(ctx.attrs["epsilon"]))
    y = ungroup((rows - mu[..., None]) * inv[..., None], x, ch)
    if scale is not None:
        y = y * bcast(scale, x.ndim, ch)
    if bias is not None:
        y = y + bcast(bias, x.ndim, ch)
    return (y, mu, var)


# ---- instance_norm ---------------------------------------------------------------------------------
@register_kernel("instance_norm")
def instance_norm(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = checked_x(ctx, blocks, (0, 1))
    cs = held_range(ctx, 0, "x", 1)
    scale, bias = per_channel(ctx, blocks, 1, "scale", cs), per_channel(ctx, blocks, 2, "bias", cs)
    rows = sample_rows(x)
    mu, _, inv = moments(rows, float(ctx.attrs["epsilon"]))
    y = ((rows - mu[..., None]) * inv[..., None]).reshape(x.shape)
    if scale is not None:
        y = y * bcast(scale, x.ndim, 1)
    if bias is not None:
        y = y + bcast(bias, x.ndim, 1)
    return (y, mu, inv)


def rows_grad(rows: Array, mu: Array, inv: Array, g_hat: Array, g_mu: Array | None = None,
              g_var: Array | None = None) -> Array:
    """d/d rows of ``sum(g_hat * xhat) + sum(g_mu * mu) + sum(g_var * var)`` where
    ``xhat = (rows - mu) * inv``, ``mu`` and ``var`` the rows' mean and variance, ``inv`` =
    1/sqrt(var + eps) (its cotangent enters through ``g_var``)."""
    m = rows.shape[-1]
    xhat = (rows - mu[..., None]) * inv[..., None]
    dx = inv[..., None] * (g_hat - g_hat.mean(axis=-1, keepdims=True)
                           - xhat * (g_hat * xhat).mean(axis=-1, keepdims=True))
    if g_mu is not None:
        dx = dx + g_mu[..., None] / m
    if g_var is not None:
        dx = dx + g_var[..., None] * 2.0 * (rows - mu[..., None]) / m
    return np.asarray(dx)


@register_kernel("instance_norm_grad")
def instance_norm_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """x_grad from y_grad and the saved statistics (mean, inverse std) as given; scale_grad and
    bias_grad over this rank's samples, at its channels, zero elsewhere (pending sums)."""
    x = checked_x(ctx, blocks, (0, 1))
    local.require_whole(ctx, 5, "y_grad")
    g = array(ctx, blocks, 5, "y_grad")
    mu, inv = array(ctx, blocks, 3, "saved_mean"), array(ctx, blocks, 4, "saved_variance")
    cs = held_range(ctx, 0, "x", 1)
    scale = per_channel(ctx, blocks, 1, "scale", cs)
    rows = sample_rows(x)
    gr = g.reshape(rows.shape)
    xhat = (rows - mu[..., None]) * inv[..., None]
    g_hat = gr if scale is None else gr * scale[None, :, None]
    # d/dx with mu and inv the row's own statistics (as the forward computed them)
    dx = rows_grad(rows, mu, inv, g_hat)
    outs: list[LocalValue] = [np.asarray(dx).reshape(x.shape)]
    for k, part in ((1, (gr * xhat).sum(axis=(0, 2))), (2, gr.sum(axis=(0, 2)))):
        shape, a = local.output(ctx, k) if ctx.output_attrs[k] is not None else ((), None)
        if a is None:
            outs.append(None)
            continue
        full = np.zeros(local.local_shape(shape, a, ctx.coord), dtype=x.dtype)
        have = local.block_range(ctx, shape, a, 0)
        full[local.held(ctx, have, np.arange(cs.start, cs.stop), f"output {k}", 0)] = part
        outs.append(full)
    return tuple(outs)
