"""Vector-Jacobian products of the constants: no input value reaches the result."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.core.dtypes import is_inexact
from spmdrules.execution.local import LocalContext, LocalValue, array, register_vjp


@register_vjp("full", "arange")
def source_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
               cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    return ()


@register_vjp("full_like")
def full_like_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                  cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    # only x's shape is read: a float x's cotangent is zero, an integer x takes none
    x = array(ctx, ins, 0, "x")
    return (np.zeros_like(x) if is_inexact(x.dtype) else None,)
