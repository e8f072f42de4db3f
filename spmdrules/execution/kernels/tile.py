"""Local kernels of tile, expand, expand_as and expand_as's gradient.

Every result position reads one position of x: a kept dim the same one, a tiled dim ``o mod n``, a
broadcast dim 0, a prepended dim none (each of its positions is a whole copy). A rank reads the
positions its result block needs from its own x block, which must hold them (else
``ShardMismatch``), so the result may be sharded wherever that holds: on a prepended or a
broadcast dim, for instance. The gradient adds the cotangent back at the positions read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.execution import local
from spmdrules.execution.local import (
    Array,
    LocalContext,
    LocalValue,
    array,
    put,
    register_kernel,
    take,
)


def source_positions(ctx: LocalContext, out_shape: Sequence[int], out_attr: Any,
                     x_shape: Sequence[int], x_attr: Any, name: str = "x") -> list[Any]:
    """Per x dim, the positions in this rank's x block that its result block reads."""
    diff = len(out_shape) - len(x_shape)
    index: list[Any] = []
    for i, n in enumerate(x_shape):
        o = local.block_range(ctx, out_shape, out_attr, i + diff)
        want = np.zeros(len(o), dtype=np.int64) if n == 1 else np.asarray(o) % max(n, 1)
        index.append(local.held(ctx, local.block_range(ctx, x_shape, x_attr, i), want, name, i))
    return index


def _copies(ctx: LocalContext, x: Array, index: list[Any], out: tuple[int, ...]) -> Array:
    """x at the positions, repeated along the result's prepended dims."""
    core = take(x, index)
    return np.broadcast_to(core, out).copy()


@register_kernel("tile", "expand", "expand_as", "expand_as_v2")
def tile_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    shape, attr = local.input_spec(ctx, 0, "x")
    out_shape, out_attr = local.output(ctx)
    index = source_positions(ctx, out_shape, out_attr, shape, attr)
    return (_copies(ctx, x, index, local.out_block(ctx)),)


def summed_back(ctx: LocalContext, x: Array, g: Array, index: list[Any]) -> Array:
    """The adjoint of ``_copies``: g summed over the prepended dims, added at the positions."""
    lead = tuple(range(g.ndim - x.ndim))
    return put(x, np.sum(g, axis=lead) if lead else g, index)


@register_kernel("expand_as_grad", "expand_as_v2_grad")
def expand_as_grad_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    g = array(ctx, blocks, 1, "out_grad")
    shape, _ = local.input_spec(ctx, 0, "x")
    g_shape, g_attr = local.input_spec(ctx, 1, "out_grad")
    # x_grad's block is laid out like x's; the cotangent's block sums into it
    _, grad_attr = local.output(ctx)
    index = source_positions(ctx, g_shape, g_attr, shape, grad_attr, "x_grad")
    return (summed_back(ctx, x, g, index),)


__all__ = ["expand_as_grad_kernel", "source_positions", "summed_back", "tile_kernel"]
