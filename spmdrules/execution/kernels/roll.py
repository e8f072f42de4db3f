"""Local kernels of roll and its gradient: result position p of a rolled dim reads x at
``(p - shift) mod n``; the rank's x block must hold what its result block reads."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel, take

_rules = importlib.import_module("spmdrules.rules.roll")


def rolled(ctx: LocalContext, x: Array, src_i: int, name: str, sign: int) -> Array:
    """x (input ``src_i``) rolled by ``sign * shifts`` into the block of output 0."""
    shape, attr = local.input_spec(ctx, src_i, name)
    out_shape, out_attr = local.output(ctx)
    shifts, axis = ctx.attrs["shifts"], ctx.attrs.get("axis", ())
    if not axis:  # the flattened x: every dim held whole
        local.require_full_dims(ctx, src_i, name, range(len(shape)), "a flat roll moves any value")
        return np.roll(x, sign * shifts[0])
    by = dict(zip(_rules.rolled_axes(shape, shifts, axis), shifts, strict=True))
    pos: list[Any] = []
    for d, n in enumerate(shape):
        o = np.asarray(local.block_range(ctx, out_shape, out_attr, d))
        src = (o - sign * by[d]) % max(n, 1) if d in by else o
        pos.append(local.held(ctx, local.block_range(ctx, shape, attr, d), src, name, d))
    return take(x, pos)


@register_kernel("roll")
def roll(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    return (rolled(ctx, array(ctx, blocks, 0, "x"), 0, "x", 1),)


@register_kernel("roll_grad")
def roll_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    return (rolled(ctx, array(ctx, blocks, 1, "out_grad"), 1, "out_grad", -1),)
