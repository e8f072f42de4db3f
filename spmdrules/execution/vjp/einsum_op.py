"""The vector-Jacobian product of einsum (:mod:`spmdrules.execution.kernels.einsum_op`)."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution.kernels.einsum_op import _notation, operand_grad
from spmdrules.execution.local import (
    LocalContext,
    LocalValue,
    array,
    arrays,
    cotangent,
    register_vjp,
)


@register_vjp("einsum")
def einsum_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
               cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """Each operand's cotangent: the contraction of the output's with the other operands
    (:func:`spmdrules.execution.kernels.matmul.operand_grad`, the kernel of einsum_grad)."""
    ops = arrays(ctx, ins, 0, "inputs")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    nota = _notation(ctx, len(ops))
    out = nota.outputs[0]
    pairs = list(zip(nota.inputs, ops, strict=True))
    return ([operand_grad(ls, out, g, [p for j, p in enumerate(pairs) if j != i], x)
             .astype(x.dtype) for i, (ls, x) in enumerate(pairs)],)
