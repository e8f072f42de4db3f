"""Local kernel of cast: each block in the asked dtype (floats computed as float64)."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution.local import LocalContext, LocalValue, array, numpy_dtype, register_kernel


@register_kernel("cast")
def cast(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    return (x.astype(numpy_dtype(str(ctx.attrs.get("dtype", "float32")))),)
