"""The local kernel of transpose: each rank permutes its own block (a partial passes through)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution.local import LocalContext, LocalValue, array, register_kernel


@register_kernel("transpose", "transpose2")
def transpose(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    perm: Any = ctx.attrs.get("perm")
    norm = [normalise_axis(ctx.op, "x", int(p), x.ndim) for p in (perm or ())]
    if sorted(norm) != list(range(x.ndim)):
        raise RuleArgumentError(
            f"{ctx.op}: perm {perm} is not a permutation of the {x.ndim} dims of 'x'; name each "
            "dim exactly once"
        )
    # a copy, not a strided view: blocks are sent as contiguous buffers by the MPI executor
    return (np.transpose(x, norm).copy(),)
