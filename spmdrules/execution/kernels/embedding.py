"""The local kernel of embedding (lookup_table_v2).

A vocab-sharded embedding (weight rows cut over some mesh dims) looks up only the ids inside its
rows and writes zeros for the rest: the output is the pending sum its rule claims. ``padding_idx``
-1 means no padding row; another negative value counts from the end of the table (the reading of
paddle.nn.functional.embedding, whose range the rule accepts).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.core.blocks import ShardMismatch
from spmdrules.execution import local
from spmdrules.execution.local import Block, LocalContext, array, register_kernel


# ---- embedding ---------------------------------------------------------------------------------------
def padding_row(padding_idx: int, vocab: int) -> int | None:
    """The table row whose lookups read zeros: None for -1 (no padding); another negative counts
    from the end of the table, as paddle.nn.functional.embedding reads it."""
    if padding_idx == -1:
        return None
    return padding_idx + vocab if padding_idx < 0 else padding_idx


@register_kernel("embedding", "lookup_table_v2")
def embedding(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
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
