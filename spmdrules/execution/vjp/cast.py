"""Vector-Jacobian product of cast: the cotangent cast back to a float x; a cast to an integer or
bool is piecewise constant, so a float x's cotangent is zero."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.core.dtypes import is_inexact
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("cast")
def cast_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
             cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    y = array(ctx, outs, 0, "out")
    if not is_inexact(x.dtype):
        return (None,)
    if not is_inexact(y.dtype):
        return (np.zeros_like(x),)
    return (cotangent(cts, 0, y).astype(x.dtype),)
