"""Local kernels of the matrix products: matmul/matmul_v2, bmm and its gradient (einsum is
:mod:`spmdrules.execution.kernels.einsum_op`).

Every rank multiplies its own blocks. The rules give a letter (batch, m, n, k, or an einsum letter)
the same mesh dims in every operand that has it and replicate size-1 (broadcast) dims, so the local
blocks line up and broadcast like the global operands. A rank holding a block of a contracted
letter computes the product over its part of that letter only: its output block is one piece of
the pending sum the rule marks on that letter's mesh dims.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.contraction import swap_last2
from spmdrules.execution.local import LocalContext, LocalValue, array, register_kernel


@register_kernel("matmul", "matmul_v2")
def matmul_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """x @ y with numpy's (= Paddle's) rules for 1-D operands and broadcast batch dims."""
    x = swap_last2(array(ctx, blocks, 0, "x"), bool(ctx.attrs.get("trans_x", False)))
    y = swap_last2(array(ctx, blocks, 1, "y"), bool(ctx.attrs.get("trans_y", False)))
    return (np.asarray(np.matmul(x, y)),)


@register_kernel("bmm")
def bmm_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    y = array(ctx, blocks, 1, "y")
    if x.ndim != 3 or y.ndim != 3:
        raise RuleArgumentError(
            f"bmm: 'x' and 'y' must be 3-D [batch, rows, cols] blocks, got ranks {x.ndim} and "
            f"{y.ndim}"
        )
    return (np.asarray(np.matmul(x, y)),)


@register_kernel("bmm_grad")
def bmm_grad_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """x_grad = out_grad @ y^T and y_grad = x^T @ out_grad, each over the local blocks."""
    x = array(ctx, blocks, 0, "x")
    y = array(ctx, blocks, 1, "y")
    g = array(ctx, blocks, 2, "out_grad")
    return (
        np.asarray(np.matmul(g, np.swapaxes(y, -1, -2))),
        np.asarray(np.matmul(np.swapaxes(x, -1, -2), g)),
    )


__all__ = ["bmm_grad_kernel", "bmm_kernel", "matmul_kernel"]
