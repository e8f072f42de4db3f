"""Local kernels of moe_combine and its backward op, on a rank's blocks.

``y[i, j] = sum_k x[scatter_index[i, k], j] * combine_weights[i, k]``. A rank holds a block of
x's rows: it gathers only the rows it holds (the others count 0), so a split of x's rows leaves
y a pending sum, as a split of ``k`` does; the rule says so. The hidden dim must be split alike
in x and y (and grad_y).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.core.shards import ShardMismatch
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


def rows_held(ctx: LocalContext, idx: Array) -> tuple[Array, Array]:
    """(local row of x for each index, whether this rank holds it)."""
    shape, attr = local.input_spec(ctx, 0, "x")
    have = local.block_range(ctx, shape, attr, 0)
    mine = (idx >= have.start) & (idx < have.stop)
    return np.where(mine, idx - have.start, 0), mine


def check_hidden(ctx: LocalContext, other: int, name: str) -> None:
    xs, xa = local.input_spec(ctx, 0, "x")
    os_, oa = local.input_spec(ctx, other, name)
    if local.block_range(ctx, xs, xa, 1) != local.block_range(ctx, os_, oa, 1):
        raise ShardMismatch(f"{ctx.op}: x and {name!r} hold different hidden columns; split the "
                            "hidden dim alike")


def check_tokens(ctx: LocalContext) -> None:
    ws, wa = local.input_spec(ctx, 1, "combine_weights")
    is_, ia = local.input_spec(ctx, 2, "scatter_index")
    for d in (0, 1):
        if local.block_range(ctx, ws, wa, d) != local.block_range(ctx, is_, ia, d):
            raise ShardMismatch(f"{ctx.op}: combine_weights and scatter_index hold different "
                                f"blocks of dim {d}; split them alike")


@register_kernel("moe_combine")
def moe_combine(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, w, idx = (array(ctx, blocks, i, n) for i, n in
                 enumerate(("x", "combine_weights", "scatter_index")))
    for i, n in enumerate(("x", "combine_weights", "scatter_index")):
        local.require_whole(ctx, i, n)
    check_tokens(ctx)
    pos, mine = rows_held(ctx, idx)
    y = np.einsum("skh,sk->sh", x[pos] * mine[..., None], w) if x.shape[0] else \
        np.zeros((w.shape[0], x.shape[1]), dtype=x.dtype)
    return (y.astype(x.dtype),)


@register_kernel("moe_combine_grad")
def moe_combine_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, w, idx, g = (array(ctx, blocks, i, n) for i, n in
                    enumerate(("x", "combine_weights", "scatter_index", "grad_y")))
    check_tokens(ctx)
    check_hidden(ctx, 3, "grad_y")
    return grads(ctx, x, w, idx, g)


def grads(ctx: LocalContext, x: Array, w: Array, idx: Array, g: Array
          ) -> tuple[Array, Array, Array]:
    """(grad_x, grad_combine_weights, grad_scatter_index) on the rank's blocks."""
    pos, mine = rows_held(ctx, idx)
    gx = np.zeros_like(x)
    contrib = g[:, None, :] * (w * mine)[..., None]  # [s, k, h]
    if x.shape[0]:  # a rank without rows of x has nothing to scatter into
        np.add.at(gx, pos.reshape(-1), contrib.reshape(pos.size, x.shape[1]))
    gw = np.einsum("sh,skh->sk", g, x[pos] * mine[..., None]) if x.shape[0] else np.zeros_like(w)
    return gx, gw.astype(w.dtype), np.zeros_like(idx)
