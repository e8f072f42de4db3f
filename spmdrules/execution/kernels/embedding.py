"""The local kernel of embedding (lookup_table_v2).

A vocab-sharded embedding (weight rows cut over some mesh dims) looks up only the ids inside its
rows and writes zeros for the rest: the output is the pending sum its rule claims. ``padding_idx``
-1 means no padding row; another negative value counts from the end of the table (the reading of
paddle.nn.functional.embedding, whose range the rule accepts). ``no_grad_idx`` (torch's
``padding_idx``) does not change the lookup: only the VJP reads it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.core.shards import ShardMismatch, ShardShapeMismatch
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


# ---- embedding ---------------------------------------------------------------------------------------
def padding_row(padding_idx: int, vocab: int) -> int | None:
    """The table row whose lookups read zeros: None for -1 (no padding); another negative counts
    from the end of the table, as paddle.nn.functional.embedding reads it."""
    if padding_idx == -1:
        return None
    return padding_idx + vocab if padding_idx < 0 else padding_idx


@register_kernel("embedding", "lookup_table_v2")
def embedding(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    ids = array(ctx, blocks, 0, "x")
    weight = array(ctx, blocks, 1, "weight")
    local.require_whole(ctx, 0, "x")  # a partial weight is fine: the lookup is linear in the table
    if ids.dtype.kind not in "iu":
        raise local.KernelInputError(f"{ctx.op}: 'x' holds {ids.dtype} values; ids are integers")
    (vocab, _), w_attr = local.input_spec(ctx, 1, "weight")
    bad = (ids < 0) | (ids >= vocab)
    if bad.any():
        raise local.KernelInputError(
            f"{ctx.op}: 'x' holds id {int(ids[bad].flat[0])} outside the vocabulary 0..{vocab - 1}"
            f" of 'weight'; clip or remap the ids"
        )
    rows = local.block_range(ctx, (vocab, weight.shape[1]), w_attr, 0)
    if len(rows) != weight.shape[0]:
        raise ShardMismatch(
            f"{ctx.op}: the block of 'weight' has {weight.shape[0]} rows but its attribute "
            f"{w_attr.mapping_str()} gives rows {rows.start}..{rows.stop - 1}"
        )
    # Rows outside this rank's range read zeros: the vocab-parallel output is a pending sum.
    mine = (ids >= rows.start) & (ids < rows.stop)
    pad = padding_row(int(ctx.attrs["padding_idx"]), vocab)
    if pad is not None:
        mine &= ids != pad
    out = np.zeros((*ids.shape, weight.shape[1]), dtype=weight.dtype)
    out[mine] = weight[ids[mine] - rows.start]
    return (out,)


# ---- c_embedding: the vocab-parallel lookup, ids offset by start_index ------------------------
def c_rows(ctx: LocalContext, ids: Array, w_index: int) -> tuple[Array, Array, range]:
    """(mask of ids this rank's table rows hold, their row in the block, the rows) for the
    table ``weight`` (input ``w_index``) whose row ``r`` holds id ``start_index + r``."""
    (rows_n, hidden), w_attr = local.input_spec(ctx, w_index, "weight")
    rows = local.block_range(ctx, (rows_n, hidden), w_attr, 0)
    if ids.dtype.kind not in "iu":
        raise local.KernelInputError(f"{ctx.op}: 'x' holds {ids.dtype} values; ids are integers")
    r = ids.astype(np.int64) - int(ctx.attrs.get("start_index", 0))
    mine = (r >= rows.start) & (r < rows.stop)
    return mine, r - rows.start, rows


@register_kernel("c_embedding")
def c_embedding(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """Row ``id - start_index`` of the table where it is one of this rank's rows, else zeros:
    ids outside the table read zeros (Paddle's c_embedding), and a row-sharded table leaves the
    pending sum its rule claims."""
    weight, ids = array(ctx, blocks, 0, "weight"), array(ctx, blocks, 1, "x")
    local.require_whole(ctx, 1, "x")
    mine, at, _ = c_rows(ctx, ids, 0)
    out = np.zeros((*ids.shape, weight.shape[1]), dtype=weight.dtype)
    out[mine] = weight[at[mine]]
    return (out,)


@register_kernel("c_embedding_grad")
def c_embedding_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """This rank's block of the table gradient: out_grad added at each of its ids (a piece of the
    sum over the ranks holding other ids). As Paddle's kernel, it is sized from the table: a block
    shaped as this rank's block of the table, whatever weight_grad's attribute says; so out_grad's
    block of the hidden dim must be the table's."""
    weight = array(ctx, blocks, 0, "weight")
    ids, g = array(ctx, blocks, 1, "x"), array(ctx, blocks, 2, "out_grad")
    local.require_whole(ctx, 1, "x")
    local.require_whole(ctx, 2, "out_grad")
    mine, at, _ = c_rows(ctx, ids, 0)
    wshape, w_attr = local.input_spec(ctx, 0, "weight")
    gshape, g_attr = local.input_spec(ctx, 2, "out_grad")
    if local.block_range(ctx, gshape, g_attr, len(gshape) - 1) != local.block_range(
            ctx, wshape, w_attr, 1):
        raise ShardShapeMismatch(
            f"{ctx.op}: out_grad's block of the hidden dim ({g_attr.mapping_str()}) is not the "
            f"table's ({w_attr.mapping_str()}), from which weight_grad's block is sized; lay "
            "them out alike, as the rule does")
    out = np.zeros(weight.shape, dtype=g.dtype)
    np.add.at(out, at[mine], g[mine])
    return (out,)
