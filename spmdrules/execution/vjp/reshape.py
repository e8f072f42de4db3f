"""The vector-Jacobian product of the reshape family: the cotangent reshaped back to x's block."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("reshape", "reshape2", "flatten", "squeeze", "unsqueeze", "unsqueeze2")
def reshape_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    return (g.reshape(x.shape),)
