"""Vector-Jacobian products of nonzero (integer positions: x takes a zero cotangent) and unique
(each unique value is x at its first index, which takes that value's cotangent)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.core.dtypes import is_inexact
from spmdrules.execution.kernels.selection import unique_parts
from spmdrules.execution.local import LocalContext, LocalValue, array, cotangent, register_vjp


@register_vjp("nonzero")
def nonzero_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    return (np.zeros_like(x) if is_inexact(x.dtype) else None,)


@register_vjp("unique")
def unique_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
               cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, ins, 0, "x")
    if not is_inexact(x.dtype):
        return (None,)
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    _, first, _, _, ax = unique_parts(ctx, x)
    n = len(first)
    dx = np.zeros_like(x)
    if ax is None:
        np.add.at(dx.reshape(-1), first, g.reshape(-1)[:n])
        return (dx,)
    at: list[Any] = [slice(None)] * x.ndim
    at[ax] = first
    keep: list[Any] = [slice(None)] * x.ndim
    keep[ax] = slice(0, n)
    np.add.at(dx, tuple(at), g[tuple(keep)])
    return (dx,)
