"""Local kernel of one_hot: each rank compares its ids with the classes of its block of the class
dim (the rule keeps it whole; any block works). Ids outside 0..num_classes-1 raise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution import local
from spmdrules.execution.kernels.gather import in_range
from spmdrules.execution.local import LocalContext, LocalValue, array, register_kernel, take


@register_kernel("one_hot")
def one_hot(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    local.require_whole(ctx, 0, "x")
    shape, attr = local.input_spec(ctx, 0, "x")
    out_shape, out_attr = local.output(ctx)
    in_range(ctx, x, int(ctx.attrs.get("num_classes", 1)), "x")
    pos = [local.held(ctx, local.block_range(ctx, shape, attr, d),
                      local.block_range(ctx, out_shape, out_attr, d), "x", d)
           for d in range(len(shape))]
    classes = np.asarray(local.block_range(ctx, out_shape, out_attr, len(shape)))
    return ((take(x, pos)[..., None] == classes).astype(np.float64),)
