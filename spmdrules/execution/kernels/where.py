"""Local kernel of where: numpy's where on blocks that broadcast as the global arrays do."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution import local
from spmdrules.execution.local import LocalContext, LocalValue, array, register_kernel

OPERANDS = ("condition", "x", "y")


@register_kernel("where")
def where(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    c, x, y = (array(ctx, blocks, i, n) for i, n in enumerate(OPERANDS))
    for i, n in enumerate(OPERANDS):
        local.require_whole(ctx, i, n)
        local.require_aligned(ctx, i, n)
    out = np.where(c, x, y)
    return (np.broadcast_to(out, local.out_block(ctx)).copy(),)
