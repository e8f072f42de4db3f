"""Local kernels of softmax and log_softmax: whole rows, normalised where they are.

Their rules replicate the normalised axis, so a rank normalises the rows it holds; a block that
holds part of a row is refused (``ShardMismatch``), and so is a partial input (the op is not
linear). The row helpers are shared with the cross entropy kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


def _local_max(x: Array, axis: int) -> Array:
    # initial=-inf: a block with no classes (an uneven shard) takes no part in the max
    out: Array = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    return out


def _shift(m: Array) -> Array:
    """The row max as the softmax's shift; a row without a finite max (empty, all -inf) shifts by
    0, so it yields nan like the unshifted formula rather than inf - inf."""
    return np.where(np.isfinite(m), m, 0.0)


def _row_max(x: Array, axis: int) -> Array:
    return _shift(_local_max(x, axis))


def log_softmax_rows(x: Array, axis: int) -> Array:
    # numpy has no softmax (scipy is not a dependency): the max-shifted form, as Paddle computes it
    z = x - _row_max(x, axis)
    out: Array = z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
    return out


def _softmax(x: Array, axis: int) -> Array:
    e = np.exp(x - _row_max(x, axis))
    out: Array = e / np.sum(e, axis=axis, keepdims=True)
    return out


# ---- softmax / log_softmax --------------------------------------------------------------------------
@register_kernel("softmax", "log_softmax")
def softmax(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    local.require_whole(ctx, 0, "x")
    # A 0-d tensor is its own single row (axis 0 or -1, as for a vector).
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs["axis"]), max(x.ndim, 1))
    if x.ndim:
        local.require_full_dims(ctx, 0, "x", [axis], "every output element needs its whole row")
    row = x.reshape(1) if x.ndim == 0 else x
    fn = log_softmax_rows if ctx.op == "log_softmax" else _softmax
    return (fn(row, axis).reshape(x.shape),)
