"""The local kernel of fused_dropout_add: ``out = dropout(x) + y`` and ``seed_offset``.

The dropout mask is a function of the seed and the global position only (drawn for the whole
tensor, then this rank's block is taken), so a sharded run keeps exactly the entries the serial run
keeps. ``mode``: ``upscale_in_train`` scales kept entries by ``1 / (1 - p)`` in training and
passes x in test; ``downgrade_in_infer`` keeps them unscaled in training and scales x by
``1 - p`` in test. The seed is ``seed`` (also when ``fix_seed`` is off: the run is reproducible).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.core.shards import shard_slices
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


def keep_scale(ctx: LocalContext, shape: tuple[int, ...]) -> Array:
    """The factor x is multiplied by on this rank's block of ``shape`` (the output's)."""
    p = float(ctx.attrs.get("p", 0.5))
    upscale = str(ctx.attrs.get("mode", "upscale_in_train")) == "upscale_in_train"
    if bool(ctx.attrs.get("is_test", False)):
        return np.full(shape, 1.0 if upscale else 1.0 - p)
    gshape, oattr = local.output(ctx, 0)
    full = np.random.default_rng(int(ctx.attrs.get("seed", 0))).random(gshape) >= p
    kept = full[shard_slices(gshape, oattr, ctx.coord)]
    if p >= 1.0:
        return np.zeros(shape)
    return kept * (1.0 / (1.0 - p) if upscale else 1.0)


def seed_offset(ctx: LocalContext) -> Array:
    """The [seed, offset] pair, written whole on every process, whatever seed_offset's attribute
    says (as Paddle's kernel does): the state of the random stream every rank draws alike."""
    return np.array([int(ctx.attrs.get("seed", 0)), 0], dtype=np.int64)


@register_kernel("fused_dropout_add")
def fused_dropout_add(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, y = array(ctx, blocks, 0, "x"), array(ctx, blocks, 1, "y")
    for i, n in ((0, "x"), (1, "y")):
        local.require_whole(ctx, i, n)
        local.require_aligned(ctx, i, n)
    return (np.asarray(x * keep_scale(ctx, x.shape) + y), seed_offset(ctx))
