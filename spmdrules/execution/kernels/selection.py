"""Local kernels of nonzero and unique, on x held whole (the rules replicate everything).

The result has the graph's declared ``size`` rows: nonzero fills the rows past the count with -1,
unique fills values with 0, first indices with -1 and counts with 0; data that does not fit raises
``KernelInputError`` naming the count and the size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.execution import local
from spmdrules.execution.local import (
    Array,
    KernelInputError,
    LocalContext,
    LocalValue,
    array,
    numpy_dtype,
    register_kernel,
)


def _whole_x(ctx: LocalContext, x: Array) -> None:
    local.require_whole(ctx, 0, "x")
    local.require_full_dims(ctx, 0, "x", range(x.ndim), "any element may land in any row")


def _fits(ctx: LocalContext, count: int, what: str) -> int:
    size = int(ctx.attrs.get("size", -1))
    if count > size:
        raise KernelInputError(f"{ctx.op}: the data has {count} {what} but the graph declared "
                               f"size={size}; declare size >= {count}")
    return size


@register_kernel("nonzero")
def nonzero(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    _whole_x(ctx, x)
    found = np.argwhere(x)
    size = _fits(ctx, len(found), "nonzero elements")
    out = np.full((size, x.ndim), -1, dtype=np.int64)
    out[: len(found)] = found
    return (out,)


def unique_parts(ctx: LocalContext, x: Array) -> tuple[Array, Array, Array, Array, int | None]:
    """np.unique's values, first indices, inverse and counts, and the axis (None: flattened)."""
    axis = list(ctx.attrs.get("axis", ()))
    ax = int(axis[0]) % x.ndim if axis else None
    src = x if ax is not None else x.reshape(-1)
    values, first, inverse, counts = np.unique(src, return_index=True, return_inverse=True,
                                               return_counts=True, axis=ax if ax is not None else 0)
    return values, first, np.asarray(inverse).reshape(-1), counts, ax


@register_kernel("unique")
def unique(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    _whole_x(ctx, x)
    values, first, inverse, counts, ax = unique_parts(ctx, x)
    n = values.shape[ax if ax is not None else 0]
    size = _fits(ctx, n, "unique values")
    dtype = numpy_dtype(str(ctx.attrs.get("dtype", "int64")))
    pad_shape = list(values.shape)
    pad_shape[ax if ax is not None else 0] = size
    out = np.zeros(pad_shape, dtype=x.dtype)
    at: list[Any] = [slice(None)] * out.ndim
    at[ax if ax is not None else 0] = slice(0, n)
    out[tuple(at)] = values

    def padded(v: Array, fill: int) -> Array:
        p = np.full(size, fill, dtype=dtype)
        p[:n] = v
        return p

    return (out,
            padded(first, -1) if ctx.attrs.get("return_index") else np.zeros((), dtype),
            inverse.astype(dtype) if ctx.attrs.get("return_inverse") else np.zeros((), dtype),
            padded(counts, 0) if ctx.attrs.get("return_counts") else np.zeros((), dtype))


__all__ = ["nonzero", "unique", "unique_parts"]
