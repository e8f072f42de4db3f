"""Local kernels of the constants: each rank fills the block of the result it holds.

A constant reads no values, so every layout of its result is computed locally: ``full`` and
``full_like`` fill the block's shape, ``arange`` evaluates ``start + step * i`` at the block's own
global positions ``i``. Floating results are computed in float64, as the executors compute every
float tensor (so pipelines can be checked to 1e-12); integer and bool dtypes are exact: ``full``'s
value and ``arange``'s bounds are attributes of type "number", where an int stays an int.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution.local import (
    LocalContext,
    LocalValue,
    block_range,
    numpy_dtype,
    out_block,
    output,
    register_kernel,
)
from spmdrules.graph.shapes.constant import arange_dtype


@register_kernel("full", "full_like")
def full(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    name = str(ctx.attrs.get("dtype") or "")
    if not name:
        x = blocks[0]
        name = str(x.dtype) if isinstance(x, np.ndarray) else "float32"
    return (np.full(out_block(ctx), ctx.attrs.get("value", 0.0), dtype=numpy_dtype(name)),)


@register_kernel("arange")
def arange(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    shape, attr = output(ctx)
    dtype = numpy_dtype(arange_dtype(ctx.attrs))
    start, step = ctx.attrs.get("start", 0.0), ctx.attrs.get("step", 1.0)
    if dtype.kind in "iu" and isinstance(start, int) and isinstance(step, int):
        positions = np.asarray(block_range(ctx, shape, attr, 0), dtype=dtype)
        return ((dtype.type(start) + dtype.type(step) * positions).astype(dtype),)
    positions = np.asarray(block_range(ctx, shape, attr, 0), dtype=np.float64)
    return ((float(start) + float(step) * positions).astype(dtype),)


__all__ = ["arange", "full"]
