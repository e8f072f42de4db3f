"""Vector-Jacobian products of slice and strided_slice: the cotangent put back where it was taken."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution.kernels.slice import local_positions
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, put, register_vjp


@register_vjp("slice", "strided_slice")
def slice_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
              cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "input")
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    return (put(x, g, local_positions(ctx)),)
