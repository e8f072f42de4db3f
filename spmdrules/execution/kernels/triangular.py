"""Local kernels of triu and tril_triu: the mask from the block's global rows and columns, so any
block of the matrix dims is computed where it lies."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.core.attr import DistAttr
from spmdrules.core.shards import ShardMismatch
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


def keep_mask(ctx: LocalContext, shape: Sequence[int], attr: DistAttr) -> Array:
    """True where the triangle keeps the entry: col - row >= diagonal (upper), <= (lower)."""
    rows = np.asarray(local.block_range(ctx, shape, attr, len(shape) - 2))
    cols = np.asarray(local.block_range(ctx, shape, attr, len(shape) - 1))
    offset = cols[None, :] - rows[:, None]
    k = int(ctx.attrs.get("diagonal", 0))
    lower = ctx.op == "tril_triu" and bool(ctx.attrs.get("lower", False))
    return np.asarray(offset <= k if lower else offset >= k)


@register_kernel("triu", "tril_triu")
def triangular(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    shape, attr = local.input_spec(ctx, 0, "x")
    out_shape, out_attr = local.output(ctx)
    for d in range(len(shape)):
        if local.block_range(ctx, shape, attr, d) != local.block_range(ctx, out_shape, out_attr, d):
            raise ShardMismatch(f"{ctx.op}: 'x' dim {d} is laid out unlike the result's; "
                                      f"give them one sharding")
    return (np.where(keep_mask(ctx, shape, attr), x, np.zeros((), dtype=x.dtype)),)
