"""Local kernels of layer_norm and fused_rms_norm: whole normalised rows, scale and bias blocks.

A block that holds part of a normalised row is refused (``ShardMismatch``), and so is a partial
input (a norm is not linear).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.shards import ShardMismatch
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


# ---- layer_norm / fused_rms_norm ---------------------------------------------------------------------
def _param(ctx: LocalContext, blocks: Sequence[LocalValue], i: int, name: str, size: int) -> Array | None:
    b = blocks[i] if i < len(blocks) else None
    if b is None:
        return None
    p = array(ctx, blocks, i, name)
    local.require_whole(ctx, i, name)
    if p.shape != (size,):
        raise ShardMismatch(
            f"{ctx.op}: the block of {name!r} has shape {list(p.shape)} but the rows need all "
            f"{size} entries; replicate {name!r}"
        )
    return p


def _normalise(
    ctx: LocalContext, blocks: Sequence[LocalValue], bna: int, params: Sequence[str]
) -> tuple[Array, Array, list[Array | None]]:
    """x's block as rows x (normalised entries), and its params, after the checks."""
    x = array(ctx, blocks, 0, "x")
    local.require_whole(ctx, 0, "x")
    if not 0 <= bna < x.ndim:
        raise RuleArgumentError(
            f"{ctx.op}: begin_norm_axis {bna} is out of range for 'x' of rank {x.ndim}"
        )
    local.require_full_dims(ctx, 0, "x", range(bna, x.ndim), "a norm needs its whole normalised row")
    size = math.prod(x.shape[bna:])
    ps = [_param(ctx, blocks, i + 1, name, size) for i, name in enumerate(params)]
    return x, x.reshape(*x.shape[:bna], size), ps


@register_kernel("layer_norm")
def layer_norm(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    bna, eps = int(ctx.attrs["begin_norm_axis"]), float(ctx.attrs["epsilon"])
    x, rows, (scale, bias) = _normalise(ctx, blocks, bna, ("scale", "bias"))
    mean = rows.mean(axis=-1)
    var = rows.var(axis=-1)  # the biased (population) variance, as Paddle's kernel
    out = (rows - mean[..., None]) / np.sqrt(var[..., None] + eps)
    if scale is not None:
        out = out * scale
    if bias is not None:
        out = out + bias
    return (out.reshape(x.shape), mean, var)


@register_kernel("fused_rms_norm")
def fused_rms_norm(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    eps = float(ctx.attrs["epsilon"])
    bna = array(ctx, blocks, 0, "x").ndim - 1
    x, rows, (scale,) = _normalise(ctx, blocks, bna, ("scale",))
    invvar = 1.0 / np.sqrt(np.mean(rows * rows, axis=-1) + eps)
    out = rows * invvar[..., None]
    if scale is not None:
        out = out * scale
    return (out.reshape(x.shape), invvar)
