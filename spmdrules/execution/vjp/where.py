"""Vector-Jacobian product of where: the cotangent to x where the condition holds, to y elsewhere,
summed over the dims each broadcasts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution.local import (
    Array,
    LocalContext,
    LocalValue,
    array,
    cotangent,
    register_vjp,
)


def unbroadcast(g: Array, like: Array) -> Array:
    """g summed back to ``like``'s shape: over the leading dims and the size-1 dims it grew."""
    lead = g.ndim - like.ndim
    g = np.sum(g, axis=tuple(range(lead))) if lead else g
    grown = tuple(d for d, n in enumerate(like.shape) if n == 1 and g.shape[d] != 1)
    return np.asarray(np.sum(g, axis=grown, keepdims=True) if grown else g).reshape(like.shape)


@register_vjp("where")
def where_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
              cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    c, x, y = (array(ctx, ins, i, n) for i, n in enumerate(("condition", "x", "y")))
    g = cotangent(cts, 0, array(ctx, outs, 0, "out"))
    mask = np.broadcast_to(c, g.shape)
    return (None, unbroadcast(np.where(mask, g, 0.0), x), unbroadcast(np.where(mask, 0.0, g), y))
