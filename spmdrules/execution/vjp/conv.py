"""Vector-Jacobian products of the convolutions (:mod:`spmdrules.execution.kernels.conv`).

The local kernel is bilinear in (input, filter), so its adjoint is the runtime's
``conv_adjoint`` on the same blocks and geometry (for a transpose, the roles swap).
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution.kernels.conv import CONV_OPS, backward, blocks_of, to_first, to_last
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp(*CONV_OPS)
def conv_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
             cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    p, x, f = blocks_of(ctx, ins)
    y = array(ctx, outs, 0, "output")
    g = to_first(cotangent(cts, 0, y), p.last)
    dx, df = backward(p, x, f, g)
    return to_last(dx, p.last).astype(x.dtype, copy=False), df.astype(f.dtype, copy=False)
