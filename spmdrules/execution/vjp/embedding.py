"""The vector-Jacobian product of embedding (:mod:`spmdrules.execution.kernels.embedding`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution import local
from spmdrules.execution.kernels.embedding import c_rows, padding_row
from spmdrules.execution.local import LocalContext, LocalValue, array, register_vjp


@register_vjp("embedding", "lookup_table_v2")
def embedding_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                  cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    ids = array(ctx, ins, 0, "x")
    weight = array(ctx, ins, 1, "weight")
    g = local.cotangent(cts, 0, array(ctx, outs, 0, "out"))
    (vocab, _), w_attr = local.input_spec(ctx, 1, "weight")
    rows = local.block_range(ctx, (vocab, weight.shape[1]), w_attr, 0)
    mine = (ids >= rows.start) & (ids < rows.stop)
    for pad in (padding_row(int(ctx.attrs["padding_idx"]), vocab),
                padding_row(int(ctx.attrs.get("no_grad_idx", -1)), vocab)):
        if pad is not None:
            mine &= ids != pad
    d_weight = np.zeros_like(weight)
    np.add.at(d_weight, ids[mine] - rows.start, g[mine])
    return (None, d_weight)


@register_vjp("c_embedding")
def c_embedding_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                    cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    weight, ids = array(ctx, ins, 0, "weight"), array(ctx, ins, 1, "x")
    g = local.cotangent(cts, 0, array(ctx, outs, 0, "out"))
    mine, at, _ = c_rows(ctx, ids, 0)
    d_weight = np.zeros_like(weight)
    np.add.at(d_weight, at[mine], g[mine])
    return (d_weight, None)
