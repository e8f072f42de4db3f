"""Local kernels of slice, strided_slice and strided_slice's gradient.

A rank computes the block of the result it holds from the block of the input it holds: the
global positions its result block needs (``start + step * i`` along each sliced axis, the same
positions elsewhere) are rewritten to positions in its input block. When the input block does not
hold every one of them (a sliced axis cut across ranks), the layout cannot be computed locally and
the kernel raises ``ShardMismatch``; an empty result block needs nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from spmdrules.execution import local
from spmdrules.execution.local import LocalContext, LocalValue, array, put, register_kernel, take

_rules = importlib.import_module("spmdrules.rules.slice")


def local_positions(ctx: LocalContext, grad: bool = False) -> tuple[Any, ...]:
    """Per input dim, the positions in this rank's input block that its result block reads."""
    shape, attr = local.input_spec(ctx, 0, "input")
    out_shape, out_attr = local.output(ctx) if not grad else local.input_spec(ctx, 1, "out_grad")
    a = ctx.attrs
    kept = _rules.boxes(ctx.op.removesuffix("_grad"), shape, a["axes"], a["starts"], a["ends"],
                        a.get("strides"))
    decrease = {d % len(shape) for d in a.get("decrease_axis", ())}
    out_dims = [d for d in range(len(shape)) if d not in decrease]
    index: list[Any] = []
    for d, n in enumerate(shape):
        whole = kept.get(d, range(n))
        if d in decrease:
            want = whole
        else:
            o = local.block_range(ctx, out_shape, out_attr, out_dims.index(d))
            want = whole[o.start:o.stop]
        pos = local.held(ctx, local.block_range(ctx, shape, attr, d), want, "input", d)
        index.append(int(pos[0]) if d in decrease else pos)
    return tuple(index)


@register_kernel("slice", "strided_slice")
def slice_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "input")
    return (take(x, local_positions(ctx)),)


@register_kernel("strided_slice_grad")
def strided_slice_grad_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "input")
    g = array(ctx, blocks, 1, "out_grad")
    local.require_whole(ctx, 0, "input")
    return (put(x, g, local_positions(ctx, grad=True)),)


__all__ = ["local_positions", "slice_kernel", "strided_slice_grad_kernel"]
